"""The rewrite of DCN nodes with Q/DQ around them (:func:`dcnconvert.transform.plugin.rewrite_model`).

:func:`plan` reads every DCN node's Q/DQ (:func:`dcnconvert.match.qdq.analyse`) before anything
changes. A node that can be honoured becomes a quantized plugin node::

    x_f -> QuantizeLinear -> x_q -> plugin(x_q, offset, mask) -> out [-> DequantizeLinear]

The QuantizeLinear in front stays (other layers may read it); the DequantizeLinear of x and the
Q/DQ of the weight and bias are dropped once nothing else reads them; the weight is embedded
quantized (INT8, or FP8 values as FLOAT16) with one FP32 scale per output channel, the bias as the
float it was (a dequantized bias as FLOAT). A QuantizeLinear that is the DCN's only reader (same type,
per-tensor scale) is taken over: the plugin node writes its output, quantized with ``output_scale``.
In ModelOpt's direct form (the DCN reads a QuantizeLinear's output and DequantizeLinear nodes read
its output) the plugin node reads and writes the quantized tensors the same way; a float input that
comes quantized (offset or mask) gets a DequantizeLinear.

Any other node with Q/DQ stays a float node, with a warning that names it and the reason: its x is the
DequantizeLinear's output and its weight the DequantizeLinear of the weight (an input of the node),
as without this module; in the direct form a DequantizeLinear is added in front and a
QuantizeLinear after it, so that the float node sees and writes what the graph expects.

:func:`inputs` (called while the replacement is built) gives a node's x and float inputs and the
helper nodes after it; :func:`finish` (after the splice) embeds the quantized weights, takes the
QuantizeLinear over and drops the Q/DQ nodes and constants nothing reads any more.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from dcnconvert import schema
from dcnconvert.errors import UnsupportedNodeError, UsageError
from dcnconvert.match.finder import DcnMatch, GraphInfo
from dcnconvert.match.qdq import Fallback, Graph, QdqNode, QuantDcn, analyse
from dcnconvert.model.quantized import weight_tensor
from dcnconvert.transform import weights
from dcnconvert.transform.builder import Builder

LOG = logging.getLogger("dcnconvert.transform.quant")


@dataclass
class QuantPlan:
    """Per node index: a :class:`QuantDcn` or a :class:`Fallback` (nodes without Q/DQ are absent)."""

    nodes: dict[int, QuantDcn | Fallback] = field(default_factory=dict)

    def quantized(self, index: int) -> QuantDcn | None:
        found = self.nodes.get(index)
        return found if isinstance(found, QuantDcn) else None


def has_qdq(model: onnx.ModelProto) -> bool:
    """Whether the main graph has a QuantizeLinear or DequantizeLinear node."""
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.domain in ("", "ai.onnx")
               for n in model.graph.node)


def plan(model: onnx.ModelProto, matches: list[DcnMatch], info: GraphInfo, target: schema.Target,
         embed: bool, warnings: list[str]) -> QuantPlan:
    """Read the Q/DQ around every match of ``model`` (with its tensor data); fallbacks are warned about."""
    result = QuantPlan()
    if not has_qdq(model):
        return result
    graph = Graph(model, info.dtypes)
    for m in matches:
        found = analyse(m, graph, target, embed)
        if found is None:
            continue
        result.nodes[m.index] = found
        if isinstance(found, Fallback):
            warnings.append(f"node '{m.label}': its Q/DQ cannot be taken into a quantized plugin node "
                            f"({found.reason}); it is rewritten as a float node, the Q/DQ stay in the graph")
        else:
            out = f", output quantized (scale {found.output_scale:g})" if found.output_scale else ""
            LOG.info("node '%s': quantized plugin node (%s, x scale %g%s)", m.label, found.qtype,
                     found.x_scale, out)
    return result


def check_quantized_nodes(known: list[DcnMatch], target: schema.Target, embed: bool) -> None:
    """Refuse to turn quantized plugin nodes into what cannot hold them.

    Raises:
        UnsupportedNodeError: a quantized plugin node for a target without quantized layers.
        UsageError: a quantized plugin node with weights as inputs.
    """
    for m in known:
        if not m.quant:
            continue
        if not target.has_embedded_weights:
            raise UnsupportedNodeError(
                f"node '{m.label}' is a quantized plugin node ({m.quant}); the plugin of --target "
                f"{target.name} has no quantized layers",
                hint=f"use --target dcnconvert, or rewrite the original Q/DQ model for --target "
                f"{target.name} "
                "(its DCNs then stay float nodes)", node=m.label)
        if not embed:
            raise UsageError(
                f"node '{m.label}' is a quantized plugin node ({m.quant}); its quantized weight and scales "
                "exist only embedded in the node, so --weights input cannot hold them",
                hint="rewrite the original Q/DQ model with --weights input (its DCNs then stay float nodes), "
                "or keep --weights embed", node=m.label)


def _qdq_node(builder: Builder, op: str, base: str, data: gs.Tensor, like: onnx.NodeProto) -> gs.Tensor:
    """A new ``op`` on ``data`` with the scale, zero point and attributes of the node ``like``."""
    t = builder.tensors
    extra = [t[name] for name in like.input[1:3] if name]
    attrs = {a.name: helper.get_attribute_value(a) for a in like.attribute
             if a.name in ("axis", "block_size", "saturate", "output_dtype")}
    if op == "DequantizeLinear":
        attrs.pop("saturate", None)
        attrs.pop("output_dtype", None)
    return builder.node(op, base, [data] + extra, attrs)[0]


def _float_input(builder: Builder, base: str, role: str, name: str, direct: dict[str, QdqNode]) -> gs.Tensor:
    tensor = builder.tensors[name]
    if role not in direct:
        return tensor
    return _qdq_node(builder, "DequantizeLinear", f"{base}/dcnconvert_dq_{role}", tensor, direct[role].node)


@dataclass
class Inputs:
    """What the replacement of one node reads and writes besides the usual.

    Attributes:
        x: the plugin node's x (after any pre-pad), or None for the usual one.
        read: role -> tensor, for the float roles that need a DequantizeLinear (direct form).
        requantize: the node whose scale quantizes the plugin node's float output again (direct form).
    """

    x: gs.Tensor | None = None
    read: dict[str, gs.Tensor] = field(default_factory=dict)
    requantize: onnx.NodeProto | None = None


def inputs(builder: Builder, match: DcnMatch, found: QuantDcn | Fallback | None, base: str) -> Inputs:
    """The inputs of ``match``'s replacement (helper nodes go to ``builder.nodes``)."""
    result = Inputs()
    if found is None:
        return result
    direct = found.dequantize
    for role in ("x", "offset", "mask", "offset_mask"):
        if role in direct and role in match.inputs and not (role == "x" and isinstance(found, QuantDcn)):
            result.read[role] = _float_input(builder, base, role, match.inputs[role], direct)
    if found.requantize is not None:
        result.requantize = found.requantize.node
    if isinstance(found, QuantDcn):
        x = builder.tensors[found.x_q]
        if match.prepad:
            if found.qtype == "fp8e4m3":  # no FP8 Pad in ONNX Runtime: pad the float x, quantize again
                padded = builder.pad(base, builder.tensors[found.x_quantizer.input[0]], match.prepad)
                x = _qdq_node(builder, "QuantizeLinear", f"{base}/dcnconvert_quantize_x", padded,
                              found.x_quantizer)
            else:  # zero is exact on the grid (zero point 0)
                x = builder.pad(base, x, match.prepad)
        result.x = x
    return result


