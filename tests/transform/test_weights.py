"""Constant weights embedded in the plugin node (dcnconvert.transform.weights, through rewrite_model).

Numbers: every rewritten model runs through support.evaluate (plugin nodes in float64 NumPy, the rest
in ONNX Runtime) on random non-zero inputs and must equal the original (via ``reference`` in ORT)
whether the weights are embedded or inputs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import evaluate, samples
from support.evaluate import ort_outputs
from support.nodes import node_attrs, plugin_nodes

from dcnconvert import schema
from dcnconvert.errors import UnsupportedNodeError
from dcnconvert.match.finder import find_dcn_nodes
from dcnconvert.transform import weights
from dcnconvert.transform.builder import Names
from dcnconvert.transform.plugin import rewrite_model
from dcnconvert.transform.standard import plugin_model_to_standard, to_standard_model

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"
SAMPLE_FILES = sorted(SAMPLES.glob("*.onnx"))
#: The sample whose weights are graph inputs too (keep_initializers_as_inputs): no constants.
TAO = "tao_ModulatedDeformConv2d.onnx"
TOLERANCE = 1e-5  # times max|expected|
#: Samples with non-square stride/padding/dilation (refused by trt-builtin).
NON_SQUARE = {"dcnconvert_ModulatedDeformConv2d", "dcn_resnet_block", "torch_dynamo_DeformConv2d_opset22"}


def _feeds(model: onnx.ModelProto, seed: int) -> dict:
    dims = {"batch": 2, "height": 10, "width": 9} if "batch" in str(model.graph.input[0]) else None
    feeds = samples.input_feeds(model, seed, dims=dims)
    assert all(np.abs(v).max() > 0 for v in feeds.values())
    return feeds


def _assert_same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name, ref in want.items():
        scale = float(np.abs(ref).max())
        assert scale > 1e-3 and got[name].shape == ref.shape
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=TOLERANCE * scale)


def _dcn_weight_names(model: onnx.ModelProto) -> set[str]:
    return {name for m in find_dcn_nodes(model) for role, name in m.inputs.items()
            if role in ("weight", "bias")}


# ------------------------------------------------------------------------------------------------
# every sample model
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=[p.stem for p in SAMPLE_FILES])
def test_sample_models_embed_by_default_and_compute_the_same(path):
    model = onnx.load(str(path))
    embedded, report = rewrite_model(model)
    inputs, input_report = rewrite_model(model, embed_weights=False)
    plugins = plugin_nodes(embedded)
    assert plugins and len(plugins) == len(report.matches)
    if path.name == TAO:
        assert report.embedded == [] and [n for n, _ in report.weights_as_inputs] == ["dcn0"]
        assert "also a graph input" in report.weights_as_inputs[0][1]
        assert embedded.SerializeToString() == inputs.SerializeToString()
    else:
        assert report.embedded == [n.name for n in plugins] and report.weights_as_inputs == []
        for node in plugins:
            a = node_attrs(node)
            assert len(node.input) == 3 and a["weight"].data_type == TensorProto.FLOAT
            assert list(a["weight"].dims) == a["weight_shape"] and len(a["weight_shape"]) == 4
        # nothing else reads the DCN weights of the samples: they leave the initializers
        assert not _dcn_weight_names(model) & {t.name for t in embedded.graph.initializer}
    assert input_report.embedded == [] and input_report.to_dict()["weights"] == "input"
    nodes = plugin_nodes(inputs)
    assert all(len(n.input) in (4, 5) and schema.ATTR_WEIGHT not in node_attrs(n) for n in nodes)
    feeds = _feeds(model, seed=21)
    want = ort_outputs(to_standard_model(model), feeds)
    for backend in evaluate.BACKENDS:
        _assert_same(evaluate.run_model(embedded, feeds, backend=backend), want)
        _assert_same(evaluate.run_model(inputs, feeds, backend=backend), want)


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=[p.stem for p in SAMPLE_FILES])
def test_idempotent_and_reversible(path):
    """A rewritten model rewrites to itself (byte for byte); un-embedding and embedding again, or
    retargeting to trt-builtin and back, gives it back too."""
    model = onnx.load(str(path))
    embedded, _ = rewrite_model(model)
    again, report = rewrite_model(embedded)
    assert again.SerializeToString() == embedded.SerializeToString()
    assert report.rewritten == [] and len(report.unchanged) == len(report.matches)
    unembedded, report = rewrite_model(embedded, embed_weights=False)
    assert all(schema.ATTR_WEIGHT not in node_attrs(n) for n in plugin_nodes(unembedded))
    assert rewrite_model(unembedded)[0].SerializeToString() == embedded.SerializeToString()
    try:
        builtin, _ = rewrite_model(embedded, "trt-builtin")
    except UnsupportedNodeError as exc:  # non-square samples are refused for trt-builtin
        assert "not square" in str(exc) and path.stem in NON_SQUARE
        return
    nodes = plugin_nodes(builtin)
    assert all(len(n.input) in (4, 5) and node_attrs(n)["plugin_version"] == b"2" for n in nodes)
    assert rewrite_model(builtin)[0].SerializeToString() == embedded.SerializeToString()


def test_weights_input_is_todays_output_for_a_rewritten_model():
    """The committed dcnconvert sample is a plugin node with weight inputs: --weights input keeps it
    byte for byte, as a rewrite of a rewritten model always did."""
    path = SAMPLES / "dcnconvert_ModulatedDeformConv2d.onnx"
    model = onnx.load(str(path))
    out, report = rewrite_model(model, embed_weights=False)
    assert out.SerializeToString() == model.SerializeToString() and report.unchanged == ["dcn0"]
    builtin, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"), "trt-builtin")
    as_input, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"), embed_weights=False)
    retargeted, _ = rewrite_model(builtin, "dcnconvert", embed_weights=False)
    assert retargeted.SerializeToString() == as_input.SerializeToString()


# ------------------------------------------------------------------------------------------------
# what is a constant
# ------------------------------------------------------------------------------------------------


def _model_with_weight_input() -> onnx.ModelProto:
    model = samples.build("mmcv.MMCVModulatedDeformConv2d", seed=3)
    graph = model.graph
    weight = next(t for t in graph.initializer if t.name == "weight")
    graph.input.append(helper.make_tensor_value_info("weight", TensorProto.FLOAT, list(weight.dims)))
    kept = [t for t in graph.initializer if t.name != "weight"]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model


def test_weight_that_is_a_graph_input_stays_an_input(caplog):
    model = _model_with_weight_input()
    with caplog.at_level(logging.INFO, logger="dcnconvert.transform.plugin"):
        out, report = rewrite_model(model)
    (plugin,) = plugin_nodes(out)
    assert list(plugin.input) == ["x", "offset", "mask", "weight", "bias"]
    assert schema.ATTR_WEIGHT not in node_attrs(plugin) and report.embedded == []
    assert report.weights_as_inputs == [("dcn0", "weight 'weight' is a graph input (its value is known at "
                                         "run time only)")]
    reason = report.weights_as_inputs[0][1]
    assert report.to_dict()["weights_as_inputs"] == [{"node": "dcn0", "reason": reason}]
    (line,) = [r.getMessage() for r in caplog.records if "stay inputs" in r.getMessage()]
    assert "node 'dcn0'" in line and "graph input" in line
    assert [t.name for t in out.graph.initializer] == ["bias"]  # the constant bias is not split off
    feeds = samples.input_feeds(samples.build("mmcv.MMCVModulatedDeformConv2d", seed=3), seed=4)
    feeds["weight"] = np.random.default_rng(5).standard_normal((6, 4, 3, 3)).astype(np.float32)
    _assert_same(evaluate.run_model(out, feeds), ort_outputs(to_standard_model(model), feeds))


def test_computed_weight_and_bias_input_stay_inputs():
    model = samples.build("mmcv.MMCVModulatedDeformConv2d", seed=3)
    graph = model.graph
    for init in graph.initializer:
        if init.name == "weight":
            init.name = "weight_raw"
    graph.node.insert(0, helper.make_node("Neg", ["weight_raw"], ["weight"], name="negate"))
    out, report = rewrite_model(model)
    assert report.weights_as_inputs == [("dcn0", "weight 'weight' is computed by Neg node 'negate'")]
    assert len(plugin_nodes(out)[0].input) == 5
    model = samples.build("mmcv.MMCVModulatedDeformConv2d", seed=3)
    model.graph.input.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, [6]))
    out, report = rewrite_model(model)
    reason = report.weights_as_inputs[0][1]
    assert reason.startswith("bias 'bias' is an initializer that is also a graph input")
    (plugin,) = plugin_nodes(out)
    assert list(plugin.input) == ["x", "offset", "mask", "weight", "bias"]  # weight and bias stay together
    assert {t.name for t in out.graph.initializer} == {"weight", "bias"}


def test_weight_of_another_type_stays_an_input():
    model = samples.build("mmcv.MMCVModulatedDeformConv2d", seed=3)
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    for i, init in enumerate(model.graph.initializer):
        model.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float64),
                                                                    init.name))
    _, report = rewrite_model(model)
    assert report.weights_as_inputs == [("dcn0", "weight 'weight' is DOUBLE; the plugin embeds FLOAT, "
                                         "FLOAT16, BFLOAT16 only")]


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
def test_low_precision_weights_keep_their_type(dtype):
    model = samples.build("mmcv.MMCVModulatedDeformConv2d", seed=6)
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.type.tensor_type.elem_type = dtype
    originals = {}
    for i, init in enumerate(model.graph.initializer):
        values = numpy_helper.to_array(init)
        low = helper.make_tensor(init.name, dtype, values.shape, values.astype(np.float32).ravel().tolist())
        model.graph.initializer[i].CopyFrom(low)
        originals[init.name] = model.graph.initializer[i].SerializeToString()
    out, report = rewrite_model(model)
    (plugin,) = plugin_nodes(out)
    embedded = weights.embedded_tensors(plugin)
    assert report.embedded == ["dcn0"] and set(embedded) == {"weight", "bias"}
    for role, tensor in embedded.items():
        assert tensor.data_type == dtype and tensor.SerializeToString() == originals[role]  # bit for bit
    feeds = {k: v.astype(np.float32) for k, v in samples.input_feeds(samples.build(
        "mmcv.MMCVModulatedDeformConv2d", seed=6), seed=2).items()}
    low_feeds = {k: (v.astype(np.float16) if dtype == TensorProto.FLOAT16 else v) for k, v in feeds.items()}
    if dtype == TensorProto.FLOAT16:  # the reference backend computes FP16 graphs; compare with inputs
        inputs, _ = rewrite_model(model, embed_weights=False)
        got = evaluate.run_model(out, low_feeds, backend="reference")["y"]
        want = evaluate.run_model(inputs, low_feeds, backend="reference")["y"]
        assert np.abs(want).max() > 0.1 and np.array_equal(got, want)


# ------------------------------------------------------------------------------------------------
# what is dropped, what is kept
# ------------------------------------------------------------------------------------------------


def test_shared_initializer_is_kept():
    """The weight is also read by another node: the plugin gets a copy, the initializer stays."""
    model = samples.build("mmcv.MMCVModulatedDeformConv2d", seed=8)
    graph = model.graph
    graph.node.append(helper.make_node("ReduceSum", ["weight"], ["weight_sum"], name="sum", keepdims=0))
    graph.output.append(helper.make_tensor_value_info("weight_sum", TensorProto.FLOAT, []))
    out, report = rewrite_model(model)
    (plugin,) = plugin_nodes(out)
    assert report.embedded == ["dcn0"] and len(plugin.input) == 3
    assert [t.name for t in out.graph.initializer] == ["weight"]  # the bias, read by nobody else, is gone
    kept = out.graph.initializer[0]
    assert kept.SerializeToString() == graph.initializer[0].SerializeToString()
    embedded = numpy_helper.to_array(node_attrs(plugin)["weight"])
    np.testing.assert_array_equal(embedded, numpy_helper.to_array(kept))
    feeds = samples.input_feeds(model, seed=3)
    _assert_same(evaluate.run_model(out, feeds), ort_outputs(to_standard_model(model), feeds))


def test_two_nodes_sharing_a_weight_both_embed_it():
    model = samples.build("mmcv.MMCVModulatedDeformConv2d", c=6, cout=6, seed=9)
    second = onnx.NodeProto()
    second.CopyFrom(model.graph.node[0])
    second.name, second.input[0], second.output[0] = "dcn1", "y", "z"
    model.graph.node.append(second)
    model.graph.output[0].name = "z"
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 6
    out, report = rewrite_model(model)
    assert report.embedded == ["dcn0", "dcn1"] and not out.graph.initializer
    a, b = (weights.embedded_tensors(n)["weight"] for n in plugin_nodes(out))
    assert a.SerializeToString() == b.SerializeToString()
    feeds = samples.input_feeds(model, seed=2)
    _assert_same(evaluate.run_model(out, feeds), ort_outputs(to_standard_model(model), feeds))


def test_constant_node_bias():
    """Paddle2ONNX's bias comes from a Constant node: embedded, and the Constant dropped; a Constant
    that a graph output also reads is kept."""
    model = samples.build("paddle2onnx.DeformConv", seed=4)
    assert [n.op_type for n in model.graph.node] == ["Constant", "DeformConv"]
    out, report = rewrite_model(model)
    assert [n.op_type for n in out.graph.node] == [schema.PLUGIN_NAME] and report.embedded == [
        "p2o.DeformConv.0"]
    bias = weights.embedded_tensors(out.graph.node[0])["bias"]
    value = numpy_helper.to_array(model.graph.node[0].attribute[0].t)
    assert bias.name == "bias" and np.abs(value).max() > 0
    np.testing.assert_array_equal(numpy_helper.to_array(bias), value)
    model.graph.output.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, [6]))
    out, _ = rewrite_model(model)
    assert [n.op_type for n in out.graph.node] == ["Constant", schema.PLUGIN_NAME]
    feeds = samples.input_feeds(model, seed=5)
    _assert_same(evaluate.run_model(out, feeds), ort_outputs(model, feeds))


def test_value_info_of_a_dropped_initializer_goes_with_it():
    model = samples.build("mmcv.MMCVModulatedDeformConv2d")
    model.graph.value_info.append(helper.make_tensor_value_info("weight", TensorProto.FLOAT, [6, 4, 3, 3]))
    model.graph.value_info.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 7, 9]))
    out, _ = rewrite_model(model)
    assert [vi.name for vi in out.graph.value_info] == ["y"]


# ------------------------------------------------------------------------------------------------
# retargeting and un-embedding
# ------------------------------------------------------------------------------------------------


def test_retarget_to_trt_builtin_moves_the_weights_back_into_initializers():
    model = samples.build("onnx.DeformConv", seed=12)
    embedded, _ = rewrite_model(model)
    builtin, report = rewrite_model(embedded, "trt-builtin")
    (plugin,) = plugin_nodes(builtin)
    assert report.rewritten == ["dcn0"] and report.embedded == [] and report.to_dict()["weights"] == "input"
    assert list(plugin.input) == ["x", "offset", "mask", "weight", "bias"]
    assert not any(weights.is_weight_attribute(a) for a in plugin.attribute)
    inits = {t.name: numpy_helper.to_array(t) for t in builtin.graph.initializer}
    originals = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert set(inits) == {"weight", "bias"}
    for name, value in originals.items():
        np.testing.assert_array_equal(inits[name], value)
    onnx.checker.check_model(builtin)
    feeds = samples.input_feeds(model, seed=7)
    _assert_same(evaluate.run_model(builtin, feeds), ort_outputs(model, feeds))


def test_unembedding_picks_a_free_name():
    """The embedded tensor's own name is taken by another tensor: the new initializer gets another."""
    embedded, _ = rewrite_model(samples.build("mmcv.MMCVDeformConv2d", seed=2))
    embedded.graph.node.append(helper.make_node("Identity", ["y"], ["weight"], name="id"))
    embedded.graph.output[0].name = "weight"
    out, _ = rewrite_model(embedded, embed_weights=False)
    (plugin,) = plugin_nodes(out)
    assert plugin.input[3] == "weight_1" and "weight_1" in {t.name for t in out.graph.initializer}
    onnx.checker.check_model(out)


