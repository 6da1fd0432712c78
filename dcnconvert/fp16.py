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
3. FP32 initializers and ``Constant`` values used by low nodes are converted (FP16: values beyond
   +-65504 are clamped and counted; BF16: round-to-nearest-even on the bits, into ``uint16`` raw
   data), ``Cast``/``ConstantOfShape`` targets follow, value_info types are updated.
4. Where a tensor's type differs from what a consumer needs, one ``Cast`` per (tensor, type) is
   inserted (so the graph stays in single static assignment form). Graph inputs and outputs keep
   FP32 unless ``io_precision`` says otherwise. The plugin node's five inputs are always in one type.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dcnconvert import schema
from dcnconvert.errors import ModelError, UnsupportedNodeError, UsageError

__all__ = [
    "KEEP_FP32_OPS",
    "LOW_TYPES",
    "CastReport",
    "bf16_bits_to_float",
    "cast_model",
    "float_to_bf16_bits",
    "to_fp16_clamped",
]

FLOAT = TensorProto.FLOAT
#: ``--precision`` / ``--io-precision`` names -> ONNX element types.
LOW_TYPES: dict[str, int] = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}
_IO_TYPES: dict[str, int] = {"fp32": FLOAT, **LOW_TYPES}
_TYPE_STR = {FLOAT: "tensor(float)", TensorProto.FLOAT16: "tensor(float16)",
             TensorProto.BFLOAT16: "tensor(bfloat16)"}
