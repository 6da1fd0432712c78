"""rewrite: allow_tf32, the optional attribute of our plugin node (TF32 math opt-in for FLOAT32
layers): written only when asked and in the schema's place, kept by a default rewrite, dropped
with a warning when retargeting to trt-builtin (refused by that target), ignored by the NumPy
reference, bad values refused, zero read as absent, reported by match; TAO's node has no such
attribute."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from support import samples
from support.evaluate import ort_outputs
from support.nodes import node_attrs, plugin_nodes

from dcnconvert import schema
from dcnconvert.errors import UnsupportedNodeError, UsageError
from dcnconvert.transform.plugin import rewrite_model

ATTR = onnx.AttributeProto


def _without_tf32(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in plugin_nodes(out):
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
        assert all(schema.ATTR_ALLOW_TF32 not in node_attrs(n) for n in plugin_nodes(default))
        assert report0.to_dict()["allow_tf32"] is False and report1.to_dict()["allow_tf32"] is True
        (plugin,) = plugin_nodes(tf32)
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
        (plugin,) = plugin_nodes(out)
        attrs = node_attrs(plugin)
        assert schema.ATTR_ALLOW_TF32 not in attrs and attrs["plugin_version"] == b"2"
        assert report.rewritten == ["dcn0"]
        assert any("allow_tf32 = 1 dropped" in w and "trt-builtin" in w for w in report.warnings)
        back, report = rewrite_model(out, "dcnconvert")
        assert schema.ATTR_ALLOW_TF32 not in node_attrs(plugin_nodes(back)[0]) and not report.warnings

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
        (got,) = ort_outputs(std, feeds).values()
        (want,) = ort_outputs(standard.to_standard_model(default), feeds).values()
        assert np.array_equal(got, want)

    @pytest.mark.parametrize(("value", "reason"), [(2, "is 2; expected 0"), (-1, "is -1; expected 0"),
                                                   ([1, 1], "expected one integer")])
    def test_bad_values_are_not_convertible(self, value, reason):
        plain, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"))
        plugin_nodes(plain)[0].attribute.append(helper.make_attribute(schema.ATTR_ALLOW_TF32, value))
        from dcnconvert.match.finder import find_dcn_nodes

        (match,) = find_dcn_nodes(plain)
        assert not match.convertible and "allow_tf32" in match.reason and reason in match.reason
        with pytest.raises(UnsupportedNodeError, match="allow_tf32"):
            rewrite_model(plain)

    def test_zero_is_read_as_absent(self):
        plain, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d"))
        plugin_nodes(plain)[0].attribute.append(helper.make_attribute(schema.ATTR_ALLOW_TF32, 0))
        from dcnconvert.match.finder import find_dcn_nodes

        (match,) = find_dcn_nodes(plain)
        assert match.convertible and match.attrs.allow_tf32 is False
        assert match.notes == ["weight and bias embedded in the node (attributes)"]  # nothing on TF32
        again, report = rewrite_model(plain)
        assert report.unchanged == ["dcn0"] and again.SerializeToString() == plain.SerializeToString()
        upgraded, report = rewrite_model(plain, allow_tf32=True)
        assert report.rewritten == ["dcn0"] and node_attrs(plugin_nodes(upgraded)[0])["allow_tf32"] == 1

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
