"""tests/support/harness_files.py on files made from the NumPy model: a small quantized case written in
the harness's format passes :func:`check_quantized_case` with the kernels' math as its output, and
fails once that output is perturbed beyond each of the comparison's bounds. Fresh inputs every
session (``core_quant.SESSION_SEED``, in the messages)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from support import core_quant, harness_files
from support.quant import QMAX, to_grid

GEOMETRY = {"stride": [1, 2], "padding": [1, 1], "dilation": [1, 1], "group": 2, "deformable_group": 2}


def grid_values(rng: np.random.Generator, shape: tuple[int, ...], qtype: str) -> np.ndarray:
    """Random values of the quantized type: integers in [-127, 127], or E4M3 codes but the NaNs."""
    if qtype == "int8":
        return rng.integers(-127, 128, shape).astype(np.float64)
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], dtype=np.uint8)
    return rng.choice(codes, shape).view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def write_case(folder: Path, qtype: str, fdtype: str, quantized_out: bool) -> dict:
    """A quantized case (2 x 8 x 6 x 7, 4 output channels, 3x3) in the harness's format, its output the
    kernels' math; returns its manifest line (read back from JSON)."""
    key = zlib.crc32(f"{qtype}/{fdtype}/{quantized_out}".encode())
    rng = np.random.default_rng(key ^ core_quant.SESSION_SEED)
    n, c, h, w, cout = 2, 8, 6, 7, 4
    ho, wo = 6, 4
    x = grid_values(rng, (n, c, h, w), qtype)
    weight = grid_values(rng, (cout, c // 2, 3, 3), qtype)
    arrays = {
        "x": x,
        "offset": rng.standard_normal((n, 36, ho, wo)) * 2.0,
        "mask": rng.uniform(0.0, 1.0, (n, 18, ho, wo)),
        "weight": weight,
        "bias": rng.uniform(-1.0, 1.0, cout),
        "weight_scale": rng.uniform(0.5, 1.5, cout) / (np.sqrt((weight**2).mean()) * 6.0),
    }
    dtypes = {"x": qtype, "offset": fdtype, "mask": fdtype, "bias": fdtype, "weight_scale": "float32",
              "weight": "float16" if qtype == "fp8e4m3" else "int8",
              "out": qtype if quantized_out else fdtype}
    x_scale = float(np.float32(1.0 / np.sqrt((x**2).mean())))
    out_scale = 2.5 / QMAX[qtype] if quantized_out else None
    case = {"name": f"q_{qtype}_{fdtype}", "dtype": fdtype, **GEOMETRY, "x_format": "linear",
            "quant": {"type": qtype, "x_scale": x_scale, "output_scale": out_scale},
            "shapes": {k: list(v.shape) for k, v in arrays.items()} | {"out": [n, cout, ho, wo]},
            "dtypes": dtypes, "files": {k: f"q_{k}.bin" for k in [*arrays, "out"]}}
    for name, values in arrays.items():  # the files' values are what the model reads back
        (folder / case["files"][name]).write_bytes(harness_files.to_bits(values, dtypes[name]))
    zeros = np.zeros((n, cout, ho, wo))  # read_arrays reads every file, the output included
    (folder / case["files"]["out"]).write_bytes(harness_files.to_bits(zeros, dtypes["out"]))
    case = json.loads(json.dumps(case))
    inputs = harness_files.quantized_inputs(case, harness_files.read_arrays(case, folder))
    out = harness_files.expected_output(case, harness_files.model_outputs(case, inputs))
    (folder / case["files"]["out"]).write_bytes(harness_files.to_bits(out, dtypes["out"]))
    return case


def perturb(case: dict, folder: Path, how: str) -> None:
    """Rewrites the case's output: one element past the Q/DQ bound (``far``), or 3% of the elements
    off the kernels' math but within that bound (``some``)."""
    arrays = harness_files.read_arrays(case, folder)
    out = arrays.pop("out")
    inputs = harness_files.quantized_inputs(case, arrays)
    refs = harness_files.model_outputs(case, inputs)
    qtype, fdtype, scale = case["quant"]["type"], case["dtype"], case["quant"]["output_scale"]
    flat = out.reshape(-1)
    if scale is None:
        bound = core_quant.allowed(qtype, fdtype, inputs, refs["qdq"]).reshape(-1)
        qdq = refs["qdq"].reshape(-1)
        if how == "far":
            flat[0] = qdq[0] + 2.0 * bound[0]
        else:
            ref = refs["core_math"].reshape(-1)
            tight = 2.0 * (core_quant.U_OUT[fdtype] * np.abs(ref) + 1e-5 * np.abs(ref).max() + 2.0**-24)
            room = np.flatnonzero(np.abs(ref + tight - qdq) < 0.5 * bound)
            moved = room[: int(np.ceil(0.03 * flat.size))]
            assert moved.size >= 0.03 * flat.size, "too few elements to move within the Q/DQ bound"
            flat[moved] = (ref + tight)[moved]
    elif how == "far":  # the grid value farthest from the expected one
        flat[0] = -QMAX[qtype] if flat[0] > 0 else QMAX[qtype]
    else:  # the neighbouring grid value of 3% of the elements
        picked = np.arange(0, flat.size, 33)
        step = 1.0 if qtype == "int8" else np.maximum(2.0**-3 * np.abs(flat[picked]), 2.0**-9)
        flat[picked] = to_grid(np.where(flat[picked] < 0, flat[picked] + step, flat[picked] - step), qtype)
    (folder / case["files"]["out"]).write_bytes(harness_files.to_bits(out, case["dtypes"]["out"]))


@pytest.mark.parametrize(
    ("qtype", "fdtype", "quantized_out", "how", "message"),
    [
        ("int8", "float32", False, "far", "exceeds its bound"),
        ("fp8e4m3", "float16", False, "some", "match the core's math"),
        ("int8", "float16", True, "far", "off by"),
        ("fp8e4m3", "float32", True, "some", "equal the core's math"),
    ],
)
def test_check_quantized_case(
    tmp_path: Path, qtype: str, fdtype: str, quantized_out: bool, how: str, message: str
) -> None:
    case = write_case(tmp_path, qtype, fdtype, quantized_out)
    numbers = harness_files.check_quantized_case(case, tmp_path)
    assert numbers["max_err_over_bound"] <= 1.0
    perturb(case, tmp_path, how)
    with pytest.raises(AssertionError, match=message):
        harness_files.check_quantized_case(case, tmp_path)
