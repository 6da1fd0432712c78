"""Numeric conversion and Cast insertion for the graph-cast (:mod:`dcnconvert.precision.cast`), steps 3 and 4.

* Values: :func:`float_to_bf16_bits` (round to nearest even), :func:`bf16_bits_to_float`,
  :func:`to_fp16_clamped` and :func:`to_bf16_clamped` (finite values beyond the type's range clamped
  and counted).
* :func:`convert_sources` / :func:`convert_attrs` / :func:`convert_embedded`: initializers,
  ``Constant`` values, ``Cast``/``ConstantOfShape`` attributes and the weights embedded in plugin
  nodes into the low type.
* :func:`insert_casts`: one ``Cast`` per (tensor, type) where a consumer needs another type than
  the tensor is stored in, and casts back to the I/O type in front of graph outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dcnconvert import schema
from dcnconvert.errors import ModelError
from dcnconvert.precision.plan import FLOAT

if TYPE_CHECKING:
    from dcnconvert.precision.plan import CastReport, Plan

FP16_MAX = 65504.0
_SUFFIX = {FLOAT: "fp32", TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16"}


# ----------------------------------------------------------------------------------------------
# value conversion
# ----------------------------------------------------------------------------------------------


def float_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even) and return the raw ``uint16`` bits.

    IEEE rounding, as the GPU's ``cvt.rn.bf16.f32`` and ``ml_dtypes`` do: finite values that round
    past the largest bfloat16 become infinities, NaN stays a quiet NaN (sign kept). Constants of a
    cast graph go through :func:`to_bf16_clamped` instead, which keeps them finite.
    """
    f32 = np.ascontiguousarray(values, dtype=np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f32)
    rounded[nan] = (0x7FC0 | ((bits[nan] >> 16) & 0x8000)).astype(np.uint16)
    return rounded


def to_bf16_clamped(values: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`float_to_bf16_bits`, with finite values that would round to infinity clamped to the largest
    bfloat16 (the rule :func:`to_fp16_clamped` applies: a finite weight never becomes infinite);
    returns ``(bits, n_clamped)``."""
    f32 = np.ascontiguousarray(values, dtype=np.float32)
    rounded = float_to_bf16_bits(f32)
    overflow = np.isfinite(f32) & ((rounded & 0x7FFF) == 0x7F80)
    rounded[overflow] = (rounded[overflow] & 0x8000) | 0x7F7F
    return rounded, int(overflow.sum())


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
    bits, n = to_bf16_clamped(array)
    tensor = TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=list(array.shape))
    tensor.raw_data = bits.astype("<u2").tobytes()
    return tensor, n


def convert_sources(graph: onnx.GraphProto, home: dict[str, int], low: int, report: CastReport) -> None:
    """Convert the FP32 initializers and ``Constant`` values whose home is ``low``; counts go to ``report``.

    Raises:
        ModelError: an initializer whose external data is not loaded.
    """
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


def convert_embedded(node: onnx.NodeProto, low: int, report: CastReport) -> None:
    """Convert the FP32 weight and bias embedded in a low plugin node (TENSOR attributes ``weight`` and
    ``bias``) to ``low``, rounded and clamped as initializers are; counts go to ``report``.

    Raises:
        ModelError: an embedded tensor whose external data is not loaded.
    """
    for attr in node.attribute:
        if attr.name not in (schema.ATTR_WEIGHT, schema.ATTR_BIAS) or attr.type != onnx.AttributeProto.TENSOR:
            continue
        if attr.t.data_type != FLOAT:
            continue
        where = f"{node.name or node.output[0]}.{attr.name}"
        if attr.t.data_location == TensorProto.EXTERNAL:
            raise ModelError(f"the {attr.name} embedded in plugin node '{node.name}' has external data that "
                             "is not loaded", hint="load the model with its external data (dcnconvert does "
                             "this for paths)", node=node.name)
        tensor, n = _low_tensor(numpy_helper.to_array(attr.t), attr.t.name, low)
        attr.t.CopyFrom(tensor)
        report.converted_embedded += 1
        if n:
            report.clamped_values += n
            report.clamped_initializers.append(where)


def convert_attrs(node: onnx.NodeProto, low: int) -> None:
    """Point a low node's FP32 ``to``/``dtype``/``value`` attributes at the low type."""
    for attr in node.attribute:
        if attr.name in ("to", "dtype") and attr.type == onnx.AttributeProto.INT and attr.i == FLOAT:
            attr.i = low
        elif attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == FLOAT:
            attr.t.CopyFrom(_low_tensor(numpy_helper.to_array(attr.t), attr.t.name, low)[0])
    if node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):
        zero = _low_tensor(np.zeros(1, np.float32), "", low)[0]
        node.attribute.append(helper.make_attribute("value", zero))


# ----------------------------------------------------------------------------------------------
# Cast insertion
# ----------------------------------------------------------------------------------------------


def insert_casts(graph: onnx.GraphProto, plan: Plan, home: dict[str, int], graph_outputs: list[str],
                 io_type: int) -> int:
    """Insert the Casts the plan needs (``home`` is updated); returns how many were inserted.

    Graph outputs stored in another type than ``io_type`` get their producer's tensor renamed and a
    Cast back under the output's name. Every Cast follows its input's producer, so the node order
    stays topological.
    """
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
    return len(made)


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
