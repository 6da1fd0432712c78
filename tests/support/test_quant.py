"""tests/support/quant.py: the float64 model of the quantized kernels' sampling against a scalar
re-implementation of the kernels' own steps (plugin_src/core/dcnElements.cuh ``quantSample``, the
cell and weights of dcnFusedCommon.cuh ``planCell``), written independently of support.reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from support.quant import QTYPES, core_interp, dcn_quant, quantize, to_grid


def _fma16(a: np.float16, b: np.float16, c: np.float16) -> np.float16:
    """FP16 fused multiply-add: the product of two FP16 values is exact in float64, one rounding."""
    return np.float16(float(a) * float(b) + float(c))


def _sample(plane: np.ndarray, y: float, x: float, mask: float, fixed: bool) -> tuple[float, str]:
    """One modulated sample as the kernels form it, and which way: float32 offsets and weights, then
    (``fixed``: INT8) 16-bit weights and an integer sum rounded half up where the weights are at least
    0 and sum to at most 1.0001, else the FP16 chain."""
    h, w = plane.shape
    f32 = np.float32
    y0, x0 = math.floor(y), math.floor(x)
    ly, lx = f32(y) - f32(y0), f32(x) - f32(x0)
    if not ((y0 >= 0 or (y0 == -1 and ly > 0)) and y0 < h and (x0 >= 0 or (x0 == -1 and lx > 0)) and x0 < w):
        return 0.0, "outside"
    wy = (f32(1) - ly if y0 >= 0 else f32(0), ly if y0 + 1 < h else f32(0))
    wx = (f32(1) - lx if x0 >= 0 else f32(0), lx if x0 + 1 < w else f32(0))
    cells = ((0, 0), (0, 1), (1, 0), (1, 1))
    vals = [plane[y0 + i, x0 + j] if 0 <= y0 + i < h and 0 <= x0 + j < w else 0.0 for i, j in cells]
    w32 = [(f32(mask) * wy[i]) * wx[j] for i, j in cells]
    total = f32(0)
    for wt in w32:
        total = f32(total + wt)
    if fixed and min(w32) >= 0 and total <= f32(1.0001):
        w16 = [min(round(float(wt) * 65536), 65535) for wt in w32]  # round() ties to even, as the kernels
        total16 = sum(q * int(v) for q, v in zip(w16, vals, strict=True))
        return float(math.floor((total16 + 32768) / 65536)), "fixed"
    s = None
    for wt32, v in zip(w32, vals, strict=True):
        wt = np.float16(wt32)
        s = np.float16(float(wt) * float(v)) if s is None else _fma16(wt, np.float16(v), s)
    return float(s), "fp16"


@pytest.mark.parametrize("mask_lo", [0.0, -1.0], ids=["mask_0_1", "mask_-1_1"])
@pytest.mark.parametrize("qtype", QTYPES)
def test_sampling_matches_the_kernels_steps(qtype: str, mask_lo: float) -> None:
    """FP8 in FP16; INT8 in fixed point, and in FP16 where a negative mask makes a weight negative."""
    rng = np.random.default_rng()
    n, c, h, w, oc, k = 1, 2, 5, 6, 3, 3
    stride, pad = (2, 1), (1, 1)
    x_q = to_grid(rng.standard_normal((n, c, h, w)) * (40 if qtype == "int8" else 60), qtype)
    w_q = quantize(rng.standard_normal((oc, c, k, k)), 0.02, qtype)
    ho = (h + 2 * pad[0] - k) // stride[0] + 1
    wo = (w + 2 * pad[1] - k) // stride[1] + 1
    # float32 offsets, some samples across the border and outside
    offset = (rng.standard_normal((n, 2 * k * k, ho, wo)) * 2.5).astype(np.float32).astype(np.float64)
    mask = rng.uniform(mask_lo, 1, (n, k * k, ho, wo)).astype(np.float32).astype(np.float64)
    want = np.zeros((n, oc, ho, wo))
    border = 0  # samples whose 2x2 cell crosses the image border (the kernels move such cells inside)
    paths = {"outside": 0, "fixed": 0, "fp16": 0}
    for oy in range(ho):
        for ox in range(wo):
            for kp in range(k * k):
                i, j = divmod(kp, k)
                y = oy * stride[0] - pad[0] + i + offset[0, 2 * kp, oy, ox]
                x = ox * stride[1] - pad[1] + j + offset[0, 2 * kp + 1, oy, ox]
                for ci in range(c):
                    value, path = _sample(x_q[0, ci], y, x, mask[0, kp, oy, ox], qtype == "int8")
                    paths[path] += 1
                    want[0, :, oy, ox] += w_q[:, ci, i, j] * to_grid(np.array(value), qtype)
                border += (math.floor(y) in (-1, h - 1)) or (math.floor(x) in (-1, w - 1))
    got = dcn_quant(x_q, 1.0, offset, mask, w_q, np.ones(oc), None, qtype=qtype, round_samples=True,
                    **core_interp(qtype), stride=stride, padding=pad)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)  # the same samples; sums in another order
    assert border > 0, "no sample on a cell that crosses the border"
    assert paths["fp16"] > 0 if qtype != "int8" or mask_lo < 0 else paths["fp16"] == 0, paths
    assert (paths["fixed"] > 0) == (qtype == "int8"), paths
