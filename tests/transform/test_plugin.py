"""rewrite: the node contract and exact helpers (test_plugin_graph.py: the rest of the graph, targets
and refusals; test_plugin_tf32.py: the TF32 permission).

Numbers: the rewritten graph's helper nodes (Pad, Slice, Sigmoid, ones mask) run in ONNX Runtime,
then the plugin node's inputs go through a standard ONNX ``DeformConv`` built from the plugin's
attributes; the result must equal the same model in standard form (or the original, where ORT runs
it) on fresh random inputs. (support.reference/evaluate test the plugin semantics themselves.)
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from support import samples
from support.evaluate import ort_outputs
from support.nodes import node_attrs, plugin_nodes

from dcnconvert import schema
from dcnconvert.errors import UnsupportedNodeError
from dcnconvert.transform.plugin import rewrite_model

ATTR = onnx.AttributeProto


def _run(model: onnx.ModelProto, feeds: dict, outputs=None) -> list:
    return list(ort_outputs(model, feeds, outputs).values())


def _helper_outputs(model: onnx.ModelProto, names, feeds: dict) -> dict:
    """Values of ``names`` in a rewritten model, running everything but the plugin nodes in ORT."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    known = {**inits, **feeds}
    wanted = [n for n in names if n not in known]
    sub = onnx.ModelProto()
    sub.CopyFrom(model)
    graph = sub.graph
    keep = [n for n in graph.node if n.op_type != schema.PLUGIN_NAME]
    del graph.node[:]
    graph.node.extend(keep)
    used = {i for n in keep for i in n.input}
    inputs = [vi for vi in graph.input if vi.name in used]
    del graph.input[:]
    graph.input.extend(inputs)
    del graph.output[:]
    graph.output.extend(helper.make_empty_tensor_value_info(name) for name in wanted)
    values = dict(zip(wanted, _run(sub, feeds), strict=True)) if wanted else {}
    return {n: values[n] if n in values else known[n] for n in names}


def _run_rewritten(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    """Run a rewritten single-DCN model: helpers in ORT, the plugin as a standard DeformConv in ORT
    (an embedded weight and bias taken from the node's attributes)."""
    (plugin,) = plugin_nodes(model)
    values = _helper_outputs(model, list(plugin.input), feeds)
    a = node_attrs(plugin)
    if schema.ATTR_WEIGHT in a:
        assert len(plugin.input) == 3
        values["<weight>"] = numpy_helper.to_array(a["weight"]).reshape(a["weight_shape"])
        sources = list(plugin.input) + ["<weight>"]
        if schema.ATTR_BIAS in a:
            values["<bias>"] = numpy_helper.to_array(a["bias"])
            sources.append("<bias>")
    else:
        sources = list(plugin.input)
    p, (x, off, mask, w) = a["padding"], sources[:4]
    with_bias = len(sources) == 5
    names = ["X", "W", "offset", "B", "mask"] if with_bias else ["X", "W", "offset", "mask"]
    node = helper.make_node("DeformConv", ["X", "W", "offset", "B" if with_bias else "", "mask"],
                            ["Y"], strides=a["stride"], pads=[p[0], p[1], p[0], p[1]],
                            dilations=a["dilation"], group=a["group"], offset_group=a["deformable_group"])
    inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in names]
    graph = helper.make_graph([node], "std", inputs, [helper.make_empty_tensor_value_info("Y")])
    std = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    std.ir_version = 9
    std_feeds = {"X": values[x], "W": values[w], "offset": values[off], "mask": values[mask]}
    if with_bias:
        std_feeds["B"] = values[sources[4]]
    return _run(std, std_feeds)[0]


