"""Tests of dcnconvert.transform.standard: plugin nodes -> standard ONNX DeformConv, opset raising, ORT
runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import samples
from support.evaluate import BACKENDS, ort_outputs, run_model

from dcnconvert import schema
from dcnconvert.errors import ModelError
from dcnconvert.model.opsets import raise_default_opset
from dcnconvert.transform.standard import (
    MIN_IR_VERSION,
    STANDARD_OPSET,
    plugin_model_to_standard,
)

F = TensorProto.FLOAT


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
        # > 1 KB: held aside during the opset conversion
        samples.random_initializer(rng, "w_off", (3 * dg * k, c, 3, 3)),
        samples.random_initializer(rng, "weight", (6, c // 2, 3, 3)),
        samples.random_initializer(rng, "bias", (6,)),
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
        got = ort_outputs(std, {"x": x})
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
    got = ort_outputs(std, feeds)["y"]
    np.testing.assert_allclose(got, run_model(model, feeds)["y"], rtol=1e-5, atol=1e-5)


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
        ort_outputs(std, feeds)["y"], run_model(model, feeds, backend="reference")["y"], rtol=1e-5, atol=1e-5
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
        got = ort_outputs(model, feeds)["y"]
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
