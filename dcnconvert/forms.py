"""One parser per exporter form of a deformable convolution (dcn_formats.md §4-§5).

Each parser reads one ONNX node and returns a :class:`ParsedDcn`: which tensor plays which role
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import onnx
from onnx import helper

from dcnconvert import schema
from dcnconvert.schema import DcnAttrs

Dim = int | str | None

#: Every form id a parser can return (besides ``"unknown"``).
FORM_IDS: tuple[str, ...] = (
    "mmcv.MMCVModulatedDeformConv2d",
    "mmdeploy.MMCVModulatedDeformConv2d",
    "mmcv-legacy.MMCVModulatedDeformConv2d",
    "mmcv.MMCVDeformConv2d",
    "mmdeploy.MMCVDeformConv2d",
    "mmcv-legacy.MMCVDeformConv2d",
    "onnx.DeformConv",
    "onnx.DeformConv.swapped",
    "paddle2onnx.DeformConv",
    "nonstandard.DeformConv",
    "openvino.DeformableConv2D",
    "tao.ModulatedDeformConv2d",
    "dcnconvert.ModulatedDeformConv2d",
    "centernet.DCNv2",
    "dcnv2_latest.DCNv2_2",
    "bevformer.ModulatedDeformableConv2dTRT",
    "bevformer.ModulatedDeformableConv2dTRT2",
    "tensorrt_pro.Plugin.DCNv2",
    "eweill.DCNv2_TRT",
    "paddle-legacy.deformable_conv",
)

#: Op types that look like a deformable convolution but match no parser are reported as "unknown".
_DCN_LIKE = re.compile(r"(?i)deform\w*conv|^dcn")


@dataclass
class GraphInfo:
    """What the parsers may know about tensors: shapes, element types, producers.

    Attributes:
        shapes: tensor name -> dims (ints, symbolic names as str, None for unknown) or None.
        dtypes: tensor name -> ONNX element type.
        producers: tensor name -> the node that produces it.
        initializers: names of initializers.
        opset: version of the default ONNX domain.
    """

    shapes: dict[str, list[Dim] | None] = field(default_factory=dict)
    dtypes: dict[str, int] = field(default_factory=dict)
    producers: dict[str, onnx.NodeProto] = field(default_factory=dict)
    initializers: frozenset = frozenset()
    opset: int = 17

    def shape(self, name: str | None) -> list[Dim] | None:
        if not name:
            return None
        return self.shapes.get(name)

    def rank(self, name: str | None) -> int | None:
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def dim(self, name: str | None, axis: int) -> int | None:
        """Dimension ``axis`` of ``name`` if it is a known int."""
        shape = self.shape(name)
        if shape is None or not -len(shape) <= axis < len(shape):
            return None
        value = shape[axis]
        return value if isinstance(value, int) else None

    def is_absent(self, name: str | None) -> bool:
        """True for an omitted optional input: empty name, or a tensor known to hold no elements."""
        if not name:
            return True
        shape = self.shape(name)
        return shape is not None and any(d == 0 for d in shape)


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
# Parsers
# --------------------------------------------------------------------------------------------------

_MMCV_KNOWN = {
    "stride": ("stride",),
    "padding": ("padding",),
    "dilation": ("dilation",),
    "group": ("groups", "group"),
    "dg": ("deform_groups", "deformable_groups", "deformable_group"),
}
_MODULATED_ROLES = ("x", "offset", "mask", "weight", "bias")


def _modulated(node, info, form, known, defaults, ignored=(), roles=_MODULATED_ROLES) -> ParsedDcn:
    parsed = ParsedDcn(form=form)
    parsed.inputs = _inputs(node, roles, 4)
    values = read_attrs(node, known, ignored)
    for key, default in defaults.items():
        if key not in values:
            if default is _REQUIRED:
                raise NotConvertible(f"attribute for '{key}' is missing and its default is not defined for {form}")
            values[key] = default
    padding = _pair(values.get("padding", 0), "padding")
    group = _int(values["group"], "group") if values.get("group") is not None else None
    dg = _int(values["dg"], "deformable_group") if values.get("dg") is not None else None
    return _finish(node, info, parsed, values.get("stride", 1), padding, values.get("dilation", 1), group, dg)


_REQUIRED = object()
_DEFAULTS = {"stride": 1, "padding": 0, "dilation": 1}


def _domain_label(node: onnx.NodeProto, default_label: str) -> str:
    domain = node.domain
    if domain in ("", "ai.onnx"):
        return default_label
    return "mmdeploy" if domain == "mmdeploy" else "mmcv"


def parse_mmcv_modulated(node, info):
    form = f"{_domain_label(node, 'mmcv-legacy')}.MMCVModulatedDeformConv2d"
    return _modulated(node, info, form, _MMCV_KNOWN, _DEFAULTS)


def parse_mmcv_dcnv1(node, info):
    form = f"{_domain_label(node, 'mmcv-legacy')}.MMCVDeformConv2d"
    parsed = ParsedDcn(form=form, mask_kind="ones")
    parsed.inputs = _inputs(node, ("x", "offset", "weight"), 3)
    values = read_attrs(node, _MMCV_KNOWN, ignored=("bias", "im2col_step"))
    padding = _doubled_pads(values.get("padding", 0), "padding")
    group = _int(values["group"], "groups") if "group" in values else None
    dg = _int(values["dg"], "deform_groups") if "dg" in values else None
    return _finish(node, info, parsed, values.get("stride", 1), padding, values.get("dilation", 1), group, dg)


_ONNX_KNOWN = {
    "strides": ("strides",),
    "pads": ("pads",),
    "dilations": ("dilations",),
    "group": ("group",),
    "offset_group": ("offset_group",),
    "kernel_shape": ("kernel_shape",),
}
_NONSTANDARD_KNOWN = {
    "stride": ("stride",),
    "padding": ("padding",),
    "dilation": ("dilation",),
    "group": ("groups", "group"),
    "dg": ("offset_groups", "offset_group", "deform_groups", "deformable_groups"),
}


def parse_deform_conv(node, info):
    if node.domain not in ("", "ai.onnx"):
        return None
    names = {a.name for a in node.attribute}
    if names & {"stride", "padding", "dilation", "groups", "offset_groups"}:
        return _parse_nonstandard_deform_conv(node, info)
    parsed = ParsedDcn(form="onnx.DeformConv")
    parsed.inputs = _inputs(node, ("x", "weight", "offset", "bias", "mask"), 3)
    bias, mask = parsed.inputs.get("bias"), parsed.inputs.get("mask")
    b_absent, m_absent = info.is_absent(bias), info.is_absent(mask)
    if (not b_absent and info.rank(bias) == 4) or (not m_absent and info.rank(mask) == 1):
        # A known hand-written exporter passes (X, W, offset, mask, bias): detect by rank.
        parsed.form = "onnx.DeformConv.swapped"
        parsed.notes.append("inputs 3 and 4 (bias, mask) given in swapped order; swapped back by rank")
        for role, name in (("mask", bias), ("bias", mask)):
            parsed.inputs.pop(role, None)
            if name:
                parsed.inputs[role] = name
    values = read_attrs(node, _ONNX_KNOWN)
    if "offset_group" not in values:
        producer = info.producers.get(bias or "")
        if (producer is not None and producer.op_type == "Constant") or node.name.startswith("p2o."):
            parsed.form = "paddle2onnx.DeformConv"
    pads = _begin_end_pads(values.get("pads", [0, 0, 0, 0]), "pads")
    padding, parsed.prepad = _split_asymmetric(pads)
    if parsed.prepad:
        parsed.notes.append(f"asymmetric pads {list(pads)}: explicit zero Pad {list(parsed.prepad)} in front")
    group = _int(values.get("group", 1), "group")
    dg = _int(values["offset_group"], "offset_group") if "offset_group" in values else None
    return _finish(
        node, info, parsed, values.get("strides", 1), padding, values.get("dilations", 1), group, dg,
        kernel_attr=values.get("kernel_shape"),
    )


def _parse_nonstandard_deform_conv(node, info):
    parsed = ParsedDcn(form="nonstandard.DeformConv", mask_kind="ones")
    parsed.inputs = _inputs(node, ("x", "offset", "weight", "bias"), 3)
    values = read_attrs(node, _NONSTANDARD_KNOWN)
    padding = _pair(values.get("padding", 0), "padding")
    group = _int(values["group"], "groups") if "group" in values else None
    dg = _int(values["dg"], "offset_groups") if "dg" in values else None
    return _finish(node, info, parsed, values.get("stride", 1), padding, values.get("dilation", 1), group, dg)


def parse_openvino(node, info):
    parsed = ParsedDcn(form="openvino.DeformableConv2D", mask_kind="ones")
    parsed.inputs = _inputs(node, ("x", "offset", "weight"), 3)
    known = {
        "stride": ("strides",),
        "padding": ("pads",),
        "dilation": ("dilations",),
        "group": ("groups", "group"),
        "dg": ("deformable_groups", "deformable_group"),
        "kernel_shape": ("kernel_shape",),
    }
    values = read_attrs(node, known)
    padding = _doubled_pads(values.get("padding", 0), "pads")
    group = _int(values["group"], "groups") if "group" in values else None
    dg = _int(values["dg"], "deformable_groups") if "dg" in values else None
    return _finish(
        node, info, parsed, values.get("stride", 1), padding, values.get("dilation", 1), group, dg,
        kernel_attr=values.get("kernel_shape"),
    )


_PLUGIN_KNOWN = {
    "stride": (schema.ATTR_STRIDE,),
    "padding": (schema.ATTR_PADDING,),
    "dilation": (schema.ATTR_DILATION,),
    "group": (schema.ATTR_GROUP,),
    "dg": (schema.ATTR_DEFORMABLE_GROUP,),
    "plugin_version": (schema.ATTR_PLUGIN_VERSION,),
    "plugin_namespace": (schema.ATTR_PLUGIN_NAMESPACE,),
}


def parse_plugin_form(node, info):
    """``ModulatedDeformConv2d``: ours (domain dcnconvert) or TAO OCDNet's (default domain)."""
    ours = node.domain == schema.PLUGIN_DOMAIN
    form = "dcnconvert.ModulatedDeformConv2d" if ours else "tao.ModulatedDeformConv2d"
    parsed = _modulated(node, info, form, _PLUGIN_KNOWN, _DEFAULTS)
    if ours:
        values = read_attrs(node, _PLUGIN_KNOWN)
        attrs = {
            schema.ATTR_PLUGIN_VERSION: values.get("plugin_version", "1"),
            schema.ATTR_PLUGIN_NAMESPACE: values.get("plugin_namespace", ""),
        }
        target = schema.target_of_node_attrs(attrs)
        parsed.node_target = target.name if target else None
    return parsed


