"""Cross-checks of the CUDA core beyond the grid of tests/test_core_gpu.py.

* Tensors larger than 2^31 elements (FP16, x/offset/out): the core's 64-bit indexing, checked at
  selected output pixels (the far end included) against a per-pixel float64 reference, itself
  checked against ``support.reference`` on small cases (CPU).
* torchvision.ops.deform_conv2d in float64 on the GPU (optional; skipped without torch/torchvision).

Inputs, tolerances and helpers are those of tests/test_core_gpu.py (its module docstring states
and justifies the per-dtype bounds).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from support import core
from support.core_cases import (
    CASES,
    FIXED_CASES,
    Case,
    check_close,
    ensure_core_built,
    expect_fused,
    inputs_and_ref,
    make_inputs,
    params_for,
    random_cases,
    record_summary,
    reference,
    round_to,
    run_core,
    to_device,
)


@pytest.fixture(scope="module")
def lib():
    return core.load(ensure_core_built())


def reference_at(
    gather_x: Callable[[np.ndarray], np.ndarray],
    x_shape: tuple[int, int, int, int],
    offset_px: np.ndarray,
    mask_px: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    n_idx: np.ndarray,
    oy: np.ndarray,
    ox: np.ndarray,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    group: int,
    dg: int,
) -> np.ndarray:
    """float64 DCN output at selected pixels only, for tensors too large for the full reference.

    Args:
        gather_x: returns x.ravel()[indices] as float64 for an int64 index array.
        offset_px, mask_px: offset[n, :, oy, ox] and mask[n, :, oy, ox] per selected pixel, (P, ch).
        n_idx, oy, ox: the selected pixels (P,).

    Returns:
        (P, Cout) float64.
    """
    _, c, h, w = x_shape
    cout, cg, kh, kw = weight.shape
    kk = kh * kw
    cpd = c // dg
    p_count = len(n_idx)
    cols = np.zeros((p_count, c, kk))
    for k in range(kk):
        i, j = divmod(k, kw)
        for d in range(dg):
            y = oy * stride[0] - padding[0] + i * dilation[0] + offset_px[:, d * 2 * kk + 2 * k]
            xs = ox * stride[1] - padding[1] + j * dilation[1] + offset_px[:, d * 2 * kk + 2 * k + 1]
            valid = (y > -1) & (y < h) & (xs > -1) & (xs < w)
            y = np.where(valid, y, 0.0)
            xs = np.where(valid, xs, 0.0)
            y0 = np.floor(y).astype(np.int64)
            x0 = np.floor(xs).astype(np.int64)
            ly, lx = y - y0, xs - x0
            chans = np.arange(d * cpd, (d + 1) * cpd, dtype=np.int64)
            acc = np.zeros((p_count, cpd))
            for dy, dx, wgt in (
                (0, 0, (1 - ly) * (1 - lx)),
                (0, 1, (1 - ly) * lx),
                (1, 0, ly * (1 - lx)),
                (1, 1, ly * lx),
            ):
                yy, xx = y0 + dy, x0 + dx
                inside = valid & (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
                yc, xc = np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)
                flat = ((n_idx[:, None] * c + chans[None, :]) * h + yc[:, None]) * w + xc[:, None]
                vals = gather_x(flat.ravel()).reshape(p_count, cpd)
                acc += np.where(inside[:, None], vals, 0.0) * wgt[:, None]
            cols[:, d * cpd : (d + 1) * cpd, k] = acc * np.where(valid, mask_px[:, d * kk + k], 0.0)[:, None]
    mg = cout // group
    out = np.empty((p_count, cout))
    for g in range(group):
        a = cols[:, g * cg : (g + 1) * cg, :].reshape(p_count, cg * kk)
        out[:, g * mg : (g + 1) * mg] = a @ weight[g * mg : (g + 1) * mg].reshape(mg, cg * kk).T
    if bias is not None:
        out += bias[None, :]
    return out


def test_point_reference_matches_full_reference() -> None:
    """CPU: the per-pixel reference used for the >2^31 case agrees with support.reference."""
    for case in (FIXED_CASES[3], FIXED_CASES[6], FIXED_CASES[7], random_cases(3, seed=7)[2]):
        inputs = make_inputs(case, "float32", "point")
        full = reference(case, inputs)
        ho, wo = case.out_hw
        n_idx, oy, ox = (
            a.ravel().astype(np.int64)
            for a in np.meshgrid(np.arange(case.n), np.arange(ho), np.arange(wo), indexing="ij")
        )
        x = inputs["x"]
        pts = reference_at(
            lambda idx, x=x: x.ravel()[idx],
            x.shape,
            inputs["offset"][n_idx, :, oy, ox],
            inputs["mask"][n_idx, :, oy, ox],
            inputs["weight"],
            inputs["bias"],
            n_idx,
            oy,
            ox,
            case.stride,
            case.padding,
            case.dilation,
            case.group,
            case.dg,
        )
        np.testing.assert_allclose(pts, full[n_idx, :, oy, ox], rtol=1e-12, atol=1e-12)


def _torch_cuda():
    try:
        import torch
        import torchvision.ops  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"torch/torchvision not importable ({type(exc).__name__}: {exc})")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_core_matches_torchvision_float64(lib, case: Case) -> None:
    """Optional cross-check: torchvision.ops.deform_conv2d in float64 on the GPU vs our FP32."""
    torch = _torch_cuda()
    import torchvision.ops

    inputs, ref = inputs_and_ref(case, "float32")
    ours = run_core(lib, case, "float32", inputs)
    t = {k: (None if v is None else torch.from_numpy(v).cuda()) for k, v in inputs.items()}
    tv = (
        torchvision.ops.deform_conv2d(
            t["x"],
            t["offset"],
            t["weight"],
            t["bias"],
            stride=case.stride,
            padding=case.padding,
            dilation=case.dilation,
            mask=t["mask"],
        )
        .cpu()
        .numpy()
    )
    assert np.linalg.norm(tv - ref) <= 1e-10 * np.linalg.norm(ref), (
        "torchvision float64 disagrees with the reference"
    )
    numbers = check_close(ours, tv, "float32")
    record_summary({"test": "torchvision", "case": case.name, "dtype": "float32", **numbers})


@pytest.mark.gpu
@pytest.mark.slow
def test_tensors_larger_than_2pow31_elements(lib) -> None:
    """x, offset and out above 2^31 elements (FP16): sampled outputs, the far end included."""
    import cupy

    case = Case("huge", 2, 16, 8200, 8200, 16, (3, 3), padding=(1, 1), dg=1, off_scale=2.0)
    dtype = "float16"
    p = params_for(case, dtype)
    kk = 9
    sizes = {
        "x": case.n * case.c * case.h * case.w,
        "offset": case.n * 2 * kk * p.ho * p.wo,
        "mask": case.n * kk * p.ho * p.wo,
        "out": case.n * case.cout * p.ho * p.wo,
    }
    assert sizes["x"] > 2**31 and sizes["offset"] > 2**31 and sizes["out"] > 2**31
    need = 2 * sum(sizes.values()) + 8 * max(sizes.values())
    free, _ = cupy.cuda.runtime.memGetInfo()
    if free < need:
        pytest.skip(f"needs ~{need / 2**30:.0f} GiB of free GPU memory, {free / 2**30:.0f} GiB free")
    # Filled one image at a time so that no CuPy operation itself spans 2^31 elements.
    rs = cupy.random.RandomState(1234)
    x = cupy.empty((case.n, case.c, case.h, case.w), dtype=cupy.float16)
    offset = cupy.empty((case.n, 2 * kk, p.ho, p.wo), dtype=cupy.float16)
    mask = cupy.empty((case.n, kk, p.ho, p.wo), dtype=cupy.float16)
    out = cupy.empty((case.n, case.cout, p.ho, p.wo), dtype=cupy.float16)
    for n in range(case.n):
        x[n] = rs.standard_normal(x.shape[1:], dtype=cupy.float32).astype(cupy.float16)
        offset[n] = (rs.standard_normal(offset.shape[1:], dtype=cupy.float32) * 2.0).astype(cupy.float16)
        mask[n] = rs.uniform(0.0, 1.0, mask.shape[1:], dtype=cupy.float32).astype(cupy.float16)
        out[n].fill(np.nan)
    rng = np.random.default_rng(5)
    weight64 = round_to(rng.standard_normal((case.cout, case.c, 3, 3)) / np.sqrt(case.c * 9), dtype)
    bias64 = round_to(rng.standard_normal(case.cout), dtype)
    core.forward(p, x, offset, mask, to_device(weight64, dtype), to_device(bias64, dtype), out, lib=lib)
    cupy.cuda.get_current_stream().synchronize()
    for n in range(case.n):
        assert not bool(cupy.isnan(out[n]).any()), f"unwritten outputs in image {n}"
    # Selected pixels: random ones plus the last rows of the last image (element indices > 2^31).
    n_idx = np.concatenate([rng.integers(0, case.n, 1500), np.full(500, case.n - 1)])
    oy = np.concatenate([rng.integers(0, p.ho, 1500), rng.integers(p.ho - 4, p.ho, 500)])
    ox = np.concatenate([rng.integers(0, p.wo, 1500), rng.integers(0, p.wo, 500)])
    off_px = np.empty((len(n_idx), 2 * kk))
    mask_px = np.empty((len(n_idx), kk))
    got = np.empty((len(n_idx), case.cout))
    for n in range(case.n):
        sel = n_idx == n
        oy_d, ox_d = cupy.asarray(oy[sel]), cupy.asarray(ox[sel])
        off_px[sel] = offset[n][:, oy_d, ox_d].T.get()
        mask_px[sel] = mask[n][:, oy_d, ox_d].T.get()
        got[sel] = out[n][:, oy_d, ox_d].T.get()
    x_host = x.get().ravel()
    ref = reference_at(
        lambda idx: x_host[idx].astype(np.float64),
        (case.n, case.c, case.h, case.w),
        off_px,
        mask_px,
        weight64,
        bias64,
        n_idx,
        oy,
        ox,
        case.stride,
        case.padding,
        case.dilation,
        case.group,
        case.dg,
    )
    absref = reference_at(
        lambda idx: np.abs(x_host[idx].astype(np.float64)),
        (case.n, case.c, case.h, case.w),
        off_px,
        np.abs(mask_px),
        np.abs(weight64),
        None,
        n_idx,
        oy,
        ox,
        case.stride,
        case.padding,
        case.dilation,
        case.group,
        case.dg,
    )
    fused = expect_fused(case, dtype, core.ALGO_AUTO)
    numbers = check_close(got, ref, dtype, absref if fused else None)
    record_summary(
        {
            "test": "huge",
            "case": "2x16x8200x8200 fp16 (x/offset/out > 2^31 elements)",
            "dtype": dtype,
            **numbers,
        }
    )