_SUFFIX = {FLOAT: "fp32", TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16"}
FP16_MAX = 65504.0
#: Default-domain opset from which ``Cast`` accepts bfloat16 (older models are converted up to it).
BF16_CAST_OPSET = 13

#: Ops that stay FP32 (with casts around them).
KEEP_FP32_OPS = frozenset({
    # sums and products that overflow 16-bit floats
    "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceProd", "ReduceMean", "CumSum", "Pow",
    # normalisation statistics (variance of large activations overflows)
    "LayerNormalization", "GroupNormalization", "InstanceNormalization",
    # index, random and identity producers whose exactness matters
    "Range", "EyeLike", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
    "Multinomial", "Bernoulli",
    # detection post-processing (box coordinates beyond 2048 lose integer precision in FP16)
    "NonMaxSuppression", "TopK", "RoiAlign",
    # quantisation scales
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
})

#: Inputs that carry the *values* of a node's output (for shape-arithmetic detection).
_VALUE_INPUTS = {"Expand": (0,), "Tile": (0,), "Reshape": (0,), "ConstantOfShape": (), "Slice": (0,),
                 "Gather": (0,), "GatherElements": (0,), "Squeeze": (0,), "Unsqueeze": (0,),
                 "Pad": (0,), "Resize": (0,), "Where": (1, 2)}
_SHAPE_SOURCES = ("Shape", "Size")


@dataclass
class CastReport:
    """What :func:`cast_model` did (JSON-ready through ``dcnconvert.report.to_jsonable``)."""

    precision: str
    io_precision: str
    low_nodes: int = 0
    kept_fp32: list[dict[str, str]] = field(default_factory=list)
    casts_inserted: int = 0
    converted_initializers: int = 0
    clamped_values: int = 0
    clamped_initializers: list[str] = field(default_factory=list)
    plugin_nodes: int = 0
    opset: list[int] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------
# value conversion
# ----------------------------------------------------------------------------------------------


def float_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even) and return the raw ``uint16`` bits.

    NaN stays a quiet NaN; finite values that would round past the largest bfloat16 are clamped to it.
    """
    f32 = np.ascontiguousarray(values, dtype=np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f32)
    rounded[nan] = (0x7FC0 | ((bits[nan] >> 16) & 0x8000)).astype(np.uint16)
    overflow = np.isfinite(f32) & ((rounded & 0x7FFF) == 0x7F80)
    rounded[overflow] = (rounded[overflow] & 0x8000) | 0x7F7F
    return rounded


def bf16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    """Decode raw bfloat16 bits (``uint16``) to float32, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_fp16_clamped(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Convert to float16, clamping finite values beyond +-65504; returns ``(array, n_clamped)``."""
    f32 = np.asarray(values, dtype=np.float32)
    over = np.isfinite(f32) & (np.abs(f32) > FP16_MAX)
    n = int(over.sum())
    if n:
        f32 = np.where(over, np.sign(f32) * FP16_MAX, f32)
    return f32.astype(np.float16), n


def _low_tensor(array: np.ndarray, name: str, low: int) -> tuple[TensorProto, int]:
    """A TensorProto of type ``low`` holding ``array`` (float32); returns ``(tensor, n_clamped)``."""
    if low == TensorProto.FLOAT16:
        arr16, n = to_fp16_clamped(array)
        return numpy_helper.from_array(arr16, name), n
    bits = float_to_bf16_bits(array)
    tensor = TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=list(array.shape))
    tensor.raw_data = bits.astype("<u2").tobytes()
    return tensor, 0


# ----------------------------------------------------------------------------------------------
# type inference
# ----------------------------------------------------------------------------------------------


def _opset(model: onnx.ModelProto, domain: str) -> int | None:
    for imp in model.opset_import:
        if imp.domain == domain or (domain == "" and imp.domain == "ai.onnx"):
            return int(imp.version)
    return None


def _schema(node: onnx.NodeProto, model: onnx.ModelProto):
    version = _opset(model, node.domain)
    if version is None:
        return None
    try:
        return onnx.defs.get_schema(node.op_type, max_inclusive_version=version, domain=node.domain)
    except onnx.defs.SchemaError:
        return None


def _infer_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor that ONNX inference (plus the custom-node rule) can type."""
    skel = onnx.ModelProto()
    skel.ir_version = model.ir_version
    skel.opset_import.extend(model.opset_import)
    skel.functions.extend(model.functions)
    g = skel.graph
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    declared = {v.name for v in model.graph.input}
    for init in model.graph.initializer:
        if init.name not in declared:
            g.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    custom = [n for n in model.graph.node if _schema(n, model) is None]
    declared_types = {vi.name: vi for vi in g.value_info}
    seeded: dict[str, onnx.ValueInfoProto] = {}

    def seed(name: str, elem_type: int) -> None:
        if name in declared_types:
            return
        if name not in seeded:
            seeded[name] = g.value_info.add()
            seeded[name].name = name
        seeded[name].type.tensor_type.elem_type = elem_type

    # our plugin computes in the type of x; in an FP32 model that is FLOAT, so one pass usually suffices
    for node in custom:
        if _is_plugin(node):
            for out in node.output:
                if out:
                    seed(out, FLOAT)
    types: dict[str, int] = {}
    for _ in range(len(custom) + 2):
        inferred = onnx.shape_inference.infer_shapes(skel, check_type=False, strict_mode=False)
        types = {}
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types[vi.name] = vi.type.tensor_type.elem_type
        changed = False
        for node in custom:
            src = types.get(node.input[0]) if node.input and node.input[0] else None
            for out in node.output:
                if out and src and types.get(out) != src and out not in declared_types:
                    seed(out, src)
                    types[out] = src
                    changed = True
        if not changed:
            break
    for init in model.graph.initializer:
        types[init.name] = init.data_type
    return types


# ----------------------------------------------------------------------------------------------
# the conversion
# ----------------------------------------------------------------------------------------------


def _is_plugin(node: onnx.NodeProto) -> bool:
    return node.op_type == schema.PLUGIN_NAME and node.domain == schema.PLUGIN_DOMAIN


def _formal(params, index: int):
    if index < len(params):
        return params[index]
    last = params[-1] if params else None
    if last is not None and last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return last
    return None


class _Plan:
    """Per-node decisions: ``low`` flag, input needs (type or None = any) and output types."""

    def __init__(self, model, types, low, keep_ops, keep_nodes):
        self.model, self.types, self.low = model, types, low
        self.keep_ops, self.keep_nodes = keep_ops, keep_nodes
        self.kept: list[dict[str, str]] = []
        self.needs: dict[tuple[int, int], int | None] = {}
        self.out_types: dict[str, int] = {}
        self.low_index: set[int] = set()

    def is_float(self, name: str) -> bool:
        return bool(name) and self.types.get(name) == FLOAT

    def keep(self, index, node, reason):
        self.kept.append({"node": node.name or f"#{index}", "op": node.op_type, "reason": reason})
        for j, name in enumerate(node.input):
            if self.is_float(name):
                self.needs[(index, j)] = FLOAT
        for name in node.output:
            if self.is_float(name):
                self.out_types[name] = FLOAT

    def decide(self, index: int, node: onnx.NodeProto, shape_arith: bool) -> None:
        floats_in = [j for j, n in enumerate(node.input) if self.is_float(n)]
        floats_out = [n for n in node.output if self.is_float(n)]
        if _is_plugin(node):
            self._make_low(index, node, {j: self.low for j in floats_in}, floats_out)
            return
        if not floats_in and not floats_out:
            return
        if node.name and node.name in self.keep_nodes:
            return self.keep(index, node, "named in --keep-fp32")
        if node.op_type in self.keep_ops:
            return self.keep(index, node, f"{node.op_type} stays FP32 (overflow or exactness)")
        if shape_arith:
            return self.keep(index, node, "shape arithmetic")
        op_schema = _schema(node, self.model)
        if op_schema is None:
            return self.keep(index, node, f"custom op {node.domain}::{node.op_type} (its types are unknown)")
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise UnsupportedNodeError(
                f"{node.op_type} node with a subgraph cannot be cast to a low precision", node=node.name,
                hint="build with --precision fp32, or convert the model beforehand (e.g. ModelOpt AutoCast)",
            )
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in op_schema.type_constraints}
        groups: dict[str, tuple[list[int], list[str]]] = {}
        needs: dict[int, int | None] = {}
        for j in floats_in:
            param = _formal(op_schema.inputs, j)
            type_str = param.type_str if param is not None else "tensor(float)"
            if type_str in allowed:
                groups.setdefault(type_str, ([], []))[0].append(j)
            else:
                needs[j] = FLOAT if type_str == "tensor(float)" else self.low
        out_fixed = []
        for k, name in enumerate(node.output):
            if name not in floats_out:
                continue
            param = _formal(op_schema.outputs, k)
            type_str = param.type_str if param is not None else "tensor(float)"
            if type_str in allowed:
                groups.setdefault(type_str, ([], []))[1].append(name)
            else:
                out_fixed.append(name)
        outs_low = []
        low_str = _TYPE_STR[self.low]
        for type_str, (ins, outs) in groups.items():
            ok = low_str in allowed[type_str]
            if len(ins) == 1 and not outs:
                needs[ins[0]] = None if ok else FLOAT
            elif ok:
                needs.update({j: self.low for j in ins})
                outs_low.extend(outs)
            else:
                opset = _opset(self.model, node.domain)
                why = f"ONNX {node.op_type} at opset {opset} does not accept {low_str}"
                return self.keep(index, node, f"{why} (schema version {op_schema.since_version})")
        if any(not ins for ins, outs in groups.values() if outs) and not _output_attr(node):
            return self.keep(index, node, "output type set by an attribute that is not converted")
        for name in out_fixed:
            self.out_types[name] = FLOAT
        self._make_low(index, node, needs, outs_low)

    def _make_low(self, index, node, needs, outs_low):
        self.low_index.add(index)
        for j, need in needs.items():
            self.needs[(index, j)] = need
        for name in outs_low:
            self.out_types[name] = self.low


