"""Find and classify the deformable convolutions of a model.

:func:`find_dcn_nodes` returns one :class:`DcnMatch` per DCN node: its form, canonical attributes,
the shapes of its tensors (from initializers, graph inputs/outputs, value_info and ONNX shape
inference) and whether it can be converted. It knows nothing about TensorRT and never raises for a
model that loaded: inference problems only leave shapes unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import onnx

from dcnconvert.match import forms
from dcnconvert.match.forms import Dim, GraphInfo, ParsedDcn
from dcnconvert.model import io as onnx_io
from dcnconvert.model.opsets import opset_version
from dcnconvert.schema import DcnAttrs

LOG = logging.getLogger("dcnconvert.match.finder")

#: Roles whose shapes a match reports, in display order.
ROLES: tuple[str, ...] = ("x", "offset", "mask", "offset_mask", "weight", "bias", "output")


@dataclass
class DcnMatch:
    """One deformable-convolution node found in a model.

    Attributes:
        node_name: the node's name (may be empty in old exports).
        op_type: the node's op type.
        domain: the node's domain ("" for the default domain).
        form: form id (see :data:`dcnconvert.match.forms.FORM_IDS`), or ``"unknown"``.
        attrs: canonical attributes, None when the node could not be parsed.
        kernel: (kh, kw) when known.
        shapes: role -> dims (int, symbolic str, or None) or None when unknown; roles are
            ``x, offset, mask, offset_mask, weight, bias, output`` (those the node has).
        with_bias: whether the node has a bias input.
        convertible: whether dcnconvert can rewrite it exactly.
        reason: why not, when not convertible.
        index: position in ``graph.node`` of the main graph (-1 inside a subgraph).
        inputs: role -> tensor name.
        output: name of the node's output tensor.
        mask_kind: ``"tensor"``, ``"ones"`` (DCNv1: synthesised) or ``"logits"``.
        prepad: explicit zero pad (h_begin, w_begin, h_end, w_end) of x, or None.
        notes: extra facts (recovered values, swapped inputs, ...).
        node_target: for nodes already in plugin form, the target their attributes select.
        dtype: element type of x (ONNX enum) when known.
        embedded: roles (``weight``, ``bias``) our plugin node carries as attributes instead of inputs
            (their shapes are in ``shapes``); empty when the weight is an input.
        quant: ``quant_type`` of our quantized plugin node (``int8``, ``fp8e4m3``), None for every
            other node (a source node with Q/DQ around it is matched by :mod:`dcnconvert.match.qdq`).
    """

    node_name: str
    op_type: str
    domain: str
    form: str
    attrs: DcnAttrs | None
    kernel: tuple[int, int] | None
    shapes: dict[str, list[Dim] | None]
    with_bias: bool
    convertible: bool
    reason: str | None = None
    index: int = -1
    inputs: dict[str, str] = field(default_factory=dict)
    output: str = ""
    mask_kind: str = "tensor"
    prepad: tuple[int, int, int, int] | None = None
    notes: list[str] = field(default_factory=list)
    node_target: str | None = None
    dtype: int | None = None
    embedded: tuple[str, ...] = ()
    quant: str | None = None

    @property
    def label(self) -> str:
        """How messages name the node."""
        return self.node_name or f"<unnamed {self.op_type} #{self.index}>"

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        attrs = None
        if self.attrs is not None:
            attrs = {
                "stride": list(self.attrs.stride),
                "padding": list(self.attrs.padding),
                "dilation": list(self.attrs.dilation),
                "group": self.attrs.group,
                "deformable_group": self.attrs.deformable_group,
            }
        return {
            "node": self.node_name,
            "op_type": self.op_type,
            "domain": self.domain,
            "form": self.form,
            "attrs": attrs,
            "kernel": list(self.kernel) if self.kernel else None,
            "prepad": list(self.prepad) if self.prepad else None,
            "shapes": {k: (list(v) if v is not None else None) for k, v in self.shapes.items()},
            "with_bias": self.with_bias,
            "mask": self.mask_kind,
            "convertible": self.convertible,
            "reason": self.reason,
            "notes": list(self.notes),
            "node_target": self.node_target,
            "embedded": list(self.embedded),
            "quant": self.quant,
        }


def _dims(type_proto: onnx.TypeProto) -> list[Dim] | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims: list[Dim] = []
    for d in type_proto.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dims


def infer_shapes_safely(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """ONNX shape inference on a weight-less skeleton of ``model``; None if it fails."""
    light = onnx_io.skeleton(model)
    try:
        return onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - inference of foreign models may fail in any way
        LOG.debug("shape inference failed (%s: %s); shapes stay unknown", type(exc).__name__, exc)
        return None


def graph_info(model: onnx.ModelProto, inferred: onnx.ModelProto | None = None) -> GraphInfo:
    """Collect shapes, element types and producers of the main graph's tensors."""
    info = GraphInfo(opset=opset_version(model) or 0)
    graph = model.graph
    value_infos = list(graph.input) + list(graph.output) + list(graph.value_info)
    if inferred is not None:
        value_infos += list(inferred.graph.value_info) + list(inferred.graph.output)
    for vi in value_infos:
        dims = _dims(vi.type)
        if dims is not None:
            old = info.shapes.get(vi.name)
            if old is None or sum(isinstance(d, int) for d in dims) > sum(isinstance(d, int) for d in old):
                info.shapes[vi.name] = dims
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            info.dtypes.setdefault(vi.name, vi.type.tensor_type.elem_type)
    names = set()
    for tensor in graph.initializer:
        info.shapes[tensor.name] = [int(d) for d in tensor.dims]
        info.dtypes[tensor.name] = tensor.data_type
        names.add(tensor.name)
    info.initializers = frozenset(names)
    for node in graph.node:
        for out in node.output:
            if out:
                info.producers[out] = node
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t") and node.output:
                    info.shapes.setdefault(node.output[0], [int(d) for d in attr.t.dims])
                    info.dtypes.setdefault(node.output[0], attr.t.data_type)
    return info


