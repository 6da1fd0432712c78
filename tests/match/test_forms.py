"""forms: every exporter form parses to the right roles and canonical attributes."""

from __future__ import annotations

import json

import pytest
from onnx import helper
from support import samples

from dcnconvert import schema
from dcnconvert.match import forms
from dcnconvert.match.finder import GraphInfo, find_dcn_nodes
from dcnconvert.match.forms import parse_node
from dcnconvert.schema import DcnAttrs

# A parameter set every form can express except where noted; the square set fits all of them.
NON_SQUARE = dict(c=4, cout=4, kernel=(3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), group=2,
                  deformable_group=2, h=9, w=8)
NON_SQUARE_G1 = dict(NON_SQUARE, group=1)
SQUARE = dict(c=4, cout=6, kernel=(3, 3), stride=(2, 2), padding=(2, 2), dilation=(2, 2), group=1,
              deformable_group=2, h=9, w=11)


def _expected_roles(form: str, bias: bool) -> set:
    kind = samples._SPEC[form][4]
    roles = {"x", "weight"}
    roles |= {"offset_mask"} if kind == "logits" else {"offset"}
    if kind == "modulated":
        roles.add("mask")
    if bias or form == "paddle2onnx.DeformConv":
        roles.add("bias")
    return roles


_PARAM_SETS = {"non-square": NON_SQUARE, "non-square-g1": NON_SQUARE_G1, "square": SQUARE}
#: Only the combinations a form can express are generated (no skipped cases).
_FORM_SETS = [(form, name) for form in samples.FORMS for name, params in _PARAM_SETS.items()
              if samples.supports(form, **params)]
FORM_PARAMS = [pytest.param(form, _PARAM_SETS[name], id=f"{form}-{name}") for form, name in _FORM_SETS]


def test_only_the_known_limited_forms_drop_parameter_sets():
    """centernet.DCNv2 (scalar attributes) cannot express non-square values; three forms have no group."""
    missing = {(form, name) for form in samples.FORMS for name in _PARAM_SETS} - set(_FORM_SETS)
    no_group = ("dcnv2_latest.DCNv2_2", "tensorrt_pro.Plugin.DCNv2", "eweill.DCNv2_TRT")
    expected = {("centernet.DCNv2", "non-square"), ("centernet.DCNv2", "non-square-g1")}
    expected |= {(form, "non-square") for form in no_group}
    assert missing == expected


@pytest.mark.parametrize("form, params", FORM_PARAMS)
def test_each_form_parses_to_canonical_attrs(form, params):
    model = samples.build(form, **params)
    (match,) = find_dcn_nodes(model)
    assert match.form == form
    assert match.convertible, match.reason
    p = params
    assert match.attrs == DcnAttrs(p["stride"], p["padding"], p["dilation"], p["group"],
                                   p["deformable_group"])
    assert match.kernel == p["kernel"]
    assert match.prepad is None
    bias = samples._SPEC[form][5]
    assert set(match.inputs) == _expected_roles(form, bias)
    assert match.with_bias == ("bias" in match.inputs)
    kinds = {"modulated": "tensor", "dcnv1": "ones", "logits": "logits"}
    assert match.mask_kind == kinds[samples._SPEC[form][4]]
    # Roles point at the sample's tensors, whatever the form's input order.
    for role in ("x", "offset", "mask", "offset_mask", "weight", "bias"):
        if role in match.inputs:
            assert match.inputs[role] == role


def test_form_ids_are_unique_and_cover_samples():
    assert len(set(forms.FORM_IDS)) == len(forms.FORM_IDS)
    assert set(samples.FORMS) == set(forms.FORM_IDS) == set(samples._SPEC)


def _info(**shapes) -> GraphInfo:
    return GraphInfo(shapes=dict(shapes), opset=17)


STD_SHAPES = dict(x=[1, 4, 8, 8], weight=[6, 4, 3, 3], offset=[1, 18, 8, 8], mask=[1, 9, 8, 8], bias=[6])


def _node(op, inputs, domain="", node_name="n", **attrs):
    node = helper.make_node(op, inputs, ["y"], name=node_name, domain=domain or None)
    node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    return node