def _output_attr(node: onnx.NodeProto) -> bool:
    if node.op_type == "ConstantOfShape":
        return True
    return any(a.name in ("to", "dtype", "value") for a in node.attribute)


def _shape_arith(graph: onnx.GraphProto) -> set[int]:
    """Indices of nodes doing float math on values derived from tensor shapes."""
    constant = {init.name for init in graph.initializer}
    derived: set[str] = set()
    result = set()
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant":
            constant.update(node.output)
            continue
        if node.op_type in _SHAPE_SOURCES:
            derived.update(node.output)
            continue
        picks = _VALUE_INPUTS.get(node.op_type)
        values = [n for j, n in enumerate(node.input) if n and (picks is None or j in picks)]
        if values and all(n in constant for n in node.input if n):
            constant.update(node.output)
        elif (values and any(n in derived for n in values)
              and all(n in derived or n in constant for n in values)):
            derived.update(node.output)
            result.add(index)
    return result


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
    opset_before = _opset(out, "") or 0
    if low == TensorProto.BFLOAT16 and opset_before < BF16_CAST_OPSET:
        from dcnconvert.standard import raise_default_opset

        out = raise_default_opset(out, BF16_CAST_OPSET)  # Cast to/from bfloat16 needs opset 13
    graph = out.graph
    types = _infer_types(out)
    plan = _Plan(out, types, low, frozenset(keep_fp32_ops), frozenset(keep_fp32_nodes))
    arith = _shape_arith(graph)
    for index, node in enumerate(graph.node):
        if node.op_type != "Constant":
            plan.decide(index, node, index in arith)
    report = CastReport(precision, io_precision or "fp32", low_nodes=len(plan.low_index), kept_fp32=plan.kept,
                        plugin_nodes=sum(1 for n in graph.node if _is_plugin(n)),
                        opset=[opset_before, _opset(out, "") or 0])

    # homes of source tensors: graph inputs (io type), initializers and Constants (low if wanted)
    consumers_need: dict[str, set[int | None]] = {}
    for index, node in enumerate(graph.node):
        for j, name in enumerate(node.input):
            if plan.is_float(name):
                consumers_need.setdefault(name, set()).add(plan.needs.get((index, j), FLOAT))
    graph_outputs = [o.name for o in graph.output if plan.is_float(o.name)]
    for name in graph_outputs:
        consumers_need.setdefault(name, set()).add(io_type)
    home: dict[str, int] = dict(plan.out_types)
    initializer_names = {i.name for i in graph.initializer}
    for vi in graph.input:
        if plan.is_float(vi.name) and vi.name not in initializer_names:
            home[vi.name] = io_type
            vi.type.tensor_type.elem_type = io_type
    constant_outputs = {n.output[0] for n in graph.node if n.op_type == "Constant" and n.output}
    for name in initializer_names | constant_outputs:
        if plan.is_float(name):
            wanted = consumers_need.get(name, set())
            # an FP32 consumer keeps the exact value; low consumers then read a Cast (folded by TensorRT)
            home[name] = low if low in wanted and FLOAT not in wanted else FLOAT

    _convert_sources(graph, home, low, report)
    for index in plan.low_index:
        _convert_attrs(graph.node[index], low)

    # graph outputs whose home differs from the io type: rename the producer's tensor, cast back
    final_casts: list[tuple[str, onnx.NodeProto]] = []
    taken = _all_names(graph)
    for name in graph_outputs:
        if home.get(name, FLOAT) == io_type:
            continue
        inner = _unique(f"{name}__{_SUFFIX[home[name]]}", taken)
        _rename(graph, name, inner)
        home[inner] = home[name]
        cast = helper.make_node("Cast", [inner], [name], to=io_type, name=_unique(f"{name}__cast_out", taken))
        final_casts.append((inner, cast))
        home[name] = io_type

    # casts where a consumer needs another type than the tensor's home (one per tensor and type)
    made: dict[tuple[str, int], str] = {(inner, io_type): cast.output[0] for inner, cast in final_casts}
    after: dict[str, list[onnx.NodeProto]] = {}
    for inner, cast in final_casts:
        after.setdefault(inner, []).append(cast)
    for index, node in enumerate(graph.node):
        for j, name in enumerate(node.input):
            if not plan.is_float(name) and name not in home:
                continue
            need = plan.needs.get((index, j), FLOAT)
            have = home.get(name, FLOAT)
            if need is None or need == have:
                continue
            key = (name, need)
            if key not in made:
                made[key] = _unique(f"{name}__{_SUFFIX[need]}", taken)
                cast = helper.make_node("Cast", [name], [made[key]], to=need,
                                        name=_unique(f"{made[key]}__cast", taken))
                after.setdefault(name, []).append(cast)
            node.input[j] = made[key]
    report.casts_inserted = len(made)

    nodes: list[onnx.NodeProto] = []
    produced = {o for n in graph.node for o in n.output}
    for name in list(after):
        if name not in produced:
            nodes.extend(after.pop(name))
    for node in graph.node:
        nodes.append(node)
        for o in node.output:
            nodes.extend(after.pop(o, []))
    del graph.node[:]
    graph.node.extend(nodes)

    inputs_with_data = [vi for vi in graph.input if vi.name in initializer_names]
    for vi in list(graph.value_info) + list(graph.output) + inputs_with_data:
        if vi.name in home and vi.type.tensor_type.elem_type == FLOAT:
            vi.type.tensor_type.elem_type = home[vi.name]
    return out, report


