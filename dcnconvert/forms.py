"""The exporter forms of a deformable convolution (dcn_formats.md §4-§5) and their parser.

:data:`SPECS` describes each form (input roles, attribute names and aliases, defaults, padding
style, mask kind); :func:`spec_for` picks a node's form and :func:`parse_with` reads it (with a few
form-specific steps: swapped DeformConv inputs, the tensorRT_Pro ``info`` JSON, the target of nodes
already rewritten). :func:`parse_node` returns a :class:`ParsedDcn`: which tensor plays which role
(``x``, ``offset``, ``mask``, ``weight``, ``bias``, or one ``offset_mask`` tensor of logits), the
canonical :class:`~dcnconvert.schema.DcnAttrs`, the kernel size, an explicit zero pre-pad of ``x``
for asymmetric pads, and the form id. A form that cannot be converted exactly (3-D, unknown
attributes, ambiguous padding, ...) gives ``convertible=False`` and a reason. Value checks (zero
stride, channel mismatches) are :mod:`dcnconvert.validate`'s job.

Form ids are ``<producer>.<op_type>``; :data:`FORM_IDS` lists them all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import onnx
from onnx import helper

from dcnconvert import schema
from dcnconvert.schema import DcnAttrs

if TYPE_CHECKING:
    from dcnconvert.match import GraphInfo

#: Op types that look like a deformable convolution but match no parser are reported as "unknown".
_DCN_LIKE = re.compile(r"(?i)deform\w*conv|^dcn")


@dataclass
class ParsedDcn:
    """The canonical description of one DCN node.

    Attributes:
        form: form id (one of :data:`FORM_IDS`, or ``"unknown"``).
        inputs: role -> tensor name; roles ``x``, ``offset``, ``mask``, ``weight``, ``bias``,
            ``offset_mask`` (offset and mask logits in one tensor). Absent roles are missing.
        mask_kind: ``"tensor"`` (a mask input), ``"ones"`` (DCNv1: synthesise ones) or
            ``"logits"`` (split ``offset_mask``: first 2/3 offset, Sigmoid of the last 1/3 mask).
        attrs: canonical attributes (the padding that the plugin applies, after any pre-pad).
        kernel: (kh, kw) when known.
        prepad: (h_begin, w_begin, h_end, w_end) zero padding of ``x`` in front of the node, or None.
        convertible: whether the form can be converted exactly.
        reason: why not, when not convertible.
        notes: facts worth reporting (values recovered from shapes, ...).
        node_target: for nodes already in the plugin form, the target their attributes select.
    """

    form: str
    inputs: dict[str, str] = field(default_factory=dict)
    mask_kind: str = "tensor"
    attrs: DcnAttrs | None = None
    kernel: tuple[int, int] | None = None
    prepad: tuple[int, int, int, int] | None = None
    convertible: bool = True
    reason: str | None = None
    notes: list[str] = field(default_factory=list)
    node_target: str | None = None

    @property
    def with_bias(self) -> bool:
        return "bias" in self.inputs


class NotConvertible(Exception):
    """Raised inside a parser; becomes ``convertible=False`` with the message as reason."""


# --------------------------------------------------------------------------------------------------
# Attribute helpers
# --------------------------------------------------------------------------------------------------

_TYPE_NAMES = {v: k for k, v in onnx.AttributeProto.AttributeType.items()}


def _attr_value(attr: onnx.AttributeProto):
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return value


def read_attrs(
    node: onnx.NodeProto,
    known: dict[str, Sequence[str]],
    ignored: Sequence[str] = (),
) -> dict[str, object]:
    """Read ``node``'s attributes into canonical keys.

    Args:
        node: the node.
        known: canonical key -> accepted attribute names (aliases).
        ignored: attribute names that carry no meaning for the conversion.

    Raises:
        NotConvertible: an attribute is not known, or two aliases disagree.
    """
    alias = {name: key for key, names in known.items() for name in names}
    values: dict[str, object] = {}
    for attr in node.attribute:
        if attr.name in ignored:
            continue
        key = alias.get(attr.name)
        if key is None:
            raise NotConvertible(
                f"unknown attribute '{attr.name}' ({_TYPE_NAMES.get(attr.type, attr.type)}) "
                f"for {node.op_type}: its meaning is unknown, so the conversion could not be exact"
            )
        value = _attr_value(attr)
        if key in values and values[key] != value:
            raise NotConvertible(f"attributes {list(known[key])} disagree ({values[key]} vs {value})")
        values[key] = value
    return values


def _int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], int):
            return int(value[0])
        raise NotConvertible(f"attribute '{name}' is {value!r}; expected one integer")
    return int(value)


def _pair(value, name: str) -> tuple[int, int]:
    """An INT or INTS attribute as an (h, w) pair."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value), int(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        if len(value) == 1:
            return int(value[0]), int(value[0])
        if len(value) == 2:
            return int(value[0]), int(value[1])
        if len(value) == 3:
            raise NotConvertible(f"3-D deformable convolution ('{name}' has 3 values {list(value)}); only 2-D is supported")
    raise NotConvertible(f"attribute '{name}' is {value!r}; expected an integer or a pair of integers")


