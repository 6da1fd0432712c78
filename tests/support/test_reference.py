"""Tests of the NumPy float64 DCN reference (dcnconvert/reference.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from support.reference import deform_conv2d_output_size, modulated_deform_conv2d

# --------------------------------------------------------------------------------------------------
# Independent oracles written as plain loops (deliberately unvectorised).


def _bilinear0(img: np.ndarray, y: float, x: float) -> float:
    h, w = img.shape
    if y <= -1 or y >= h or x <= -1 or x >= w:
        return 0.0
    y0, x0 = math.floor(y), math.floor(x)
    total = 0.0
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < h and 0 <= xx < w:
                total += wy * wx * float(img[yy, xx])
    return total


def naive_dcn(x, offset, mask, weight, bias, stride, padding, dilation, group, dg):
    n, c, _h, _w = x.shape
    oc, cpg, kh, kw = weight.shape
    oh, ow = offset.shape[2:]
    out = np.zeros((n, oc, oh, ow))
    for b, o, oy, ox in itertools.product(range(n), range(oc), range(oh), range(ow)):
        gc = o // (oc // group)
        acc = 0.0 if bias is None else float(bias[o])
        for cl in range(cpg):
            ch = gc * cpg + cl
            g = ch // (c // dg)
            for i, j in itertools.product(range(kh), range(kw)):
                k = i * kw + j
                dy = offset[b, g * 2 * kh * kw + 2 * k, oy, ox]
                dx = offset[b, g * 2 * kh * kw + 2 * k + 1, oy, ox]
                y = oy * stride[0] - padding[0] + i * dilation[0] + dy
                xx = ox * stride[1] - padding[1] + j * dilation[1] + dx
                acc += weight[o, cl, i, j] * mask[b, g * kh * kw + k, oy, ox] * _bilinear0(x[b, ch], y, xx)
        out[b, o, oy, ox] = acc
    return out


def naive_conv(x, weight, bias, stride, padding, dilation, group, shift=(0, 0)):
    """Ordinary grouped 2-D convolution as loops; zeros outside the image.

    ``shift`` moves every sampling point by whole pixels (what integer offsets do).
    """
    n, _c, h, w = x.shape
    oc, cpg, kh, kw = weight.shape
    oh, ow = deform_conv2d_output_size((h, w), (kh, kw), stride=stride, padding=padding, dilation=dilation)
    out = np.zeros((n, oc, oh, ow))
    for b, o, oy, ox in itertools.product(range(n), range(oc), range(oh), range(ow)):
        gc = o // (oc // group)
        acc = 0.0 if bias is None else float(bias[o])
        for cl, i, j in itertools.product(range(cpg), range(kh), range(kw)):
            y = oy * stride[0] - padding[0] + i * dilation[0] + shift[0]
            xx = ox * stride[1] - padding[1] + j * dilation[1] + shift[1]
            if 0 <= y < h and 0 <= xx < w:
                acc += weight[o, cl, i, j] * x[b, gc * cpg + cl, y, xx]
        out[b, o, oy, ox] = acc
    return out


def _case(seed, n, c, h, w, oc, kh, kw, stride, padding, dilation, group, dg, bias=True, offset_scale=2.0):
    rng = np.random.default_rng(seed)
    oh, ow = deform_conv2d_output_size((h, w), (kh, kw), stride=stride, padding=padding, dilation=dilation)
    x = rng.standard_normal((n, c, h, w))
    offset = rng.standard_normal((n, 2 * dg * kh * kw, oh, ow)) * offset_scale
    mask = rng.uniform(0.05, 1.0, (n, dg * kh * kw, oh, ow))
    weight = rng.standard_normal((oc, c // group, kh, kw))
    b = rng.standard_normal(oc) if bias else None
    return x, offset, mask, weight, b


def _run(args, stride, padding, dilation, group, dg):
    x, offset, mask, weight, b = args
    return modulated_deform_conv2d(
        x,
        offset,
        mask,
        weight,
        b,
        stride=stride,
        padding=padding,
        dilation=dilation,
        group=group,
        deformable_group=dg,
    )


# --------------------------------------------------------------------------------------------------
# Hand-checkable cases.


def test_single_sample_bilinear_by_hand():
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    weight = np.ones((1, 1, 1, 1))
    mask = np.full((1, 1, 1, 1), 0.5)
    offset = np.array([0.25, 0.5]).reshape(1, 2, 1, 1)  # dy = 0.25, dx = 0.5 at output (0, 0)
    out = modulated_deform_conv2d(x, offset, mask, weight, np.array([10.0]), stride=2)
    # bilinear at (0.25, 0.5): 0.75*(1.5) + 0.25*(3.5) = 2.0; times mask 0.5, plus bias 10.
    assert out.shape == (1, 1, 1, 1)
    assert out[0, 0, 0, 0] == pytest.approx(11.0, abs=1e-12)


@pytest.mark.parametrize("dy, dx", [(0, 0), (1, 0), (0, -1), (-2, 1), (3, 3)])
@pytest.mark.parametrize("group", [1, 2])
def test_integer_offsets_equal_shifted_conv(dy, dx, group):
    rng = np.random.default_rng(100 + 10 * dy + dx + group)
    n, c, h, w, oc = 2, 4, 6, 5, 4
    x = rng.standard_normal((n, c, h, w))
    weight = rng.standard_normal((oc, c // group, 3, 3))
    bias = rng.standard_normal(oc)
    oh, ow = deform_conv2d_output_size((h, w), (3, 3), padding=(1, 1))
    offset = np.zeros((n, 2 * 9, oh, ow))
    offset[:, 0::2] = dy
    offset[:, 1::2] = dx
    mask = np.ones((n, 9, oh, ow))
    out = modulated_deform_conv2d(x, offset, mask, weight, bias, padding=(1, 1), group=group)
    expected = naive_conv(x, weight, bias, (1, 1), (1, 1), (1, 1), group, shift=(dy, dx))
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "kh, kw, stride, padding, dilation, group",
    [(3, 3, (1, 1), (1, 1), (1, 1), 1), (1, 3, (2, 1), (0, 2), (1, 2), 2), (3, 3, (1, 2), (2, 1), (2, 1), 2)],
)
def test_zero_offsets_ones_mask_equal_ordinary_conv(kh, kw, stride, padding, dilation, group):
    rng = np.random.default_rng(7 + kh + group)
    n, c, h, w, oc = 3, 4, 7, 8, 6
    x = rng.standard_normal((n, c, h, w))
    weight = rng.standard_normal((oc, c // group, kh, kw))
    bias = rng.standard_normal(oc)
    oh, ow = deform_conv2d_output_size((h, w), (kh, kw), stride=stride, padding=padding, dilation=dilation)
    out = modulated_deform_conv2d(
        x,
        np.zeros((n, 2 * 2 * kh * kw, oh, ow)),
        np.ones((n, 2 * kh * kw, oh, ow)),
        weight,
        bias,
        stride=stride,
        padding=padding,
        dilation=dilation,
        group=group,
        deformable_group=2,
    )
    expected = naive_conv(x, weight, bias, stride, padding, dilation, group)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "coord, expected",
    [
        (-1.0, 0.0),  # exactly -1: whole sample is 0
        (-1.5, 0.0),
        (-0.5, 0.5 * 5.0),  # only the in-image corner (row 0) contributes
        (-1e-9, (1 - 1e-9) * 5.0),
        (0.0, 5.0),
        (2.0, 7.0),  # last row, exactly
        (2.5, 0.5 * 7.0),  # between last row and the out-of-image one
        (3.0, 0.0),  # exactly H: whole sample is 0
        (3.0 - 1e-9, 1e-9 * 7.0),  # just inside H: weight of the last row is ~1e-9
    ],
)
@pytest.mark.parametrize("axis", ["y", "x"])
def test_boundary_behaviour(coord, expected, axis):
    # Image 3x3 whose row r (or column r) is 5 + r everywhere; a 1x1 kernel samples at the offset.
    ramp = 5.0 + np.arange(3.0)
    img = np.repeat(ramp[:, None], 3, axis=1) if axis == "y" else np.repeat(ramp[None, :], 3, axis=0)
    x = img[None, None]
    offset = np.zeros((1, 2, 1, 1))
    offset[0, 0 if axis == "y" else 1, 0, 0] = coord
    offset[0, 1 if axis == "y" else 0, 0, 0] = 1.0  # other coordinate in the middle of the image
    out = modulated_deform_conv2d(x, offset, np.ones((1, 1, 1, 1)), np.ones((1, 1, 1, 1)), stride=3)
    assert out[0, 0, 0, 0] == pytest.approx(expected, abs=1e-12)


# --------------------------------------------------------------------------------------------------
# Random cases against the naive loop (exact to float64 round-off).

NAIVE_GRID = [
    # n, c, h, w, oc, kh, kw, stride, padding, dilation, group, dg, bias
    (1, 4, 5, 6, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1, 1, True),
    (3, 4, 6, 5, 2, 3, 3, (2, 1), (1, 2), (1, 2), 2, 2, False),
    (2, 8, 5, 7, 4, 1, 3, (1, 2), (0, 1), (2, 1), 2, 4, True),
    (1, 4, 4, 4, 6, 3, 1, (1, 1), (2, 0), (2, 1), 1, 4, True),
]


@pytest.mark.parametrize("case", NAIVE_GRID, ids=lambda c: "-".join(map(str, c)).replace(" ", ""))
def test_matches_naive_loop(case):
    n, c, h, w, oc, kh, kw, stride, padding, dilation, group, dg, bias = case
    args = _case(
        NAIVE_GRID.index(case) + 1, n, c, h, w, oc, kh, kw, stride, padding, dilation, group, dg, bias, 3.0
    )
    out = _run(args, stride, padding, dilation, group, dg)
    expected = naive_dcn(*args, stride, padding, dilation, group, dg)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------------------
# Random cases against onnx.reference's DeformConv (an independent implementation via GridSample).


def _onnx_deform_conv(x, offset, mask, weight, bias, stride, padding, dilation, group, dg):
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    inputs = ["X", "W", "offset", "B" if bias is not None else "", "mask"]
    node = helper.make_node(
        "DeformConv",
        inputs,
        ["Y"],
        strides=list(stride),
        pads=[padding[0], padding[1], padding[0], padding[1]],
        dilations=list(dilation),
        group=group,
        offset_group=dg,
    )
    feeds = {"X": x, "W": weight, "offset": offset, "mask": mask}
    if bias is not None:
        feeds["B"] = bias
    return ReferenceEvaluator(node).run(None, feeds)[0]


GEOMETRIES = [
    # kh, kw, stride, padding, dilation
    (3, 3, (1, 1), (1, 1), (1, 1)),
    (3, 3, (2, 1), (1, 2), (1, 2)),
    (1, 3, (1, 2), (0, 1), (2, 1)),
]
FULL_GRID = list(itertools.product([1, 2], [1, 2, 4], GEOMETRIES, [True, False], [1, 3]))
# Deterministic thinning: every 5th case (5 is coprime with the grid's inner sizes, so every value of
# every axis still appears).
ORT_GRID = FULL_GRID[::5]


def _grid_id(case):
    group, dg, (kh, kw, s, p, d), bias, n = case
    return (
        f"g{group}-dg{dg}-k{kh}x{kw}-s{s[0]}{s[1]}-p{p[0]}{p[1]}-d{d[0]}{d[1]}-{'b' if bias else 'nob'}-n{n}"
    )


def test_grid_covers_every_axis_value():
    for axis, values in enumerate(([1, 2], [1, 2, 4], GEOMETRIES, [True, False], [1, 3])):
        assert {case[axis] for case in ORT_GRID} == set(values), axis


@pytest.mark.parametrize("case", ORT_GRID, ids=_grid_id)
def test_matches_onnx_reference_evaluator(case):
    group, dg, (kh, kw, stride, padding, dilation), bias, n = case
    seed = FULL_GRID.index(case) + 1000
    # Offsets of scale 3 push many samples out of the image (and across -1 / H).
    args = _case(
        seed, n, 8 if dg == 4 else 4, 4, 5, 4, kh, kw, stride, padding, dilation, group, dg, bias, 3.0
    )
    out = _run(args, stride, padding, dilation, group, dg)
    expected = _onnx_deform_conv(*args, stride, padding, dilation, group, dg)
    scale = np.abs(expected).max()
    assert scale > 0.1
    # onnx.reference goes through GridSample with normalised coordinates: ~1e-7 relative round-off.
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5 * scale)


def test_float32_and_float16_inputs_are_upcast():
    args = _case(3, 1, 4, 5, 5, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1, 1)
    low = [a.astype(np.float16) for a in args]
    out = _run(low, (1, 1), (1, 1), (1, 1), 1, 1)
    assert out.dtype == np.float64
    expected = naive_dcn(*[a.astype(np.float64) for a in low], (1, 1), (1, 1), (1, 1), 1, 1)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_large_case_is_fast():
    import time

    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 32, 128, 128)).astype(np.float32)
    offset = rng.standard_normal((1, 18, 128, 128)).astype(np.float32)
    mask = rng.random((1, 9, 128, 128)).astype(np.float32)
    weight = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    start = time.perf_counter()
    out = modulated_deform_conv2d(x, offset, mask, weight, padding=1)
    assert out.shape == (1, 32, 128, 128)
    assert time.perf_counter() - start < 5.0


# --------------------------------------------------------------------------------------------------
# Validation.


def _good():
    return {
        "x": np.ones((2, 4, 5, 5)),
        "offset": np.ones((2, 18, 5, 5)),
        "mask": np.ones((2, 9, 5, 5)),
        "weight": np.ones((6, 4, 3, 3)),
        "bias": np.ones(6),
    }


@pytest.mark.parametrize(
    "change, kwargs, message",
    [
        ({"x": np.ones((4, 5, 5))}, {}, "x must have 4 dimensions"),
        ({"weight": np.ones((6, 3, 3, 3))}, {}, "weight.shape[1] must be 4"),
        ({"offset": np.ones((2, 16, 5, 5))}, {}, "offset shape"),
        ({"mask": np.ones((2, 18, 5, 5))}, {}, "mask shape"),
        ({"mask": np.ones((1, 9, 5, 5))}, {}, "mask shape"),
        ({"bias": np.ones(5)}, {}, "bias shape"),
        ({}, {"group": 3}, "group=3 must divide"),
        ({}, {"deformable_group": 3}, "deformable_group=3 must divide"),
        ({}, {"stride": 0}, "stride must be >= 1"),
        ({}, {"padding": (-1, 1)}, "padding must be >= 0"),
        ({}, {"dilation": (1, 2, 3)}, "dilation must be an int or a pair"),
        ({"x": np.ones((2, 4, 5, 5), dtype=np.int64)}, {}, "floating-point"),
        ({"offset": np.ones((2, 18, 4, 5))}, {}, "offset shape"),
    ],
)
def test_bad_arguments_raise_value_error(change, kwargs, message):
    args = _good()
    args.update(change)
    kwargs = {"padding": 1, **kwargs}
    with pytest.raises(ValueError) as info:
        modulated_deform_conv2d(**args, **kwargs)
    assert message in str(info.value)


def test_kernel_larger_than_input_raises():
    with pytest.raises(ValueError, match="does not fit"):
        modulated_deform_conv2d(
            np.ones((1, 1, 2, 2)), np.ones((1, 18, 1, 1)), np.ones((1, 9, 1, 1)), np.ones((1, 1, 3, 3))
        )


def test_output_size_helper():
    assert deform_conv2d_output_size((7, 8), (3, 1), stride=(2, 1), padding=(1, 0), dilation=(2, 1)) == (3, 8)
    assert deform_conv2d_output_size((5, 5), (3, 3), padding=1) == (5, 5)


def test_importable_with_numpy_only():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for name in ('onnx', 'onnxruntime', 'onnx_graphsurgeon', 'polygraphy', 'click'):\n"
        "    sys.modules[name] = None\n"
        "import support.reference as r\n"
        "print(r.modulated_deform_conv2d.__name__)\n"
    )
    tests_dir = __import__("pathlib").Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=tests_dir, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "modulated_deform_conv2d" in done.stdout