class TestMmcv:
    def test_scalar_attributes_become_pairs(self):
        node = _node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"], "mmcv",
                     stride=2, padding=1, dilation=1, groups=1, deform_groups=1)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.attrs == DcnAttrs((2, 2), (1, 1), (1, 1), 1, 1)
        assert parsed.form == "mmcv.MMCVModulatedDeformConv2d"
        assert not parsed.with_bias

    def test_other_domain_is_mmcv_compatible(self):
        node = _node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"], "vendor",
                     stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, deform_groups=1)
        assert parse_node(node, _info(**STD_SHAPES)).form == "mmcv.MMCVModulatedDeformConv2d"

    def test_mmdeploy_4_value_padding(self):
        node = _node("MMCVDeformConv2d", ["x", "offset", "weight"], "mmdeploy",
                     stride=[1, 1], padding=[1, 1, 2, 2], dilation=[1, 1], groups=1, deform_groups=1)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.attrs.padding == (1, 2)
        assert parsed.mask_kind == "ones"

    def test_ambiguous_4_value_padding_is_not_convertible(self):
        node = _node("MMCVDeformConv2d", ["x", "offset", "weight"], "mmdeploy", padding=[1, 2, 1, 2])
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert not parsed.convertible and "ambiguous" in parsed.reason
        assert parsed.form == "mmdeploy.MMCVDeformConv2d"

    def test_dcnv1_ignores_bias_and_im2col_step(self):
        node = _node("MMCVDeformConv2d", ["x", "offset", "weight"], "mmcv", stride=[1, 1], padding=[1, 1],
                     dilation=[1, 1], groups=1, deform_groups=1, bias=0, im2col_step=32)
        assert parse_node(node, _info(**STD_SHAPES)).convertible

    def test_unknown_attribute_is_not_convertible(self):
        node = _node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"], "mmcv",
                     activation="relu")
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert not parsed.convertible
        assert "unknown attribute 'activation' (STRING)" in parsed.reason

    def test_conflicting_aliases(self):
        node = _node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"], "mmcv", groups=1,
                     group=2)
        assert "disagree" in parse_node(node, _info(**STD_SHAPES)).reason

    def test_groups_recovered_from_shapes_when_missing(self):
        shapes = dict(STD_SHAPES, weight=[6, 2, 3, 3])
        node = _node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"], "mmcv")
        assert parse_node(node, _info(**shapes)).attrs.group == 2

    def test_3d_by_weight_rank(self):
        shapes = dict(STD_SHAPES, weight=[6, 4, 3, 3, 3], x=[1, 4, 8, 8, 8])
        node = _node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"], "mmcv", stride=1)
        parsed = parse_node(node, _info(**shapes))
        assert not parsed.convertible and "3-D" in parsed.reason

    def test_too_few_inputs(self):
        node = _node("MMCVModulatedDeformConv2d", ["x", "offset", "mask"], "mmcv")
        assert "at least 4 inputs" in parse_node(node, _info(**STD_SHAPES)).reason


