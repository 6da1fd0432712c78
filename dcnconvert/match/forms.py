"""The exporter forms of a deformable convolution (dcn_formats.md §4-§5) and their parser.

:data:`~dcnconvert.match.table.SPECS` describes each form (input roles, attribute names and aliases,
defaults, padding style, mask kind; :mod:`dcnconvert.match.table`);
:func:`~dcnconvert.match.table.spec_for` picks a node's form and :func:`parse_with` reads it (with a few
form-specific steps: swapped DeformConv inputs, the tensorRT_Pro ``info`` JSON, the target of nodes
already rewritten). :func:`parse_node` returns a :class:`ParsedDcn`: which tensor plays which role
(``x``, ``offset``, ``mask``, ``weight``, ``bias``, or one ``offset_mask`` tensor of logits), the
canonical :class:`~dcnconvert.schema.DcnAttrs`, the kernel size, an explicit zero pre-pad of ``x``
for asymmetric pads, and the form id. A form that cannot be converted exactly (3-D, unknown
attributes, ambiguous padding, ...) gives ``convertible=False`` and a reason. Value checks (zero
stride, channel mismatches) are :mod:`dcnconvert.match.validate`'s job.

Form ids are ``<producer>.<op_type>``; :data:`FORM_IDS` lists them all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import onnx

from dcnconvert import schema
from dcnconvert.match.attrs import NotConvertible, as_int, attr_value, pair, plugin_padding, read_attrs
from dcnconvert.match.embedded import read_embedded
from dcnconvert.match.table import FORM_IDS, LOGIT_KNOWN, REQUIRED, SPECS, FormSpec, spec_for
from dcnconvert.schema import DcnAttrs

__all__ = [
    "Dim",
    "GraphInfo",
    "FORM_IDS",
    "SPECS",
    "FormSpec",
    "NotConvertible",
    "ParsedDcn",
    "parse_node",
    "parse_with",
    "read_attrs",
    "spec_for",
]

Dim = int | str | None


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
        embedded: roles (``weight``, ``bias``) that our plugin node carries as attributes, with their
            shapes; empty when the weight is an input.
        quant: ``quant_type`` of our quantized plugin node (:data:`dcnconvert.schema.QUANT_TYPES`),
            None for every other node.
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
    embedded: dict[str, list[int]] = field(default_factory=dict)
    quant: str | None = None

    @property
    def with_bias(self) -> bool:
        return "bias" in self.inputs or "bias" in self.embedded


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
    return {role: name for role, name in zip(roles, names, strict=False) if role and name}


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
                raise NotConvertible(
                    f"{kind} deformable convolution ({label} rank {rank}); only 2-D is supported")
            raise NotConvertible(f"{label} has rank {rank}; a 2-D deformable convolution needs rank 4")
    weight = parsed.inputs.get("weight")
    kh, kw = info.dim(weight, 2), info.dim(weight, 3)
    if (kh is None or kw is None) and kernel_attr is not None:
        kh, kw = pair(kernel_attr, "kernel_shape")
    elif kernel_attr is not None and (kh, kw) != pair(kernel_attr, "kernel_shape"):
        raise NotConvertible(f"kernel_shape {list(kernel_attr)} differs from the weight's {[kh, kw]}")
    parsed.kernel = (kh, kw) if kh is not None and kw is not None else None
    if group is None:
        cin, wc = info.dim(parsed.inputs.get("x"), 1), info.dim(weight, 1)
        group = cin // wc if cin and wc and cin % wc == 0 else 1
    if dg is None:
        dg = _recover_dg(info, parsed)
    parsed.attrs = DcnAttrs(
        stride=pair(stride, "stride"),
        padding=tuple(padding),  # type: ignore[arg-type]
        dilation=pair(dilation, "dilation"),
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
# Form-specific steps and the parser
# --------------------------------------------------------------------------------------------------


def _trt_pro_values(node: onnx.NodeProto) -> dict:
    """Attributes of a tensorRT_Pro ``Plugin`` node from its ``info`` JSON."""
    read_attrs(node, {"name": ("name",), "info": ("info",)})
    text = next((attr_value(a) for a in node.attribute if a.name == "info"), "") or ""
    if not text.strip():
        return {}
    try:
        loaded = json.loads(text)
    except ValueError:
        raise NotConvertible(f"attribute 'info' is not JSON: {text[:60]!r}") from None
    if not isinstance(loaded, dict):
        raise NotConvertible(f"attribute 'info' is not a JSON object: {text[:60]!r}")
    alias = {name: key for key, names in LOGIT_KNOWN.items() for name in names}
    unknown = sorted(set(loaded) - set(alias))
    if unknown:
        raise NotConvertible(f"unknown keys {unknown} in attribute 'info'")
    return {alias[k]: v for k, v in loaded.items()}


def _parse_deform_conv_inputs(node: onnx.NodeProto, info: GraphInfo, parsed: ParsedDcn) -> None:
    """Standard DeformConv: detect the swapped (mask, bias) exporter bug by rank; label Paddle2ONNX."""
    bias, mask = parsed.inputs.get("bias"), parsed.inputs.get("mask")
    bias_is_mask = not info.is_absent(bias) and info.rank(bias) == 4
    if bias_is_mask or (not info.is_absent(mask) and info.rank(mask) == 1):
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
    embedded = read_embedded(node) if spec.form == "dcnconvert.ModulatedDeformConv2d" else None
    if embedded is None:
        parsed.inputs = _inputs(node, spec.roles, spec.min_inputs)
    else:
        parsed.inputs = _inputs(node, schema.EMBEDDED_INPUT_NAMES, len(schema.EMBEDDED_INPUT_NAMES))
        parsed.embedded = embedded.shapes
        parsed.quant = embedded.quant_type
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
            if default is REQUIRED:
                raise NotConvertible(
                    f"attribute '{key}' is missing and its default is not defined for {spec.form}")
            values[key] = default
    padding, parsed.prepad = plugin_padding(spec.padding, values["padding"])
    if parsed.prepad:
        parsed.notes.append(f"asymmetric padding: explicit zero Pad {list(parsed.prepad)} of x in front")
    group = as_int(values["group"], "group") if "group" in values else None
    if spec.group_one:
        if group not in (None, 1):
            raise NotConvertible(f"{spec.form} has no group support; 'groups' = {group}")
        group = 1
    dg = as_int(values["dg"], "deformable_group") if "dg" in values else None
    _finish(node, info, parsed, values["stride"], padding, values["dilation"], group, dg,
            embedded.kernel if embedded is not None else values.get("kernel_shape"))
    if spec.form == "dcnconvert.ModulatedDeformConv2d":
        target = schema.target_of_node_attrs({
            schema.ATTR_PLUGIN_VERSION: values.get("plugin_version", "1"),
            schema.ATTR_PLUGIN_NAMESPACE: values.get("plugin_namespace", ""),
        })
        parsed.node_target = target.name if target else None
        if "allow_tf32" in values:
            _read_allow_tf32(values["allow_tf32"], parsed)
        if embedded is not None:
            parsed.notes.append(f"{' and '.join(parsed.embedded)} embedded in the node (attributes)")
        if parsed.quant:
            parsed.notes.append(f"quantized ({parsed.quant}): x and weight quantized, per-channel weight "
                                "scales")
    return parsed


def _read_allow_tf32(value: object, parsed: ParsedDcn) -> None:
    """Our plugin node's optional ``allow_tf32`` (INT 0 or 1) into ``parsed.attrs``."""
    flag = as_int(value, schema.ATTR_ALLOW_TF32)
    if flag not in (0, 1):
        raise NotConvertible(f"attribute '{schema.ATTR_ALLOW_TF32}' is {flag}; expected 0 (FP32-accurate "
                             "math, the default) or 1 (TF32 for FLOAT32 tensors)")
    if flag and parsed.attrs is not None:
        parsed.attrs = replace(parsed.attrs, allow_tf32=True)
        parsed.notes.append(f"{schema.ATTR_ALLOW_TF32} = 1: FLOAT32 math may use TF32 (10-bit mantissa)")


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
