"""Tests of dcnconvert.transform.standard: plugin nodes -> standard ONNX DeformConv, opset raising, ORT
runs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import samples
from support.evaluate import BACKENDS, run_model

from dcnconvert import schema
from dcnconvert.errors import ModelError
from dcnconvert.model.opsets import raise_default_opset
from dcnconvert.transform.standard import (
    MIN_IR_VERSION,
    STANDARD_OPSET,
    plugin_model_to_standard,
)

F = TensorProto.FLOAT


def _ort(model, feeds, names=None):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = names or [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _init(rng, name, shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _plugin(inputs, output, target=schema.TARGET_DCNCONVERT, name="dcn", **kw):
    attrs = schema.DcnAttrs(**kw).node_attrs(target)
    return helper.make_node(
        schema.PLUGIN_NAME, inputs, [output], name=name, domain=schema.PLUGIN_DOMAIN, **attrs
    )


def legacy_opset_model(opset: int, bias: bool = True, target=schema.TARGET_DCNCONVERT) -> onnx.ModelProto:
    """A plugin model at an old opset, around it ops whose signature changed between ``opset`` and 19.

    Split (``split`` attribute -> input), ReduceSum/ReduceMean (``axes`` attribute -> input),
    Squeeze/Unsqueeze (``axes`` attribute -> input), Clip (``min/max`` attributes -> inputs, opset < 11).
    """
    rng = np.random.default_rng(opset)
    c, dg, k = 8, 2, 9
    inits = [
        _init(rng, "w_off", (3 * dg * k, c, 3, 3)),  # > 1 KB: held aside during the opset conversion
        _init(rng, "weight", (6, c // 2, 3, 3)),
        _init(rng, "bias", (6,)),
    ]
    axes_as_input = opset >= 13
    nodes = [
        helper.make_node("Conv", ["x", "w_off"], ["om"], pads=[1, 2, 1, 2], dilations=[1, 2], strides=[2, 1]),
    ]
    if axes_as_input:
        inits.append(numpy_helper.from_array(np.array([2 * dg * k, dg * k], np.int64), "split"))
        nodes.append(helper.make_node("Split", ["om", "split"], ["offset", "mask_logits"], axis=1))
    else:
        nodes.append(
            helper.make_node("Split", ["om"], ["offset", "mask_logits"], axis=1, split=[2 * dg * k, dg * k])
        )
    nodes += [
        helper.make_node("Sigmoid", ["mask_logits"], ["mask"]),
        _plugin(
            ["x", "offset", "mask", "weight"] + (["bias"] if bias else []),
            "dcn_out",
            target=target,
            stride=(2, 1),
            padding=(1, 2),
            dilation=(1, 2),
            group=2,
            deformable_group=dg,
        ),
    ]
    if opset < 11:
        nodes.append(helper.make_node("Clip", ["dcn_out"], ["clipped"], min=-0.5, max=0.75))
    else:
        inits += [
            numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
            numpy_helper.from_array(np.array(0.75, np.float32), "hi"),
        ]
        nodes.append(helper.make_node("Clip", ["dcn_out", "lo", "hi"], ["clipped"]))
    if axes_as_input:
        inits += [numpy_helper.from_array(np.array([1], np.int64), "ax1")]
        nodes += [
            helper.make_node("ReduceSum", ["clipped", "ax1"], ["rsum"], keepdims=1),
            helper.make_node("Squeeze", ["rsum", "ax1"], ["sq"]),
            helper.make_node("Unsqueeze", ["sq", "ax1"], ["us"]),
        ]
    else:
        nodes += [
            helper.make_node("ReduceSum", ["clipped"], ["rsum"], axes=[1], keepdims=1),
            helper.make_node("Squeeze", ["rsum"], ["sq"], axes=[1]),
            helper.make_node("Unsqueeze", ["sq"], ["us"], axes=[1]),
        ]
    if opset < 18:
        nodes.append(helper.make_node("ReduceMean", ["dcn_out"], ["pooled"], axes=[2, 3], keepdims=0))
    else:
        inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "ax23"))
        nodes.append(helper.make_node("ReduceMean", ["dcn_out", "ax23"], ["pooled"], keepdims=0))
    graph = helper.make_graph(
        nodes,
        "legacy",
        [helper.make_tensor_value_info("x", F, ["N", c, "H", "W"])],
        [
            helper.make_tensor_value_info("us", F, ["N", 1, "OH", "OW"]),
            helper.make_tensor_value_info("sq", F, ["N", "OH", "OW"]),
            helper.make_tensor_value_info("pooled", F, ["N", 6]),
        ],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[
            helper.make_opsetid("", opset),
            helper.make_opsetid(schema.PLUGIN_DOMAIN, schema.PLUGIN_DOMAIN_VERSION),
            helper.make_opsetid("mmcv", 1),  # left over from the source form; unused now
        ],
        producer_name="test",
    )
    model.ir_version = 6 if opset < 13 else 7
    return model


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opset", [9, 10, 11, 12, 13, 17, 19, 21])
def test_opset_raise_keeps_meaning_of_other_ops(opset, backend):
    model = legacy_opset_model(opset)
    before = model.SerializeToString()
    std = plugin_model_to_standard(model)
    assert model.SerializeToString() == before  # input untouched
    onnx.checker.check_model(std, full_check=True)
    default = [o.version for o in std.opset_import if o.domain == ""]
    assert default == [max(opset, STANDARD_OPSET)]
    assert {o.domain for o in std.opset_import} == {""}  # dcnconvert and mmcv imports dropped
    assert std.ir_version >= MIN_IR_VERSION
    assert [n.op_type for n in std.graph.node].count("DeformConv") == 1
    assert not any(n.domain for n in std.graph.node)
    rng = np.random.default_rng(opset + 500)
    for batch, h, w in ((1, 6, 7), (3, 5, 4)):
        x = rng.standard_normal((batch, 8, h, w)).astype(np.float32)
        expected = run_model(model, {"x": x}, backend=backend)  # original graph at its opset, NumPy plugin
        got = _ort(std, {"x": x})
        for name in ("us", "sq", "pooled"):
            scale = float(np.abs(expected[name]).max())
            assert scale > 0.05
            np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-5 * scale, err_msg=name)


def test_large_initializers_survive_conversion_bit_for_bit():
    model = legacy_opset_model(11)
    std = plugin_model_to_standard(model)
    original = {i.name: i.SerializeToString() for i in model.graph.initializer}
    converted = {i.name: i.SerializeToString() for i in std.graph.initializer}
    for name, data in original.items():
        assert converted[name] == data, name
    assert not any(i.data_location == onnx.TensorProto.EXTERNAL for i in std.graph.initializer)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    "target", [schema.TARGET_DCNCONVERT, schema.TARGET_TRT_BUILTIN], ids=lambda t: t.name
)
def test_deformconv_node_attributes(bias, target):
    std = plugin_model_to_standard(legacy_opset_model(19, bias=bias, target=target))
    (node,) = [n for n in std.graph.node if n.op_type == "DeformConv"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert list(node.input) == ["x", "weight", "offset", "bias" if bias else "", "mask"]
    assert node.name == "dcn" and list(node.output) == ["dcn_out"]
    assert attrs == {
        "strides": [2, 1],
        "pads": [1, 2, 1, 2],
        "dilations": [1, 2],
        "group": 2,
        "offset_group": 2,
        "kernel_shape": [3, 3],
    }


def test_plugin_only_model_with_weight_as_graph_input():
    """No initializer for the weight: kernel_shape is left out (optional) and ORT still runs it."""
    names = ["x", "offset", "mask", "weight"]
    shapes = [[2, 4, 5, 6], [2, 2 * 3, 5, 3], [2, 3, 5, 3], [4, 4, 1, 3]]
    node = _plugin(names, "y", stride=(1, 2), padding=(0, 1), dilation=(1, 1))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, F, ["a", "b", "c", "d"]) for n in names],
        [helper.make_tensor_value_info("y", F, ["a", 4, "e", "f"])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dcnconvert", 1)]
    )
    std = plugin_model_to_standard(model)
    (dc,) = std.graph.node
    assert "kernel_shape" not in {a.name for a in dc.attribute}
    rng = np.random.default_rng(9)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes, strict=True)}
    feeds["mask"] = np.abs(feeds["mask"])
    np.testing.assert_allclose(_ort(std, feeds)["y"], run_model(model, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_plugin_in_if_branch_is_converted():
    rng = np.random.default_rng(12)
    weight = numpy_helper.from_array(rng.standard_normal((2, 2, 3, 3)).astype(np.float32), "weight")
    vi = [helper.make_tensor_value_info(n, F, ["N", "C", "H", "W"]) for n in ("x", "offset", "mask")]
    then_g = helper.make_graph(
        [_plugin(["x", "offset", "mask", "weight"], "yb", padding=(1, 1))],
        "then",
        [],
        [helper.make_tensor_value_info("yb", F, ["N", 2, "H", "W"])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["ye"])],
        "else",
        [],
        [helper.make_tensor_value_info("ye", F, ["N", 2, "H", "W"])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])] + vi,
        [helper.make_tensor_value_info("y", F, ["N", 2, "H", "W"])],
        [weight],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 16), helper.make_opsetid("dcnconvert", 1)]
    )
    std = plugin_model_to_standard(model)
    then_nodes = next(a.g for a in std.graph.node[0].attribute if a.name == "then_branch").node
    assert [n.op_type for n in then_nodes] == ["DeformConv"]
    feeds = {
        "cond": np.array(True),
        "x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32),
        "offset": rng.standard_normal((1, 18, 4, 4)).astype(np.float32),
        "mask": rng.random((1, 9, 4, 4)).astype(np.float32),
    }
    np.testing.assert_allclose(
        _ort(std, feeds)["y"], run_model(model, feeds, backend="reference")["y"], rtol=1e-5, atol=1e-5
    )


def test_model_without_plugin_nodes_is_returned_unchanged():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, [1])],
        [helper.make_tensor_value_info("y", F, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    std = plugin_model_to_standard(model)
    assert std is not model
    assert std.SerializeToString() == model.SerializeToString()


def test_raise_default_opset_is_noop_at_or_above():
    model = legacy_opset_model(19)
    assert raise_default_opset(model, 19, "DeformConv") is model


def test_conversion_failure_is_a_model_error():
    model = legacy_opset_model(11)
    # A DeformConv below opset 19 has no version-converter adapter.
    model.graph.node.append(helper.make_node("DeformConv", ["x", "weight", "offset"], ["bad"]))
    with pytest.raises(ModelError, match="cannot convert the model from opset 11 to opset 19") as info:
        plugin_model_to_standard(model)
    assert "re-export" in info.value.hint


def test_target_opset_below_19_is_refused():
    with pytest.raises(ModelError, match="below 19"):
        plugin_model_to_standard(legacy_opset_model(11), target_opset=17)


def test_bad_plugin_node_is_a_model_error():
    model = legacy_opset_model(19)
    node = next(n for n in model.graph.node if n.op_type == schema.PLUGIN_NAME)
    for attr in list(node.attribute):
        if attr.name == schema.ATTR_STRIDE:
            node.attribute.remove(attr)
    with pytest.raises(ModelError, match="attribute 'stride' must be INTS"):
        plugin_model_to_standard(model)


def test_big_model_path_checks_with_weights_held_aside(monkeypatch):
    """Over the protobuf limit the checker sees a weight-less copy; the result keeps its weights."""
    from dcnconvert.transform import standard

    monkeypatch.setattr(standard, "_CHECKER_LIMIT_BYTES", 1000)
    model = legacy_opset_model(11)
    std = standard.plugin_model_to_standard(model)
    w_off = next(i for i in std.graph.initializer if i.name == "w_off")
    assert w_off.data_location == onnx.TensorProto.DEFAULT and len(w_off.raw_data) == 54 * 8 * 9 * 4


@pytest.mark.parametrize("target", ["dcnconvert", "trt-builtin"])
def test_to_standard_model_accepts_rewritten_models_of_either_target(target):
    from support import samples

    from dcnconvert.transform.plugin import rewrite_model

    original = samples.build(
        "mmcv.MMCVModulatedDeformConv2d", n=2, group=2, c=4, cout=4, deformable_group=2, seed=31
    )
    rewritten, _ = rewrite_model(original, target=target)
    from_rewritten = plugin_model_to_standard(rewritten)
    from dcnconvert.transform.standard import to_standard_model

    direct = to_standard_model(rewritten)
    assert [n.op_type for n in direct.graph.node] == ["DeformConv"]
    feeds = samples.input_feeds(original, 32)
    expected = run_model(rewritten, feeds)["y"]
    for model in (direct, from_rewritten, to_standard_model(original)):
        got = _ort(model, feeds)["y"]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * float(np.abs(expected).max()))


def test_to_standard_model_without_dcn_returns_a_copy():
    from dcnconvert.transform.standard import to_standard_model

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, [1])],
        [helper.make_tensor_value_info("y", F, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    std = to_standard_model(model)
    assert std.SerializeToString() == model.SerializeToString()


# --------------------------------------------------------------------------------------------------
# to_standard_model: valid standard DeformConv nodes are kept as they are, everything else converted
# --------------------------------------------------------------------------------------------------


def _deform_node(model: onnx.ModelProto) -> onnx.NodeProto:
    (node,) = [n for n in model.graph.node if n.op_type == "DeformConv"]
    return node


def _drop_mask(model: onnx.ModelProto) -> None:
    """Make a sample ``onnx.DeformConv`` model a DCNv1 one: no mask input (ORT uses ones)."""
    node = _deform_node(model)
    names = list(node.input[:4])
    while names and not names[-1]:
        names.pop()
    del node.input[:]
    node.input.extend(names)
    kept = [vi for vi in model.graph.input if vi.name != "mask"]
    del model.graph.input[:]
    model.graph.input.extend(kept)


def _standard_sample(pads, bias: bool, mask: bool, opset: int = 19, seed: int = 0) -> onnx.ModelProto:
    model = samples.build(
        "onnx.DeformConv", n=2, c=4, h=5, w=6, cout=4, pads=pads, stride=(2, 1), dilation=(1, 2),
        group=2, deformable_group=2, bias=bias, opset=opset, seed=seed,
    )
    if not mask:
        _drop_mask(model)
    return model


def _close_to_numpy_reference(std: onnx.ModelProto, original: onnx.ModelProto, feeds: dict) -> None:
    """ORT on ``std`` == the float64 NumPy reference of the rewritten ``original``."""
    from dcnconvert.transform.plugin import rewrite_model

    rewritten, _ = rewrite_model(original)
    expected = run_model(rewritten, feeds)
    got = _ort(std, feeds)
    assert set(got) == set(expected)
    for name, ref in expected.items():
        scale = float(np.abs(ref).max())
        assert scale > 1e-3, name
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=1e-5 * scale, err_msg=name)


def _is_valid(model: onnx.ModelProto) -> list[bool]:
    from dcnconvert.match.finder import find_dcn_nodes
    from dcnconvert.transform.standard import is_valid_standard_deformconv

    return [is_valid_standard_deformconv(m, model) for m in find_dcn_nodes(model)]


@pytest.mark.parametrize("opset", [19, 22])
@pytest.mark.parametrize("mask", [True, False], ids=["mask", "nomask"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("pads", [None, (0, 1, 2, 1), (2, 0, 0, 1)], ids=["sym", "asym0121", "asym2001"])
def test_valid_standard_deformconv_passes_through_byte_identical(pads, bias, mask, opset):
    from dcnconvert.transform.standard import to_standard_model

    seed = 300 + 10 * opset + 4 * bool(pads) + 2 * bias + mask
    model = _standard_sample(pads, bias, mask, opset=opset, seed=seed)
    before = model.SerializeToString()
    assert _is_valid(model) == [True]
    std = to_standard_model(model)
    assert model.SerializeToString() == before  # input untouched
    assert std is not model
    assert _deform_node(std).SerializeToString() == _deform_node(model).SerializeToString()
    assert std.SerializeToString() == before  # nothing to convert at opset >= 19: the model as it was
    feeds = samples.input_feeds(model, seed + 1)
    assert ("mask" in feeds) == mask
    got, original = _ort(std, feeds), _ort(model, feeds)
    for name, value in original.items():
        assert np.abs(value).max() > 1e-3
        assert got[name].tobytes() == value.tobytes(), name  # bit for bit
    # ... and both agree with our own parse of the node (rewrite + float64 NumPy reference).
    _close_to_numpy_reference(std, model, feeds)


def test_deformconv_without_offset_group_attribute_that_fits_the_channels_is_kept():
    from dcnconvert.transform.standard import to_standard_model

    model = samples.build("onnx.DeformConv", deformable_group=1, seed=8)
    node = _deform_node(model)
    kept = [a for a in node.attribute if a.name != "offset_group"]  # default 1 == offset channels / 18
    del node.attribute[:]
    node.attribute.extend(kept)
    assert _is_valid(model) == [True]
    assert to_standard_model(model).SerializeToString() == model.SerializeToString()


def _mixed_model(pads=(0, 1, 1, 0)) -> onnx.ModelProto:
    """mmcv MMCVModulatedDeformConv2d (dg 2) feeding a standard DeformConv (group 2, dg 2, asymmetric
    pads, non-square stride and dilation), at opset 19."""
    rng = np.random.default_rng(41)
    n, c, h, w, k = 2, 4, 6, 7, 9
    oh = h + pads[0] + pads[2] - (2 * 2 + 1) + 1
    ow = (w + pads[1] + pads[3] - 3) // 2 + 1
    inits = [
        _init(rng, "w1", (4, c, 3, 3)),
        _init(rng, "b1", (4,)),
        _init(rng, "w2", (6, 2, 3, 3)),
        _init(rng, "b2", (6,)),
    ]
    mmcv_node = helper.make_node(
        "MMCVModulatedDeformConv2d", ["x", "off1", "m1", "w1", "b1"], ["y1"], name="mmcv_dcn",
        domain="mmcv", stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, deform_groups=2,
    )
    std_node = helper.make_node(
        "DeformConv", ["y1", "w2", "off2", "b2", "m2"], ["y"], name="std_dcn", strides=[1, 2],
        pads=list(pads), dilations=[2, 1], group=2, offset_group=2, kernel_shape=[3, 3],
    )
    inputs = [
        helper.make_tensor_value_info(name, F, shape)
        for name, shape in (
            ("x", [n, c, h, w]), ("off1", [n, 2 * 2 * k, h, w]), ("m1", [n, 2 * k, h, w]),
            ("off2", [n, 2 * 2 * k, oh, ow]), ("m2", [n, 2 * k, oh, ow]),
        )
    ]
    graph = helper.make_graph(
        [mmcv_node, std_node], "mixed", inputs, [helper.make_tensor_value_info("y", F, [n, 6, oh, ow])], inits
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("mmcv", 1)]
    )
    model.ir_version = MIN_IR_VERSION
    return model


def test_mixed_model_converts_only_the_mmcv_node():
    from dcnconvert.transform.standard import to_standard_model

    model = _mixed_model()
    assert _is_valid(model) == [False, True]
    std = to_standard_model(model)
    onnx.checker.check_model(std, full_check=True)
    assert [(n.op_type, n.name) for n in std.graph.node] == [
        ("DeformConv", "mmcv_dcn"), ("DeformConv", "std_dcn")
    ]
    assert std.graph.node[0].SerializeToString() != model.graph.node[0].SerializeToString()
    assert std.graph.node[1].SerializeToString() == model.graph.node[1].SerializeToString()
    assert {o.domain: o.version for o in std.opset_import} == {"": 19}  # mmcv import dropped
    rng = np.random.default_rng(42)
    feeds = {
        vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
        for vi in model.graph.input
    }
    for name in ("m1", "m2"):
        feeds[name] = np.abs(feeds[name])
    _close_to_numpy_reference(std, model, feeds)


def _variant(case: str) -> onnx.ModelProto:
    """DeformConv models that are not valid standard DeformConv (or not the standard form)."""
    if case in ("onnx.DeformConv.swapped", "paddle2onnx.DeformConv", "nonstandard.DeformConv"):
        pads = (0, 1, 2, 1) if case in samples.PADS_FORMS else None
        return samples.build(case, deformable_group=2, pads=pads, seed=51)
    model = samples.build("onnx.DeformConv", deformable_group=2, seed=52)
    node = _deform_node(model)
    if case == "offset_group-missing":  # not Paddle2ONNX-labelled; offset channels say 2, ORT would use 1
        kept = [a for a in node.attribute if a.name != "offset_group"]
        del node.attribute[:]
        node.attribute.extend(kept)
    elif case == "opset-18":  # DeformConv does not exist below opset 19
        model.opset_import[0].version = 18
    elif case == "strides-as-INT":  # our parser reads it; the operator wants INTS
        for attr in node.attribute:
            if attr.name == "strides":
                attr.CopyFrom(helper.make_attribute("strides", 1))
    else:  # pragma: no cover
        raise AssertionError(case)
    return model


@pytest.mark.parametrize(
    "case",
    ["onnx.DeformConv.swapped", "paddle2onnx.DeformConv", "nonstandard.DeformConv",
     "offset_group-missing", "opset-18", "strides-as-INT"],
)
def test_other_deformconv_variants_are_still_converted(case):
    from dcnconvert.transform.standard import to_standard_model

    model = _variant(case)
    assert _is_valid(model) == [False]
    std = to_standard_model(model)
    onnx.checker.check_model(std, full_check=True)
    assert std.SerializeToString() != model.SerializeToString()
    node = _deform_node(std)
    assert node.SerializeToString() != _deform_node(model).SerializeToString()
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["offset_group"] == 2 and len(node.input) == 5  # canonical: X, W, offset, B, mask
    assert max(o.version for o in std.opset_import if o.domain == "") >= STANDARD_OPSET
    _close_to_numpy_reference(std, model, samples.input_feeds(model, 53))


def test_invalid_standard_deformconv_is_still_refused():
    """A node that is not kept goes through the rewrite's validation, as before."""
    from dcnconvert.errors import ValidationError
    from dcnconvert.transform.standard import to_standard_model

    model = samples.build("onnx.DeformConv", deformable_group=2, seed=54)
    for attr in _deform_node(model).attribute:
        if attr.name == "offset_group":
            attr.i = 4  # 36 offset channels do not fit 4 groups of a 3x3 kernel
    assert _is_valid(model) == [False]
    with pytest.raises(ValidationError, match="offset has 36 channels; expected .* = 72"):
        to_standard_model(model)
