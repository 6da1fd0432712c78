"""Tests of support.evaluate: running graphs that contain plugin nodes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dcnconvert import schema
from dcnconvert.errors import ModelError, UsageError
from support.evaluate import BACKENDS, is_plugin_node, run_model
from support.reference import modulated_deform_conv2d

KH = KW = 3


def _plugin_node(inputs, output, stride=(1, 1), padding=(1, 1), dilation=(1, 1), group=1, dg=1, name="dcn"):
    attrs = schema.DcnAttrs(stride, padding, dilation, group, dg).node_attrs(schema.TARGET_DCNCONVERT)
    return helper.make_node(
        schema.PLUGIN_NAME, inputs, [output], name=name, domain=schema.PLUGIN_DOMAIN, **attrs
    )


def _init(name, array, dtype):
    return numpy_helper.from_array(array.astype(dtype), name)


def build_block(
    dtype=np.float32, bias=True, stride=(2, 1), padding=(1, 2), dilation=(1, 2), group=2, dg=2, c=4
):
    """x -> Conv(offset+mask logits) -> Split -> Sigmoid -> plugin -> Relu -> Add(relu, plugin).

    Returns the plugin model and the same model written with standard ONNX DeformConv (opset 19).
    """
    rng = np.random.default_rng(11)
    k = KH * KW
    oc = 4
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    w_off = rng.standard_normal((3 * dg * k, c, KH, KW)) * 0.3
    b_off = rng.standard_normal(3 * dg * k) * 0.5
    weight = rng.standard_normal((oc, c // group, KH, KW)) * 0.5
    bvec = rng.standard_normal(oc)
    inits = [
        _init("w_off", w_off, dtype),
        _init("b_off", b_off, dtype),
        _init("weight", weight, dtype),
        _init("bias", bvec, dtype),
        numpy_helper.from_array(np.array([2 * dg * k, dg * k], dtype=np.int64), "split"),
    ]
    conv_attrs = {
        "kernel_shape": [KH, KW],
        "strides": list(stride),
        "pads": [padding[0], padding[1], padding[0], padding[1]],
        "dilations": list(dilation),
    }
    common = [
        helper.make_node("Conv", ["x", "w_off", "b_off"], ["om"], name="conv_offset", **conv_attrs),
        helper.make_node("Split", ["om", "split"], ["offset", "mask_logits"], axis=1, name="split"),
        helper.make_node("Sigmoid", ["mask_logits"], ["mask"], name="sigmoid"),
    ]
    tail = [
        helper.make_node("Relu", ["dcn_out"], ["relu"], name="relu"),
        helper.make_node("Add", ["relu", "dcn_out"], ["y"], name="add"),
    ]
    io = {
        "inputs": [helper.make_tensor_value_info("x", elem, ["N", c, "H", "W"])],
        "outputs": [helper.make_tensor_value_info("y", elem, ["N", oc, "OH", "OW"])],
    }
    plugin_inputs = ["x", "offset", "mask", "weight"] + (["bias"] if bias else [])
    plugin = _plugin_node(plugin_inputs, "dcn_out", stride, padding, dilation, group, dg)
    g1 = helper.make_graph(common + [plugin] + tail, "plugin", io["inputs"], io["outputs"], inits)
    m1 = helper.make_model(
        g1, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid(schema.PLUGIN_DOMAIN, 1)]
    )
    deform = helper.make_node(
        "DeformConv",
        ["x", "weight", "offset", "bias" if bias else "", "mask"],
        ["dcn_out"],
        name="dcn",
        strides=list(stride),
        pads=[padding[0], padding[1], padding[0], padding[1]],
        dilations=list(dilation),
        group=group,
        offset_group=dg,
        kernel_shape=[KH, KW],
    )
    g2 = helper.make_graph(common + [deform] + tail, "standard", io["inputs"], io["outputs"], inits)
    m2 = helper.make_model(g2, opset_imports=[helper.make_opsetid("", 19)])
    m2.ir_version = 10
    onnx.checker.check_model(m1)
    onnx.checker.check_model(m2)
    return m1, m2


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch, h, w", [(1, 7, 6), (3, 5, 9)])
def test_block_matches_standard_deformconv_in_ort(backend, bias, batch, h, w):
    plugin_model, standard_model = build_block(bias=bias)
    rng = np.random.default_rng(batch * 100 + h + w + bias)
    feeds = {"x": rng.standard_normal((batch, 4, h, w)).astype(np.float32)}
    got = run_model(plugin_model, feeds, backend=backend)
    (expected,) = _ort(standard_model, feeds)
    assert set(got) == {"y"}
    assert got["y"].dtype == np.float32
    assert got["y"].shape == expected.shape
    scale = float(np.abs(expected).max())
    assert scale > 0.1
    np.testing.assert_allclose(got["y"], expected, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("backend", BACKENDS)
def test_plugin_only_graph_equals_reference_function(backend):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    offset = (rng.standard_normal((2, 2 * 2 * 3, 5, 2)) * 2).astype(np.float32)
    mask = rng.random((2, 2 * 3, 5, 2)).astype(np.float32)
    weight = rng.standard_normal((6, 2, 1, 3)).astype(np.float32)
    names = ["x", "offset", "mask", "weight"]
    node = _plugin_node(names + [""], "y", stride=(1, 2), padding=(0, 1), dilation=(1, 2), group=2, dg=2)
    elem = TensorProto.FLOAT
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, elem, a.shape)
         for n, a in zip(names, (x, offset, mask, weight), strict=True)],
        [helper.make_tensor_value_info("y", elem, [2, 6, 5, 2])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid(schema.PLUGIN_DOMAIN, 1)]
    )
    got = run_model(model, dict(zip(names, (x, offset, mask, weight), strict=True)), backend=backend)["y"]
    expected = modulated_deform_conv2d(
        x, offset, mask, weight, stride=(1, 2), padding=(0, 1), dilation=(1, 2), group=2, deformable_group=2
    )
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected.astype(np.float32), rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp16_graph_stays_fp16_and_close_to_fp32(backend):
    m32, _ = build_block(np.float32)
    m16, _ = build_block(np.float16)
    rng = np.random.default_rng(21)
    x = rng.standard_normal((2, 4, 6, 6))
    y32 = run_model(m32, {"x": x.astype(np.float32)}, backend=backend)["y"]
    y16 = run_model(m16, {"x": x.astype(np.float16)}, backend=backend)["y"]
    assert y16.dtype == np.float16
    scale = float(np.abs(y32).max())
    err = float(np.abs(y16.astype(np.float32) - y32).max())
    assert err < 1e-2 * scale, (err, scale)
    assert err > 0  # it really ran in FP16 (the weights were rounded)


def test_output_names_selects_intermediate_tensors():
    model, _ = build_block()
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    names = ["mask", "dcn_out"]
    ref = run_model(model, {"x": x}, backend="reference", output_names=names)
    split = run_model(model, {"x": x}, backend="onnxruntime", output_names=names)
    assert list(ref) == list(split) == names
    assert ref["mask"].shape == (1, 18, 3, 6) and ref["dcn_out"].shape == (1, 4, 3, 6)
    assert 0 < ref["mask"].min() and ref["mask"].max() < 1
    for name in names:
        np.testing.assert_allclose(ref[name], split[name], rtol=1e-5, atol=1e-5)


def test_model_is_not_modified():
    model, _ = build_block()
    before = model.SerializeToString()
    x = np.random.default_rng(2).standard_normal((1, 4, 6, 6)).astype(np.float32)
    for backend in BACKENDS:
        run_model(model, {"x": x}, backend=backend)
    assert model.SerializeToString() == before


def test_bad_backend_and_feeds():
    model, _ = build_block()
    x = np.ones((1, 4, 6, 6), np.float32)
    with pytest.raises(UsageError, match="unknown backend"):
        run_model(model, {"x": x}, backend="tensorrt")
    with pytest.raises(UsageError, match=r"no value given for graph input\(s\) \['x'\]"):
        run_model(model, {})
    with pytest.raises(UsageError, match="not graph inputs"):
        run_model(model, {"x": x, "z": x})


def test_plugin_node_inside_subgraph():
    """The reference backend runs plugins inside If branches; the split backend refuses clearly."""
    rng = np.random.default_rng(4)
    weight = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    names = ["x", "offset", "mask"]
    branch_node = _plugin_node(names + ["weight"], "yb", padding=(1, 1))
    then_g = helper.make_graph(
        [branch_node], "then", [], [helper.make_tensor_value_info("yb", TensorProto.FLOAT, [1, 2, 4, 4])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["ye"])],
        "else",
        [],
        [helper.make_tensor_value_info("ye", TensorProto.FLOAT, [1, 2, 4, 4])],
    )
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g, name="if")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])]
        + [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", "C", "H", "W"]) for n in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        [numpy_helper.from_array(weight, "weight")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid(schema.PLUGIN_DOMAIN, 1)]
    )
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    offset = rng.standard_normal((1, 18, 4, 4)).astype(np.float32)
    mask = rng.random((1, 9, 4, 4)).astype(np.float32)
    feeds = {"cond": np.array(True), "x": x, "offset": offset, "mask": mask}
    got = run_model(model, feeds, backend="reference")["y"]
    np.testing.assert_allclose(got, modulated_deform_conv2d(x, offset, mask, weight, padding=1), atol=1e-5)
    with pytest.raises(ModelError, match="inside a subgraph"):
        run_model(model, feeds, backend="onnxruntime")


def test_is_plugin_node():
    assert is_plugin_node(_plugin_node(["a", "b", "c", "d"], "y"))
    assert not is_plugin_node(helper.make_node(schema.PLUGIN_NAME, ["a"], ["y"]))  # TAO's default domain


def _bn_model(opset, outputs=("y",), **attrs):
    names = ["x", "scale", "bias", "mean", "var"]
    node = helper.make_node("BatchNormalization", names, list(outputs), name="bn", **attrs)
    graph = helper.make_graph(
        [node],
        "bn",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, None if n != "x" else [2, 3, 4, 5])
            for n in names[:1]
        ],
        [
            helper.make_tensor_value_info(o, TensorProto.FLOAT, None if o != "y" else [2, 3, 4, 5])
            for o in outputs[:1]
        ],
    )
    rng = np.random.default_rng(opset)
    inits = {
        "scale": rng.uniform(0.5, 1.5, 3),
        "bias": rng.standard_normal(3),
        "mean": rng.standard_normal(3),
        "var": rng.uniform(0.5, 2.0, 3),
    }
    graph.initializer.extend(numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items())
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model, inits


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opset", [9, 11, 13, 15])
def test_batchnorm_is_inference_mode_at_every_opset(backend, opset):
    """onnx.reference's BatchNormalization-9 uses batch statistics; evaluate overrides it."""
    model, p = _bn_model(opset, epsilon=1e-3)
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)
    got = run_model(model, {"x": x}, backend=backend)["y"]
    sh = (1, 3, 1, 1)
    expected = (x - p["mean"].reshape(sh)) / np.sqrt(p["var"].reshape(sh) + 1e-3) * p["scale"].reshape(sh)
    expected += p["bias"].reshape(sh)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_training_mode_batchnorm_is_refused_by_reference_backend():
    model, _ = _bn_model(15, outputs=("y", "running_mean", "running_var"), training_mode=1)
    with pytest.raises(ModelError, match="training mode"):
        run_model(model, {"x": np.ones((2, 3, 4, 5), np.float32)}, backend="reference", output_names=["y"])