def test_allow_tf32_on_an_embedded_node_keeps_the_weights_in_place():
    embedded, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d", seed=1))
    tf32, report = rewrite_model(embedded, allow_tf32=True)
    direct, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d", seed=1), allow_tf32=True)
    assert report.rewritten == ["dcn0"] and tf32.SerializeToString() == direct.SerializeToString()
    assert [a.name for a in plugin_nodes(tf32)[0].attribute] == [
        "stride", "padding", "dilation", "group", "deformable_group", "allow_tf32", "weight", "weight_shape",
        "bias", "plugin_version", "plugin_namespace"]


def test_unembed_graph_and_reference_of_an_embedded_model():
    model = samples.build("mmcv.MMCVModulatedDeformConv2d", stride=(2, 1), seed=14)
    embedded, _ = rewrite_model(model)
    before = embedded.SerializeToString()
    std = plugin_model_to_standard(embedded)
    assert embedded.SerializeToString() == before  # the input is not modified
    (node,) = [n for n in std.graph.node if n.op_type == "DeformConv"]
    assert list(node.input) == ["x", "weight", "offset", "bias", "mask"]
    assert node_attrs(node)["kernel_shape"] == [3, 3]
    feeds = samples.input_feeds(model, seed=8)
    want = ort_outputs(to_standard_model(model), feeds)
    _assert_same(ort_outputs(std, feeds), want)
    _assert_same(ort_outputs(to_standard_model(embedded), feeds), want)
    copy = onnx.ModelProto()
    copy.CopyFrom(embedded)
    assert weights.unembed_graph(copy.graph, Names(copy)) == 1
    assert list(copy.graph.node[0].input) == ["x", "offset", "mask", "weight", "bias"]
    assert weights.unembed_graph(copy.graph, Names(copy)) == 0