def parse_centernet_dcnv2(node, info):
    known = {
        "stride": ("stride",),
        "padding": ("padding",),
        "dilation": ("dilation",),
        "group": ("groups", "group"),
        "dg": ("deformable_group", "deformable_groups"),
    }
    # CaoWGG's importer defaults padding to 1, others to 0: a missing padding is ambiguous.
    defaults = {"stride": 1, "padding": _REQUIRED, "dilation": 1}
    return _modulated(node, info, "centernet.DCNv2", known, defaults)


def parse_dcnv2_2(node, info):
    known = {
        "stride": ("stride",),
        "padding": ("padding",),
        "dilation": ("dilation",),
        "dg": ("deformable_groups", "deformable_group"),
    }
    parsed = _modulated(node, info, "dcnv2_latest.DCNv2_2", known, _DEFAULTS)
    parsed.attrs = DcnAttrs(parsed.attrs.stride, parsed.attrs.padding, parsed.attrs.dilation, 1, parsed.attrs.deformable_group)
    return parsed


def parse_bevformer(node, info):
    return _modulated(node, info, f"bevformer.{node.op_type}", _MMCV_KNOWN, _DEFAULTS)


def _logits_form(node, info, form, values) -> ParsedDcn:
    parsed = ParsedDcn(form=form, mask_kind="logits")
    parsed.inputs = _inputs(node, ("x", "offset_mask", "weight", "bias"), 3)
    padding = _pair(values.get("padding", 0), "padding")
    dg = _int(values["dg"], "deformable_groups") if values.get("dg") is not None else None
    group = _int(values.get("group", 1), "groups")
    if group != 1:
        raise NotConvertible(f"{form} has no group support; 'groups' = {group}")
    return _finish(node, info, parsed, values.get("stride", 1), padding, values.get("dilation", 1), 1, dg)


