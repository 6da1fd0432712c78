"""embedded: a plugin node whose weight and bias are attributes is a valid dcnconvert node (kernel and
shapes from weight_shape), on the full model and on its weight-less skeleton; bad ones are refused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import samples

from dcnconvert import schema
from dcnconvert.errors import UnsupportedNodeError, ValidationError
from dcnconvert.match import validate
from dcnconvert.match.embedded import read_embedded
from dcnconvert.match.finder import find_dcn_nodes
from dcnconvert.model import io as onnx_io
from dcnconvert.transform.plugin import rewrite_model


def _embedded(**params) -> onnx.ModelProto:
    out, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d", **params))
    return out


def _set(node: onnx.NodeProto, name: str, value) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)
    if value is not None:
        node.attribute.insert(len(kept) - 2, helper.make_attribute(name, value))


@pytest.mark.parametrize("light", [False, True], ids=["model", "skeleton"])
def test_embedded_node_is_a_valid_plugin_node(light):
    model = _embedded(c=8, cout=16, kernel=(3, 2), stride=(2, 1), deformable_group=2, group=2)
    if light:
        model = onnx_io.skeleton(model, 0)  # the weights carry no data there
        assert onnx_io.is_skeleton_tensor(model.graph.node[0].attribute[5].t)
    (m,) = find_dcn_nodes(model)
    assert m.form == "dcnconvert.ModulatedDeformConv2d" and m.convertible and m.node_target == "dcnconvert"
    assert m.kernel == (3, 2) and m.embedded == ("weight", "bias") and m.with_bias
    assert m.shapes["weight"] == [16, 4, 3, 2] and m.shapes["bias"] == [16]
    assert m.inputs == {"x": "x", "offset": "offset", "mask": "mask"}
    assert m.attrs.stride == (2, 1) and m.attrs.group == 2 and m.attrs.deformable_group == 2
    assert "weight and bias embedded in the node (attributes)" in m.notes
    assert m.to_dict()["embedded"] == ["weight", "bias"]
    assert validate.problems(m) == []


def test_without_bias():
    model = _embedded(bias=False)
    (m,) = find_dcn_nodes(model)
    assert m.embedded == ("weight",) and not m.with_bias and "bias" not in m.shapes
    assert read_embedded(model.graph.node[0]).shapes == {"weight": [6, 4, 3, 3]}


def test_input_form_has_none():
    out, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"), embed_weights=False)
    assert read_embedded(out.graph.node[0]) is None
    (m,) = find_dcn_nodes(out)
    assert m.embedded == () and m.to_dict()["embedded"] == []


def test_shapes_are_validated_like_inputs():
    """A weight_shape that does not fit the input channels is a ValidationError naming the node."""
    model = _embedded()
    node = model.graph.node[0]
    weight = numpy_helper.to_array(node.attribute[5].t)
    node.attribute[5].t.CopyFrom(numpy_helper.from_array(weight.reshape(6, 2, 3, 6), "weight"))
    _set(node, "weight_shape", [6, 2, 3, 6])
    (m,) = find_dcn_nodes(model)
    assert m.convertible and m.kernel == (3, 6)
    with pytest.raises(ValidationError, match="dcn0") as info:
        rewrite_model(model)
    assert "weight shape [6, 2, 3, 6] does not fit an input of 4 channels" in str(info.value)


def _refused(model: onnx.ModelProto, *words: str) -> None:
    (m,) = find_dcn_nodes(model)
    assert not m.convertible, m
    assert all(w in m.reason for w in words), m.reason
    with pytest.raises(UnsupportedNodeError, match="dcn0"):
        rewrite_model(model)


def test_weight_shape_missing_or_wrong():
    model = _embedded()
    _set(model.graph.node[0], "weight_shape", None)
    _refused(model, "'weight' without 'weight_shape'")
    for bad in ([6, 4, 9], [6, 4, 3, 0]):
        model = _embedded()
        _set(model.graph.node[0], "weight_shape", bad)
        _refused(model, "'weight_shape' is", "expected 4 positive integers")
    model = _embedded()
    _set(model.graph.node[0], "weight_shape", [6, 4, 3, 4])
    _refused(model, "has 216 values", "needs 288")


def test_bias_or_weight_shape_without_weight():
    model = _embedded()
    _set(model.graph.node[0], "weight", None)
    model.graph.node[0].input.extend(["w_in"])
    model.graph.initializer.append(numpy_helper.from_array(np.ones((6, 4, 3, 3), np.float32), "w_in"))
    _refused(model, "'weight_shape', 'bias'", "without 'weight'")


def test_bias_with_the_wrong_length():
    model = _embedded()
    node = model.graph.node[0]
    node.attribute[7].t.CopyFrom(numpy_helper.from_array(np.ones(5, np.float32), "bias"))
    _refused(model, "'bias' has dims [5]", "expected [6]")


def test_type_the_plugin_does_not_take():
    model = _embedded()
    node = model.graph.node[0]
    weight = numpy_helper.to_array(node.attribute[5].t)
    node.attribute[5].t.CopyFrom(numpy_helper.from_array(weight.astype(np.float64), "weight"))
    _refused(model, "holds DOUBLE values", "FLOAT, FLOAT16, BFLOAT16")
    model = _embedded()
    _set(model.graph.node[0], "weight", [1.0, 2.0])
    _refused(model, "'weight' is FLOATS", "TENSOR attribute")


def test_embedded_weight_with_weight_inputs_is_refused():
    model = _embedded()
    model.graph.node[0].input.append("extra")
    model.graph.initializer.append(numpy_helper.from_array(np.ones((6, 4, 3, 3), np.float32), "extra"))
    _refused(model, "takes exactly the inputs x, offset, mask", "the node has 4")


def test_tao_node_has_no_such_attributes():
    model = samples.build("tao.ModulatedDeformConv2d")
    model.graph.node[0].attribute.append(helper.make_attribute("weight_shape", [6, 4, 3, 3]))
    (m,) = find_dcn_nodes(model)
    assert not m.convertible and "unknown attribute 'weight_shape'" in m.reason


def test_bf16_embedded_weight_is_accepted():
    model = _embedded()
    node = model.graph.node[0]
    t = node.attribute[5].t
    bf16 = TensorProto(name="weight", data_type=TensorProto.BFLOAT16, dims=list(t.dims))
    bf16.raw_data = (numpy_helper.to_array(t).view(np.uint32) >> 16).astype("<u2").tobytes()
    t.CopyFrom(bf16)
    (m,) = find_dcn_nodes(model)
    assert m.convertible and read_embedded(node).weight_dtype == TensorProto.BFLOAT16
    assert read_embedded(node).bias_dtype == TensorProto.FLOAT
    again, report = rewrite_model(model)
    assert report.unchanged == ["dcn0"] and again.SerializeToString() == model.SerializeToString()
    assert schema.WEIGHT_DTYPES[TensorProto.BFLOAT16] == "BFLOAT16"