def _expected(form: str, params: dict, feeds: dict, original: onnx.ModelProto) -> np.ndarray:
    """The original model's output: ORT runs the standard forms; others via the equivalent standard model."""
    # (ORT rightly rejects Paddle2ONNX's missing offset_group when dg > 1)
    paddle_dg1 = form == "paddle2onnx.DeformConv" and params.get("deformable_group", 1) == 1
    if form == "onnx.DeformConv" or paddle_dg1:
        return _run(original, feeds)[0]
    std_params = dict(params)
    std_params.pop("pads", None)
    std_params["bias"] = samples._SPEC[form][5] if params.get("bias") is None else params["bias"]
    std = samples.build("onnx.DeformConv", **std_params)
    std_feeds = dict(feeds)
    if "offset_mask" in feeds:
        om = feeds["offset_mask"]
        two_thirds = om.shape[1] * 2 // 3
        std_feeds["offset"] = om[:, :two_thirds]
        std_feeds["mask"] = (1 / (1 + np.exp(-om[:, two_thirds:].astype(np.float64)))).astype(np.float32)
    elif "mask" not in feeds:
        k = params.get("deformable_group", 1) * np.prod(params.get("kernel", (3, 3)))
        off = feeds["offset"]
        std_feeds["mask"] = np.ones((off.shape[0], k, off.shape[2], off.shape[3]), np.float32)
    return _run(std, std_feeds)[0]


GRID = [
    dict(),
    dict(n=2, c=4, cout=4, kernel=(3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), group=2,
         deformable_group=2, h=9, w=8),
    dict(n=3, c=8, cout=4, kernel=(1, 3), stride=(1, 2), padding=(0, 1), deformable_group=4, h=5, w=10,
         bias=False),
    dict(n=2, c=4, cout=6, stride=(2, 2), padding=(2, 2), dilation=(2, 2), deformable_group=2, dynamic=True),
]


def _supported(form, params):
    params = dict(params)
    if params.get("bias") is False and not samples._SPEC[form][5]:
        params.pop("bias")
    return params if samples.supports(form, **params) else None


#: Only the (form, grid case) pairs the form can express are generated (no skipped cases).
GRID_PARAMS = [pytest.param(form, case, id=f"{form}-{case}")
               for form in samples.FORMS for case in range(len(GRID))
               if _supported(form, GRID[case]) is not None]


def test_grid_drops_only_what_limited_forms_cannot_express():
    generated = {p.values for p in GRID_PARAMS}
    missing = {(form, case) for form in samples.FORMS for case in range(len(GRID))} - generated
    assert missing == {("centernet.DCNv2", 1), ("centernet.DCNv2", 2), ("dcnv2_latest.DCNv2_2", 1),
                       ("tensorrt_pro.Plugin.DCNv2", 1), ("eweill.DCNv2_TRT", 1)}


@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "inputs"])
@pytest.mark.parametrize("form, case", GRID_PARAMS)
def test_rewritten_model_equals_original(form, case, embed):
    params = _supported(form, GRID[case])
    params["seed"] = case
    model = samples.build(form, **params)
    out, report = rewrite_model(model, embed_weights=embed)
    (plugin,) = plugin_nodes(out)
    # TAO lists its weights as graph inputs too: they are not constants, so they stay inputs
    assert (schema.ATTR_WEIGHT in node_attrs(plugin)) == (embed and form != "tao.ModulatedDeformConv2d")
    assert report.embedded == ([plugin.name] if schema.ATTR_WEIGHT in node_attrs(plugin) else [])
    feeds = samples.input_feeds(model, seed=100 + case)
    got = _run_rewritten(out, feeds)
    want = _expected(form, params, feeds, model)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(want).max() > 0.1  # not a trivially zero output


@pytest.mark.parametrize("pads", [(0, 1, 2, 1), (2, 0, 1, 0), (1, 1, 0, 2), (0, 0, 1, 1)])
@pytest.mark.parametrize("form", ["onnx.DeformConv", "paddle2onnx.DeformConv"])
def test_asymmetric_pads_are_exact(form, pads):
    model = samples.build(form, pads=pads, h=6, w=7, stride=(2, 1), seed=7)
    out, _ = rewrite_model(model)
    assert [n.op_type for n in out.graph.node][-2:] == ["Pad", schema.PLUGIN_NAME]
    assert node_attrs(plugin_nodes(out)[0])["padding"] == [0, 0]
    feeds = samples.input_feeds(model, seed=3)
    np.testing.assert_allclose(_run_rewritten(out, feeds), _run(model, feeds)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [9, 10, 11])