def _begin_end_pads(pads, name: str) -> tuple[int, int, int, int]:
    """ONNX-style pads [h_begin, w_begin, h_end, w_end]."""
    if not isinstance(pads, (list, tuple)) or not all(isinstance(v, int) for v in pads):
        raise NotConvertible(f"attribute '{name}' is {pads!r}; expected 4 integers")
    if len(pads) == 6:
        raise NotConvertible(f"3-D deformable convolution ('{name}' has 6 values); only 2-D is supported")
    if len(pads) == 2:
        raise NotConvertible(f"1-D deformable convolution ('{name}' has 2 values); only 2-D is supported")
    if len(pads) != 4:
        raise NotConvertible(f"attribute '{name}' has {len(pads)} values {list(pads)}; expected 4")
    return tuple(int(v) for v in pads)  # type: ignore[return-value]


def _doubled_pads(pads, name: str) -> tuple[int, int]:
    """mmdeploy / OpenVINO 4-value padding ``[pH, pH, pW, pW]`` -> (pH, pW)."""
    if isinstance(pads, (list, tuple)) and len(pads) == 4 and all(isinstance(v, int) for v in pads):
        if pads[0] == pads[1] and pads[2] == pads[3]:
            return int(pads[0]), int(pads[2])
        raise NotConvertible(
            f"attribute '{name}' = {list(pads)} is ambiguous: mmdeploy writes [pH, pH, pW, pW], ONNX "
            "order would be [h_begin, w_begin, h_end, w_end]; the two readings differ here"
        )
    return _pair(pads, name)


def _split_asymmetric(pads: tuple[int, int, int, int]) -> tuple[tuple[int, int], tuple[int, int, int, int] | None]:
    """(plugin padding, prepad) for begin/end pads.

    Symmetric pads stay in the plugin. Otherwise all padding moves into an explicit zero ``Pad`` of
    x and the plugin pads nothing (exact: padded zeros and out-of-image samples are both 0), which
    also keeps the plugin's padding square.
    """
    hb, wb, he, we = pads
    if hb == he and wb == we:
        return (hb, wb), None
    return (0, 0), (hb, wb, he, we)


# --------------------------------------------------------------------------------------------------
# Shared finishing step
# --------------------------------------------------------------------------------------------------


def _inputs(node: onnx.NodeProto, roles: Sequence[str | None], minimum: int) -> dict[str, str]:
    names = list(node.input)
    while names and not names[-1]:
        names.pop()
    if len(names) < minimum:
        raise NotConvertible(f"{node.op_type} needs at least {minimum} inputs, the node has {len(names)}")
    if len(names) > len(roles):
        raise NotConvertible(f"{node.op_type} takes at most {len(roles)} inputs, the node has {len(names)}")
    return {role: name for role, name in zip(roles, names) if role and name}


