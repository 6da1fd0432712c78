"""Cast an FP32 ONNX graph to FP16 or BF16 for TensorRT's strongly typed networks ("graph-cast").

TensorRT 11 has no FP16/BF16 builder flags: a network is built in the types its ONNX graph says.
This module converts a model (plugin nodes included) to the low type before parsing. It is a small
converter of our own, not onnxconverter-common or ModelOpt AutoCast, because the
former breaks single static assignment with ``keep_io_types=True`` when an input has several
consumers and silently clamps weights to 1e4; the latter needs torch and pins older onnx/onnxruntime.

How it works:

1. Types of every tensor come from ONNX shape inference on a weight-less copy of the graph; plugin
   (custom-domain) node outputs get the type of their first input.
2. Every node is either *low* (runs in the low type) or *kept* in FP32. Kept: ops in
   :data:`KEEP_FP32_OPS` (overflowing reductions, normalisation statistics, index/random producers,
   NMS/TopK/RoiAlign, quantisation), shape arithmetic (float math on values derived from ``Shape``),
   custom-domain nodes other than our plugin, nodes named with ``keep_fp32_nodes``, and nodes whose
   ONNX schema at the model's opset does not accept the low type (e.g. ``Conv`` before opset 22 has
   no bfloat16). Inputs that a schema pins to ``tensor(float)`` (``Resize`` scales) stay FP32.
3. FP32 initializers and ``Constant`` values used by low nodes are converted (rounded to nearest
   even; finite values beyond the type's range, +-65504 for FP16, are clamped and counted, so a
   weight never becomes infinite; BF16 into ``uint16`` raw data), ``Cast``/``ConstantOfShape``
   targets follow, value_info types are updated.
4. Where a tensor's type differs from what a consumer needs, one ``Cast`` per (tensor, type) is
   inserted (so the graph stays in single static assignment form). Graph inputs and outputs keep
   FP32 unless ``io_precision`` says otherwise. The plugin node's float inputs (``x, offset, mask``,
   and ``weight[, bias]`` where they are inputs) are always in one type (the low one, or FP32 for a
   plugin node kept by op type or name).
5. A weight and bias embedded in a low plugin node (TENSOR attributes) are converted to the low type
   like initializers (rounded, clamped and counted: ``converted_embedded``), so the cast model is as
   small as with weight inputs and its numbers are the same. (The plugin would also accept them in
   FP32, converting them when it prepares them; converting here keeps one rounding rule, the cast's
   clamping, for every weight.) A plugin node kept in FP32 keeps FP32 weights.

This module is the driver and the public API; steps 1-2 live in :mod:`dcnconvert.precision.plan`,
steps 3-5 in :mod:`dcnconvert.precision.values`.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx
from onnx import TensorProto

from dcnconvert import schema
from dcnconvert.errors import UsageError
from dcnconvert.model.opsets import opset_version, raise_default_opset
from dcnconvert.precision.plan import FLOAT, KEEP_FP32_OPS, CastReport, homes, plan_model
from dcnconvert.precision.values import (
    bf16_bits_to_float,
    convert_attrs,
    convert_embedded,
    convert_sources,
    float_to_bf16_bits,
    insert_casts,
    to_bf16_clamped,
    to_fp16_clamped,
)

__all__ = [
    "KEEP_FP32_OPS",
    "LOW_TYPES",
    "CastReport",
    "bf16_bits_to_float",
    "cast_model",
    "float_to_bf16_bits",
    "to_bf16_clamped",
    "to_fp16_clamped",
]

#: ``--precision`` / ``--io-precision`` names -> ONNX element types.
LOW_TYPES: dict[str, int] = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}
_IO_TYPES: dict[str, int] = {"fp32": FLOAT, **LOW_TYPES}
#: Default-domain opset from which ``Cast`` accepts bfloat16 (older models are converted up to it).
BF16_CAST_OPSET = 13


def cast_model(
    model: onnx.ModelProto,
    precision: str,
    *,
    io_precision: str | None = None,
    keep_fp32_ops: Iterable[str] = KEEP_FP32_OPS,
    keep_fp32_nodes: Iterable[str] = (),
) -> tuple[onnx.ModelProto, CastReport]:
    """Return a copy of ``model`` computing in ``precision`` (``"fp16"`` or ``"bf16"``).

    Args:
        model: an FP32 model (original or rewritten; plugin nodes are converted too). Not modified.
        precision: ``"fp16"`` or ``"bf16"``.
        io_precision: type of the FP32 graph inputs/outputs: ``None``/``"fp32"`` keeps them
            (Casts inside the graph), ``"fp16"``/``"bf16"`` changes them.
        keep_fp32_ops: op types kept in FP32.
        keep_fp32_nodes: node names kept in FP32.

    Raises:
        UsageError: an unknown precision name.
        UnsupportedNodeError: a node with a subgraph (If/Loop/Scan) that would need converting.
        ModelError: an initializer whose external data is not loaded.
    """
    if precision not in LOW_TYPES:
        raise UsageError(f"cannot cast a graph to {precision!r}", hint=f"use one of {', '.join(LOW_TYPES)}")
    if io_precision not in (None, *_IO_TYPES):
        raise UsageError(f"unknown --io-precision {io_precision!r}",
                         hint=f"use one of {', '.join(_IO_TYPES)}")
    low = LOW_TYPES[precision]
    io_type = _IO_TYPES[io_precision or "fp32"]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    opset_before = opset_version(out) or 0
    if low == TensorProto.BFLOAT16 and opset_before < BF16_CAST_OPSET:

        out = raise_default_opset(out, BF16_CAST_OPSET, "a Cast to bfloat16")  # needs opset 13
    graph = out.graph
    plan = plan_model(out, low, keep_fp32_ops, keep_fp32_nodes)
    report = CastReport(precision, io_precision or "fp32", low_nodes=len(plan.low_index), kept_fp32=plan.kept,
                        plugin_nodes=sum(1 for n in graph.node if schema.is_plugin_node(n)),
                        opset=[opset_before, opset_version(out) or 0])

    initializer_names = {i.name for i in graph.initializer}
    home, graph_outputs = homes(graph, plan, io_type)
    convert_sources(graph, home, low, report)
    for index in plan.low_index:
        convert_attrs(graph.node[index], low)
        if schema.is_plugin_node(graph.node[index]):
            convert_embedded(graph.node[index], low, report)
    report.casts_inserted = insert_casts(graph, plan, home, graph_outputs, io_type)

    inputs_with_data = [vi for vi in graph.input if vi.name in initializer_names]
    for vi in list(graph.value_info) + list(graph.output) + inputs_with_data:
        if vi.name in home and vi.type.tensor_type.elem_type == FLOAT:
            vi.type.tensor_type.elem_type = home[vi.name]
    return out, report