class TestDeformConv:
    def test_standard_input_order_and_names(self):
        node = _node("DeformConv", ["x", "weight", "offset", "bias", "mask"], strides=[1, 2],
                     pads=[1, 0, 1, 0], dilations=[2, 1], group=1, offset_group=1, kernel_shape=[3, 3])
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.form == "onnx.DeformConv"
        assert parsed.inputs == {"x": "x", "weight": "weight", "offset": "offset", "bias": "bias",
                                 "mask": "mask"}
        assert parsed.attrs == DcnAttrs((1, 2), (1, 0), (2, 1), 1, 1)
        assert parsed.prepad is None

    def test_defaults_and_absent_optional_inputs(self):
        node = _node("DeformConv", ["x", "weight", "offset"])
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.attrs == DcnAttrs((1, 1), (0, 0), (1, 1), 1, 1)
        assert parsed.mask_kind == "ones" and not parsed.with_bias

    def test_empty_bias_name_with_mask(self):
        node = _node("DeformConv", ["x", "weight", "offset", "", "mask"], offset_group=1)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.mask_kind == "tensor" and not parsed.with_bias and parsed.inputs["mask"] == "mask"

    def test_asymmetric_pads_become_a_prepad(self):
        node = _node("DeformConv", ["x", "weight", "offset"], pads=[0, 1, 2, 1], offset_group=1)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.prepad == (0, 1, 2, 1)
        assert parsed.attrs.padding == (0, 0)

    def test_swapped_mask_and_bias_detected_by_rank(self):
        node = _node("DeformConv", ["x", "weight", "offset", "mask", "bias"], offset_group=1)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.form == "onnx.DeformConv.swapped"
        assert parsed.inputs["mask"] == "mask" and parsed.inputs["bias"] == "bias"

    def test_swapped_with_empty_constant_for_missing_mask(self):
        shapes = dict(STD_SHAPES, empty=[0])
        node = _node("DeformConv", ["x", "weight", "offset", "empty", "bias"], offset_group=1)
        parsed = parse_node(node, _info(**shapes))
        assert parsed.form == "onnx.DeformConv.swapped"
        assert parsed.mask_kind == "ones" and parsed.inputs["bias"] == "bias"

    def test_unknown_ranks_keep_the_standard_order(self):
        node = _node("DeformConv", ["x", "weight", "offset", "b", "m"], offset_group=1)
        parsed = parse_node(node, _info(x=[1, 4, 8, 8], weight=[6, 4, 3, 3]))
        assert (parsed.form == "onnx.DeformConv" and parsed.inputs["bias"] == "b"
                and parsed.inputs["mask"] == "m")

    @pytest.mark.parametrize("dg", [1, 2, 4])
    def test_missing_offset_group_recovered_from_offset_channels(self, dg):
        shapes = dict(STD_SHAPES, offset=[1, 18 * dg, 8, 8], mask=[1, 9 * dg, 8, 8])
        node = _node("DeformConv", ["x", "weight", "offset", "bias", "mask"], node_name="p2o.DeformConv.0",
                     pads=[1, 1, 1, 1])
        parsed = parse_node(node, _info(**shapes))
        assert parsed.attrs.deformable_group == dg
        assert parsed.form == "paddle2onnx.DeformConv"
        assert (f"deformable group {dg} recovered" in " ".join(parsed.notes)) == (dg != 1)

    def test_missing_offset_group_with_unknown_shapes_assumes_1(self):
        node = _node("DeformConv", ["x", "weight", "offset"])
        parsed = parse_node(node, _info(x=[1, 4, 8, 8], weight=[6, 4, 3, 3]))
        assert parsed.attrs.deformable_group == 1
        assert any("assumed 1" in n for n in parsed.notes)

    def test_kernel_shape_used_when_weight_shape_unknown(self):
        node = _node("DeformConv", ["x", "w", "offset"], kernel_shape=[1, 3], offset_group=1)
        assert parse_node(node, _info(x=[1, 4, 8, 8])).kernel == (1, 3)

    def test_kernel_shape_contradicting_weight(self):
        node = _node("DeformConv", ["x", "weight", "offset"], kernel_shape=[1, 3])
        assert "differs" in parse_node(node, _info(**STD_SHAPES)).reason

    @pytest.mark.parametrize("pads,words", [([1, 1, 1, 1, 1, 1], "3-D"), ([1, 1], "1-D")])
    def test_non_2d_pads(self, pads, words):
        node = _node("DeformConv", ["x", "weight", "offset"], pads=pads)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert not parsed.convertible and words in parsed.reason

    def test_nonstandard_attributes(self):
        node = _node("DeformConv", ["x", "offset", "weight", "bias"], stride=[2, 2], padding=[1, 1],
                     dilation=[1, 1], groups=1, offset_groups=1)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.form == "nonstandard.DeformConv"
        assert parsed.inputs == {"x": "x", "offset": "offset", "weight": "weight", "bias": "bias"}
        assert parsed.attrs.stride == (2, 2) and parsed.mask_kind == "ones"

    def test_mixed_standard_and_nonstandard_is_refused(self):
        node = _node("DeformConv", ["x", "offset", "weight"], stride=[1, 1], pads=[0, 0, 0, 0])
        assert not parse_node(node, _info(**STD_SHAPES)).convertible

    def test_other_domain_is_unknown(self):
        parsed = parse_node(_node("DeformConv", ["x", "w", "o"], domain="foo"), _info())
        assert parsed.form == "unknown" and not parsed.convertible


