"""The quantized DCN's math in NumPy (float64): the one model the core, plugin and rewrite tests share.

A quantized layer (plugin_src/core/dcnParams.h, ``DcnQuant``) holds ``x = x_scale * x_q`` and
``w[o] = w_scale[o] * w_q[o]``. Its kernels interpolate each modulated sample from the corner values
``x_q``, INT8 in fixed point where the corner weights allow and otherwise in FP16 (``fp16_interp=True``
here, exactly as they round; :func:`core_interp` gives both flags for a type) and round it to the
quantized type before the product (``round_samples=True``);
the Q/DQ graph it replaces feeds the dequantized ``x`` to a float convolution and rounds nothing
there (``round_samples=False``). Both then scale the sums by ``x_scale * w_scale[o]`` and add the bias;
a quantized output divides by ``output_scale`` and rounds once more.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from support.reference import modulated_deform_conv2d

#: The quantized types, as the plugin node's ``quant_type`` names them.
QTYPES: tuple[str, ...] = ("int8", "fp8e4m3")

#: The largest magnitude of each type.
QMAX: dict[str, float] = {"int8": 127.0, "fp8e4m3": 448.0}


def to_grid(values: np.ndarray, qtype: str) -> np.ndarray:
    """``values`` rounded to the nearest value of ``qtype`` (ties to even) and saturated, as float64.

    INT8 saturates to [-128, 127]; FP8 E4M3FN to +-448 (it has no infinity).
    """
    v = np.asarray(values, dtype=np.float64)
    if qtype == "int8":
        return np.clip(np.rint(v), -128.0, 127.0)
    if qtype == "fp8e4m3":
        return np.clip(v, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    raise ValueError(f"unknown quantized type {qtype!r} (expected one of {', '.join(QTYPES)})")


def quantize(values: np.ndarray, scale: np.ndarray | float, qtype: str) -> np.ndarray:
    """``values / scale`` on the grid of ``qtype`` (QuantizeLinear with zero point 0), as float64."""
    return to_grid(np.asarray(values, dtype=np.float64) / np.asarray(scale, dtype=np.float64), qtype)


def dcn_quant(
    x_q: np.ndarray,
    x_scale: float,
    offset: np.ndarray,
    mask: np.ndarray,
    w_q: np.ndarray,
    w_scale: np.ndarray,
    bias: np.ndarray | None,
    *,
    qtype: str,
    round_samples: bool,
    fp16_interp: bool = False,
    fixed_interp: bool = False,
    output_scale: float | None = None,
    **attrs: object,
) -> np.ndarray:
    """The quantized layer's output in float64, ``(N, OC, oh, ow)``.

    Args:
        x_q, w_q: the quantized values (on the grid of ``qtype``).
        x_scale: the per-tensor scale of x; ``w_scale``: one scale per output channel.
        round_samples: round each modulated sample to ``qtype`` (the kernels' math) or not (the Q/DQ
            graph's).
        fp16_interp: interpolate in float16 as the kernels do (else in float64).
        fixed_interp: with ``fp16_interp``, INT8's fixed-point samples where their weights allow.
        output_scale: quantize the output with this scale (values on the grid, not rescaled).
        attrs: stride, padding, dilation, group, deformable_group.
    """
    transform = (lambda s: to_grid(s, qtype)) if round_samples else None
    sums = modulated_deform_conv2d(
        x_q, offset, mask, w_q, None, sample_transform=transform, fp16_interp=fp16_interp,
        fixed_interp=fixed_interp, **attrs
    )
    out = sums * (float(x_scale) * np.asarray(w_scale, dtype=np.float64))[None, :, None, None]
    if bias is not None:
        out = out + np.asarray(bias, dtype=np.float64)[None, :, None, None]
    if output_scale is not None:
        out = quantize(out, output_scale, qtype)
    return out


def core_interp(qtype: str) -> dict:
    """The sampling flags of :func:`dcn_quant` that model the kernels for ``qtype``."""
    return {"fp16_interp": True, "fixed_interp": qtype == "int8"}


def absolute_sums(x_q, x_scale, offset, mask, w_q, w_scale, *, qtype: str, **attrs: object) -> np.ndarray:
    """``x_scale * w_scale[o] * sum |w_q| * |s|`` per output, with the samples ``s`` of ``|x_q|`` and
    ``|mask|``: the magnitude at which the FP8 tensor-core sums round (tests of the FP8 tiles)."""
    return dcn_quant(np.abs(x_q), x_scale, offset, np.abs(mask), np.abs(w_q), w_scale, None,
                     qtype=qtype, round_samples=False, **attrs)


def sample_rounding_bound(w_q: np.ndarray, w_scale: np.ndarray, x_scale: float, qtype: str,
                          sample_max: float) -> np.ndarray:
    """Per output channel, the most the kernels' sampling can move a float output from the Q/DQ graph's.

    Each product ``w_q * s`` moves by at most ``|w_q| * r``, with ``r`` the largest error of a sample
    (in units of ``x_scale``; ``sample_max``: the largest sample magnitude, ``max|x_q|`` times the
    largest mask value): the FP16 interpolation, at most ``5 * 2**-11 * sample_max`` (the four corner
    weights rounded to FP16, each at most 2**-11 of itself, and four FP16 roundings of partial sums
    bounded by the sample; INT8's fixed-point weights move it by at most ``2**-17 * 4 * sample_max``,
    less), then the rounding to the type: half a unit for INT8; for FP8 half a unit
    in the last place of ``sample_max``, at most 2**-4 of it. So
    ``|out - out_Q/DQ| <= x_scale * w_scale[o] * sum |w_q[o]| * r``.
    """
    interp = 5.0 * 2.0**-11 * float(sample_max)
    if qtype == "int8":
        r = 0.5 + interp
    elif qtype == "fp8e4m3":
        # E4M3: 3 mantissa bits; half an ulp of the binade holding sample_max (subnormal step 2**-9).
        e = np.floor(np.log2(max(float(sample_max), 2.0 ** -6)))
        r = 0.5 * 2.0 ** (e - 3) + interp
    else:
        raise ValueError(f"unknown quantized type {qtype!r}")
    per_o = np.abs(np.asarray(w_q, dtype=np.float64)).reshape(len(w_scale), -1).sum(axis=1)
    return float(x_scale) * np.asarray(w_scale, dtype=np.float64) * per_o * r
