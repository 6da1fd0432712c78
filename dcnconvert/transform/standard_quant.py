"""A quantized plugin node in standard ONNX, with the Q/DQ semantics of the graph it came from.

:func:`dcnconvert.transform.standard.plugin_model_to_standard` (``dcnconvert reference``, ``verify``)
calls :func:`expand` for every plugin node that carries ``quant_type``; it becomes::

    x_q -> DequantizeLinear(x_scale) -> DeformConv(W = w_q * weight_scale, B)
        [-> QuantizeLinear(output_scale)]

The weight is dequantized here in float32 (what a DequantizeLinear of the weight computes), the bias
is the node's float bias. Nothing rounds the modulated samples: the plugin's kernels do (see
:mod:`dcnconvert.model.quantized` and ``plugin_src/core/dcnParams.h``), so ``verify`` allows for that
rounding in its tolerances. The ``DeformConv`` runs in FLOAT: an offset, mask or float output of
another type is cast around it. The model must already be at default-domain opset 19 or later (FP8
Q/DQ and ``DeformConv``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dcnconvert import schema
from dcnconvert.errors import ModelError
from dcnconvert.model.quantized import ONNX_TYPE_OF, dequantized


def is_quantized(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is our plugin node with a ``quant_type``."""
    return schema.is_plugin_node(node) and any(a.name == schema.ATTR_QUANT_TYPE for a in node.attribute)


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def expand(node: onnx.NodeProto, graph: onnx.GraphProto, unique: Callable[[str], str],
           dtypes: dict[str, int], deform_conv: Callable[..., onnx.NodeProto]) -> list[onnx.NodeProto]:
    """The standard nodes replacing the quantized plugin ``node``; initializers go into ``graph``.

    Args:
        unique: gives unused names.
        dtypes: tensor name -> element type (the offset's decides the float output's type).
        deform_conv: makes the ``DeformConv`` of a float plugin node with weight inputs
            (:func:`dcnconvert.transform.standard._deform_conv_node`, given the weight dims).

    Raises:
        ModelError: the node lacks a field, or has inputs other than ``x, offset, mask``.
    """
    attrs = _attrs(node)
    base = node.name or node.output[0]
    qtype = attrs[schema.ATTR_QUANT_TYPE]
    qtype = qtype.decode() if isinstance(qtype, bytes) else qtype
    names = [n for n in node.input]
    if qtype not in ONNX_TYPE_OF or len(names) != 3 or schema.ATTR_WEIGHT not in attrs \
            or schema.ATTR_X_SCALE not in attrs or schema.ATTR_WEIGHT_SCALE not in attrs:
        raise ModelError(f"quantized plugin node '{base}' needs inputs x, offset, mask and the fields "
                         f"{schema.ATTR_WEIGHT}, {schema.ATTR_X_SCALE}, {schema.ATTR_WEIGHT_SCALE}",
                         hint="rewrite the Q/DQ model again with 'dcnconvert rewrite'", node=node.name)
    x_q, offset, mask = names
    shape = [int(v) for v in attrs[schema.ATTR_WEIGHT_SHAPE]]
    w_scale = numpy_helper.to_array(attrs[schema.ATTR_WEIGHT_SCALE]).astype(np.float32)
    w = (dequantized(attrs[schema.ATTR_WEIGHT]).astype(np.float32).reshape(shape)
         * w_scale.reshape(-1, 1, 1, 1)).astype(np.float32)
    nodes: list[onnx.NodeProto] = []

    def init(array: np.ndarray | onnx.TensorProto, label: str) -> str:
        name = unique(f"{base}/reference_{label}")
        tensor = numpy_helper.from_array(array, name) if isinstance(array, np.ndarray) else array
        tensor.name = name
        graph.initializer.append(tensor)
        return name

    def add(op: str, inputs: list[str], label: str, output: str | None = None, **kw) -> str:
        out = output or unique(f"{base}/reference_{label}_out")
        nodes.append(helper.make_node(op, inputs, [out], name=unique(f"{base}/reference_{label}"), **kw))
        return out

    def as_float(name: str, label: str) -> str:
        return name if dtypes.get(name, TensorProto.FLOAT) == TensorProto.FLOAT else \
            add("Cast", [name], f"cast_{label}", to=TensorProto.FLOAT)

    zero = init(helper.make_tensor("zero", ONNX_TYPE_OF[qtype], [], [0]), "zero_point")
    x_scale = init(np.array(attrs[schema.ATTR_X_SCALE], np.float32), "x_scale")
    x = add("DequantizeLinear", [x_q, x_scale, zero], "dequantize_x")
    inputs = [x, as_float(offset, "offset"), as_float(mask, "mask"), init(w, "weight")]
    if schema.ATTR_BIAS in attrs:
        inputs.append(init(numpy_helper.to_array(attrs[schema.ATTR_BIAS]).astype(np.float32), "bias"))
    float_type = dtypes.get(offset, TensorProto.FLOAT)
    quantized_out = schema.ATTR_OUTPUT_SCALE in attrs
    out = node.output[0] if not quantized_out and float_type == TensorProto.FLOAT else \
        unique(f"{base}/reference_float_out")
    plain = helper.make_node(schema.PLUGIN_NAME, inputs, [out], name=node.name, domain=schema.PLUGIN_DOMAIN)
    plain.attribute.extend(a for a in node.attribute if a.name in
                           (schema.ATTR_STRIDE, schema.ATTR_PADDING, schema.ATTR_DILATION, schema.ATTR_GROUP,
                            schema.ATTR_DEFORMABLE_GROUP))
    nodes.append(deform_conv(plain, {inputs[3]: shape}))
    if quantized_out:
        scale = init(np.array(attrs[schema.ATTR_OUTPUT_SCALE], np.float32), "output_scale")
        add("QuantizeLinear", [out, scale, zero], "quantize_output", output=node.output[0])
    elif out != node.output[0]:
        add("Cast", [out], "cast_output", output=node.output[0], to=float_type)
    return nodes
