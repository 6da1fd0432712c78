"""Q/DQ around a deformable convolution: what a quantized plugin node can take over.

ModelOpt (and ONNX Runtime's QDQ quantizer it drives) quantizes a layer by putting
``QuantizeLinear -> DequantizeLinear`` on its activations and ``DequantizeLinear`` on its weight
(the weight stored quantized, ``dq_only``, or as ``QuantizeLinear(w)`` of the float constant), and,
when the layer's output is quantized too, ``QuantizeLinear -> DequantizeLinear`` after it. For a
custom op named in ``--trt_plugins_precision`` it then removes the DQ in front of the op and the Q
after it, so that the op reads the Q's output and its output feeds a DQ ("direct" form). Both forms
are read here, in a model with its tensor data loaded:

* :func:`analyse` looks at one DCN match. No DequantizeLinear/QuantizeLinear on x and the weight:
  None (a float node, nothing to say). Otherwise a :class:`QuantDcn` (the plugin node takes x
  quantized, the weight quantized with one scale per output channel, optionally its output
  quantized), or a :class:`Fallback` saying why the node stays a float node.
* Q/DQ parameters are honoured when the scale is a positive, finite constant, the zero point is
  absent or 0, the type is INT8 or FLOAT8E4M3FN, and the scale is per tensor (x, output) or per
  tensor / per output channel on axis 0 (the weight), without blocks.

The rewrite (:mod:`dcnconvert.transform.quant`) builds the node from what is found here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dcnconvert import schema
from dcnconvert.match.finder import DcnMatch
from dcnconvert.model.quantized import QUANT_ONNX_TYPES, quantize_values

_DEFAULT = ("", "ai.onnx")
Q_OPS = ("QuantizeLinear", "DequantizeLinear")


@dataclass(frozen=True)
class QdqNode:
    """One default-domain QuantizeLinear or DequantizeLinear and what it says.

    Attributes:
        node: the node.
        qtype: the quantized element type (ONNX enum; 0 when unknown).
        scale: its scale values (float64), None when the scale is not a constant.
        zero_point_zero: the zero point is absent or all zeros.
        axis, block_size, saturate: the attributes (defaults applied).
    """

    node: onnx.NodeProto
    qtype: int
    scale: np.ndarray | None
    zero_point_zero: bool
    axis: int = 1
    block_size: int = 0
    saturate: int = 1

    @property
    def quantized(self) -> str:
        """The node's quantized tensor: DequantizeLinear's input, QuantizeLinear's output."""
        return self.node.input[0] if self.node.op_type == "DequantizeLinear" else self.node.output[0]

    def problem(self, what: str, per_channel: int | None = None) -> str | None:
        """Why these parameters cannot be honoured for ``what`` (None when they can).

        Args:
            per_channel: the number of output channels when a per-channel scale on axis 0 is
                allowed (the weight), None for a per-tensor scale only.
        """
        op = f"{self.node.op_type} '{self.node.name or self.node.output[0]}' of {what}"
        if self.qtype not in QUANT_ONNX_TYPES:
            kind = TensorProto.DataType.Name(self.qtype) if self.qtype else "an unknown type"
            return f"{op} quantizes to {kind}; the plugin takes INT8 or FLOAT8E4M3FN"
        if self.scale is None:
            return f"{op} has a scale that is not a constant"
        if not self.zero_point_zero:
            return f"{op} has a nonzero zero point; the plugin quantizes symmetrically (zero point 0)"
        if self.block_size:
            return f"{op} uses block quantization (block_size {self.block_size})"
        if not np.all(np.isfinite(self.scale)) or np.any(self.scale <= 0):
            return f"{op} has a scale that is not positive and finite"
        if self.scale.size != 1:
            if per_channel is None:
                return f"{op} has {self.scale.size} scales; the plugin takes one scale for {what}"
            if self.axis not in (0, -4) or self.scale.size != per_channel:
                return (f"{op} has {self.scale.size} scales on axis {self.axis}; the plugin takes one per "
                        f"output channel ({per_channel}, axis 0)")
        return None