def _finish(
    node: onnx.NodeProto,
    info: GraphInfo,
    parsed: ParsedDcn,
    stride,
    padding,
    dilation,
    group: int | None,
    dg: int | None,
    kernel_attr=None,
) -> ParsedDcn:
    """Check ranks and outputs, derive kernel, group and deformable group, build DcnAttrs."""
    outputs = [o for o in node.output if o]
    if len(outputs) != 1:
        raise NotConvertible(f"{node.op_type} with {len(outputs)} outputs; expected 1")
    for role in ("bias", "mask"):
        if role in parsed.inputs and info.is_absent(parsed.inputs[role]):
            del parsed.inputs[role]
    if parsed.mask_kind == "tensor" and "mask" not in parsed.inputs:
        parsed.mask_kind = "ones"
    w_rank = info.rank(parsed.inputs.get("weight"))
    x_rank = info.rank(parsed.inputs.get("x"))
    for label, rank in (("weight", w_rank), ("input", x_rank)):
        if rank is not None and rank != 4:
            kind = {5: "3-D", 3: "1-D"}.get(rank)
            if kind:
                raise NotConvertible(f"{kind} deformable convolution ({label} rank {rank}); only 2-D is supported")
            raise NotConvertible(f"{label} has rank {rank}; a 2-D deformable convolution needs rank 4")
    weight = parsed.inputs.get("weight")
    kh, kw = info.dim(weight, 2), info.dim(weight, 3)
    if (kh is None or kw is None) and kernel_attr is not None:
        kh, kw = _pair(kernel_attr, "kernel_shape")
    elif kernel_attr is not None and (kh, kw) != _pair(kernel_attr, "kernel_shape"):
        raise NotConvertible(f"kernel_shape {list(kernel_attr)} differs from the weight's {[kh, kw]}")
    parsed.kernel = (kh, kw) if kh is not None and kw is not None else None
    if group is None:
        cin, wc = info.dim(parsed.inputs.get("x"), 1), info.dim(weight, 1)
        group = cin // wc if cin and wc and cin % wc == 0 else 1
    if dg is None:
        dg = _recover_dg(info, parsed)
    parsed.attrs = DcnAttrs(
        stride=_pair(stride, "stride"),
        padding=tuple(padding),  # type: ignore[arg-type]
        dilation=_pair(dilation, "dilation"),
        group=int(group),
        deformable_group=int(dg),
    )
    return parsed


def _recover_dg(info: GraphInfo, parsed: ParsedDcn) -> int:
    """Deformable group from the offset channels (Paddle2ONNX omits offset_group)."""
    if parsed.kernel is None:
        parsed.notes.append("deformable group not given and kernel unknown: assumed 1")
        return 1
    k = parsed.kernel[0] * parsed.kernel[1]
    if parsed.mask_kind == "logits":
        channels, per_group = info.dim(parsed.inputs.get("offset_mask"), 1), 3 * k
    else:
        channels, per_group = info.dim(parsed.inputs.get("offset"), 1), 2 * k
    if channels is None:
        parsed.notes.append("deformable group not given and offset channels unknown: assumed 1")
        return 1
    if channels % per_group or channels == 0:
        return 1  # validation reports the channel mismatch
    dg = channels // per_group
    if dg != 1:
        parsed.notes.append(f"deformable group {dg} recovered from {channels} offset channels")
    return dg


# --------------------------------------------------------------------------------------------------
# Form table
# --------------------------------------------------------------------------------------------------

