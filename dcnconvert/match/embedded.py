"""The embedded weight and bias of a ``dcnconvert.ModulatedDeformConv2d`` plugin node.

A plugin node may carry its constant weight (and bias) as TENSOR attributes instead of inputs
(:data:`dcnconvert.schema.ATTR_WEIGHT`, ``weight_shape``, ``bias``). :func:`read_embedded` reads and
checks them: the node then has exactly the inputs ``x, offset, mask``, the kernel size comes from
``weight_shape``, and the shapes that matching and validation report for the roles ``weight`` and
``bias`` are ``weight_shape`` and ``[Cout]``. Only the tensors' types and dims are read, never their
data, so this works on a weight-less skeleton (:func:`dcnconvert.model.io.skeleton`) too.
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
    """

    weight_shape: tuple[int, int, int, int]
    weight_dtype: int
    bias_dtype: int | None = None

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


def _tensor(attr: onnx.AttributeProto, role: str) -> onnx.TensorProto:
    if attr.type != _ATTR.TENSOR:
        kind = _TYPE_NAMES.get(attr.type, attr.type)
        raise NotConvertible(f"attribute '{attr.name}' is {kind}; the embedded {role} must be a TENSOR "
                             "attribute")
    tensor = attr.t
    if tensor.data_type not in schema.WEIGHT_DTYPES:
        name = onnx.TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in \
            onnx.TensorProto.DataType.values() else str(tensor.data_type)
        raise NotConvertible(f"attribute '{attr.name}' holds {name} values; the plugin takes an embedded "
                             f"{role} of type {', '.join(schema.WEIGHT_DTYPES.values())}")
    return tensor


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
             if a.name in (schema.ATTR_WEIGHT, schema.ATTR_WEIGHT_SHAPE, schema.ATTR_BIAS)}
    if not attrs:
        return None
    if schema.ATTR_WEIGHT not in attrs:
        present = ", ".join(f"'{name}'" for name in attrs)
        raise NotConvertible(f"attribute(s) {present} without '{schema.ATTR_WEIGHT}': an embedded bias or "
                             f"weight_shape needs the embedded weight too")
    weight = _tensor(attrs[schema.ATTR_WEIGHT], "weight")
    shape_attr = attrs.get(schema.ATTR_WEIGHT_SHAPE)
    if shape_attr is None:
        raise NotConvertible(f"attribute '{schema.ATTR_WEIGHT}' without '{schema.ATTR_WEIGHT_SHAPE}' (INTS, "
                             f"[Cout, C/group, kh, kw]); the plugin needs both")
    shape = [int(v) for v in shape_attr.ints]
    if shape_attr.type != _ATTR.INTS or len(shape) != 4 or min(shape) < 1:
        shown = shape if shape_attr.type == _ATTR.INTS else _TYPE_NAMES.get(shape_attr.type, shape_attr.type)
        raise NotConvertible(f"attribute '{schema.ATTR_WEIGHT_SHAPE}' is {shown}; expected 4 positive "
                             "integers [Cout, C/group, kh, kw]")
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
    return EmbeddedWeights((shape[0], shape[1], shape[2], shape[3]), int(weight.data_type), bias_dtype)
