"""Q/DQ insertion (dcnconvert.quantize.qdq): scales, the node pattern, shared x, output pairs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from dcnconvert.model.quantized import ONNX_TYPE_OF, QUANT_MAX
from dcnconvert.quantize import qdq
from tests.support import samples


@pytest.mark.parametrize("qtype", ["int8", "fp8e4m3"])
def test_weight_scales_are_channel_amax_over_qmax(qtype):
    rng = np.random.default_rng(3)
    w = rng.normal(size=(5, 3, 3, 3)) * rng.uniform(0.1, 4.0, size=(5, 1, 1, 1))
    w[2] = 0.0
    scales = qdq.weight_scales(w, qtype)
    expect = np.abs(w).reshape(5, -1).max(axis=1) / {"int8": 127.0, "fp8e4m3": 448.0}[qtype]
    expect[2] = 1.0  # an all-zero channel gets scale 1 (any positive scale represents it exactly)
    np.testing.assert_array_equal(scales, expect)
    # Every weight value then lies inside the type's range: no channel saturates.
    assert np.all(np.abs(w) / scales[:, None, None, None] <= QUANT_MAX[qtype] * (1 + 1e-12))


def test_scale_from_amax_zero_and_tiny():
    assert qdq.scale_from_amax(0.0, "int8") == 1.0
    assert qdq.scale_from_amax(1e-40, "int8") == 1.0
    assert qdq.scale_from_amax(254.0, "int8") == 2.0
    assert qdq.scale_from_amax(448.0, "fp8e4m3") == 1.0


def _plan(model, qtype, x_scale=0.05, output_scale=None, index=None):
    if index is None:
        index = next(i for i, n in enumerate(model.graph.node) if n.op_type == "DeformConv")
    node = model.graph.node[index]
    weight = qdq.constant_value(model, "weight")
    return qdq.LayerPlan(node_name=node.name, index=index, x="x",
                         x_pos=list(node.input).index("x"), x_scale=x_scale, weight="weight",
                         w_pos=list(node.input).index("weight"), w_scale=qdq.weight_scales(weight, qtype),
                         output="y" if output_scale else None, output_scale=output_scale)


def _inits(model):
    return {i.name: i for i in model.graph.initializer}


@pytest.mark.parametrize("qtype", ["int8", "fp8e4m3"])
def test_pattern_around_a_deformconv(qtype):
    model = samples.build("onnx.DeformConv", c=4, cout=6, seed=1)
    before = onnx.ModelProto()
    before.CopyFrom(model)
    out = qdq.insert_qdq(model, [_plan(model, qtype)], qtype)
    assert model == before  # the input model is not modified
    onnx.checker.check_model(out, full_check=True)
    by_out = {o: n for n in out.graph.node for o in n.output}
    dcn = next(n for n in out.graph.node if n.op_type == "DeformConv")
    inits = _inits(out)
    zp_type = ONNX_TYPE_OF[qtype]

    dq_x = by_out[dcn.input[0]]
    q_x = by_out[dq_x.input[0]]
    assert (q_x.op_type, dq_x.op_type, q_x.input[0]) == ("QuantizeLinear", "DequantizeLinear", "x")
    assert not q_x.attribute and not dq_x.attribute  # per tensor: no axis
    assert list(dq_x.input[1:]) == list(q_x.input[1:])
    x_scale, x_zp = inits[q_x.input[1]], inits[q_x.input[2]]
    assert x_scale.data_type == TensorProto.FLOAT and list(x_scale.dims) == []
    assert numpy_helper.to_array(x_scale) == np.float32(0.05)
    assert x_zp.data_type == zp_type and list(x_zp.dims) == []

    dq_w = by_out[dcn.input[1]]
    q_w = by_out[dq_w.input[0]]
    assert q_w.input[0] == "weight" and "weight" in inits  # Q -> DQ of the float constant
    assert [(a.name, a.i) for a in q_w.attribute] == [("axis", 0)] == [(a.name, a.i) for a in dq_w.attribute]
    w_scale, w_zp = inits[q_w.input[1]], inits[q_w.input[2]]
    expect = qdq.weight_scales(numpy_helper.to_array(inits["weight"]), qtype).astype(np.float32)
    np.testing.assert_array_equal(numpy_helper.to_array(w_scale), expect)
    assert w_zp.data_type == zp_type and list(w_zp.dims) == [6]
    zeros = numpy_helper.to_array(w_zp)
    assert np.all(zeros.astype(np.float32) == 0.0)
    # offset, bias and mask are untouched graph inputs / initializers.
    assert list(dcn.input[2:]) == list(before.graph.node[-1].input[2:])
    assert dcn.output[0] == "y" and len(out.graph.node) == len(before.graph.node) + 4


def test_fp8_zero_point_reads_back_as_float8():
    model = samples.build("onnx.DeformConv", seed=2)
    out = qdq.insert_qdq(model, [_plan(model, "fp8e4m3")], "fp8e4m3")
    zp = next(i for i in out.graph.initializer if i.name == "x_zero_point")
    value = numpy_helper.to_array(zp)
    assert value.dtype == ml_dtypes.float8_e4m3fn and float(value) == 0.0


@pytest.mark.parametrize("graph_output", [True, False])
def test_output_pair_keeps_names_and_consumers(graph_output):
    model = samples.build("onnx.DeformConv", seed=4)
    if not graph_output:  # y feeds a Relu whose output is the graph output
        model.graph.node.append(onnx.helper.make_node("Relu", ["y"], ["z"], name="relu"))
        model.graph.output[0].name = "z"
    out = qdq.insert_qdq(model, [_plan(model, "int8", output_scale=0.25)], "int8")
    onnx.checker.check_model(out, full_check=True)
    by_out = {o: n for n in out.graph.node for o in n.output}
    dcn = next(n for n in out.graph.node if n.op_type == "DeformConv")
    q = next(n for n in out.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == dcn.output[0])
    dq = next(n for n in out.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0])
    assert numpy_helper.to_array(_inits(out)[q.input[1]]) == np.float32(0.25)
    if graph_output:
        assert dq.output[0] == "y" and out.graph.output[0].name == "y" and dcn.output[0] != "y"
    else:
        assert dcn.output[0] == "y" and by_out["z"].input[0] == dq.output[0]
    names = [n.name for n in out.graph.node]
    assert len(names) == len(set(names))


def test_two_dcns_share_the_x_pair():
    model = samples.build("onnx.DeformConv", seed=5)
    dcn = model.graph.node[-1]
    twin = onnx.NodeProto()
    twin.CopyFrom(dcn)
    twin.name, twin.output[0] = "dcn_twin", "y2"
    model.graph.node.append(twin)
    model.graph.output.append(onnx.helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 6, 7, 9]))
    first, second = _plan(model, "int8"), _plan(model, "int8", index=len(model.graph.node) - 1)
    out = qdq.insert_qdq(model, [second, first], "int8")  # any order: the pair goes before the first
    onnx.checker.check_model(out, full_check=True)
    x_q = [n for n in out.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x"]
    w_q = [n for n in out.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "weight"]
    assert len(x_q) == 1 and len(w_q) == 2
    dcns = [n for n in out.graph.node if n.op_type == "DeformConv"]
    assert dcns[0].input[0] == dcns[1].input[0]


def test_plan_that_does_not_match_the_node_is_refused():
    from dcnconvert.errors import ModelError

    model = samples.build("onnx.DeformConv", seed=6)
    plan = _plan(model, "int8")
    plan.x = "offset_not_x"
    with pytest.raises(ModelError, match="no longer reads"):
        qdq.insert_qdq(model, [plan], "int8")