class Graph:
    """Producers, consumers and constants of a main graph (with its tensor data)."""

    def __init__(self, model: onnx.ModelProto, dtypes: dict[str, int]):
        graph = model.graph
        self.dtypes = dtypes
        self.graph_inputs = {vi.name for vi in graph.input}
        self.graph_outputs = {vi.name for vi in graph.output}
        self.initializers = {t.name: t for t in graph.initializer}
        self.producers: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.output:
                if name:
                    self.producers[name] = node
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(node)

    def constant(self, name: str) -> onnx.TensorProto | None:
        """The tensor behind ``name`` when it is a constant whose data is loaded (else None)."""
        if not name or name in self.graph_inputs:
            return None
        tensor = self.initializers.get(name)
        if tensor is None:
            node = self.producers.get(name)
            if node is None or node.op_type != "Constant" or node.domain not in _DEFAULT:
                return None
            tensor = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
        if tensor is None or tensor.data_location == TensorProto.EXTERNAL:
            return None
        return tensor

    def values(self, name: str) -> np.ndarray | None:
        tensor = self.constant(name)
        return None if tensor is None else numpy_helper.to_array(tensor)

    def qdq(self, name: str, op: str) -> QdqNode | None:
        """The ``op`` (QuantizeLinear/DequantizeLinear) node that produces ``name``, or None."""
        node = self.producers.get(name)
        if node is None or node.op_type != op or node.domain not in _DEFAULT:
            return None
        return self.read(node)

    def read(self, node: onnx.NodeProto) -> QdqNode:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        zp_name = node.input[2] if len(node.input) > 2 else ""
        zp = self.constant(zp_name)
        if zp_name:
            qtype = zp.data_type if zp is not None else self.dtypes.get(zp_name, 0)
        elif node.op_type == "DequantizeLinear":
            qtype = self.dtypes.get(node.input[0], 0)
            tensor = self.initializers.get(node.input[0])
            qtype = tensor.data_type if tensor is not None else qtype
        else:
            qtype = int(attrs.get("output_dtype", 0)) or TensorProto.UINT8
        scale = self.values(node.input[1])
        zero = not zp_name or (zp is not None and not np.any(numpy_helper.to_array(zp).astype(np.float64)))
        return QdqNode(node, int(qtype), None if scale is None else scale.astype(np.float64).ravel(), zero,
                       axis=int(attrs.get("axis", 1)), block_size=int(attrs.get("block_size", 0)),
                       saturate=int(attrs.get("saturate", 1)))


@dataclass
class QuantDcn:
    """A DCN node that becomes a quantized plugin node.

    Attributes:
        qtype: ``quant_type`` (``int8`` or ``fp8e4m3``).
        x_q: the quantized tensor the plugin node reads as x.
        x_scale: its scale.
        x_quantizer: the QuantizeLinear (same scale and type) that makes ``x_q`` from a float tensor,
            or None (an asymmetric pre-pad of an FP8 x pads its input and quantizes again).
        weight: the quantized weight values (float64, on the type's grid), OIHW.
        weight_scale: one scale per output channel (float32).
        bias: the float bias (its own float type; a dequantized bias as float32), or None.
        output_scale: the output's scale when the plugin node writes it quantized, else None.
        output: the tensor the plugin node writes: the absorbed QuantizeLinear's output, or the
            DCN's own output (float, or quantized in the direct form).
        dequantize: float role -> the QuantizeLinear whose output feeds the DCN directly (direct
            form); the rewrite puts a DequantizeLinear in between.
        removable: nodes the rewrite may drop once nothing reads them (the DQ of x, of the weight
            and bias, the absorbed Q).
        absorbed: the output QuantizeLinear the plugin node takes over, or None.
        requantize: in the direct form, the DequantizeLinear reading the output when the plugin node
            cannot write it quantized (another type or scale): the rewrite quantizes its float output.
        sources: the DCN's weight and bias inputs (dropped when nothing reads them any more).
    """

    qtype: str
    x_q: str
    x_scale: float
    x_quantizer: onnx.NodeProto | None
    weight: np.ndarray
    weight_scale: np.ndarray
    bias: onnx.TensorProto | None
    output_scale: float | None
    output: str
    dequantize: dict[str, QdqNode] = field(default_factory=dict)
    removable: list[onnx.NodeProto] = field(default_factory=list)
    absorbed: onnx.NodeProto | None = None
    requantize: QdqNode | None = None
    sources: list[str] = field(default_factory=list)