_REQUIRED = object()
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
_LOGIT_KNOWN = {
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
            ``begin_end`` (ONNX ``[hb, wb, he, we]``) or ``paddle`` (a pair or ``[top, bottom, left, right]``).
        defaults: values of missing attributes (``_REQUIRED``: missing is not convertible).
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
    *(_spec(f"{label}.MMCVDeformConv2d", _DCNV1, _MMCV_KNOWN, ignored=("bias", "im2col_step"), mask_kind="ones",
            padding="doubled") for label in ("mmcv", "mmdeploy", "mmcv-legacy")),
    *(_spec(form, ("x", "weight", "offset", "bias", "mask"), {
        "stride": ("strides",), "padding": ("pads",), "dilation": ("dilations",), "group": ("group",),
        "dg": ("offset_group",), "kernel_shape": ("kernel_shape",)}, min_inputs=3, padding="begin_end",
        defaults={"stride": 1, "padding": [0, 0, 0, 0], "dilation": 1, "group": 1})
      for form in ("onnx.DeformConv", "onnx.DeformConv.swapped", "paddle2onnx.DeformConv")),
    _spec("nonstandard.DeformConv", ("x", "offset", "weight", "bias"), {
        "stride": ("stride",), "padding": ("padding",), "dilation": ("dilation",), "group": ("groups", "group"),
        "dg": ("offset_groups", "offset_group", "deform_groups", "deformable_groups")}, mask_kind="ones"),
    _spec("openvino.DeformableConv2D", _DCNV1, {
        "stride": ("strides",), "padding": ("pads",), "dilation": ("dilations",), "group": ("groups", "group"),
        "dg": ("deformable_groups", "deformable_group"), "kernel_shape": ("kernel_shape",)},
        mask_kind="ones", padding="doubled"),
    _spec("tao.ModulatedDeformConv2d", _MODULATED, _PLUGIN_KNOWN),
    _spec("dcnconvert.ModulatedDeformConv2d", _MODULATED, _PLUGIN_KNOWN),
    # CaoWGG's importer defaults padding to 1, others to 0: a missing padding is ambiguous.
    _spec("centernet.DCNv2", _MODULATED, {**_MMCV_KNOWN, "dg": ("deformable_group", "deformable_groups")},
          defaults={"stride": 1, "padding": _REQUIRED, "dilation": 1}),
    _spec("dcnv2_latest.DCNv2_2", _MODULATED, {k: v for k, v in _LOGIT_KNOWN.items() if k != "group"},
          group_one=True),
    *(_spec(f"bevformer.{op}", _MODULATED, _MMCV_KNOWN)
      for op in ("ModulatedDeformableConv2dTRT", "ModulatedDeformableConv2dTRT2")),
    # tensorRT_Pro writes info="" and its plugin hard-codes stride 1, padding 1, dilation 1, dg 1.
    _spec("tensorrt_pro.Plugin.DCNv2", _LOGITS, _LOGIT_KNOWN, mask_kind="logits", group_one=True,
          defaults={"stride": 1, "padding": 1, "dilation": 1, "dg": 1}),
    _spec("eweill.DCNv2_TRT", _LOGITS, {**_LOGIT_KNOWN, "name": ("name",)}, mask_kind="logits", group_one=True),
    _spec("paddle-legacy.deformable_conv", ("x", "weight", "mask", "offset"), {
        "stride": ("strides", "stride"), "padding": ("paddings", "padding"), "dilation": ("dilations", "dilation"),
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
        names = {a.name: _attr_value(a) for a in node.attribute if a.name == "name"}
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


def _padding(style: str, value) -> tuple[tuple[int, int], tuple[int, int, int, int] | None]:
    """(plugin padding, prepad) from a padding attribute of the given style."""
    if style == "begin_end":
        return _split_asymmetric(_begin_end_pads(value, "pads"))
    if style == "doubled":
        return _doubled_pads(value, "padding"), None
    if style == "paddle" and isinstance(value, (list, tuple)) and len(value) == 4:
        top, bottom, left, right = (_int(v, "paddings") for v in value)
        return _split_asymmetric((top, left, bottom, right))
    return _pair(value, "padding"), None


def _trt_pro_values(node: onnx.NodeProto) -> dict:
    """Attributes of a tensorRT_Pro ``Plugin`` node from its ``info`` JSON."""
    read_attrs(node, {"name": ("name",), "info": ("info",)})
    text = next((_attr_value(a) for a in node.attribute if a.name == "info"), "") or ""
    if not text.strip():
        return {}
    try:
        loaded = json.loads(text)
    except ValueError:
        raise NotConvertible(f"attribute 'info' is not JSON: {text[:60]!r}") from None
    if not isinstance(loaded, dict):
        raise NotConvertible(f"attribute 'info' is not a JSON object: {text[:60]!r}")
    alias = {name: key for key, names in _LOGIT_KNOWN.items() for name in names}
    unknown = sorted(set(loaded) - set(alias))
    if unknown:
        raise NotConvertible(f"unknown keys {unknown} in attribute 'info'")
    return {alias[k]: v for k, v in loaded.items()}


def _parse_deform_conv_inputs(node: onnx.NodeProto, info: GraphInfo, parsed: ParsedDcn) -> None:
    """Standard DeformConv: detect the swapped (mask, bias) exporter bug by rank; label Paddle2ONNX."""
    bias, mask = parsed.inputs.get("bias"), parsed.inputs.get("mask")
    if (not info.is_absent(bias) and info.rank(bias) == 4) or (not info.is_absent(mask) and info.rank(mask) == 1):
        parsed.form = "onnx.DeformConv.swapped"
        parsed.notes.append("inputs 3 and 4 (bias, mask) given in swapped order; swapped back by rank")
        for role, name in (("mask", bias), ("bias", mask)):
            parsed.inputs.pop(role, None)
            if name:
                parsed.inputs[role] = name
    elif not any(a.name == "offset_group" for a in node.attribute):
        producer = info.producers.get(bias or "")
        if (producer is not None and producer.op_type == "Constant") or node.name.startswith("p2o."):
            parsed.form = "paddle2onnx.DeformConv"


def parse_with(spec: FormSpec, node: onnx.NodeProto, info: GraphInfo) -> ParsedDcn:
    """Parse ``node`` as ``spec``'s form.

    Raises:
        NotConvertible: the node cannot be converted exactly.
    """
    parsed = ParsedDcn(form=spec.form, mask_kind=spec.mask_kind)
    parsed.inputs = _inputs(node, spec.roles, spec.min_inputs)
    if spec.form == "paddle-legacy.deformable_conv" and "offset" not in parsed.inputs:
        raise NotConvertible("deformable_conv without an Offset input")
    if spec.form == "onnx.DeformConv":
        _parse_deform_conv_inputs(node, info, parsed)
    if spec.form == "tensorrt_pro.Plugin.DCNv2":
        values = _trt_pro_values(node)
    else:
        values = read_attrs(node, spec.known, spec.ignored)
    if values.get("name", "DCNv2") != "DCNv2":
        raise NotConvertible(f"attribute 'name' = {values['name']!r}; expected 'DCNv2'")
    for key, default in spec.defaults.items():
        if key not in values:
            if default is _REQUIRED:
                raise NotConvertible(f"attribute '{key}' is missing and its default is not defined for {spec.form}")
            values[key] = default
    padding, parsed.prepad = _padding(spec.padding, values["padding"])
    if parsed.prepad:
        parsed.notes.append(f"asymmetric padding: explicit zero Pad {list(parsed.prepad)} of x in front")
    group = _int(values["group"], "group") if "group" in values else None
    if spec.group_one:
        if group not in (None, 1):
            raise NotConvertible(f"{spec.form} has no group support; 'groups' = {group}")
        group = 1
    dg = _int(values["dg"], "deformable_group") if "dg" in values else None
    _finish(node, info, parsed, values["stride"], padding, values["dilation"], group, dg, values.get("kernel_shape"))
    if spec.form == "dcnconvert.ModulatedDeformConv2d":
        target = schema.target_of_node_attrs({
            schema.ATTR_PLUGIN_VERSION: values.get("plugin_version", "1"),
            schema.ATTR_PLUGIN_NAMESPACE: values.get("plugin_namespace", ""),
        })
        parsed.node_target = target.name if target else None
    return parsed


#: Every form id a parser can return (besides ``"unknown"``).
FORM_IDS: tuple[str, ...] = tuple(SPECS)


def parse_node(node: onnx.NodeProto, info: GraphInfo) -> ParsedDcn | None:
    """Parse one node; None when it is not a deformable convolution.

    Nodes whose op type looks like a deformable convolution but match no known form come back
    with form ``"unknown"`` and ``convertible=False``.
    """
    spec = spec_for(node)
    if spec is None:
        if node.op_type != "Plugin" and _DCN_LIKE.search(node.op_type):
            return ParsedDcn(
                form="unknown",
                convertible=False,
                reason=f"op {node.domain or 'ai.onnx'}::{node.op_type} looks like a deformable convolution "
                "but is not a known form (DCNv3/DCNv4 and deformable attention are different operators)",
            )
        return None
    try:
        return parse_with(spec, node, info)
    except NotConvertible as exc:
        return ParsedDcn(form=spec.form, mask_kind=spec.mask_kind, convertible=False, reason=str(exc))
