"""The plugin harness's GPU result files, and the comparison of its quantized cases.

``dcn_harness gpu`` (tests/harness/gpuManifest.cpp) writes, for every case, the exact bits it uploaded
and the output it read back as ``<case>_<tensor>.bin``, and one line of ``manifest.jsonl``: the
geometry, x's format, every file's shape and element type (:data:`DTYPES`; ``fp8e4m3`` files hold
E4M3FN bytes) and, for a quantized case, ``quant`` = {type, x_scale, output_scale} (the weight scales
are the file ``weight_scale``). :func:`read_arrays` gives a case's tensors as float64;
:func:`check_quantized_case` compares a quantized case with the float64 model of the quantized math
(:mod:`support.quant`) through the checks the core's GPU tests use (:mod:`support.core_quant`).
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from dcnconvert.precision.values import bf16_bits_to_float, float_to_bf16_bits
from support import core_quant
from support.quant import absolute_sums, core_interp, dcn_quant, quantize, to_grid

#: Element types of the harness's files.
DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16", "int8", "fp8e4m3")


def read_tensor(path: Path, dtype: str, shape: list[int]) -> np.ndarray:
    """A harness file as float64 of ``shape``."""
    raw = Path(path).read_bytes()
    if dtype == "float32":
        arr = np.frombuffer(raw, dtype=np.float32)
    elif dtype == "float16":
        arr = np.frombuffer(raw, dtype=np.float16)
    elif dtype == "bfloat16":
        arr = bf16_bits_to_float(np.frombuffer(raw, dtype=np.uint16))
    elif dtype == "int8":
        arr = np.frombuffer(raw, dtype=np.int8)
    elif dtype == "fp8e4m3":
        arr = np.frombuffer(raw, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    else:
        raise ValueError(f"{Path(path).name}: unknown element type {dtype!r} (expected {', '.join(DTYPES)})")
    assert arr.size == int(np.prod(shape)), f"{Path(path).name}: {arr.size} elements, expected shape {shape}"
    return arr.reshape(shape).astype(np.float64)


def to_bits(values: np.ndarray, dtype: str) -> bytes:
    """Values as a harness file's bytes (to nearest even; INT8 and E4M3 values must be on their grid)."""
    v = np.asarray(values, dtype=np.float64)
    if dtype == "float32":
        return v.astype(np.float32).tobytes()
    if dtype == "float16":
        return v.astype(np.float16).tobytes()
    if dtype == "bfloat16":
        return float_to_bf16_bits(v.astype(np.float32)).tobytes()
    if dtype in ("int8", "fp8e4m3"):
        assert np.array_equal(to_grid(v, dtype), v), f"values off the {dtype} grid"
        return (v.astype(np.int8) if dtype == "int8" else v.astype(ml_dtypes.float8_e4m3fn)).tobytes()
    raise ValueError(f"unknown element type {dtype!r} (expected one of {', '.join(DTYPES)})")


def read_arrays(case: dict, folder: Path) -> dict[str, np.ndarray]:
    """Every file of a manifest line (``out`` included) as float64."""
    return {
        name: read_tensor(Path(folder) / file, case["dtypes"][name], case["shapes"][name])
        for name, file in case["files"].items()
    }


def geometry(case: dict) -> dict:
    """The attributes of a manifest line as :func:`support.reference.modulated_deform_conv2d` takes them."""
    keys = ("stride", "padding", "dilation", "group", "deformable_group")
    return {k: case[k] for k in keys}


def quantized_inputs(case: dict, arrays: dict[str, np.ndarray]) -> dict:
    """The inputs of a quantized case as :mod:`support.core_quant` names them (x_q, x_scale, offset,
    mask, w_q, w_scale, bias); asserts what the node took: x and weights on the grid of its type,
    scales > 0."""
    quant = case["quant"]
    qtype = quant["type"]
    inputs = {
        "x_q": arrays["x"],
        "x_scale": float(np.float32(quant["x_scale"])),
        "offset": arrays["offset"],
        "mask": arrays["mask"],
        "w_q": arrays["weight"],
        "w_scale": arrays["weight_scale"],
        "bias": arrays.get("bias"),
    }
    for name in ("x_q", "w_q"):
        values = inputs[name]
        on_grid = np.array_equal(to_grid(values, qtype), values)
        assert on_grid, f"{case['name']}: {name} is not on the {qtype} grid"
    assert inputs["x_scale"] > 0 and (inputs["w_scale"] > 0).all(), f"{case['name']}: a scale is not > 0"
    return inputs


def model_outputs(case: dict, inputs: dict) -> dict[str, np.ndarray]:
    """The float outputs (no output_scale) of the Q/DQ graph's math (``qdq``, samples not rounded) and
    of the kernels' math (``core_math``: FP16 interpolation, every sample rounded to the quantized
    type), and the absolute sums the FP8 tensor-core sums round at (``abs``)."""
    args = tuple(inputs[k] for k in ("x_q", "x_scale", "offset", "mask", "w_q", "w_scale", "bias"))
    common = {"qtype": case["quant"]["type"], **geometry(case)}
    return {
        "qdq": dcn_quant(*args, round_samples=False, **common),
        "core_math": dcn_quant(*args, round_samples=True, **core_interp(common["qtype"]), **common),
        "abs": absolute_sums(*args[:6], **common),
    }


def expected_output(case: dict, refs: dict[str, np.ndarray]) -> np.ndarray:
    """What the kernels' math gives as the case's output: the float output, or its grid values."""
    scale = case["quant"]["output_scale"]
    if scale is None:
        return refs["core_math"]
    return quantize(refs["core_math"], float(np.float32(scale)), case["quant"]["type"])


def check_quantized_case(case: dict, folder: Path) -> dict:
    """Asserts that the output of a quantized case matches the float64 model and returns its numbers.

    A float output: :func:`support.core_quant.check_float_output` (every element within the Q/DQ
    model's bound, sample rounding included; at least 99% within the FP32 arithmetic's bound of the
    kernels' math). A quantized output (its grid values): :func:`~support.core_quant.check_quantized_output`
    (within the float bound in grid units plus one step of the Q/DQ model quantized; at least 99%
    equal to the kernels' math quantized).
    """
    arrays = read_arrays(case, folder)
    got = arrays.pop("out")
    inputs = quantized_inputs(case, arrays)
    refs = model_outputs(case, inputs)
    assert got.shape == refs["qdq"].shape, f"{case['name']}: output {got.shape}, model {refs['qdq'].shape}"
    qtype = case["quant"]["type"]
    context = f"({case['name']})"
    scale = case["quant"]["output_scale"]
    if scale is None:
        return core_quant.check_float_output(qtype, case["dtype"], inputs, refs, got, context)
    return core_quant.check_quantized_output(
        qtype, inputs, refs, float(np.float32(scale)), got, context, exact_share=True
    )