@dataclass
class Fallback:
    """A DCN with Q/DQ that stays a float node, and why.

    Attributes:
        reason: for the warning.
        dequantize: float role -> QuantizeLinear feeding it directly (direct form): the rewrite adds a
            DequantizeLinear, so the float node reads floats.
        requantize: the DequantizeLinear nodes that read the DCN's output directly (direct form): the
            rewrite puts a QuantizeLinear with their scale after the float node.
    """

    reason: str
    dequantize: dict[str, QdqNode] = field(default_factory=dict)
    requantize: QdqNode | None = None


_FLOAT_ROLES = ("x", "offset", "mask", "offset_mask")


def _direct_inputs(match: DcnMatch, g: Graph, roles=_FLOAT_ROLES) -> dict[str, QdqNode]:
    found = {}
    for role in roles:
        q = g.qdq(match.inputs.get(role, ""), "QuantizeLinear")
        if q is not None:
            found[role] = q
    return found


def _output_dqs(match: DcnMatch, g: Graph) -> list[onnx.NodeProto] | None:
    """The DequantizeLinear nodes reading the DCN's output, when they are all its readers."""
    readers = g.consumers.get(match.output, [])
    if not readers or match.output in g.graph_outputs:
        return None
    if all(n.op_type == "DequantizeLinear" and n.domain in _DEFAULT and n.input[0] == match.output
           for n in readers):
        return readers
    return None


def _same(a: QdqNode, b: QdqNode) -> bool:
    key = ("qtype", "zero_point_zero", "axis", "block_size")
    return all(getattr(a, k) == getattr(b, k) for k in key) \
        and a.scale is not None and b.scale is not None and np.array_equal(a.scale, b.scale)


def _weight(match: DcnMatch, g: Graph, cout: int | None) -> tuple[np.ndarray, QdqNode, list] | str:
    """(w_q on the grid, the weight's DQ, nodes that may go) or why the weight cannot be taken."""
    name = match.inputs.get("weight", "")
    dq = g.qdq(name, "DequantizeLinear")
    if dq is None:
        return f"weight '{name}' has no DequantizeLinear (only x is quantized)"
    problem = dq.problem("the weight", per_channel=cout or 0)
    if problem:
        return problem
    source = dq.node.input[0]
    values = g.values(source)
    removable = [dq.node]
    if values is not None:
        tensor = g.constant(source)
        if tensor.data_type != dq.qtype:
            return f"weight '{source}' is {TensorProto.DataType.Name(tensor.data_type)}"
        return values.astype(np.float64), dq, removable
    q = g.qdq(source, "QuantizeLinear")
    if q is None:
        return f"weight '{source}' is neither a quantized constant nor the QuantizeLinear of one"
    problem = q.problem("the weight", per_channel=cout or 0)
    w_f = g.values(q.node.input[0])
    if problem:
        return problem
    if w_f is None:
        return (f"weight '{q.node.input[0]}' (quantized by '{q.node.name}') is not a constant with its data "
                "loaded")
    if q.qtype != dq.qtype:
        return "the weight's QuantizeLinear and DequantizeLinear disagree on the type"
    scale = q.scale.reshape((-1,) + (1,) * (w_f.ndim - 1)) if q.scale.size > 1 else q.scale.reshape(())
    qtype = QUANT_ONNX_TYPES[q.qtype]
    return quantize_values(w_f, scale, qtype, saturate=bool(q.saturate)), dq, removable + [q.node]


def _bias(match: DcnMatch, g: Graph) -> tuple[onnx.TensorProto | None, list] | str:
    name = match.inputs.get("bias", "")
    if not name:
        return None, []
    tensor = g.constant(name)
    if tensor is not None:
        if tensor.data_type not in schema.WEIGHT_DTYPES:
            return f"bias '{name}' is {TensorProto.DataType.Name(tensor.data_type)}"
        return tensor, []
    dq = g.qdq(name, "DequantizeLinear")
    source = g.values(dq.node.input[0]) if dq is not None else None
    if dq is None or dq.scale is None or source is None or (dq.scale.size > 1 and dq.axis not in (0, -1)):
        return f"bias '{name}' is not a constant (nor the DequantizeLinear of a constant)"
    zp = g.values(dq.node.input[2]) if len(dq.node.input) > 2 and dq.node.input[2] else 0
    values = (source.astype(np.float64) - np.asarray(zp, np.float64)) * dq.scale
    return numpy_helper.from_array(values.astype(np.float32), name), [dq.node]


