"""match: shapes from every source, symbolic dims, robustness of shape inference, subgraphs."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from support import samples

from dcnconvert.match.finder import find_dcn_nodes
from dcnconvert.model import opsets


def _conv_then_dcn(dynamic: bool) -> onnx.ModelProto:
    """x -> Conv(3x3, pad 1) -> DCN; offset and mask from Convs: shapes only known by inference."""
    rng = np.random.default_rng(0)
    n, h, w = ("N", "H", "W") if dynamic else (2, 8, 10)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w_in"),
        numpy_helper.from_array(rng.standard_normal((18, 4, 3, 3)).astype(np.float32), "w_off"),
        numpy_helper.from_array(rng.standard_normal((9, 4, 3, 3)).astype(np.float32), "w_mask"),
        numpy_helper.from_array(rng.standard_normal((5, 4, 3, 3)).astype(np.float32), "w_dcn"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w_in"], ["feat"], pads=[1, 1, 1, 1], name="conv_in"),
        helper.make_node("Conv", ["feat", "w_off"], ["offset"], pads=[1, 1, 1, 1], name="conv_off"),
        helper.make_node("Conv", ["feat", "w_mask"], ["mask_logits"], pads=[1, 1, 1, 1], name="conv_mask"),
        helper.make_node("Sigmoid", ["mask_logits"], ["mask"], name="sig"),
        helper.make_node("MMCVModulatedDeformConv2d", ["feat", "offset", "mask", "w_dcn"], ["y"], name="dcn",
                         domain="mmcv", stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1,
                         deform_groups=1),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [n, 3, h, w])],
                              [helper.make_tensor_value_info("y", 1, None)], inits)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("mmcv", 1)]
    )


class TestShapes:
    @pytest.mark.parametrize("dynamic", [False, True])
    def test_shapes_come_from_inference(self, dynamic):
        (m,) = find_dcn_nodes(_conv_then_dcn(dynamic))
        for role, channels in (("x", 4), ("offset", 18), ("mask", 9)):
            n, c, h, w = m.shapes[role]
            assert c == channels
            if dynamic:  # inference names the Conv outputs' spatial dims itself
                assert n == "N" and isinstance(h, str) and isinstance(w, str)
            else:
                assert (n, h, w) == (2, 8, 10)
        assert m.shapes["weight"] == [5, 4, 3, 3]
        assert m.shapes["output"] is None  # a custom op: inference cannot know
        assert m.kernel == (3, 3) and m.dtype == onnx.TensorProto.FLOAT
        assert m.index == 4 and m.output == "y"

    def test_shapes_from_graph_inputs_and_value_info(self):
        model = samples.build("mmcv.MMCVModulatedDeformConv2d", n=3, h=5, w=6, cout=8)
        (m,) = find_dcn_nodes(model)
        assert m.shapes == {"x": [3, 4, 5, 6], "offset": [3, 18, 5, 6], "mask": [3, 9, 5, 6],
                            "weight": [8, 4, 3, 3], "bias": [8], "output": [3, 8, 5, 6]}

    def test_constant_node_bias_shape(self):
        (m,) = find_dcn_nodes(samples.build("paddle2onnx.DeformConv", cout=7))
        assert m.shapes["bias"] == [7]

    def test_inference_failure_leaves_shapes_unknown(self, monkeypatch):
        def broken(*args, **kwargs):
            raise RuntimeError("inference exploded")

        monkeypatch.setattr(onnx.shape_inference, "infer_shapes", broken)
        (m,) = find_dcn_nodes(_conv_then_dcn(False))
        assert m.shapes["x"] is None and m.shapes["offset"] is None
        assert m.shapes["weight"] == [5, 4, 3, 3]
        assert m.convertible

    def test_does_not_modify_the_model(self):
        model = _conv_then_dcn(True)
        before = model.SerializeToString()
        find_dcn_nodes(model)
        assert model.SerializeToString() == before


class TestReporting:
    def test_to_dict_is_json(self):
        (m,) = find_dcn_nodes(samples.build("onnx.DeformConv", pads=(1, 0, 2, 0), dynamic=True))
        data = json.loads(json.dumps(m.to_dict()))
        assert data["form"] == "onnx.DeformConv"
        assert data["attrs"] == {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "group": 1,
                                 "deformable_group": 1}
        assert data["prepad"] == [1, 0, 2, 0]
        assert data["shapes"]["x"] == ["N", 4, "H", "W"]
        assert data["convertible"] is True and data["mask"] == "tensor"

    def test_label_of_unnamed_nodes(self):
        model = samples.build("mmcv.MMCVModulatedDeformConv2d")
        model.graph.node[0].name = ""
        (m,) = find_dcn_nodes(model)
        assert m.label == "<unnamed MMCVModulatedDeformConv2d #0>"

    def test_no_dcn(self):
        model = helper.make_model(helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", 1, [2])],
            [helper.make_tensor_value_info("y", 1, [2])]))
        assert find_dcn_nodes(model) == []

    def test_several_nodes_in_graph_order(self):
        model = samples.build("mmcv.MMCVModulatedDeformConv2d", c=6, cout=6)
        second = onnx.NodeProto()
        second.CopyFrom(model.graph.node[0])
        second.name, second.input[0], second.output[0] = "dcn1", "y", "z"
        model.graph.node.append(second)
        model.graph.output[0].name = "z"
        assert [m.node_name for m in find_dcn_nodes(model)] == ["dcn0", "dcn1"]
        assert [m.index for m in find_dcn_nodes(model)] == [0, 1]

    def test_dcn_in_a_subgraph_is_reported_not_convertible(self):
        inner = samples.build("mmcv.MMCVModulatedDeformConv2d").graph
        body = helper.make_graph(list(inner.node), "body", [], [helper.make_tensor_value_info("y", 1, None)],
                                 list(inner.initializer))
        cond = helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])
        if_node = helper.make_node("If", ["cond"], ["out"], then_branch=body, else_branch=body, name="if")
        graph = helper.make_graph([if_node], "g", [cond] + list(inner.input),
                                  [helper.make_tensor_value_info("out", 1, None)])
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("mmcv", 1)]
        )
        found = find_dcn_nodes(model)
        assert len(found) == 2 and all(not m.convertible and "subgraph" in m.reason for m in found)
        assert all(m.index == -1 for m in found)

    def test_default_opset(self):
        assert opsets.opset_version(samples.build("onnx.DeformConv", opset=22)) == 22
        model = samples.build("paddle-legacy.deformable_conv")
        del model.opset_import[0]
        assert opsets.opset_version(model) is None
