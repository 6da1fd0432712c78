"""Quantized layers (INT8, FP8 E4M3) on the GPU core: inputs, the packed weight buffer, one run, and
the bounds of tests/test_core_gpu_quant.py.

Inputs are drawn in float, then quantized as ModelOpt's max calibration would (x per tensor, the
weights per output channel, scale = amax / the type's largest value), so nothing saturates. The
core's output is compared with two float64 models (tests/support/quant.py): ``round_samples=False``
(the Q/DQ graph the layer replaces) within :func:`allowed`, and ``round_samples=True`` (the core's
own math, sample by sample), which the core meets up to FP32 arithmetic except where an FP32 sample
lands on the other side of a rounding boundary than its float64 value.
"""

from __future__ import annotations

import os
import zlib

import ml_dtypes
import numpy as np

from support import core
from support.core_cases import Case, params_for, round_to
from support.quant import QMAX, absolute_sums, core_interp, dcn_quant, quantize, sample_rounding_bound
from support.reference import modulated_deform_conv2d

#: quant_type -> (DcnParams.quant, the DcnDataType of the quantized tensors).
QUANT = {"int8": (core.QUANT_INT8, core.INT8), "fp8e4m3": (core.QUANT_FP8, core.FP8E4M3)}
FLOAT_TYPES = {"float32": core.FLOAT32, "float16": core.FLOAT16}
U_OUT = {"float32": 0.0, "float16": 2.0**-11}

#: Seed of this session's inputs (fresh each run unless DCN_TEST_SEED is set); tests print it.
SESSION_SEED = int(os.environ.get("DCN_TEST_SEED", int.from_bytes(os.urandom(4), "little")))


def attrs(case: Case) -> dict:
    return {
        "stride": case.stride,
        "padding": case.padding,
        "dilation": case.dilation,
        "group": case.group,
        "deformable_group": case.dg,
    }


