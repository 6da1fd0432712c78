"""Q/DQ insertion around DCN nodes, in the pattern ModelOpt's ONNX PTQ gives convolutions.

For each DCN node (any form :mod:`dcnconvert.match` finds, with a constant weight input):

- x: ``QuantizeLinear -> DequantizeLinear`` per tensor, scale ``amax(x) / QMAX`` (a scalar of x's
  float type), zero point a scalar 0 of the quantized type; DCNs that read the same x share the pair;
- weight: ``QuantizeLinear -> DequantizeLinear`` of the float constant, per output channel
  (``axis=0``), scale ``max|w[o]| / QMAX`` (1 for an all-zero channel), zero points ``[cout]`` zeros;
- offset, mask, bias: untouched (the quantized DCN keeps them in float);
- output (``quantize_output``): ``QuantizeLinear -> DequantizeLinear`` per tensor with ``amax(out) / QMAX``.

QMAX (``model.quantized.QUANT_MAX``) is 127 for ``int8`` (symmetric INT8, zero point 0) and 448 for
``fp8e4m3`` (FLOAT8E4M3FN). Node and tensor names follow ModelOpt's: ``<tensor>_QuantizeLinear``,
``<tensor>_DequantizeLinear``, their outputs ``..._Output``, initializers ``<tensor>_scale`` and
``<tensor>_zero_point``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dcnconvert import schema
from dcnconvert.errors import ModelError
from dcnconvert.model.quantized import QUANT_MAX

__all__ = ["LayerPlan", "constant_value", "insert_qdq", "required_opset", "scale_from_amax", "weight_scales"]

#: Default-domain opset the inserted nodes need: per-channel Q/DQ needs 13, FLOAT8E4M3FN needs 19.
_MIN_OPSET: dict[str, int] = {"int8": 13, "fp8e4m3": 19}

assert set(QUANT_MAX) == set(schema.QUANT_TYPES) == set(_MIN_OPSET)


def required_opset(qtype: str) -> int:
    """The default-domain opset a model needs for the Q/DQ nodes of ``qtype``."""
    return _MIN_OPSET[qtype]


def scale_from_amax(amax: np.ndarray | float, qtype: str) -> np.ndarray:
    """``amax / QMAX`` (float64); 1 where ``amax`` is 0 or too small for a float32 scale."""
    a = np.asarray(amax, dtype=np.float64)
    scale = a / QUANT_MAX[qtype]
    return np.where(scale >= np.finfo(np.float32).tiny, scale, 1.0)


def weight_scales(weight: np.ndarray, qtype: str) -> np.ndarray:
    """Per output channel (axis 0 of OIHW) ``max |w[o]| / QMAX``, float64 ``[cout]``."""
    w = np.asarray(weight, dtype=np.float64)
    return scale_from_amax(np.abs(w.reshape(w.shape[0], -1)).max(axis=1), qtype)


def constant_value(model: onnx.ModelProto, name: str) -> np.ndarray | None:
    """The value of tensor ``name`` when it is a constant (an initializer that is no graph input, or
    the output of a ``Constant`` node with a ``value`` tensor), else None."""
    graph = model.graph
    if name in {i.name for i in graph.input}:
        return None
    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t)
            return None
    return None


@dataclass
class LayerPlan:
    """What one DCN node gets: the node (its index in ``graph.node``), the x and weight tensor names
    and input positions, the scales, and the output to quantize (None: float output)."""

    node_name: str
    index: int
    x: str
    x_pos: int
    x_scale: float
    weight: str
    w_pos: int
    w_scale: np.ndarray
    output: str | None = None
    output_scale: float | None = None
    x_quantized: bool = False  # x is already a DequantizeLinear output: no new pair, its scale kept

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the command's ``layers`` rows)."""
        return {"node": self.node_name, "x": self.x, "x_scale": self.x_scale, "weight": self.weight,
                "weight_scale_min": float(np.min(self.w_scale)),
                "weight_scale_max": float(np.max(self.w_scale)),
                "output": self.output, "output_scale": self.output_scale, "x_scale_kept": self.x_quantized}


def _float_type(model: onnx.ModelProto, name: str) -> int:
    """ONNX element type of tensor ``name`` (FLOAT when shape inference cannot tell)."""
    graph = model.graph
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if vi.name == name and vi.type.tensor_type.elem_type:
            return int(vi.type.tensor_type.elem_type)
    return TensorProto.FLOAT


def _zero_point(name: str, qtype: str, shape: tuple[int, ...]) -> TensorProto:
    if qtype == "int8":
        return numpy_helper.from_array(np.zeros(shape, dtype=np.int8), name)
    # FLOAT8E4M3FN zero: all bits 0; written as raw bytes, which every onnx version reads back.
    nbytes = int(np.prod(shape))
    return helper.make_tensor(name, TensorProto.FLOAT8E4M3FN, list(shape), bytes(nbytes), raw=True)


def _scale(name: str, value: np.ndarray | float, elem_type: int) -> TensorProto:
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    return numpy_helper.from_array(np.asarray(value, dtype=np.float64).astype(dtype), name)


