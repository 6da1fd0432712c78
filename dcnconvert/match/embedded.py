"""The embedded weight and bias of a ``dcnconvert.ModulatedDeformConv2d`` plugin node.

A plugin node may carry its constant weight (and bias) as TENSOR attributes instead of inputs
(:data:`dcnconvert.schema.ATTR_WEIGHT`, ``weight_shape``, ``bias``). :func:`read_embedded` reads and
checks them: the node then has exactly the inputs ``x, offset, mask``, the kernel size comes from
``weight_shape``, and the shapes that matching and validation report for the roles ``weight`` and
``bias`` are ``weight_shape`` and ``[Cout]``. Only the tensors' types and dims are read, never their
data, so this works on a weight-less skeleton (:func:`dcnconvert.model.io.skeleton`) too.

A quantized node (:data:`dcnconvert.schema.ATTR_QUANT_TYPE`) holds its weight in the type
:data:`dcnconvert.schema.QUANT_WEIGHT_DTYPES` names, one ``weight_scale`` per output channel and an
``x_scale`` (``output_scale`` optional); quantized fields without an embedded weight are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import onnx

from dcnconvert import schema
from dcnconvert.match.attrs import NotConvertible

_ATTR = onnx.AttributeProto
_TYPE_NAMES = {v: k for k, v in _ATTR.AttributeType.items()}


@dataclass(frozen=True)
class EmbeddedWeights:
    """What a plugin node's weight attributes say.

    Attributes:
        weight_shape: ``[Cout, C/group, kh, kw]``.
        weight_dtype: ONNX element type of the weight.
        bias_dtype: ONNX element type of the bias, None without one.
        quant_type: ``quant_type`` of a quantized node (a key of :data:`dcnconvert.schema.QUANT_TYPES`),
            None for a float node.
    """

    weight_shape: tuple[int, int, int, int]
    weight_dtype: int
    bias_dtype: int | None = None
    quant_type: str | None = None

    @property
    def kernel(self) -> list[int]:
        return [self.weight_shape[2], self.weight_shape[3]]

    @property
    def shapes(self) -> dict[str, list[int]]:
        """Role -> shape: ``weight``, and ``bias`` when there is one."""
        out = {"weight": list(self.weight_shape)}
        if self.bias_dtype is not None:
            out["bias"] = [self.weight_shape[0]]
        return out


def _type_name(data_type: int) -> str:
    if data_type in onnx.TensorProto.DataType.values():
        return onnx.TensorProto.DataType.Name(data_type)
    return str(data_type)


def _tensor(attr: onnx.AttributeProto, role: str, allowed: dict[int, str] = schema.WEIGHT_DTYPES,
            why: str = "") -> onnx.TensorProto:
    if attr.type != _ATTR.TENSOR:
        kind = _TYPE_NAMES.get(attr.type, attr.type)
        raise NotConvertible(f"attribute '{attr.name}' is {kind}; the embedded {role} must be a TENSOR "
                             "attribute")
    tensor = attr.t
    if tensor.data_type not in allowed:
        raise NotConvertible(f"attribute '{attr.name}' holds {_type_name(tensor.data_type)} values; the "
                             f"plugin takes an embedded {role} of type {', '.join(allowed.values())}{why}")
    return tensor


_QUANT_ATTRS = tuple(name for name, _, _ in schema.QUANT_FIELDS)


def _quant_type(attrs: dict[str, onnx.AttributeProto], shape: list[int]) -> str | None:
    """The ``quant_type`` of a node with an embedded weight (None: a float node), its fields checked."""
    if schema.ATTR_QUANT_TYPE not in attrs:
        stray = [name for name in _QUANT_ATTRS if name in attrs]
        if stray:
            raise NotConvertible(f"attribute(s) {stray} without '{schema.ATTR_QUANT_TYPE}': a quantized node "
                                 f"names its type ({', '.join(schema.QUANT_TYPES)})")
        return None
    attr = attrs[schema.ATTR_QUANT_TYPE]
    qtype = attr.s.decode("utf-8", errors="replace") if attr.type == _ATTR.STRING else None
    if qtype not in schema.QUANT_TYPES:
        raise NotConvertible(f"attribute '{schema.ATTR_QUANT_TYPE}' is {qtype!r}; expected a STRING, one of "
                             f"{', '.join(schema.QUANT_TYPES)}")
    for name in (schema.ATTR_X_SCALE, schema.ATTR_OUTPUT_SCALE):
        if name in attrs and attrs[name].type != _ATTR.FLOAT:
            raise NotConvertible(f"attribute '{name}' of a quantized node must be a FLOAT")
    if schema.ATTR_X_SCALE not in attrs:
        raise NotConvertible(f"quantized node without '{schema.ATTR_X_SCALE}' (FLOAT, the scale of x)")
    if schema.ATTR_WEIGHT_SCALE not in attrs:
        raise NotConvertible(f"quantized node without '{schema.ATTR_WEIGHT_SCALE}' (FLOAT tensor, one scale "
                             "per output channel)")
    scale = _tensor(attrs[schema.ATTR_WEIGHT_SCALE], "weight scale", {onnx.TensorProto.FLOAT: "FLOAT"})
    if _count(scale) != shape[0]:
        raise NotConvertible(f"attribute '{schema.ATTR_WEIGHT_SCALE}' has {_count(scale)} values; expected "
                             f"{shape[0]} (one per output channel of {schema.ATTR_WEIGHT_SHAPE} {shape})")
    return qtype


def _count(tensor: onnx.TensorProto) -> int:
    return math.prod(int(d) for d in tensor.dims)


def read_embedded(node: onnx.NodeProto) -> EmbeddedWeights | None:
    """The embedded weights of our plugin node, or None when it takes its weight as an input.

    Raises:
        NotConvertible: the attributes do not make a valid embedded weight (a missing or wrong
            ``weight_shape``, a bias without a weight, element counts that disagree, a type the
            plugin does not take, inputs other than ``x, offset, mask``).
    """
    attrs = {a.name: a for a in node.attribute
             if a.name in (schema.ATTR_WEIGHT, schema.ATTR_WEIGHT_SHAPE, schema.ATTR_BIAS, *_QUANT_ATTRS)}
    if not attrs:
        return None
    if schema.ATTR_WEIGHT not in attrs:
        present = ", ".join(f"'{name}'" for name in attrs)
        raise NotConvertible(f"attribute(s) {present} without '{schema.ATTR_WEIGHT}': an embedded bias, "
                             f"weight_shape or quantization field needs the embedded weight too")
    shape_attr = attrs.get(schema.ATTR_WEIGHT_SHAPE)
    if shape_attr is None:
        raise NotConvertible(f"attribute '{schema.ATTR_WEIGHT}' without '{schema.ATTR_WEIGHT_SHAPE}' (INTS, "
                             f"[Cout, C/group, kh, kw]); the plugin needs both")
    shape = [int(v) for v in shape_attr.ints]
    if shape_attr.type != _ATTR.INTS or len(shape) != 4 or min(shape) < 1:
        shown = shape if shape_attr.type == _ATTR.INTS else _TYPE_NAMES.get(shape_attr.type, shape_attr.type)
        raise NotConvertible(f"attribute '{schema.ATTR_WEIGHT_SHAPE}' is {shown}; expected 4 positive "
                             "integers [Cout, C/group, kh, kw]")
    qtype = _quant_type(attrs, shape)
    if qtype is None:
        weight = _tensor(attrs[schema.ATTR_WEIGHT], "weight")
    else:
        wanted = schema.QUANT_WEIGHT_DTYPES[qtype]
        weight = _tensor(attrs[schema.ATTR_WEIGHT], "weight", {wanted: _type_name(wanted)},
                         f" for {schema.ATTR_QUANT_TYPE} '{qtype}'")
    if _count(weight) != math.prod(shape):
        raise NotConvertible(f"attribute '{schema.ATTR_WEIGHT}' has {_count(weight)} values (dims "
                             f"{list(weight.dims)}), but {schema.ATTR_WEIGHT_SHAPE} {shape} needs "
                             f"{math.prod(shape)}")
    bias_dtype = None
    if schema.ATTR_BIAS in attrs:
        bias = _tensor(attrs[schema.ATTR_BIAS], "bias")
        if _count(bias) != shape[0] or len(bias.dims) != 1:
            raise NotConvertible(f"attribute '{schema.ATTR_BIAS}' has dims {list(bias.dims)}; expected "
                                 f"[{shape[0]}] (one value per output channel of {schema.ATTR_WEIGHT_SHAPE} "
                                 f"{shape})")
        bias_dtype = int(bias.data_type)
    names = list(node.input)
    while names and not names[-1]:
        names.pop()
    if len(names) != len(schema.EMBEDDED_INPUT_NAMES) or not all(names):
        raise NotConvertible(
            f"{node.op_type} with an embedded '{schema.ATTR_WEIGHT}' takes exactly the inputs "
            f"{', '.join(schema.EMBEDDED_INPUT_NAMES)}; the node has {len(names)} ({names}): drop the weight "
            "attributes or the extra inputs")
    return EmbeddedWeights((shape[0], shape[1], shape[2], shape[3]), int(weight.data_type), bias_dtype, qtype)