def _x(match: DcnMatch, g: Graph) -> tuple[QdqNode, onnx.NodeProto | None, list] | None:
    """(the x Q/DQ, the same-scale QuantizeLinear making x_q, removable nodes) or None."""
    name = match.inputs.get("x", "")
    dq = g.qdq(name, "DequantizeLinear")
    if dq is not None:
        q = g.qdq(dq.node.input[0], "QuantizeLinear")
        return dq, (q.node if q is not None and _same(q, dq) and q.saturate else None), [dq.node]
    q = g.qdq(name, "QuantizeLinear")
    if q is not None:  # direct form: the DCN reads the Q's output
        return q, (q.node if q.saturate else None), []
    return None


def analyse(match: DcnMatch, g: Graph, target: schema.Target, embed: bool) -> QuantDcn | Fallback | None:
    """What to do with the Q/DQ around ``match`` (see the module doc); None when there is none."""
    x = _x(match, g)
    w_dq = g.qdq(match.inputs.get("weight", ""), "DequantizeLinear")
    direct = _direct_inputs(match, g)
    out_dqs = _output_dqs(match, g)
    requant = g.read(out_dqs[0]) if out_dqs else None
    if x is None and w_dq is None and not direct and requant is None:
        return None

    def fallback(reason: str) -> Fallback:
        return Fallback(reason, dequantize=direct, requantize=requant)

    if x is None:
        return fallback("x is not quantized (no DequantizeLinear or QuantizeLinear in front of it)")
    x_qdq, x_quantizer, removable = x
    if match.form == "dcnconvert.ModulatedDeformConv2d" or match.embedded:
        return fallback("the node already is a plugin node")
    if target.name != schema.TARGET_DCNCONVERT.name:
        return fallback(f"--target {target.name}: only our plugin (--target dcnconvert) has quantized layers")
    if not embed:
        return fallback("--weights input: a quantized plugin node carries its weight (--weights embed)")
    problem = x_qdq.problem("x")
    if problem:
        return fallback(problem)
    shape = match.shapes.get("weight")
    cout = shape[0] if shape and isinstance(shape[0], int) else None
    weight = _weight(match, g, cout)
    if isinstance(weight, str):
        return fallback(weight)
    w_q, w_dq, w_removable = weight
    if w_dq.qtype != x_qdq.qtype:
        return fallback(f"x is {TensorProto.DataType.Name(x_qdq.qtype)} but the weight "
                        f"{TensorProto.DataType.Name(w_dq.qtype)}; the plugin takes one type for both")
    bias = _bias(match, g)
    if isinstance(bias, str):
        return fallback(bias)
    qtype = QUANT_ONNX_TYPES[x_qdq.qtype]
    if match.prepad and qtype == "fp8e4m3" and x_quantizer is None:
        return fallback("asymmetric padding of an FP8 x that no QuantizeLinear of the same scale produces")
    cout = w_q.shape[0]
    w_scale = np.broadcast_to(w_dq.scale, (cout,)).astype(np.float32)
    result = QuantDcn(qtype, x_qdq.quantized, float(x_qdq.scale[0]), x_quantizer, w_q, w_scale, bias[0], None,
                      match.output, {r: q for r, q in direct.items() if r != "x"},
                      removable + w_removable + bias[1],
                      sources=[match.inputs[r] for r in ("weight", "bias") if match.inputs.get(r)])
    _output(match, g, result, requant, x_qdq.qtype)
    return result


def _output(match: DcnMatch, g: Graph, result: QuantDcn, requant: QdqNode | None, qtype: int) -> None:
    """Take over a QuantizeLinear after the DCN, or quantize for DequantizeLinear readers (direct form)."""
    readers = g.consumers.get(match.output, [])
    if requant is not None:  # direct form: the readers are DQs; the plugin writes the quantized output
        if all(_same(requant, g.read(n)) for n in readers) and not requant.problem("the output") \
                and requant.qtype == qtype:
            result.output_scale = float(requant.scale[0])
        else:
            result.requantize = requant
        return
    if len(readers) != 1 or match.output in g.graph_outputs:
        return
    q = g.qdq(readers[0].output[0], "QuantizeLinear") if readers[0].output else None
    if q is None or q.node is not readers[0] or q.problem("the output") or q.qtype != qtype or not q.saturate:
        return
    result.output_scale = float(q.scale[0])
    result.output = q.node.output[0]
    result.absorbed = q.node
