"""NumPy float64 reference of the ``ModulatedDeformConv2d`` plugin (modulated deformable convolution).

The semantics are the canonical ones shared by mmcv, torchvision, ONNX ``DeformConv`` and TensorRT's
plugin (``shared/research/dcn_formats.md`` §2). For output ``(n, o, oy, ox)``, output group
``gc = o // (OC / group)`` and input channel ``c`` of that group, with offset group
``g = c // (C / deformable_group)`` and kernel point ``k = i * kw + j``::

    out = bias[o] + sum_{c, i, j} W[o, c - gc * C / group, i, j] * mask[n, g*kh*kw + k, oy, ox]
          * bilinear0(x[n, c], oy*sH - pH + i*dH + offset[n, g*2*kh*kw + 2k,     oy, ox],
                               ox*sW - pW + j*dW + offset[n, g*2*kh*kw + 2k + 1, oy, ox])

``bilinear0`` is bilinear interpolation in which every corner outside the image counts as 0, and the
whole sample is 0 when ``y <= -1``, ``y >= H``, ``x <= -1`` or ``x >= W``.

This module needs only NumPy (it is imported on machines without onnx). All arithmetic is float64;
inputs of any float dtype are upcast and the result is float64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["deform_conv2d_output_size", "modulated_deform_conv2d"]

PairLike = int | Sequence[int]


def _pair(value: PairLike, name: str, minimum: int) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)):
        pair = (int(value), int(value))
    else:
        items = list(value)
        if len(items) != 2 or not all(isinstance(v, (int, np.integer)) for v in items):
            raise ValueError(f"{name} must be an int or a pair of ints (h, w), got {value!r}")
        pair = (int(items[0]), int(items[1]))
    if min(pair) < minimum:
        raise ValueError(f"{name} must be >= {minimum} in both axes, got {pair}")
    return pair


def deform_conv2d_output_size(
    input_hw: Sequence[int],
    kernel_hw: Sequence[int],
    *,
    stride: PairLike = (1, 1),
    padding: PairLike = (0, 0),
    dilation: PairLike = (1, 1),
) -> tuple[int, int]:
    """Output spatial size ``(oh, ow)`` of a 2-D (deformable) convolution with symmetric padding.

    Args:
        input_hw: input height and width.
        kernel_hw: kernel height and width.
        stride: stride, an int or ``(h, w)``.
        padding: padding on each side, an int or ``(h, w)``.
        dilation: dilation, an int or ``(h, w)``.

    Returns:
        ``(oh, ow)``; a value below 1 means the kernel does not fit (callers decide whether to raise).
    """
    sh, sw = _pair(stride, "stride", 1)
    ph, pw = _pair(padding, "padding", 0)
    dh, dw = _pair(dilation, "dilation", 1)
    h, w = (int(v) for v in input_hw)
    kh, kw = (int(v) for v in kernel_hw)
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    return oh, ow


def _as_float64(array: object, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(array)
    if not (np.issubdtype(arr.dtype, np.floating) or arr.dtype.kind == "V" or arr.dtype.name == "bfloat16"):
        raise ValueError(f"{name} must be a floating-point array, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(arr.shape)}")
    return arr.astype(np.float64, copy=False)


def _check_shapes(
    x: np.ndarray,
    offset: np.ndarray,
    mask: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    group: int,
    deformable_group: int,
) -> tuple[int, int]:
    n, c, h, w = x.shape
    oc, cpg, kh, kw = weight.shape
    if group < 1 or deformable_group < 1:
        raise ValueError(f"group and deformable_group must be >= 1, got {group} and {deformable_group}")
    if c % group or oc % group:
        raise ValueError(f"group={group} must divide the input channels ({c}) and output channels ({oc})")
    if c % deformable_group:
        raise ValueError(f"deformable_group={deformable_group} must divide the input channels ({c})")
    if cpg * group != c:
        raise ValueError(
            f"weight shape {tuple(weight.shape)} does not match x channels {c} with group={group}: "
            f"weight.shape[1] must be {c // group}"
        )
    if kh < 1 or kw < 1:
        raise ValueError(f"kernel size must be >= 1, got {kh}x{kw}")
    oh, ow = deform_conv2d_output_size((h, w), (kh, kw), stride=stride, padding=padding, dilation=dilation)
    if oh < 1 or ow < 1:
        raise ValueError(
            f"kernel {kh}x{kw} with dilation {dilation} does not fit the padded input "
            f"{h}x{w} + 2*{padding} (output would be {oh}x{ow})"
        )
    k = kh * kw
    expected_offset = (n, 2 * deformable_group * k, oh, ow)
    if tuple(offset.shape) != expected_offset:
        raise ValueError(
            f"offset shape {tuple(offset.shape)} != expected {expected_offset} "
            f"(N, 2*deformable_group*kh*kw, oh, ow) for deformable_group={deformable_group}"
        )
    expected_mask = (n, deformable_group * k, oh, ow)
    if tuple(mask.shape) != expected_mask:
        raise ValueError(
            f"mask shape {tuple(mask.shape)} != expected {expected_mask} "
            f"(N, deformable_group*kh*kw, oh, ow) for deformable_group={deformable_group}"
        )
    if bias is not None and tuple(bias.shape) != (oc,):
        raise ValueError(f"bias shape {tuple(bias.shape)} != ({oc},)")
    return oh, ow


def _corner_weights32(ly, lx, scale, inside: tuple) -> list:
    """The quantized kernels' corner weights ``(scale * wy) * wx`` in float32, in corner order (top
    left, top right, bottom left, bottom right); ``inside``: (top row, bottom row, left column,
    right column) in the plane, the kernels zero the weights of the others."""
    f32 = np.float32
    ly32, lx32, m32 = ly.astype(f32), lx.astype(f32), scale.astype(f32)
    top, bottom, left, right = inside
    wy = (np.where(top, f32(1.0) - ly32, f32(0.0)), np.where(bottom, ly32, f32(0.0)))
    wx = (np.where(left, f32(1.0) - lx32, f32(0.0)), np.where(right, lx32, f32(0.0)))
    return [((m32 * wy[i]) * wx[j]).astype(f32) for i in (0, 1) for j in (0, 1)]


def _fixed_weights(w32: list) -> tuple[np.ndarray, list]:
    """INT8's fixed-point weights (dcnElements.cuh, fixedWeights): where all four are at least 0 and
    their float32 sum at most 1.0001, ``min(round(65536 w), 65535)`` each (``ok`` says where)."""
    f32 = np.float32
    total = ((w32[0] + w32[1]) + w32[2]) + w32[3]
    ok = (w32[0] >= 0) & (w32[1] >= 0) & (w32[2] >= 0) & (w32[3] >= 0) & (total <= f32(1.0001))
    return ok, [np.minimum(np.rint(w.astype(np.float64) * 65536.0), 65535.0) for w in w32]


def modulated_deform_conv2d(
    x: np.ndarray,
    offset: np.ndarray,
    mask: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: PairLike = (1, 1),
    padding: PairLike = (0, 0),
    dilation: PairLike = (1, 1),
    group: int = 1,
    deformable_group: int = 1,
    sample_transform: Callable[[np.ndarray], np.ndarray] | None = None,
    fp16_interp: bool = False,
    fixed_interp: bool = False,
) -> np.ndarray:
    """Modulated deformable 2-D convolution in float64 (the plugin's exact semantics).

    Args:
        x: input ``(N, C, H, W)``.
        offset: ``(N, 2*deformable_group*kh*kw, oh, ow)``; channel ``g*2*kh*kw + 2k`` is dy, ``+1`` dx.
        mask: ``(N, deformable_group*kh*kw, oh, ow)``; a plain multiplier (already sigmoid-ed).
        weight: ``(OC, C/group, kh, kw)``.
        bias: ``(OC,)`` or None.
        stride: int or ``(h, w)``, >= 1.
        padding: symmetric padding, int or ``(h, w)``, >= 0.
        dilation: int or ``(h, w)``, >= 1.
        group: convolution groups.
        deformable_group: offset groups.
        sample_transform: applied to every modulated sample (mask times the bilinear value) before
            the product with the weights; a quantized layer rounds its samples there
            (:mod:`tests.support.quant`).
        fp16_interp: interpolate as the quantized kernels do (plugin_src/core/dcnParams.h): corner
            weights formed in float32 (mask times row weight times column weight) and rounded to
            float16, the sum of the four products rounded to float16 after each step, in corner order.
        fixed_interp: with ``fp16_interp``, INT8's samples: in fixed point where the float32 weights
            allow (16-bit weights, an exact sum rounded half up; dcnElements.cuh, quantSample), else
            as ``fp16_interp``.

    Returns:
        float64 array ``(N, OC, oh, ow)``.

    Raises:
        ValueError: on inconsistent shapes or attribute values (the message says which).
    """
    stride_hw = _pair(stride, "stride", 1)
    padding_hw = _pair(padding, "padding", 0)
    dilation_hw = _pair(dilation, "dilation", 1)
    group = int(group)
    deformable_group = int(deformable_group)
    x = _as_float64(x, "x", 4)
    offset = _as_float64(offset, "offset", 4)
    mask = _as_float64(mask, "mask", 4)
    weight = _as_float64(weight, "weight", 4)
    bias = None if bias is None else _as_float64(bias, "bias", 1)
    oh, ow = _check_shapes(
        x, offset, mask, weight, bias, stride_hw, padding_hw, dilation_hw, group, deformable_group
    )

    n, c, h, w = x.shape
    oc, cpg, kh, kw = weight.shape
    dg = deformable_group
    k_count = kh * kw
    p_count = oh * ow
    (sh, sw), (ph, pw), (dh, dw) = stride_hw, padding_hw, dilation_hw

    # Zero border of one pixel: every corner of a valid sample (-1 < y < H) then lies inside the
    # padded image and out-of-image corners read 0, which is exactly bilinear0.
    hp, wp = h + 2, w + 2
    xpad = np.zeros((n, dg, c // dg, hp * wp), dtype=np.float64)
    xpad.reshape(n, dg, c // dg, hp, wp)[..., 1:-1, 1:-1] = x.reshape(n, dg, c // dg, h, w)

    offset = offset.reshape(n, dg, k_count, 2, p_count)
    mask = mask.reshape(n, dg, k_count, p_count)
    base_y = (np.arange(oh, dtype=np.float64) * sh - ph)[:, None]  # (oh, 1)
    base_x = (np.arange(ow, dtype=np.float64) * sw - pw)[None, :]  # (1, ow)
    base_y = np.broadcast_to(base_y, (oh, ow)).reshape(p_count)
    base_x = np.broadcast_to(base_x, (oh, ow)).reshape(p_count)

    # weight as (group, OC/group, C/group, K); columns per kernel point as (N, group, C/group, P).
    wk = weight.reshape(group, oc // group, cpg, k_count)
    out = np.zeros((n, group, oc // group, p_count), dtype=np.float64)
    for k in range(k_count):
        i, j = divmod(k, kw)
        y = base_y + i * dh + offset[:, :, k, 0, :]  # (N, dg, P)
        xs = base_x + j * dw + offset[:, :, k, 1, :]
        valid = (y > -1) & (y < h) & (xs > -1) & (xs < w)
        y = np.where(valid, y, 0.0)
        xs = np.where(valid, xs, 0.0)
        y0 = np.floor(y)
        x0 = np.floor(xs)
        ly = y - y0
        lx = xs - x0
        hy = 1.0 - ly
        hx = 1.0 - lx
        scale = np.where(valid, mask[:, :, k, :], 0.0)
        # Padded indices of the top-left corner (row y0 + 1, column x0 + 1).
        idx = (y0.astype(np.intp) + 1) * wp + (x0.astype(np.intp) + 1)
        sampled = np.zeros((n, dg, c // dg, p_count), dtype=np.float64)
        corners = ((0, hy * hx), (1, hy * lx), (wp, ly * hx), (wp + 1, ly * lx))
        if fp16_interp:
            inside = (y0 >= 0, y0 + 1 < h, x0 >= 0, x0 + 1 < w)
            w32 = _corner_weights32(ly, lx, scale, inside)
            w16s = [wc.astype(np.float16).astype(np.float64) for wc in w32]
            corners = tuple((off, w16s[i]) for i, (off, _) in enumerate(corners))
            fixed_ok, w16 = _fixed_weights(w32)
            fixed_sum = np.full(sampled.shape, 32768.0)
        for ci, (corner, weight_c) in enumerate(corners):
            vals = np.take_along_axis(xpad, (idx + corner)[:, :, None, :], axis=3)
            if fp16_interp:  # each product exact in float64, each partial sum rounded to float16
                sampled = (sampled + vals * weight_c[:, :, None, :]).astype(np.float16).astype(np.float64)
                fixed_sum += vals * w16[ci][:, :, None, :]  # integers below 2**25: exact
            else:
                sampled += vals * (weight_c * scale)[:, :, None, :]
        if fixed_interp:
            sampled = np.where(fixed_ok[:, :, None, :], np.floor(fixed_sum / 65536.0), sampled)
        if sample_transform is not None:
            sampled = sample_transform(sampled)
        cols = sampled.reshape(n, group, cpg, p_count)
        out += np.matmul(wk[None, :, :, :, k], cols)
    out = out.reshape(n, oc, oh, ow)
    if bias is not None:
        out += bias[None, :, None, None]
    return out
