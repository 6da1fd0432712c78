"""The table of exporter forms of a deformable convolution (dcn_formats.md §4-§5).

:data:`SPECS` describes each form (input roles, attribute names and aliases, defaults, padding
style, mask kind) as a :class:`FormSpec`; :func:`spec_for` picks a node's form by op type, domain
and attribute names. :data:`FORM_IDS` lists every form id (``<producer>.<op_type>``). The parser
that reads a node as its form is :func:`dcnconvert.match.forms.parse_with`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from dcnconvert import schema
from dcnconvert.match.attrs import attr_value

#: A default meaning "a missing attribute is not convertible".
REQUIRED = object()
_MODULATED = ("x", "offset", "mask", "weight", "bias")
_LOGITS = ("x", "offset_mask", "weight", "bias")
_DCNV1 = ("x", "offset", "weight")
_MMCV_KNOWN = {
    "stride": ("stride",),
    "padding": ("padding",),
    "dilation": ("dilation",),
    "group": ("groups", "group"),
    "dg": ("deform_groups", "deformable_groups", "deformable_group"),
}
_PLUGIN_KNOWN = {
    "stride": (schema.ATTR_STRIDE,),
    "padding": (schema.ATTR_PADDING,),
    "dilation": (schema.ATTR_DILATION,),
    "group": (schema.ATTR_GROUP,),
    "dg": (schema.ATTR_DEFORMABLE_GROUP,),
    "plugin_version": (schema.ATTR_PLUGIN_VERSION,),
    "plugin_namespace": (schema.ATTR_PLUGIN_NAMESPACE,),
}
#: Our plugin node also has the optional allow_tf32, embedded weights and quantization fields (TAO's
#: node, a source form, does not; :mod:`dcnconvert.match.embedded` reads the weights).
_DCNCONVERT_KNOWN = {**_PLUGIN_KNOWN, "allow_tf32": (schema.ATTR_ALLOW_TF32,),
                     "embedded_weight": (schema.ATTR_WEIGHT,), "weight_shape": (schema.ATTR_WEIGHT_SHAPE,),
                     "embedded_bias": (schema.ATTR_BIAS,), "quant_type": (schema.ATTR_QUANT_TYPE,),
                     "x_scale": (schema.ATTR_X_SCALE,), "weight_scale": (schema.ATTR_WEIGHT_SCALE,),
                     "output_scale": (schema.ATTR_OUTPUT_SCALE,)}
LOGIT_KNOWN = {
    "stride": ("stride",),
    "padding": ("padding",),
    "dilation": ("dilation",),
    "dg": ("deformable_groups", "deformable_group"),
    "group": ("groups", "group"),
}


@dataclass(frozen=True)
class FormSpec:
    """How to read one form.

    Attributes:
        form: form id.
        roles: role of each input position.
        min_inputs: inputs that must be present.
        known: canonical key -> accepted attribute names.
        ignored: attribute names without meaning for the conversion.
        mask_kind: ``tensor``, ``ones`` or ``logits``.
        padding: ``pair`` (INT or INTS[2]), ``doubled`` (mmdeploy ``[pH, pH, pW, pW]`` or a pair),
            ``begin_end`` (ONNX ``[hb, wb, he, we]``) or ``paddle`` (a pair or
            ``[top, bottom, left, right]``).
        defaults: values of missing attributes (``REQUIRED``: missing is not convertible).
        group_one: the form has no groups (group 1; a given value other than 1 is refused).
    """

    form: str
    roles: tuple[str, ...]
    min_inputs: int
    known: dict
    ignored: tuple[str, ...] = ()
    mask_kind: str = "tensor"
    padding: str = "pair"
    defaults: dict = field(default_factory=lambda: {"stride": 1, "padding": 0, "dilation": 1})
    group_one: bool = False


def _spec(form, roles, known, **kw) -> FormSpec:
    return FormSpec(form=form, roles=roles, min_inputs=kw.pop("min_inputs", 3 if len(roles) < 5 else 4),
                    known=known, **kw)


SPECS: dict[str, FormSpec] = {s.form: s for s in (
    *(_spec(f"{label}.MMCVModulatedDeformConv2d", _MODULATED, _MMCV_KNOWN)
      for label in ("mmcv", "mmdeploy", "mmcv-legacy")),
    *(_spec(f"{label}.MMCVDeformConv2d", _DCNV1, _MMCV_KNOWN, ignored=("bias", "im2col_step"),
            mask_kind="ones", padding="doubled") for label in ("mmcv", "mmdeploy", "mmcv-legacy")),
    *(_spec(form, ("x", "weight", "offset", "bias", "mask"), {
        "stride": ("strides",), "padding": ("pads",), "dilation": ("dilations",), "group": ("group",),
        "dg": ("offset_group",), "kernel_shape": ("kernel_shape",)}, min_inputs=3, padding="begin_end",
        defaults={"stride": 1, "padding": [0, 0, 0, 0], "dilation": 1, "group": 1})
      for form in ("onnx.DeformConv", "onnx.DeformConv.swapped", "paddle2onnx.DeformConv")),
    _spec("nonstandard.DeformConv", ("x", "offset", "weight", "bias"), {
        "stride": ("stride",), "padding": ("padding",), "dilation": ("dilation",),
        "group": ("groups", "group"),
        "dg": ("offset_groups", "offset_group", "deform_groups", "deformable_groups")}, mask_kind="ones"),
    _spec("openvino.DeformableConv2D", _DCNV1, {
        "stride": ("strides",), "padding": ("pads",), "dilation": ("dilations",),
        "group": ("groups", "group"),
        "dg": ("deformable_groups", "deformable_group"), "kernel_shape": ("kernel_shape",)},
        mask_kind="ones", padding="doubled"),
    _spec("tao.ModulatedDeformConv2d", _MODULATED, _PLUGIN_KNOWN),
    _spec("dcnconvert.ModulatedDeformConv2d", _MODULATED, _DCNCONVERT_KNOWN),
    # CaoWGG's importer defaults padding to 1, others to 0: a missing padding is ambiguous.
    _spec("centernet.DCNv2", _MODULATED, {**_MMCV_KNOWN, "dg": ("deformable_group", "deformable_groups")},
          defaults={"stride": 1, "padding": REQUIRED, "dilation": 1}),
    _spec("dcnv2_latest.DCNv2_2", _MODULATED, {k: v for k, v in LOGIT_KNOWN.items() if k != "group"},
          group_one=True),
    *(_spec(f"bevformer.{op}", _MODULATED, _MMCV_KNOWN)
      for op in ("ModulatedDeformableConv2dTRT", "ModulatedDeformableConv2dTRT2")),
    # tensorRT_Pro writes info="" and its plugin hard-codes stride 1, padding 1, dilation 1, dg 1.
    _spec("tensorrt_pro.Plugin.DCNv2", _LOGITS, LOGIT_KNOWN, mask_kind="logits", group_one=True,
          defaults={"stride": 1, "padding": 1, "dilation": 1, "dg": 1}),
    # dcnv2_trt's plugin hard-codes the same stride 1, padding 1, dilation 1: a missing attribute means that.
    _spec("eweill.DCNv2_TRT", _LOGITS, {**LOGIT_KNOWN, "name": ("name",)}, mask_kind="logits",
          group_one=True, defaults={"stride": 1, "padding": 1, "dilation": 1}),
    _spec("paddle-legacy.deformable_conv", ("x", "weight", "mask", "offset"), {
        "stride": ("strides", "stride"), "padding": ("paddings", "padding"),
        "dilation": ("dilations", "dilation"),
        "group": ("groups",), "dg": ("deformable_groups",)}, ignored=("im2col_step",), padding="paddle",
        min_inputs=4),
)}


def _domain_label(node: onnx.NodeProto) -> str:
    if node.domain in ("", "ai.onnx"):
        return "mmcv-legacy"
    return "mmdeploy" if node.domain == "mmdeploy" else "mmcv"


def spec_for(node: onnx.NodeProto) -> FormSpec | None:
    """The form of ``node`` by op type, domain and attribute names; None for other nodes."""
    op, default_domain = node.op_type, node.domain in ("", "ai.onnx")
    if op in ("MMCVModulatedDeformConv2d", "MMCVDeformConv2d"):
        return SPECS[f"{_domain_label(node)}.{op}"]
    if op == "DeformConv":
        if not default_domain:
            return None
        names = {a.name for a in node.attribute}
        nonstandard = {"stride", "padding", "dilation", "groups", "offset_groups"}
        return SPECS["nonstandard.DeformConv" if names & nonstandard else "onnx.DeformConv"]
    if op == schema.PLUGIN_NAME:
        return SPECS["dcnconvert.ModulatedDeformConv2d" if node.domain == schema.PLUGIN_DOMAIN
                     else "tao.ModulatedDeformConv2d"]
    if op == "Plugin":
        names = {a.name: attr_value(a) for a in node.attribute if a.name == "name"}
        return SPECS["tensorrt_pro.Plugin.DCNv2"] if names.get("name") == "DCNv2" else None
    by_op = {
        "DeformableConv2D": "openvino.DeformableConv2D",
        "DCNv2": "centernet.DCNv2",
        "DCNv2_2": "dcnv2_latest.DCNv2_2",
        "ModulatedDeformableConv2dTRT": "bevformer.ModulatedDeformableConv2dTRT",
        "ModulatedDeformableConv2dTRT2": "bevformer.ModulatedDeformableConv2dTRT2",
        "DCNv2_TRT": "eweill.DCNv2_TRT",
        "deformable_conv": "paddle-legacy.deformable_conv",
    }
    return SPECS[by_op[op]] if op in by_op else None


#: Every form id a parser can return (besides ``"unknown"``).
FORM_IDS: tuple[str, ...] = tuple(SPECS)