def _to_match(node: onnx.NodeProto, parsed: ParsedDcn, info: GraphInfo, index: int) -> DcnMatch:
    output = next((o for o in node.output if o), "")
    shapes = {role: info.shape(name) for role, name in parsed.inputs.items()}
    shapes.update({role: list(shape) for role, shape in parsed.embedded.items()})
    if output:
        shapes["output"] = info.shape(output)
    ordered = {role: shapes[role] for role in ROLES if role in shapes}
    return DcnMatch(
        node_name=node.name,
        op_type=node.op_type,
        domain=node.domain,
        form=parsed.form,
        attrs=parsed.attrs,
        kernel=parsed.kernel,
        shapes=ordered,
        with_bias=parsed.with_bias,
        convertible=parsed.convertible,
        reason=parsed.reason,
        index=index,
        inputs=dict(parsed.inputs),
        output=output,
        mask_kind=parsed.mask_kind,
        prepad=parsed.prepad,
        notes=list(parsed.notes),
        node_target=parsed.node_target,
        dtype=info.dtypes.get(parsed.inputs.get("x", "")),
        embedded=tuple(parsed.embedded),
        quant=parsed.quant,
    )


def _subgraph_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        for attr in node.attribute:
            subs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
            for sub in subs:
                yield from sub.node
                yield from _subgraph_nodes(sub)


def find_dcn_nodes(model: onnx.ModelProto, *, info: GraphInfo | None = None) -> list[DcnMatch]:
    """Find every deformable-convolution node of ``model``.

    Args:
        model: the model (not modified; large weights are not copied).
        info: tensor facts from :func:`graph_info`; computed (with shape inference) when omitted.

    Returns:
        One :class:`DcnMatch` per DCN node of the main graph, in graph order, followed by any found
        inside subgraphs (If/Loop/Scan bodies), which are reported as not convertible.
    """
    if info is None:
        info = graph_info(model, infer_shapes_safely(model))
    matches: list[DcnMatch] = []
    for index, node in enumerate(model.graph.node):
        parsed = forms.parse_node(node, info)
        if parsed is not None:
            matches.append(_to_match(node, parsed, info, index))
    empty = GraphInfo(opset=info.opset)
    for node in _subgraph_nodes(model.graph):
        parsed = forms.parse_node(node, empty)
        if parsed is not None:
            match = _to_match(node, parsed, empty, -1)
            match.convertible = False
            match.reason = "inside a subgraph (If/Loop/Scan body); only main-graph nodes are rewritten"
            matches.append(match)
    return matches