def parse_trt_pro_plugin(node, info):
    """tensorRT_Pro ``Plugin(name="DCNv2", info=<JSON or "">)``; other Plugin nodes are not DCN."""
    attrs = {a.name: _attr_value(a) for a in node.attribute}
    if attrs.get("name") != "DCNv2":
        return None
    form = "tensorrt_pro.Plugin.DCNv2"
    try:
        read_attrs(node, {"name": ("name",), "info": ("info",)})
        text = attrs.get("info", "") or ""
        if not text.strip():
            # The plugin hard-codes these; its exporter writes info="".
            values = {"stride": 1, "padding": 1, "dilation": 1, "dg": 1}
        else:
            try:
                loaded = json.loads(text)
            except ValueError:
                raise NotConvertible(f"attribute 'info' is not JSON: {text[:60]!r}") from None
            if not isinstance(loaded, dict):
                raise NotConvertible(f"attribute 'info' is not a JSON object: {text[:60]!r}")
            keys = {
                "stride": ("stride",),
                "padding": ("padding",),
                "dilation": ("dilation",),
                "dg": ("deformable_groups", "deformable_group"),
                "group": ("groups", "group"),
            }
            alias = {name: key for key, names in keys.items() for name in names}
            unknown = sorted(set(loaded) - set(alias))
            if unknown:
                raise NotConvertible(f"unknown keys {unknown} in attribute 'info'")
            values = {"stride": 1, "padding": 1, "dilation": 1, "dg": 1}
            values.update({alias[k]: v for k, v in loaded.items()})
        return _logits_form(node, info, form, values)
    except NotConvertible as exc:
        return ParsedDcn(form=form, convertible=False, reason=str(exc), mask_kind="logits")