def _embed_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its plugin node's weight (and bias) moved into the node's attributes."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    (node,) = [n for n in out.graph.node if is_plugin_node(n)]
    inits = {t.name: t for t in out.graph.initializer}
    attrs = [helper.make_attribute(schema.ATTR_WEIGHT, inits[node.input[3]]),
             helper.make_attribute(schema.ATTR_WEIGHT_SHAPE, list(inits[node.input[3]].dims))]
    if len(node.input) == 5:
        attrs.append(helper.make_attribute(schema.ATTR_BIAS, inits[node.input[4]]))
    del node.input[3:]
    node.attribute.extend(attrs)
    onnx.checker.check_model(out)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bias", [True, False])
def test_embedded_weights_are_read_from_the_attributes(backend, bias):
    """x, offset, mask inputs and the weight/bias TENSOR attributes: the same numbers as the inputs."""
    plugin_model, standard_model = build_block(bias=bias)
    embedded = _embed_weights(plugin_model)
    feeds = {"x": np.random.default_rng(7).standard_normal((2, 4, 6, 7)).astype(np.float32)}
    got = run_model(embedded, feeds, backend=backend)["y"]
    assert np.array_equal(got, run_model(plugin_model, feeds, backend=backend)["y"])
    (expected,) = _ort(standard_model, feeds)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * float(np.abs(expected).max()))


def test_embedded_weight_with_extra_inputs_is_refused():
    from support.evaluate import plugin_node_forward

    weight = numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32))
    x = np.ones((1, 4, 2, 2), np.float32)
    offset, mask = np.zeros((1, 2, 2, 2), np.float32), np.ones((1, 1, 2, 2), np.float32)
    attrs = {schema.ATTR_WEIGHT: weight, schema.ATTR_WEIGHT_SHAPE: [4, 4, 1, 1], "padding": [0, 0]}
    np.testing.assert_array_equal(plugin_node_forward([x, offset, mask], attrs), np.full((1, 4, 2, 2), 4.0))
    with pytest.raises(ModelError, match="embedded weight needs inputs x, offset, mask; got 4"):
        plugin_node_forward([x, offset, mask, x], attrs)
    with pytest.raises(ModelError, match="needs the embedded weight too"):
        plugin_node_forward([x, offset, mask], {schema.ATTR_BIAS: weight})