def requantized(builder: Builder, base: str, like: onnx.NodeProto, outputs: list[gs.Tensor]) -> tuple[
        list[gs.Tensor], list[gs.Node]]:
    """Outputs for the plugin node and a QuantizeLinear (scale of ``like``) writing the original ones."""
    float_out = gs.Variable(builder.names(f"{base}/dcnconvert_float_out"))
    t = builder.tensors
    extra = [t[name] for name in like.input[1:3] if name]
    attrs = {a.name: helper.get_attribute_value(a) for a in like.attribute
             if a.name in ("axis", "block_size")}
    q = gs.Node(op="QuantizeLinear", name=builder.names(f"{base}/dcnconvert_quantize_out"), attrs=attrs,
                inputs=[float_out] + extra, outputs=list(outputs))
    return [float_out], [q]


def _quant_attributes(node: onnx.NodeProto, found: QuantDcn) -> None:
    at = next((i for i, a in enumerate(node.attribute) if a.name == schema.ATTR_PLUGIN_VERSION),
              len(node.attribute))
    scale = onnx.numpy_helper.from_array(found.weight_scale, f"{node.name or node.output[0]}/weight_scale")
    new = [helper.make_attribute(schema.ATTR_QUANT_TYPE, found.qtype),
           helper.make_attribute(schema.ATTR_X_SCALE, float(found.x_scale)),
           helper.make_attribute(schema.ATTR_WEIGHT_SCALE, scale)]
    if found.output_scale is not None:
        new.append(helper.make_attribute(schema.ATTR_OUTPUT_SCALE, float(found.output_scale)))
    for offset, attr in enumerate(new):
        node.attribute.insert(at + offset, attr)