class _Graph:
    """Helper holding new nodes/initializers and unique names."""

    def __init__(self, model: onnx.ModelProto, qtype: str) -> None:
        self.model = model
        self.qtype = qtype
        g = model.graph
        self.names = ({n.name for n in g.node} | {t for n in g.node for t in (*n.input, *n.output)}
                      | {i.name for i in g.initializer} | {i.name for i in g.input})

    def unique(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def qdq_pair(self, src: str, scale: np.ndarray | float, elem_type: int, axis: int | None,
                 shape: tuple[int, ...]) -> tuple[list[onnx.NodeProto], str]:
        """``src -> Q -> DQ``; returns the two nodes and the DQ's output name."""
        g = self.model.graph
        s_name, z_name = self.unique(f"{src}_scale"), self.unique(f"{src}_zero_point")
        g.initializer.extend([_scale(s_name, scale, elem_type), _zero_point(z_name, self.qtype, shape)])
        q_out = self.unique(f"{src}_QuantizeLinear_Output")
        dq_out = self.unique(f"{src}_DequantizeLinear_Output")
        kw = {} if axis is None else {"axis": axis}
        q = helper.make_node("QuantizeLinear", [src, s_name, z_name], [q_out],
                             name=self.unique(f"{src}_QuantizeLinear"), **kw)
        dq = helper.make_node("DequantizeLinear", [q_out, s_name, z_name], [dq_out],
                              name=self.unique(f"{src}_DequantizeLinear"), **kw)
        return [q, dq], dq_out


def insert_qdq(model: onnx.ModelProto, plans: list[LayerPlan], qtype: str) -> onnx.ModelProto:
    """A copy of ``model`` with the Q/DQ nodes of ``plans`` (see the module docstring).

    The nodes are placed right before the DCN they feed (after its output for the output pair), so the
    graph stays topologically sorted. A model below :func:`required_opset` must be upgraded first.

    Raises:
        ModelError: a plan's node does not read the tensors it names (the model changed).
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(out)
    except Exception:  # noqa: BLE001 - custom domains may defeat inference; types default to FLOAT
        inferred = out
    g = _Graph(out, qtype)
    nodes = list(out.graph.node)
    before: dict[int, list[onnx.NodeProto]] = {}
    after: dict[int, list[onnx.NodeProto]] = {}
    x_pairs: dict[str, str] = {}
    graph_outputs = {o.name for o in out.graph.output}
    for plan in sorted(plans, key=lambda p: p.index):
        node = nodes[plan.index]
        if node.input[plan.x_pos] != plan.x or node.input[plan.w_pos] != plan.weight:
            raise ModelError(f"node '{plan.node_name}' no longer reads x '{plan.x}' and weight "
                             f"'{plan.weight}'",
                             node=plan.node_name, hint="this is a bug in dcnconvert; please report it")
        if plan.x_quantized:
            x_pairs[plan.x] = plan.x
        if plan.x not in x_pairs:
            pair, x_pairs[plan.x] = g.qdq_pair(plan.x, plan.x_scale, _float_type(inferred, plan.x), None, ())
            before.setdefault(plan.index, []).extend(pair)
        node.input[plan.x_pos] = x_pairs[plan.x]
        w_type = _float_type(inferred, plan.weight)
        if w_type == TensorProto.FLOAT:
            w_value = constant_value(out, plan.weight)
            if w_value is not None and w_value.dtype in (np.float16, np.float64):
                w_type = helper.np_dtype_to_tensor_dtype(w_value.dtype)
        pair, node.input[plan.w_pos] = g.qdq_pair(plan.weight, plan.w_scale, w_type, 0, (len(plan.w_scale),))
        before.setdefault(plan.index, []).extend(pair)
        if plan.output is not None and plan.output_scale is not None:
            after[plan.index] = _output_pair(g, node, plan, _float_type(inferred, plan.output),
                                             plan.output in graph_outputs)
    ordered: list[onnx.NodeProto] = []
    for i, node in enumerate(nodes):
        ordered.extend(before.get(i, []))
        ordered.append(node)
        ordered.extend(after.get(i, []))
    del out.graph.node[:]
    out.graph.node.extend(ordered)
    return out


def _output_pair(g: _Graph, node: onnx.NodeProto, plan: LayerPlan, elem_type: int,
                 is_graph_output: bool) -> list[onnx.NodeProto]:
    """Q -> DQ after the node's output; every consumer reads the DQ output. A graph output keeps its
    name: the DCN then writes ``<name>_float`` and the DQ writes the graph output."""
    assert plan.output is not None and plan.output_scale is not None
    out_name = plan.output
    if is_graph_output:
        src = g.unique(f"{out_name}_float")
        node.output[0] = src
        pair, _ = g.qdq_pair(src, plan.output_scale, elem_type, None, ())
        pair[1].output[0] = out_name  # other consumers keep reading the name, now the DQ's output
        return pair
    pair, dq_out = g.qdq_pair(out_name, plan.output_scale, elem_type, None, ())
    for other in g.model.graph.node:
        if other is node or other in pair:
            continue
        for i, name in enumerate(other.input):
            if name == out_name:
                other.input[i] = dq_out
    return pair
