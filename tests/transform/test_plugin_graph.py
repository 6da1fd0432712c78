"""rewrite: everything outside the DCN nodes is preserved, targets and no-ops, and what is refused
before anything changes (test_plugin.py: the node contract and exact helpers)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from bad_inputs import EXPECTED, corpus_models
from onnx import helper, numpy_helper
from support import samples
from support.nodes import node_attrs, plugin_nodes

from dcnconvert import schema
from dcnconvert.errors import NoMatchError, UnsupportedNodeError, ValidationError
from dcnconvert.model import io as onnx_io
from dcnconvert.transform.plugin import rewrite_model

ATTR = onnx.AttributeProto


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
        assert plugin_nodes(out)[0].doc_string == "dcn doc"
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
        assert plugin_nodes(out)[0].name == "" and report.rewritten == ["<unnamed MMCVDeformConv2d #0>"]
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
        assert node_attrs(plugin_nodes(builtin)[0])["plugin_version"] == b"2"
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