def finish(graph: onnx.GraphProto, quantized: dict[str, tuple[QuantDcn, str]]) -> list[str]:
    """After the splice: embed the quantized weights of the plugin nodes named by their output in
    ``quantized`` (output -> (what was found, the weight's name)), take the output QuantizeLinear over,
    and drop the Q/DQ nodes and constants nothing reads any more; returns the names dropped."""
    if not quantized:
        return []
    absorbed = {f.absorbed.output[0] for f, _ in quantized.values() if f.absorbed is not None}
    removable = {n.output[0] for f, _ in quantized.values() for n in f.removable if n.output}
    for node in graph.node:
        if not (schema.is_plugin_node(node) and node.output and node.output[0] in quantized):
            continue
        found, name = quantized[node.output[0]]
        tensors = {"weight": weight_tensor(found.weight, found.qtype, name)}
        if found.bias is not None:
            tensors["bias"] = found.bias
        weights.add_weight_attributes(node, tensors, list(found.weight.shape))
        _quant_attributes(node, found)
        if found.absorbed is not None:
            node.output[0] = found.absorbed.output[0]
    old_outputs = {out for out, (f, _) in quantized.items() if f.absorbed is not None}
    for i in reversed(range(len(graph.node))):
        node = graph.node[i]
        if node.op_type == "QuantizeLinear" and node.output and node.output[0] in absorbed \
                and node.input[0] in old_outputs:
            del graph.node[i]
    for i in reversed(range(len(graph.value_info))):
        if graph.value_info[i].name in old_outputs:
            del graph.value_info[i]
    return _prune(graph, removable, {name for f, _ in quantized.values() for name in f.sources})


def _prune(graph: onnx.GraphProto, outputs: set[str], constants: set[str]) -> list[str]:
    """Remove the nodes (by their first output) among ``outputs`` that nothing reads, repeatedly, and
    then the constants they read, and those among ``constants``, that nothing else reads."""
    read_by_prune: set[str] = set(constants)
    changed = True
    while changed:
        changed = False
        read = set(weights.reads(graph))
        for i in reversed(range(len(graph.node))):
            node = graph.node[i]
            if node.output and node.output[0] in outputs and not any(o in read for o in node.output if o):
                read_by_prune.update(n for n in node.input if n)
                outputs.update(n for n in node.input if n)  # a Q feeding a dropped DQ may go too
                del graph.node[i]
                changed = True
    return weights.drop_unread(graph, read_by_prune)