def make_inputs(case: Case, qtype: str, fdtype: str) -> dict:
    """Float inputs, their quantized forms and scales (float64 host arrays)."""
    rng = np.random.default_rng(zlib.crc32(f"{case.name}/{qtype}/{fdtype}".encode()) ^ SESSION_SEED)
    kh, kw = case.kernel
    ho, wo = case.out_hw
    kk = kh * kw
    x = rng.standard_normal((case.n, case.c, case.h, case.w)) * 2.0
    w = rng.standard_normal((case.cout, case.c // case.group, kh, kw)) / np.sqrt(case.c // case.group * kk)
    x_scale = float(np.float32(np.abs(x).max() / QMAX[qtype]))
    w_scale = (
        (np.abs(w).reshape(case.cout, -1).max(axis=1) / QMAX[qtype]).astype(np.float32).astype(np.float64)
    )
    offset = rng.standard_normal((case.n, 2 * case.dg * kk, ho, wo)) * case.off_scale
    mask = rng.uniform(case.mask_lo, 1.0, (case.n, case.dg * kk, ho, wo))
    bias = rng.standard_normal(case.cout) if case.bias else None
    return {
        "x": x,
        "weight": w,
        "x_scale": x_scale,
        "w_scale": w_scale,
        "x_q": quantize(x, x_scale, qtype),
        "w_q": quantize(w, w_scale[:, None, None, None], qtype),
        "offset": round_to(offset, fdtype),
        "mask": round_to(mask, fdtype),
        "bias": None if bias is None else round_to(bias, fdtype),
    }


def to_bytes(values: np.ndarray, qtype: str) -> np.ndarray:
    """Quantized values (on the grid) as the core's bytes: int8, or E4M3 bits as uint8."""
    if qtype == "int8":
        return values.astype(np.int8)
    return values.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def from_bytes(values: np.ndarray, qtype: str) -> np.ndarray:
    if qtype == "int8":
        return values.astype(np.float64)
    return values.view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def params(case: Case, qtype: str, fdtype: str, inputs: dict, *, algo: int, out_scale: float | None):
    quant, qdt = QUANT[qtype]
    p = params_for(case, fdtype, algo)
    p.quant = quant
    p.xScale = inputs["x_scale"]
    p.outType = qdt if out_scale is not None else FLOAT_TYPES[fdtype]
    p.outScale = out_scale if out_scale is not None else 0.0
    return p


def packed_weights(p, inputs: dict, qtype: str, lib) -> np.ndarray:
    """The OIHW buffer of a quantized layer: the values' bytes, then FP32 scales (dcnParams.h)."""
    scales_at, total = core.quant_weight_layout(p, lib)
    buf = np.zeros(total, dtype=np.uint8)
    values = to_bytes(inputs["w_q"], qtype).reshape(-1).view(np.uint8)
    buf[: values.size] = values
    buf[scales_at:] = inputs["w_scale"].astype(np.float32).view(np.uint8)
    return buf


def run(
    lib,
    case: Case,
    qtype: str,
    fdtype: str,
    inputs: dict,
    *,
    algo: int = core.ALGO_AUTO,
    out_scale: float | None = None,
    channel_last: bool = False,
    prepared: bool = False,
) -> np.ndarray:
    """The core's output as float64 (a quantized output as its grid values); checks that every
    element was written and nothing past the end."""
    import cupy

    p = params(case, qtype, fdtype, inputs, algo=algo, out_scale=out_scale)
    status, msg = core.validate(p, lib)
    assert status == core.SUCCESS, msg
    stream = cupy.cuda.Stream(non_blocking=True)
    try:
        with stream:
            x = cupy.asarray(to_bytes(inputs["x_q"], qtype))
            if channel_last:
                p.xLayout = core.LAYOUT_NHWC
                x = cupy.ascontiguousarray(x.transpose(0, 2, 3, 1))
            weight = cupy.asarray(packed_weights(p, inputs, qtype, lib))
            if prepared:
                weight = core.prepare_weights(p, weight, lib)
                p.weightLayout = core.WEIGHT_PREPARED
            np_f = np.float32 if fdtype == "float32" else np.float16
            dev = {
                k: None if inputs[k] is None else cupy.asarray(inputs[k].astype(np_f))
                for k in ("offset", "mask", "bias")
            }
            shape = (p.n, p.cout, p.ho, p.wo)
            count = int(np.prod(shape))
            if out_scale is None:
                buf = cupy.full(count + 4099, np.nan, dtype=np_f)
            else:  # 0x7F (INT8 127, E4M3 NaN) may be an output value: only the guard tail is checked
                buf = cupy.full(count + 4099, 0x7F, dtype=cupy.int8 if qtype == "int8" else cupy.uint8)
            out = buf[:count].reshape(shape)
            core.forward(p, x, dev["offset"], dev["mask"], weight, dev["bias"], out, lib=lib)
    finally:
        # A refused call (UnsupportedNodeError) leaves the uploads and the poison fill queued; they
        # finish before the buffers go back to CuPy's pool, whose next stream may get them.
        stream.synchronize()
    tail = buf[count:].get()
    if out_scale is None:
        assert np.isnan(tail).all(), "the kernel wrote past the end of the output"
        result = out.get().astype(np.float64)
        assert not np.isnan(result).any(), "output elements were not written"
        return result
    assert (tail.view(np.uint8) == 0x7F).all(), "the kernel wrote past the end of the output"
    return from_bytes(out.get(), qtype)


def references(case: Case, qtype: str, inputs: dict, out_scale: float | None = None) -> dict:
    """The Q/DQ model, the core's model (samples rounded) and the unquantized float result."""
    common = dict(qtype=qtype, output_scale=out_scale, **attrs(case))
    args = (
        inputs["x_q"],
        inputs["x_scale"],
        inputs["offset"],
        inputs["mask"],
        inputs["w_q"],
        inputs["w_scale"],
        inputs["bias"],
    )
    return {
        "qdq": dcn_quant(*args, round_samples=False, **common),
        "core_math": dcn_quant(*args, round_samples=True, **core_interp(qtype), **common),
        # sum |w_q * s| per output, times the scales: the magnitude the FP8 tensor-core sums round at
        "abs": absolute_sums(*args[:6], qtype=qtype, **attrs(case)),
        "float": modulated_deform_conv2d(
            inputs["x"], inputs["offset"], inputs["mask"], inputs["weight"], inputs["bias"], **attrs(case)
        ),
    }


def allowed(qtype: str, fdtype: str, inputs: dict, ref_qdq: np.ndarray) -> np.ndarray:
    """Elementwise bound of |core - Q/DQ model| for a float output.

    Sample rounding (sample_rounding_bound: each sample moves by at most half a step of its type,
    for FP8 at the largest magnitude QMAX), the output's rounding (u |ref|), and FP32 arithmetic
    (1e-5 max|ref| + 2^-24).
    """
    samp = sample_rounding_bound(inputs["w_q"], inputs["w_scale"], inputs["x_scale"], qtype, QMAX[qtype])
    ref_max = float(np.abs(ref_qdq).max())
    return samp[None, :, None, None] + U_OUT[fdtype] * np.abs(ref_qdq) + 1e-5 * ref_max + 2.0**-24


#: The share of outputs that must match the kernels' math (samples rounded) within FP32's bound:
#: the rest are outputs one of whose samples FP32 rounded to the neighbouring step.
MIN_EXACT_SHARE = 0.99
#: Error of the FP8 tensor-core sums, as a share of the absolute sum (check_float_output).
FP8_CHUNK_SUM = 2.0**-12


def check_float_output(
    qtype: str, fdtype: str, inputs: dict, refs: dict, out: np.ndarray, context: str
) -> dict:
    """Asserts the bounds of a float output and returns its error numbers.

    ``refs``: ``qdq`` and ``core_math`` (:func:`references`), and optionally ``float`` (the
    unquantized layer). Every element within :func:`allowed` of the Q/DQ model; at least
    :data:`MIN_EXACT_SHARE` of them within ``u |ref| + 1e-5 max|ref| + 2^-24`` of the kernels' math;
    with ``float``, relative L2 error below 0.1 against it (quantization noise). ``context`` ends
    every message (the seed, the case).
    """
    bound = allowed(qtype, fdtype, inputs, refs["qdq"])
    worst = float((np.abs(out - refs["qdq"]) / bound).max())
    assert worst <= 1.0, f"error against the Q/DQ model exceeds its bound by x{worst:.3f} {context}"
    ref_max = float(np.abs(refs["core_math"]).max())
    tight = U_OUT[fdtype] * np.abs(refs["core_math"]) + 1e-5 * ref_max + 2.0**-24
    if qtype == "fp8e4m3" and "abs" in refs:
        # The tensor cores' FP8 sums keep fewer bits than FP32 (dcnParams.h); each fresh sum (one to
        # four 128-channel chunks) is added in FP32, so its error is a small share of its absolute sum.
        tight = tight + FP8_CHUNK_SUM * refs["abs"]
    within = float((np.abs(out - refs["core_math"]) <= tight).mean())
    assert within >= MIN_EXACT_SHARE, (
        f"only {within:.4f} of the outputs match the core's math in float64 {context}"
    )
    numbers = {
        "max_err_over_bound": worst,
        "rel_l2_vs_qdq": float(np.linalg.norm(out - refs["qdq"]) / np.linalg.norm(refs["qdq"])),
        "share_exact_math": within,
    }
    if "float" in refs:
        rel_float = float(np.linalg.norm(out - refs["float"]) / np.linalg.norm(refs["float"]))
        assert rel_float < 0.1, f"relative L2 error {rel_float:.3e} against the unquantized layer {context}"
        numbers["rel_l2_vs_float"] = rel_float
    return numbers


def check_quantized_output(
    qtype: str, inputs: dict, refs: dict, out_scale: float, out_q: np.ndarray, context: str, *,
    exact_share: bool = False,
) -> dict:
    """Asserts the bounds of a quantized output (its grid values) and returns its error numbers.

    ``refs`` holds the float outputs (no output_scale) of the Q/DQ model and, with ``exact_share``,
    of the kernels' math. out_q = round(out / output_scale): within the float bound (in grid units)
    plus one step of the Q/DQ model quantized; with ``exact_share``, at least
    :data:`MIN_EXACT_SHARE` of the elements equal to the kernels' math quantized.
    """
    bound = allowed(qtype, "float32", inputs, refs["qdq"])
    expect = quantize(refs["qdq"], out_scale, qtype)
    # FP16 rounding of the bias and the FP32 sums move the value before the output rounds.
    step = 1.0 if qtype == "int8" else 2.0**-3 * np.maximum(np.abs(expect), 2.0**-6)
    slack = (bound + 2.0**-11 * np.abs(refs["qdq"])) / out_scale + step
    worst = float((np.abs(out_q - expect) / slack).max())
    assert worst <= 1.0, f"quantized output off by x{worst:.3f} of its bound {context}"
    numbers = {"max_err_over_bound": worst}
    if exact_share:
        same = float((out_q == quantize(refs["core_math"], out_scale, qtype)).mean())
        assert same >= MIN_EXACT_SHARE, (
            f"only {same:.4f} of the quantized outputs equal the core's math {context}"
        )
        numbers["share_exact_math"] = same
    return numbers
