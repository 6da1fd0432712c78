"""rewrite: the node contract, preservation of everything else, targets, errors, and exact helpers.

Numbers: the rewritten graph's helper nodes (Pad, Slice, Sigmoid, ones mask) run in ONNX Runtime,
then the plugin node's inputs go through a standard ONNX ``DeformConv`` built from the plugin's
attributes; the result must equal the same model in standard form (or the original, where ORT runs
it) on fresh random inputs. (support.reference/evaluate test the plugin semantics themselves.)
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from bad_inputs import EXPECTED, corpus_models
from onnx import helper, numpy_helper
from support import samples

from dcnconvert import schema
from dcnconvert.errors import NoMatchError, UnsupportedNodeError, UsageError, ValidationError
from dcnconvert.model import io as onnx_io
from dcnconvert.transform.plugin import rewrite_model

ATTR = onnx.AttributeProto


def _run(model: onnx.ModelProto, feeds: dict, outputs=None) -> list:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in sess.get_inputs()}
    return sess.run(outputs, {k: v for k, v in feeds.items() if k in wanted})


def _plugin_nodes(model):
    return [n for n in model.graph.node
            if n.op_type == schema.PLUGIN_NAME and n.domain == schema.PLUGIN_DOMAIN]


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


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
    (plugin,) = _plugin_nodes(model)
    values = _helper_outputs(model, list(plugin.input), feeds)
    a = _attrs(plugin)
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
    (plugin,) = _plugin_nodes(out)
    # TAO lists its weights as graph inputs too: they are not constants, so they stay inputs
    assert (schema.ATTR_WEIGHT in _attrs(plugin)) == (embed and form != "tao.ModulatedDeformConv2d")
    assert report.embedded == ([plugin.name] if schema.ATTR_WEIGHT in _attrs(plugin) else [])
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
    assert _attrs(_plugin_nodes(out)[0])["padding"] == [0, 0]
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
    (plugin,) = _plugin_nodes(out)
    values = _helper_outputs(out, list(plugin.input[1:3]), feeds)
    offset, mask = values[plugin.input[1]], values[plugin.input[2]]
    om = feeds["offset_mask"].astype(np.float64)
    np.testing.assert_array_equal(offset, feeds["offset_mask"][:, :36])
    np.testing.assert_allclose(mask, 1 / (1 + np.exp(-om[:, 36:])), rtol=1e-5, atol=1e-7)


class TestOnesMask:
    def _mask(self, model: onnx.ModelProto, offset: np.ndarray) -> np.ndarray:
        out, _ = rewrite_model(model)
        (plugin,) = _plugin_nodes(out)
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
        assert _attrs(cos)["value"].data_type == onnx.TensorProto.FLOAT16

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
        (plugin,) = _plugin_nodes(out)
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
        (plugin,) = _plugin_nodes(out)
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
        a = _attrs(plugin)
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
        assert list(_plugin_nodes(out)[0].input) == ["x", "offset", "mask", "weight"]
        out, _ = rewrite_model(samples.build("paddle-legacy.deformable_conv"))
        assert list(_plugin_nodes(out)[0].input) == ["x", "offset", "mask"]


def _decorated(form="mmcv.MMCVModulatedDeformConv2d") -> onnx.ModelProto:
    """A sample with things to preserve: metadata, docs, value_info, an extra node, an unused initializer."""
    model = samples.build(form, dynamic=True)
    model.doc_string = "model doc"
    model.domain = "org.example"
    model.model_version = 7
    model.graph.doc_string = "graph doc"
    model.graph.node[-1].doc_string = "dcn doc"
    meta = model.metadata_props.add()
    meta.key, meta.value = "author", "tests"
    graph = model.graph
    graph.output[0].name = "y_final"
    graph.node.append(helper.make_node("Relu", ["y"], ["y_final"], name="relu", doc_string="relu doc"))
    graph.value_info.append(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 6, "OH", "OW"]))
    graph.initializer.append(numpy_helper.from_array(np.arange(3, dtype=np.float32), "unused"))
    return model


class TestPreservation:
    @pytest.mark.parametrize("form", ["mmcv.MMCVModulatedDeformConv2d", "mmcv.MMCVDeformConv2d",
                                      "tensorrt_pro.Plugin.DCNv2", "tao.ModulatedDeformConv2d"])
    def test_everything_else_is_kept(self, form):
        model = _decorated(form)
        out, _ = rewrite_model(model)
        for field in ("ir_version", "producer_name", "producer_version", "doc_string", "domain",
                      "model_version", "metadata_props"):
            assert getattr(out, field) == getattr(model, field), field
        assert [(o.domain, o.version) for o in out.opset_import][:-1] == [
            (o.domain, o.version) for o in model.opset_import]
        assert out.graph.name == model.graph.name and out.graph.doc_string == "graph doc"
        assert out.graph.input == model.graph.input and out.graph.output == model.graph.output
        assert out.graph.value_info == model.graph.value_info
        # the embedded weights leave the initializers (TAO's are graph inputs too: they stay)
        embedded = set() if form == "tao.ModulatedDeformConv2d" else {"weight", "bias"}
        kept = [t for t in model.graph.initializer if t.name not in embedded]
        assert sorted(t.name for t in kept) == sorted(["unused"] + ([] if embedded else ["weight", "bias"]))
        assert out.graph.initializer[: len(kept)] == kept
        assert out.graph.node[-1] == model.graph.node[-1]  # the Relu, untouched
        assert _plugin_nodes(out)[0].doc_string == "dcn doc"
        onnx.checker.check_model(out)

    def test_input_model_is_not_modified(self):
        model = _decorated("mmcv.MMCVDeformConv2d")
        before = model.SerializeToString()
        out, _ = rewrite_model(model)
        assert out is not model and model.SerializeToString() == before

    def test_inplace_returns_the_same_object(self):
        model = samples.build("mmcv.MMCVDeformConv2d")
        expected, _ = rewrite_model(model)
        out, _ = rewrite_model(model, inplace=True)
        assert out is model and out == expected

    def test_default_opset_version_kept(self):
        for opset in (19, 22):
            out, _ = rewrite_model(samples.build("onnx.DeformConv", opset=opset))
            assert {o.domain: o.version for o in out.opset_import}[""] == opset

    def test_new_names_do_not_collide(self):
        model = samples.build("mmcv.MMCVDeformConv2d")
        graph = model.graph
        graph.output[0].name = "dcn0/dcnconvert_offset_shape_out"
        graph.node.append(helper.make_node("Identity", ["y"], ["dcn0/dcnconvert_offset_shape_out"],
                                           name="dcn0/dcnconvert_offset_shape"))
        out, _ = rewrite_model(model)
        names = [o for n in out.graph.node for o in n.output]
        assert len(names) == len(set(names))
        node_names = [n.name for n in out.graph.node]
        assert len(node_names) == len(set(node_names))
        onnx.checker.check_model(out)

    def test_unnamed_node(self):
        model = samples.build("mmcv.MMCVDeformConv2d")
        model.graph.node[0].name = ""
        out, report = rewrite_model(model)
        assert _plugin_nodes(out)[0].name == "" and report.rewritten == ["<unnamed MMCVDeformConv2d #0>"]
        assert all(n.name.startswith("y/") for n in out.graph.node[:-1])

    def test_external_data_round_trip(self, tmp_path):
        model = samples.build("mmcv.MMCVModulatedDeformConv2d", c=16, cout=32)
        onnx_io.save_model(model, tmp_path / "in.onnx", size_limit=1000)
        assert onnx_io.file_uses_external_data(tmp_path / "in.onnx")
        out, _ = rewrite_model(onnx_io.load_model(tmp_path / "in.onnx"), inplace=True)
        onnx_io.save_model(out, tmp_path / "out.onnx", external_data=True)
        back = onnx_io.load_model(tmp_path / "out.onnx")
        expected, _ = rewrite_model(model)
        assert back.graph.node == expected.graph.node and back.opset_import == expected.opset_import
        for a, b in zip(back.graph.initializer, expected.graph.initializer, strict=True):
            assert a.name == b.name
            np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))


class TestTargetsAndNoOps:
    def test_rewritten_model_is_a_no_op(self):
        out, _ = rewrite_model(samples.build("mmcv.MMCVDeformConv2d"))
        again, report = rewrite_model(out)
        assert again == out and report.rewritten == [] and report.unchanged == ["dcn0"]

    def test_retarget_both_ways(self):
        out, _ = rewrite_model(samples.build("mmcv.MMCVDeformConv2d"))
        builtin, report = rewrite_model(out, "trt-builtin")
        assert report.rewritten == ["dcn0"]
        assert _attrs(_plugin_nodes(builtin)[0])["plugin_version"] == b"2"
        assert [n.op_type for n in builtin.graph.node] == [n.op_type for n in out.graph.node]
        back, _ = rewrite_model(builtin, "dcnconvert")
        assert back == out

    def test_retarget_refuses_non_square(self):
        out, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d", stride=(2, 1)))
        with pytest.raises(UnsupportedNodeError, match="dcn0"):
            rewrite_model(out, "trt-builtin")

    def test_no_dcn_warns_or_raises(self):
        model = helper.make_model(helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", 1, [2])],
            [helper.make_tensor_value_info("y", 1, [2])]))
        out, report = rewrite_model(model)
        assert out == model and report.rewritten == [] and "no deformable convolution" in report.warnings[0]
        with pytest.raises(NoMatchError):
            rewrite_model(model, require_match=True)

    def test_unknown_dcn_like_op_is_skipped_with_a_warning(self):
        model = samples.build("mmcv.MMCVModulatedDeformConv2d")
        model.graph.node.append(helper.make_node("DCNv3_TRT", ["y"], ["z"], name="dcn3", domain="custom"))
        model.opset_import.append(helper.make_opsetid("custom", 1))
        model.graph.output[0].name = "z"
        out, report = rewrite_model(model)
        assert report.rewritten == ["dcn0"] and report.skipped[0][0] == "dcn3"
        assert any("dcn3" in w for w in report.warnings)
        assert out.graph.node[-1] == model.graph.node[-1]

    def test_keep_leaves_chosen_nodes_alone_unvalidated(self):
        model = samples.build("mmcv.MMCVDeformConv2d", c=4, cout=4, padding=(1, 1))
        second = onnx.NodeProto()
        second.CopyFrom(model.graph.node[0])
        second.name, second.input[0], second.output[0] = "dcn1", "y", "z"
        for attr in second.attribute:
            if attr.name == "deform_groups":
                attr.i = 3  # 4 input channels are not divisible by 3: invalid for the rewrite
        model.graph.node.append(second)
        model.graph.output[0].name = "z"
        with pytest.raises(ValidationError, match="dcn1"):
            rewrite_model(model)
        seen = []
        out, report = rewrite_model(model, keep=lambda m: seen.append(m.form) or m.node_name == "dcn1")
        assert seen == ["mmcv.MMCVDeformConv2d"] * 2
        assert report.rewritten == ["dcn0"] and [name for name, _ in report.skipped] == ["dcn1"]
        assert [n.op_type for n in out.graph.node][-2] == schema.PLUGIN_NAME
        assert out.graph.node[-1].SerializeToString() == second.SerializeToString()
        everything, report = rewrite_model(model, keep=lambda m: True, require_match=True)
        assert everything == model and report.rewritten == [] and len(report.skipped) == 2

    def test_report_to_dict(self):
        _, report = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"))
        data = report.to_dict()
        assert data["target"] == "dcnconvert" and data["rewritten"] == ["dcn0"]
        assert data["matches"][0]["form"] == "mmcv.MMCVModulatedDeformConv2d"


@pytest.mark.parametrize("case", sorted(corpus_models()))
def test_corpus_is_refused_before_anything_changes(case):
    model = corpus_models()[case]
    before = model.SerializeToString()
    cls, words = EXPECTED[case]
    with pytest.raises((ValidationError, UnsupportedNodeError)) as info:
        rewrite_model(model, inplace=True)
    assert type(info.value).__name__ == cls and "dcn0" in str(info.value)
    assert all(w in str(info.value).lower() for w in words)
    assert model.SerializeToString() == before  # validation runs before any change, even in place


def test_model_without_default_opset_gets_one_for_the_helpers(capsys):
    model = samples.build("mmcv.MMCVDeformConv2d", dynamic=True)
    del model.opset_import[0]
    out, report = rewrite_model(model)
    assert {o.domain: o.version for o in out.opset_import}[""] == 13
    assert any("no default ONNX opset" in w for w in report.warnings)
    onnx.checker.check_model(out)
    assert capsys.readouterr().out == ""  # graphsurgeon's warnings never reach stdout


def test_dcn_in_a_subgraph_is_refused():
    inner = samples.build("mmcv.MMCVModulatedDeformConv2d").graph
    body = helper.make_graph(list(inner.node), "body", [], [helper.make_tensor_value_info("y", 1, None)],
                             list(inner.initializer))
    cond = helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])
    node = helper.make_node("If", ["cond"], ["out"], then_branch=body, else_branch=body, name="if")
    model = helper.make_model(
        helper.make_graph([node], "g", [cond] + list(inner.input),
                          [helper.make_tensor_value_info("out", 1, None)]),
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("mmcv", 1)])
    with pytest.raises(UnsupportedNodeError, match="subgraph"):
        rewrite_model(model)


def test_checker_failure_of_the_input_is_only_a_warning():
    model = samples.build("centernet.DCNv2")  # default-domain custom op: onnx.checker rejects the input
    model.graph.node.append(helper.make_node("MyCustomOp", ["y"], ["z"], name="custom"))
    model.graph.output[0].name = "z"
    _, report = rewrite_model(model)
    assert report.rewritten == ["dcn0"]
    assert any("already before the rewrite" in w for w in report.warnings)


# ------------------------------------------------------------------------------------------------
# allow_tf32: the optional attribute of our plugin (TF32 math opt-in for FLOAT32)
# ------------------------------------------------------------------------------------------------


def _without_tf32(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in _plugin_nodes(out):
        kept = [a for a in node.attribute if a.name != schema.ATTR_ALLOW_TF32]
        del node.attribute[:]
        node.attribute.extend(kept)
    return out


class TestAllowTf32:
    @pytest.mark.parametrize("form", samples.FORMS)
    def test_written_only_when_asked(self, form):
        """allow_tf32=True adds INT allow_tf32 = 1 after deformable_group and changes nothing else;
        the default output has no such attribute."""
        model = samples.build(form, stride=(2, 2), deformable_group=2)
        default, report0 = rewrite_model(model)
        tf32, report1 = rewrite_model(model, allow_tf32=True)
        assert all(schema.ATTR_ALLOW_TF32 not in _attrs(n) for n in _plugin_nodes(default))
        assert report0.to_dict()["allow_tf32"] is False and report1.to_dict()["allow_tf32"] is True
        (plugin,) = _plugin_nodes(tf32)
        names = [a.name for a in plugin.attribute]
        weight_attrs = [n for n in ("weight", "weight_shape", "bias") if n in names]
        bias = ["bias"] if report1.matches[0].with_bias else []
        expected = [] if form == "tao.ModulatedDeformConv2d" else ["weight", "weight_shape", *bias]
        assert weight_attrs == expected
        assert names == ["stride", "padding", "dilation", "group", "deformable_group", "allow_tf32",
                         *weight_attrs, "plugin_version", "plugin_namespace"]
        (attr,) = [a for a in plugin.attribute if a.name == schema.ATTR_ALLOW_TF32]
        assert attr.type == ATTR.INT and attr.i == 1
        assert _without_tf32(tf32).SerializeToString() == default.SerializeToString()
        assert report1.rewritten == [plugin.name]  # a plugin node without the attribute is rewritten too
        onnx.checker.check_model(tf32)

    def test_default_leaves_plugin_nodes_byte_identical(self):
        """A rewritten model (with or without allow_tf32) comes back unchanged from a default rewrite."""
        plain, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"))
        tf32, _ = rewrite_model(plain, allow_tf32=True)
        for model in (plain, tf32):
            again, report = rewrite_model(model)
            assert again.SerializeToString() == model.SerializeToString()
            assert report.unchanged == ["dcn0"] and report.rewritten == []
        again, report = rewrite_model(tf32, allow_tf32=True)
        assert again.SerializeToString() == tf32.SerializeToString() and report.unchanged == ["dcn0"]
        # asked on a rewritten model: the same bytes as rewriting the original with the option
        direct, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"), allow_tf32=True)
        assert tf32.SerializeToString() == direct.SerializeToString()

    def test_retargeting_to_trt_builtin_drops_it_with_a_warning(self):
        tf32, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"), allow_tf32=True)
        out, report = rewrite_model(tf32, "trt-builtin")
        (plugin,) = _plugin_nodes(out)
        assert schema.ATTR_ALLOW_TF32 not in _attrs(plugin) and _attrs(plugin)["plugin_version"] == b"2"
        assert report.rewritten == ["dcn0"]
        assert any("allow_tf32 = 1 dropped" in w and "trt-builtin" in w for w in report.warnings)
        back, report = rewrite_model(out, "dcnconvert")
        assert schema.ATTR_ALLOW_TF32 not in _attrs(_plugin_nodes(back)[0]) and not report.warnings

    def test_trt_builtin_target_refuses_it(self):
        model = samples.build("mmcv.MMCVModulatedDeformConv2d")
        with pytest.raises(UsageError, match="target trt-builtin .* has no allow_tf32 field") as info:
            rewrite_model(model, "trt-builtin", allow_tf32=True)
        assert "target dcnconvert" in info.value.hint and "allow_tf32=True" in info.value.hint

    @pytest.mark.parametrize("form", ["mmcv.MMCVModulatedDeformConv2d", "mmcv.MMCVDeformConv2d",
                                      "tensorrt_pro.Plugin.DCNv2"])
    def test_numpy_reference_ignores_it(self, form):
        """evaluate (plugin nodes through the float64 reference) and `reference` (standard DeformConv in
        ORT) give the same numbers with and without the attribute."""
        from support import evaluate

        from dcnconvert.transform import standard

        model = samples.build(form, deformable_group=2, seed=5)
        default, _ = rewrite_model(model)
        tf32, _ = rewrite_model(model, allow_tf32=True)
        feeds = samples.input_feeds(model, seed=11)
        for backend in ("onnxruntime", "reference"):
            a = evaluate.run_model(default, feeds, backend=backend)["y"]
            b = evaluate.run_model(tf32, feeds, backend=backend)["y"]
            assert np.abs(a).max() > 0 and np.array_equal(a, b)
        std = standard.to_standard_model(tf32)
        assert not any(a.name == schema.ATTR_ALLOW_TF32 for n in std.graph.node for a in n.attribute)
        assert np.array_equal(_run(std, feeds)[0], _run(standard.to_standard_model(default), feeds)[0])

    @pytest.mark.parametrize(("value", "reason"), [(2, "is 2; expected 0"), (-1, "is -1; expected 0"),
                                                   ([1, 1], "expected one integer")])
    def test_bad_values_are_not_convertible(self, value, reason):
        plain, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"))
        _plugin_nodes(plain)[0].attribute.append(helper.make_attribute(schema.ATTR_ALLOW_TF32, value))
        from dcnconvert.match.finder import find_dcn_nodes

        (match,) = find_dcn_nodes(plain)
        assert not match.convertible and "allow_tf32" in match.reason and reason in match.reason
        with pytest.raises(UnsupportedNodeError, match="allow_tf32"):
            rewrite_model(plain)

    def test_zero_is_read_as_absent(self):
        plain, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"))
        _plugin_nodes(plain)[0].attribute.append(helper.make_attribute(schema.ATTR_ALLOW_TF32, 0))
        from dcnconvert.match.finder import find_dcn_nodes

        (match,) = find_dcn_nodes(plain)
        assert match.convertible and match.attrs.allow_tf32 is False
        assert match.notes == ["weight and bias embedded in the node (attributes)"]  # nothing on TF32
        again, report = rewrite_model(plain)
        assert report.unchanged == ["dcn0"] and again.SerializeToString() == plain.SerializeToString()
        upgraded, report = rewrite_model(plain, allow_tf32=True)
        assert report.rewritten == ["dcn0"] and _attrs(_plugin_nodes(upgraded)[0])["allow_tf32"] == 1

    def test_match_reports_it(self):
        from dcnconvert.match.finder import find_dcn_nodes

        tf32, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"), allow_tf32=True)
        (match,) = find_dcn_nodes(tf32)
        assert match.convertible and match.attrs.allow_tf32 is True
        assert any("allow_tf32 = 1" in note for note in match.to_dict()["notes"])

    def test_tao_node_has_no_such_attribute(self):
        """TAO's ModulatedDeformConv2d (a source form in the default domain) does not take it."""
        model = samples.build("tao.ModulatedDeformConv2d")
        model.graph.node[-1].attribute.append(helper.make_attribute(schema.ATTR_ALLOW_TF32, 1))
        from dcnconvert.match.finder import find_dcn_nodes

        (match,) = find_dcn_nodes(model)
        assert not match.convertible and "unknown attribute 'allow_tf32'" in match.reason