def test_logits_split_at_old_opsets(opset):
    """Slice-1 (attributes) below opset 10, Slice-10 (inputs) from 10; Sigmoid of the last third."""
    model = samples.build("eweill.DCNv2_TRT", opset=opset, deformable_group=2, c=4, seed=opset)
    out, _ = rewrite_model(model)
    slices = [n for n in out.graph.node if n.op_type == "Slice"]
    assert len(slices) == 2 and all((len(n.input) == 1) == (opset < 10) for n in slices)
    feeds = samples.input_feeds(model, seed=1)
    (plugin,) = plugin_nodes(out)
    values = _helper_outputs(out, list(plugin.input[1:3]), feeds)
    offset, mask = values[plugin.input[1]], values[plugin.input[2]]
    om = feeds["offset_mask"].astype(np.float64)
    np.testing.assert_array_equal(offset, feeds["offset_mask"][:, :36])
    np.testing.assert_allclose(mask, 1 / (1 + np.exp(-om[:, 36:])), rtol=1e-5, atol=1e-7)


class TestOnesMask:
    def _mask(self, model: onnx.ModelProto, offset: np.ndarray) -> np.ndarray:
        out, _ = rewrite_model(model)
        (plugin,) = plugin_nodes(out)
        return _helper_outputs(out, [plugin.input[2]], {"offset": offset})[plugin.input[2]]

    @pytest.mark.parametrize("dg,kernel", [(1, (3, 3)), (2, (1, 3))])
    def test_follows_dynamic_batch_and_spatial_dims(self, dg, kernel):
        model = samples.build("mmcv.MMCVDeformConv2d", dynamic=True, deformable_group=dg, kernel=kernel)
        k = dg * kernel[0] * kernel[1]
        for n, h, w in ((1, 5, 6), (3, 7, 4)):
            offset = np.random.default_rng(n).standard_normal((n, 2 * k, h, w)).astype(np.float32)
            mask = self._mask(model, offset)
            assert mask.shape == (n, k, h, w) and mask.dtype == np.float32
            assert np.all(mask == 1)

    def test_dtype_follows_the_offset(self):
        model = samples.build("mmcv.MMCVDeformConv2d", dynamic=True)
        for vi in list(model.graph.input) + list(model.graph.output):
            vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
        w = model.graph.initializer[0]
        w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w).astype(np.float16), w.name))
        out, _ = rewrite_model(model)
        (cos,) = [n for n in out.graph.node if n.op_type == "ConstantOfShape"]
        assert node_attrs(cos)["value"].data_type == onnx.TensorProto.FLOAT16

    def test_unknown_kernel_uses_half_the_offset_channels(self):
        model = samples.build("mmcv.MMCVDeformConv2d", dynamic=True, deformable_group=2)
        # the weight is a graph input of unknown shape, so the kernel size is unknown
        del model.graph.initializer[0]
        model.graph.input.append(helper.make_tensor_value_info("weight", onnx.TensorProto.FLOAT, None))
        out, _ = rewrite_model(model)
        assert "Div" in [n.op_type for n in out.graph.node]
        offset = np.random.default_rng(3).standard_normal((2, 36, 3, 4)).astype(np.float32)
        mask = self._mask(model, offset)
        assert mask.shape == (2, 18, 3, 4) and np.all(mask == 1)

    def test_old_opset_static_uses_a_constant(self):
        model = samples.build("mmcv.MMCVDeformConv2d", opset=8)
        out, _ = rewrite_model(model)
        (plugin,) = plugin_nodes(out)
        ones = {t.name: t for t in out.graph.initializer}[plugin.input[2]]
        np.testing.assert_array_equal(numpy_helper.to_array(ones), np.ones((1, 9, 7, 9), np.float32))

    def test_old_opset_dynamic_is_refused(self):
        model = samples.build("mmcv.MMCVDeformConv2d", opset=8)
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
        model.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "N"
        with pytest.raises(UnsupportedNodeError, match="opset 8"):
            rewrite_model(model)