class TestOtherForms:
    def test_openvino(self):
        node = _node("DeformableConv2D", ["x", "offset", "weight"], "org.openvinotoolkit", strides=[1, 1],
                     pads=[2, 2, 1, 1], dilations=[1, 1], groups=1, deformable_groups=1, kernel_shape=[3, 3])
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.form == "openvino.DeformableConv2D" and parsed.attrs.padding == (2, 1)

    def test_tao_and_ours(self):
        attrs = DcnAttrs((1, 1), (1, 1), (1, 1), 1, 1)
        tao = _node(schema.PLUGIN_NAME, ["x", "offset", "mask", "weight"], stride=[1, 1], padding=[1, 1],
                    dilation=[1, 1], group=1, deformable_group=1)
        parsed = parse_node(tao, _info(**STD_SHAPES))
        assert (parsed.form == "tao.ModulatedDeformConv2d" and parsed.attrs == attrs
                and parsed.node_target is None)
        for target in schema.TARGETS.values():
            ours = _node(schema.PLUGIN_NAME, ["x", "offset", "mask", "weight"], schema.PLUGIN_DOMAIN,
                         **attrs.node_attrs(target))
            parsed = parse_node(ours, _info(**STD_SHAPES))
            assert parsed.form == "dcnconvert.ModulatedDeformConv2d" and parsed.node_target == target.name

    def test_ours_with_unknown_plugin_version(self):
        node = _node(schema.PLUGIN_NAME, ["x", "offset", "mask", "weight"], schema.PLUGIN_DOMAIN,
                     plugin_version="7", plugin_namespace="")
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.convertible and parsed.node_target is None

    def test_centernet_scalar_attrs(self):
        node = _node("DCNv2", ["x", "offset", "mask", "weight", "bias"], stride=1, padding=2, dilation=2,
                     groups=1, deformable_group=1)
        assert parse_node(node, _info(**STD_SHAPES)).attrs == DcnAttrs((1, 1), (2, 2), (2, 2), 1, 1)

    def test_centernet_missing_padding_is_ambiguous(self):
        node = _node("DCNv2", ["x", "offset", "mask", "weight", "bias"], stride=1, dilation=1)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert not parsed.convertible and "padding" in parsed.reason

    def test_yolact_style_string_attrs_are_not_convertible(self):
        node = _node("DCNv2", ["x", "offset", "mask", "weight", "bias"], "yolact", stride_h="1", padding=1)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert not parsed.convertible and "stride_h" in parsed.reason

    def test_plugin_without_dcn_name_is_not_a_dcn(self):
        assert parse_node(_node("Plugin", ["x"], name="HSwish", info=""), _info()) is None

    @pytest.mark.parametrize("info,expected", [
        ("", DcnAttrs((1, 1), (1, 1), (1, 1), 1, 1)),
        (json.dumps({"stride": 2, "padding": [0, 1], "dilation": [1, 1], "deformable_groups": 2}),
         DcnAttrs((2, 2), (0, 1), (1, 1), 1, 2)),
    ])
    def test_trt_pro_plugin_info(self, info, expected):
        shapes = dict(STD_SHAPES, om=[1, 27 * expected.deformable_group, 8, 8])
        node = _node("Plugin", ["x", "om", "weight", "bias"], name="DCNv2", info=info)
        parsed = parse_node(node, _info(**shapes))
        assert parsed.form == "tensorrt_pro.Plugin.DCNv2" and parsed.attrs == expected
        assert parsed.mask_kind == "logits" and parsed.inputs["offset_mask"] == "om"

    @pytest.mark.parametrize("info,words", [("{not json", "not JSON"), ('{"kernel": 3}', "unknown keys"),
                                            ("[1, 2]", "not a JSON object"), ('{"groups": 2}', "no group")])
    def test_trt_pro_plugin_bad_info(self, info, words):
        node = _node("Plugin", ["x", "om", "weight", "bias"], name="DCNv2", info=info)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert not parsed.convertible and words in parsed.reason

    def test_dcnv2_trt(self):
        node = _node("DCNv2_TRT", ["x", "om", "weight", "bias"], dilation=[1, 1], padding=[1, 1],
                     stride=[1, 1], deformable_groups=1, name="DCNv2")
        parsed = parse_node(node, _info(**dict(STD_SHAPES, om=[1, 27, 8, 8])))
        assert parsed.form == "eweill.DCNv2_TRT" and parsed.mask_kind == "logits" and parsed.convertible

    def test_dcnv2_trt_missing_attributes_mean_what_its_plugin_hard_codes(self):
        """dcnv2_trt's plugin runs stride 1, padding 1, dilation 1 (as tensorRT_Pro's does)."""
        node = _node("DCNv2_TRT", ["x", "om", "weight", "bias"], deformable_groups=1)
        parsed = parse_node(node, _info(**dict(STD_SHAPES, om=[1, 27, 8, 8])))
        assert parsed.convertible and parsed.attrs == DcnAttrs((1, 1), (1, 1), (1, 1), 1, 1)

    @pytest.mark.parametrize("padding,pad_attr,prepad", [
        ([1, 2], (1, 2), None), ([1, 1, 2, 2], (1, 2), None), ([0, 1, 2, 2], (0, 0), (0, 2, 1, 2)),
    ])
    def test_paddle_legacy(self, padding, pad_attr, prepad):
        node = _node("deformable_conv", ["x", "weight", "mask", "offset"], "custom", stride=[1, 1],
                     padding=padding, dilation=[1, 1], groups=1, deformable_groups=1, im2col_step=64)
        parsed = parse_node(node, _info(**STD_SHAPES))
        assert parsed.inputs == {"x": "x", "weight": "weight", "mask": "mask", "offset": "offset"}
        assert parsed.attrs.padding == pad_attr and parsed.prepad == prepad

    def test_dcn_like_unknown_op(self):
        parsed = parse_node(_node("DCNv3", ["x"], "custom"), _info())
        assert parsed.form == "unknown" and not parsed.convertible and "DCNv3" in parsed.reason

    def test_unrelated_ops_are_ignored(self):
        assert parse_node(_node("Conv", ["x", "w"]), _info()) is None

    def test_two_outputs_are_refused(self):
        node = helper.make_node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"], ["y", "z"],
                                domain="mmcv")
        assert "2 outputs" in parse_node(node, _info(**STD_SHAPES)).reason