def _convert_sources(graph: onnx.GraphProto, home: dict[str, int], low: int, report: CastReport) -> None:
    for i, init in enumerate(graph.initializer):
        if init.data_type != FLOAT or home.get(init.name) != low:
            continue
        if init.data_location == TensorProto.EXTERNAL:
            raise ModelError(f"initializer '{init.name}' has external data that is not loaded",
                             hint="load the model with its external data (dcnconvert does this for paths)")
        tensor, n = _low_tensor(numpy_helper.to_array(init), init.name, low)
        graph.initializer[i].CopyFrom(tensor)
        report.converted_initializers += 1
        if n:
            report.clamped_values += n
            report.clamped_initializers.append(init.name)
    for node in graph.node:
        if node.op_type == "Constant" and node.output and home.get(node.output[0]) == low:
            value = None
            for attr in node.attribute:
                if attr.name == "value":
                    value = numpy_helper.to_array(attr.t)
                elif attr.name == "value_float":
                    value = np.array(attr.f, dtype=np.float32)
                elif attr.name == "value_floats":
                    value = np.array(list(attr.floats), dtype=np.float32)
            if value is None:
                continue
            tensor, n = _low_tensor(value.astype(np.float32), "", low)
            report.clamped_values += n
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("value", tensor))


def _convert_attrs(node: onnx.NodeProto, low: int) -> None:
    for attr in node.attribute:
        if attr.name in ("to", "dtype") and attr.type == onnx.AttributeProto.INT and attr.i == FLOAT:
            attr.i = low
        elif attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == FLOAT:
            attr.t.CopyFrom(_low_tensor(numpy_helper.to_array(attr.t), attr.t.name, low)[0])
    if node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):
        zero = _low_tensor(np.zeros(1, np.float32), "", low)[0]
        node.attribute.append(helper.make_attribute("value", zero))


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {i.name for i in graph.initializer} | {v.name for v in list(graph.input) + list(graph.output)}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        if node.name:
            names.add(node.name)
    return names


def _unique(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        for seq in (node.input, node.output):
            for j, name in enumerate(seq):
                if name == old:
                    seq[j] = new
    for init in graph.initializer:
        if init.name == old:
            init.name = new
    for vi in graph.value_info:
        if vi.name == old:
            vi.name = new