class TestContract:
    @pytest.mark.parametrize("weights", ["embed", "input"])
    @pytest.mark.parametrize("target", list(schema.TARGETS))
    @pytest.mark.parametrize("form", samples.FORMS)
    def test_plugin_node(self, form, target, weights):
        """Inputs x, offset, mask, weight[, bias]; or x, offset, mask with the weight attributes (our
        plugin, embedding asked, weights that are constants)."""
        model = samples.build(form, stride=(2, 2), deformable_group=2)
        out, report = rewrite_model(model, target, embed_weights=weights == "embed")
        (plugin,) = plugin_nodes(out)
        t = schema.TARGETS[target]
        assert plugin.name == model.graph.node[-1].name
        assert list(plugin.output) == ["y"]
        with_bias = report.matches[0].with_bias
        embedded = weights == "embed" and target == "dcnconvert" and form != "tao.ModulatedDeformConv2d"
        assert report.to_dict()["weights"] == ("embed" if weights == "embed" and target == "dcnconvert"
                                               else "input")
        n_in = 3 if embedded else 5 if with_bias else 4
        assert len(plugin.input) == n_in
        assert plugin.input[0] == "x"
        assert plugin.input[1] == ("offset" if "offset" in report.matches[0].inputs else plugin.input[1])
        if not embedded:
            assert plugin.input[3] == "weight"
        if n_in == 5:
            assert plugin.input[4] == "bias"
        weight_attrs = {}
        if embedded:
            weight_attrs = {"weight": ATTR.TENSOR, "weight_shape": ATTR.INTS}
            if with_bias:
                weight_attrs["bias"] = ATTR.TENSOR
        types = {a.name: a.type for a in plugin.attribute}
        assert types == {"stride": ATTR.INTS, "padding": ATTR.INTS, "dilation": ATTR.INTS, "group": ATTR.INT,
                         "deformable_group": ATTR.INT, "plugin_version": ATTR.STRING,
                         "plugin_namespace": ATTR.STRING, **weight_attrs}
        assert [a.name for a in plugin.attribute] == [f for f, _ in schema.PLUGIN_FIELDS] + list(
            weight_attrs) + [schema.ATTR_PLUGIN_VERSION, schema.ATTR_PLUGIN_NAMESPACE]
        a = node_attrs(plugin)
        if embedded:
            weight = numpy_helper.to_array({i.name: i for i in model.graph.initializer}["weight"])
            assert a["weight_shape"] == list(weight.shape) == [6, 4, 3, 3]
            np.testing.assert_array_equal(numpy_helper.to_array(a["weight"]), weight)
            assert a["weight"].data_type == onnx.TensorProto.FLOAT and a["weight"].name == "weight"
            assert not {"weight", "bias"} & {i.name for i in out.graph.initializer}  # nothing else reads them
            if with_bias:
                assert list(a["bias"].dims) == [6]
        assert a["stride"] == [2, 2] and a["padding"] == [1, 1] and a["dilation"] == [1, 1]
        assert a["group"] == 1 and a["deformable_group"] == 2
        assert (a["plugin_version"] == t.plugin_version.encode()
                and a["plugin_namespace"] == t.plugin_namespace.encode())
        opsets = {o.domain: o.version for o in out.opset_import}
        assert opsets[schema.PLUGIN_DOMAIN] == schema.PLUGIN_DOMAIN_VERSION
        onnx.checker.check_model(out)
        if form != "dcnconvert.ModulatedDeformConv2d" or target != schema.DEFAULT_TARGET:
            assert report.rewritten == [plugin.name]

    def test_mask_input_names_for_modulated_forms(self):
        out, _ = rewrite_model(samples.build("paddle-legacy.deformable_conv"), embed_weights=False)
        assert list(plugin_nodes(out)[0].input) == ["x", "offset", "mask", "weight"]
        out, _ = rewrite_model(samples.build("paddle-legacy.deformable_conv"))
        assert list(plugin_nodes(out)[0].input) == ["x", "offset", "mask"]