def parse_dcnv2_trt(node, info):
    known = {
        "stride": ("stride",),
        "padding": ("padding",),
        "dilation": ("dilation",),
        "dg": ("deformable_groups", "deformable_group"),
        "name": ("name",),
    }
    values = read_attrs(node, known)
    if values.get("name", "DCNv2") != "DCNv2":
        raise NotConvertible(f"attribute 'name' = {values['name']!r}; expected 'DCNv2'")
    values = {"stride": 1, "padding": 0, "dilation": 1, **values}
    return _logits_form(node, info, "eweill.DCNv2_TRT", values)


def parse_paddle_legacy(node, info):
    parsed = ParsedDcn(form="paddle-legacy.deformable_conv")
    parsed.inputs = _inputs(node, ("x", "weight", "mask", "offset"), 2)
    if "offset" not in parsed.inputs:
        raise NotConvertible("deformable_conv without an Offset input")
    known = {
        "stride": ("strides", "stride"),
        "padding": ("paddings", "padding"),
        "dilation": ("dilations", "dilation"),
        "group": ("groups",),
        "dg": ("deformable_groups",),
    }
    values = read_attrs(node, known, ignored=("im2col_step",))
    raw = values.get("padding", 0)
    if isinstance(raw, (list, tuple)) and len(raw) == 4:
        top, bottom, left, right = (int(v) for v in raw)  # Paddle's 4-value order
        padding, parsed.prepad = _split_asymmetric((top, left, bottom, right))
    else:
        padding = _pair(raw, "paddings")
    group = _int(values["group"], "groups") if "group" in values else None
    dg = _int(values["dg"], "deformable_groups") if "dg" in values else None
    return _finish(node, info, parsed, values.get("stride", 1), padding, values.get("dilation", 1), group, dg)


#: op_type -> parser. A parser returns None when the node is not a DCN after all.
PARSERS: dict[str, Callable[[onnx.NodeProto, GraphInfo], ParsedDcn | None]] = {
    "MMCVModulatedDeformConv2d": parse_mmcv_modulated,
    "MMCVDeformConv2d": parse_mmcv_dcnv1,
    "DeformConv": parse_deform_conv,
    "DeformableConv2D": parse_openvino,
    schema.PLUGIN_NAME: parse_plugin_form,
    "DCNv2": parse_centernet_dcnv2,
    "DCNv2_2": parse_dcnv2_2,
    "ModulatedDeformableConv2dTRT": parse_bevformer,
    "ModulatedDeformableConv2dTRT2": parse_bevformer,
    "Plugin": parse_trt_pro_plugin,
    "DCNv2_TRT": parse_dcnv2_trt,
    "deformable_conv": parse_paddle_legacy,
}


def _fallback_form(node: onnx.NodeProto) -> str:
    """A form id for a node whose parser failed before it named the form."""
    label = {
        "MMCVModulatedDeformConv2d": f"{_domain_label(node, 'mmcv-legacy')}.MMCVModulatedDeformConv2d",
        "MMCVDeformConv2d": f"{_domain_label(node, 'mmcv-legacy')}.MMCVDeformConv2d",
        "DeformConv": "onnx.DeformConv",
        "DeformableConv2D": "openvino.DeformableConv2D",
        schema.PLUGIN_NAME: "dcnconvert.ModulatedDeformConv2d"
        if node.domain == schema.PLUGIN_DOMAIN
        else "tao.ModulatedDeformConv2d",
        "DCNv2": "centernet.DCNv2",
        "DCNv2_2": "dcnv2_latest.DCNv2_2",
        "ModulatedDeformableConv2dTRT": "bevformer.ModulatedDeformableConv2dTRT",
        "ModulatedDeformableConv2dTRT2": "bevformer.ModulatedDeformableConv2dTRT2",
        "DCNv2_TRT": "eweill.DCNv2_TRT",
        "deformable_conv": "paddle-legacy.deformable_conv",
    }
    return label.get(node.op_type, "unknown")


def parse_node(node: onnx.NodeProto, info: GraphInfo) -> ParsedDcn | None:
    """Parse one node; None when it is not a deformable convolution.

    Nodes whose op type looks like a deformable convolution but match no known form come back
    with form ``"unknown"`` and ``convertible=False``.
    """
    parser = PARSERS.get(node.op_type)
    if parser is None:
        if _DCN_LIKE.search(node.op_type):
            return ParsedDcn(
                form="unknown",
                convertible=False,
                reason=f"op {node.domain or 'ai.onnx'}::{node.op_type} looks like a deformable convolution "
                "but is not a known form (DCNv3/DCNv4 and deformable attention are different operators)",
            )
        return None
    try:
        return parser(node, info)
    except NotConvertible as exc:
        return ParsedDcn(form=_fallback_form(node), convertible=False, reason=str(exc))
