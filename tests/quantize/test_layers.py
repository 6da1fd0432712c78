"""The quantize stage end to end (dcnconvert.quantize.layers): the Q/DQ model runs in ONNX Runtime and
computes the quantized math of tests/support/quant.py; its error against the float model stays within
the bound derived below; layers it cannot quantize are reported."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from dcnconvert.errors import ModelError, NoMatchError, UsageError
from dcnconvert.model.quantized import QUANT_MAX
from dcnconvert.quantize import layers
from dcnconvert.transform import standard
from tests.support import quant, samples

EPS32 = float(np.finfo(np.float32).eps)

# form, kwargs: non-square stride/padding/dilation, groups, deformable groups.
CASES = [
    ("onnx.DeformConv", {}),
    ("onnx.DeformConv", {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "group": 2,
                         "deformable_group": 2, "c": 4, "cout": 6}),
    ("mmcv.MMCVModulatedDeformConv2d", {"stride": (1, 2), "padding": (2, 1), "dilation": (2, 1),
                                        "deformable_group": 2}),
]


def _run(model, feed):
    sess = ort.InferenceSession(standard.to_standard_model(model).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0].astype(np.float64)


def _attrs(kw):
    return {"stride": kw.get("stride", (1, 1)), "padding": kw.get("padding", (1, 1)),
            "dilation": kw.get("dilation", (1, 1)), "group": kw.get("group", 1),
            "deformable_group": kw.get("deformable_group", 1)}


def _init(model, name):
    init = next(i for i in model.graph.initializer if i.name == name)
    return numpy_helper.to_array(init).astype(np.float64)


def _float_error_bound(feed, w, x_scale, w_scale, qtype, attrs):
    """Per output element, how far the Q/DQ graph may move a float output (exact arithmetic).

    With s = mask * bilinear(x) and s' the sample of the dequantized x':
    ``out' - out = sum (w' - w) * s' + sum w * (s' - s)``. Bilinear weights are >= 0 and sum to <= 1,
    so ``|s'| <= |mask| * bilinear(|x'|)`` and ``|s' - s| <= |mask| * bilinear(|x' - x|)``; hence
    ``|out' - out| <= DCN(|x'|, |mask|, |w' - w|) + DCN(|x' - x|, |mask|, |w|)``, every term at most
    the rounding of one value: INT8 half a step (``scale / 2``), E4M3 half an ulp, at most 2**-4 of
    the value for normal numbers and half the subnormal step 2**-9 * scale below. No value saturates
    on calibration inputs (the scales come from their amax). A float32 term covers ONNX Runtime's
    own rounding in both models."""
    from tests.support.reference import modulated_deform_conv2d

    x = feed["x"].astype(np.float64)
    ws = w_scale[:, None, None, None]
    if qtype == "int8":
        ex, ew = np.full_like(x, x_scale / 2), np.broadcast_to(ws / 2, w.shape)
    else:
        ex = 2.0 ** -4 * np.abs(x) + 2.0 ** -10 * x_scale
        ew = 2.0 ** -4 * np.abs(w) + 2.0 ** -10 * ws
    x_deq = quant.quantize(x, x_scale, qtype) * x_scale
    mask = np.abs(feed["mask"]).astype(np.float64)
    offset = feed["offset"].astype(np.float64)
    bound = (modulated_deform_conv2d(np.abs(x_deq), offset, mask, ew, None, **attrs)
             + modulated_deform_conv2d(ex, offset, mask, np.abs(w), None, **attrs))
    mag = modulated_deform_conv2d(np.abs(x), offset, mask, np.abs(w), None, **attrs)
    return bound + 64 * EPS32 * (mag + 1.0)


@pytest.mark.parametrize("qtype", ["int8", "fp8e4m3"])
@pytest.mark.parametrize("form,kw", CASES)
def test_qdq_model_is_the_quantized_math_and_close_to_float(form, kw, qtype):
    seed = int(np.random.default_rng().integers(1 << 30))  # fresh inputs every run
    model = samples.build(form, seed=seed % 1000, **kw)
    feeds = [samples.input_feeds(model, seed + i) for i in range(3)]
    out, report = layers.quantize_model(model, qtype, feeds)
    onnx.checker.check_model(out)
    assert [r["node"] for r in report["layers"]] == ["dcn0"] and report["skipped"] == []

    x_amax = max(float(np.abs(f["x"]).max()) for f in feeds)
    assert report["amax"] == {"x": pytest.approx(x_amax, rel=1e-7)}
    x_scale = x_amax / QUANT_MAX[qtype]
    w = _init(model, "weight")
    w_scale = np.abs(w).reshape(w.shape[0], -1).max(axis=1) / QUANT_MAX[qtype]
    assert _init(out, "x_scale") == pytest.approx(x_scale, rel=1e-6)
    np.testing.assert_allclose(_init(out, "weight_scale"), w_scale, rtol=1e-6)
    bias = _init(model, "bias") if "bias" in {i.name for i in model.graph.initializer} else None

    # The Q/DQ model is the quantized math without the sample rounding (tests/support/quant.py), on
    # calibration inputs and on a fresh input that may saturate.
    fresh = samples.input_feeds(model, seed + 99)
    xs = np.float32(_init(out, "x_scale"))
    ws = _init(out, "weight_scale").astype(np.float32)
    for feed in feeds + [fresh]:
        got = _run(out, feed)
        x_q = quant.quantize(feed["x"], xs, qtype)
        w_q = quant.quantize(w, ws.astype(np.float64)[:, None, None, None], qtype)
        want = quant.dcn_quant(x_q, float(xs), feed["offset"], feed["mask"], w_q, ws, bias, qtype=qtype,
                               round_samples=False, **_attrs(kw))
        mag = quant.dcn_quant(np.abs(x_q), float(xs), feed["offset"], np.abs(feed["mask"]), np.abs(w_q), ws,
                              None, qtype=qtype, round_samples=False, **_attrs(kw))
        assert np.all(np.abs(got - want) <= 64 * EPS32 * (mag + np.abs(want) + 1e-6))

    # Against the float model, on the calibration inputs (no saturation there).
    for feed in feeds:
        diff = np.abs(_run(out, feed) - _run(model, feed))
        bound = _float_error_bound(feed, w, x_scale, w_scale, qtype, _attrs(kw))
        assert np.all(diff <= bound), (diff.max(), (diff / bound).max())
        assert diff.max() > 0  # the quantization did change the result


def test_network_with_two_dcns_and_output_quantization():
    model = onnx.load(samples_path("torch_dynamo_dcn_net.onnx"))
    rng = np.random.default_rng()
    feeds = [{"x": rng.normal(size=(1, 3, 16, 16)).astype(np.float32)} for _ in range(2)]
    out, report = layers.quantize_model(model, "int8", feeds, quantize_output=True)
    onnx.checker.check_model(out)
    assert [r["node"] for r in report["layers"]] == ["node_deform_conv2d", "node_deform_conv2d_1"]
    for row in report["layers"]:
        assert row["output_scale"] == pytest.approx(report["amax"][row["output"]] / 127)
    assert out.graph.output[0].name == "y"
    for feed in feeds:
        got, want = _run(out, feed), _run(model, feed)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 0.1 * np.abs(want).max()  # a sanity check; the bound is above
        # the quantized output is on the grid of its scale
        scale = report["layers"][1]["output_scale"]
        np.testing.assert_allclose(got / scale, np.rint(got / scale), atol=1e-3)


def samples_path(name):
    from pathlib import Path

    return Path(__file__).resolve().parents[2] / "sample_models" / name


def test_opset_is_upgraded_for_fp8():
    model = samples.build("mmcv.MMCVModulatedDeformConv2d", seed=1)
    assert [o.version for o in model.opset_import if o.domain == ""] == [11]
    out, report = layers.quantize_model(model, "fp8e4m3", [samples.input_feeds(model, 0)])
    assert report["opset_upgraded_from"] == 11
    assert [o.version for o in out.opset_import if o.domain == ""] == [19]
    onnx.checker.check_model(out)


def test_skips_are_reported_and_nothing_quantizable_is_an_error():
    model = samples.build("tao.ModulatedDeformConv2d", seed=1)  # weight is a graph input
    with pytest.raises(NoMatchError, match="not a constant"):
        layers.quantize_model(model, "int8", [samples.input_feeds(model, 0)])


def test_quantized_layers_are_not_quantized_twice():
    model = samples.build("onnx.DeformConv", seed=1)
    feeds = [samples.input_feeds(model, 0)]
    once, _ = layers.quantize_model(model, "int8", feeds)
    with pytest.raises(NoMatchError, match="already dequantized"):
        layers.quantize_model(once, "int8", feeds)


def _with_x_pair(model, scale, zp):
    """``model`` whose DCN reads x through a Q/DQ pair given from outside (as ModelOpt shares one)."""
    g = model.graph
    g.initializer.extend([numpy_helper.from_array(np.asarray(scale, np.float32), "xs"),
                          numpy_helper.from_array(zp, "xz")])
    g.node.insert(0, onnx.helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q"))
    g.node.insert(1, onnx.helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq"))
    next(n for n in g.node if n.op_type == "DeformConv").input[0] = "xd"
    return model


def test_shared_x_pair_is_kept_and_only_the_weight_is_added():
    model = _with_x_pair(samples.build("onnx.DeformConv", seed=1), 0.02, np.zeros((), np.int8))
    out, report = layers.quantize_model(model, "int8", [samples.input_feeds(model, 0)])
    onnx.checker.check_model(out)
    row = report["layers"][0]
    assert row["x_scale_kept"] and row["x_scale"] == pytest.approx(0.02)
    ops = [n.op_type for n in out.graph.node]
    assert ops.count("QuantizeLinear") == 2 and ops.count("DequantizeLinear") == 2
    assert next(n for n in out.graph.node if n.op_type == "DeformConv").input[0] == "xd"


@pytest.mark.parametrize("scale,zp,qtype", [
    ([0.02, 0.03], np.zeros(2, np.int8), "int8"),      # not per tensor (a 1-D scale on x)
    (0.02, np.ones((), np.int8), "int8"),               # zero point not 0
    (0.02, np.zeros((), np.uint8), "int8"),             # UINT8
    (0.02, np.zeros((), np.int8), "fp8e4m3"),           # another type than asked for
])
def test_shared_x_pair_that_cannot_be_kept_leaves_the_layer_float(scale, zp, qtype):
    model = samples.build("onnx.DeformConv", seed=1, c=2, opset=19)
    if np.asarray(scale).size > 1:  # a per-channel DQ needs its axis
        model = _with_x_pair(model, scale, zp)
        for n in model.graph.node[:2]:
            n.attribute.append(onnx.helper.make_attribute("axis", 1))
    else:
        model = _with_x_pair(model, scale, zp)
    with pytest.raises(NoMatchError, match="not per tensor"):
        layers.quantize_model(model, qtype, [samples.input_feeds(model, 0)])


def test_node_selection_and_unknown_names():
    model = samples.build("onnx.DeformConv", seed=1)
    feeds = [samples.input_feeds(model, 0)]
    with pytest.raises(UsageError, match="no DCN node of that name"):
        layers.quantize_model(model, "int8", feeds, nodes=["nope"])
    with pytest.raises(UsageError, match="unknown quantized type"):
        layers.quantize_model(model, "int4", feeds)


def test_opset_that_cannot_be_upgraded_names_the_fix():
    model = samples.build("centernet.DCNv2", seed=1)  # opset 9, custom op in the default domain
    with pytest.raises(ModelError, match="opset 9") as info:
        layers.quantize_model(model, "int8", [samples.input_feeds(model, 0)])
    assert "dcnconvert reference" in info.value.hint
