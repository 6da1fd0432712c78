"""Type analysis for the graph-cast (:mod:`dcnconvert.precision.cast`): which node runs in which type.

Steps 1 and 2 of :mod:`dcnconvert.precision.cast`'s recipe, and the choice of each source tensor's type:

* :func:`infer_types`: the element type of every tensor (ONNX shape inference on a weight-less copy;
  custom-domain node outputs get the type of their first input; a quantized plugin node's float output
  that of its offset, its quantized output the quantized type).
* :class:`Plan`: per node, whether it runs in the low type or stays FP32 (with the reason), what
  type each float input needs and what type each float output gets (:data:`KEEP_FP32_OPS`, shape
  arithmetic, custom ops, ONNX schemas at the model's opset).
* :func:`plan_model` runs both over a model; :func:`homes` decides the type that graph inputs,
  initializers and ``Constant`` outputs are stored in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto, helper

from dcnconvert import schema
from dcnconvert.errors import UnsupportedNodeError
from dcnconvert.model.opsets import opset_version
from dcnconvert.model.quantized import ONNX_TYPE_OF

FLOAT = TensorProto.FLOAT
TYPE_STR = {FLOAT: "tensor(float)", TensorProto.FLOAT16: "tensor(float16)",
            TensorProto.BFLOAT16: "tensor(bfloat16)"}

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
@dataclass
class CastReport:
    """What :func:`cast_model` did (JSON-ready through ``dcnconvert.report.to_jsonable``)."""

    precision: str
    io_precision: str
    low_nodes: int = 0
    kept_fp32: list[dict[str, str]] = field(default_factory=list)
    casts_inserted: int = 0
    converted_initializers: int = 0
    converted_embedded: int = 0
    clamped_values: int = 0
    clamped_initializers: list[str] = field(default_factory=list)
    plugin_nodes: int = 0
    opset: list[int] = field(default_factory=list)


_SHAPE_SOURCES = ("Shape", "Size")


def _schema(node: onnx.NodeProto, model: onnx.ModelProto):
    version = opset_version(model, node.domain)
    if version is None:
        return None
    try:
        return onnx.defs.get_schema(node.op_type, max_inclusive_version=version, domain=node.domain)
    except onnx.defs.SchemaError:
        return None


def infer_types(model: onnx.ModelProto) -> dict[str, int]:
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
        if schema.is_plugin_node(node):
            for out in node.output:
                if out:
                    seed(out, _quantized_output(node) or FLOAT)
    types: dict[str, int] = {}
    for _ in range(len(custom) + 2):
        inferred = onnx.shape_inference.infer_shapes(skel, check_type=False, strict_mode=False)
        types = {}
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types[vi.name] = vi.type.tensor_type.elem_type
        changed = False
        for node in custom:
            at = _type_source(node)
            src = _quantized_output(node) or (types.get(node.input[at]) if len(node.input) > at and
                                              node.input[at] else None)
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


def _quantized_output(node: onnx.NodeProto) -> int | None:
    """The element type of a quantized plugin node's quantized output (``output_scale``), else None."""
    if not schema.is_plugin_node(node):
        return None
    attrs = {a.name: a for a in node.attribute}
    if schema.ATTR_QUANT_TYPE not in attrs or schema.ATTR_OUTPUT_SCALE not in attrs:
        return None
    return ONNX_TYPE_OF.get(attrs[schema.ATTR_QUANT_TYPE].s.decode("utf-8", errors="replace"))


def _type_source(node: onnx.NodeProto) -> int:
    """The input whose type a custom node's outputs get: the offset (input 1) for a quantized plugin
    node, whose float output has the offset's type (x is quantized); input 0 otherwise."""
    quantized = schema.is_plugin_node(node) and any(a.name == schema.ATTR_QUANT_TYPE for a in node.attribute)
    return 1 if quantized else 0


def _formal(params, index: int):
    if index < len(params):
        return params[index]
    last = params[-1] if params else None
    if last is not None and last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return last
    return None


class Plan:
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
        if schema.is_plugin_node(node):  # all float inputs in one type: low, or FP32 when asked for
            if node.op_type in self.keep_ops or (node.name and node.name in self.keep_nodes):
                return self.keep(index, node, "named in --keep-fp32 (the plugin runs in FP32)")
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
        low_str = TYPE_STR[self.low]
        for type_str, (ins, outs) in groups.items():
            ok = low_str in allowed[type_str]
            if len(ins) == 1 and not outs:
                needs[ins[0]] = None if ok else FLOAT
            elif ok:
                needs.update({j: self.low for j in ins})
                outs_low.extend(outs)
            else:
                version = opset_version(self.model, node.domain)
                why = f"ONNX {node.op_type} at opset {version} does not accept {low_str}"
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


def shape_arith(graph: onnx.GraphProto) -> set[int]:
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


def plan_model(model: onnx.ModelProto, low: int, keep_ops: Iterable[str], keep_nodes: Iterable[str]) -> Plan:
    """Infer the types of ``model`` and decide every node (``Constant`` nodes are left to :func:`homes`).

    Raises:
        UnsupportedNodeError: a node with a subgraph (If/Loop/Scan) that would need converting.
    """
    plan = Plan(model, infer_types(model), low, frozenset(keep_ops), frozenset(keep_nodes))
    arith = shape_arith(model.graph)
    for index, node in enumerate(model.graph.node):
        if node.op_type != "Constant":
            plan.decide(index, node, index in arith)
    return plan


def homes(graph: onnx.GraphProto, plan: Plan, io_type: int) -> tuple[dict[str, int], list[str]]:
    """The type each float tensor is stored in, and the float graph outputs.

    Graph inputs get ``io_type`` (their declared type is changed here); initializers and
    ``Constant`` outputs the low type when only low consumers read them (an FP32 consumer keeps the
    exact value; low consumers then read a Cast, folded by TensorRT); node outputs what the plan says.
    """
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
            home[name] = plan.low if plan.low in wanted and FLOAT not in wanted else FLOAT
    return home, graph_outputs
