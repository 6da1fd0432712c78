"""Tolerances of ``verify`` for models with quantized DCN layers.

A quantized plugin node rounds each modulated sample ``s = mask * bilinear(x_q)`` to its type before
the product (``plugin_src/core/dcnParams.h``); the reference (the Q/DQ graph, run by ONNX Runtime)
does not. A product ``w_q * s`` then moves by at most ``|w_q| * r``, with ``r`` the largest rounding
step of a sample: half a unit for INT8, and for FP8 E4M3 half a unit in the last place of the
largest sample, at most 448 (the type's largest value, ``|mask| <= 1``): ``r = 16``. So an output
channel ``o`` moves by at most::

    bound[o] = x_scale * w_scale[o] * sum |w_q[o]| * r

plus one output step (``output_scale``) when the layer writes its output quantized: the two results
may fall on either side of a rounding boundary. :func:`quantized_layers` finds the quantized layers of
a model (its quantized plugin nodes, or those the rewrite makes of its Q/DQ) and :func:`atol_floor`
is the largest bound: ``verify``'s default ``atol`` is raised to it (an ``--atol`` given is kept). It
is a worst case, exact at a quantized layer's output; layers after it may scale the difference
(pass ``--atol`` for such models).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import helper, numpy_helper

from dcnconvert import schema
from dcnconvert.model.quantized import QUANT_MAX

#: The largest error of one sample against the Q/DQ graph's, in units of ``x_scale``, for masks in
#: [0, 1]: the kernels' FP16 interpolation (at most 5 * 2**-11 of the largest sample,
#: plugin_src/core/dcnParams.h; INT8's fixed-point weights, at most 2**-15 of it, stay within that)
#: and the rounding to the type (INT8 half a unit; FP8 half the ulp of 256..448).
_INTERP = 5.0 * 2.0**-11  # of the largest sample magnitude
SAMPLE_STEP: dict[str, float] = {
    "int8": 0.5 + _INTERP * 128.0,
    "fp8e4m3": 0.5 * 2.0 ** (np.floor(np.log2(QUANT_MAX["fp8e4m3"])) - 3) + _INTERP * QUANT_MAX["fp8e4m3"],
}


@dataclass(frozen=True)
class QuantLayer:
    """One quantized DCN layer and the most its sample rounding moves its output."""

    node: str
    quant_type: str
    x_scale: float
    output_scale: float | None
    bound: float

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "quant_type": self.quant_type, "x_scale": self.x_scale,
                "output_scale": self.output_scale, "rounding_bound": self.bound}


def _layer(node: Any) -> QuantLayer:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    qtype = attrs[schema.ATTR_QUANT_TYPE]
    qtype = qtype.decode() if isinstance(qtype, bytes) else str(qtype)
    shape = [int(v) for v in attrs[schema.ATTR_WEIGHT_SHAPE]]
    w_q = np.abs(numpy_helper.to_array(attrs[schema.ATTR_WEIGHT]).astype(np.float64)).reshape(shape[0], -1)
    w_scale = numpy_helper.to_array(attrs[schema.ATTR_WEIGHT_SCALE]).astype(np.float64)
    x_scale = float(attrs[schema.ATTR_X_SCALE])
    out_scale = attrs.get(schema.ATTR_OUTPUT_SCALE)
    bound = float(np.max(x_scale * w_scale * w_q.sum(axis=1) * SAMPLE_STEP[qtype]))
    if out_scale is not None:
        bound += float(out_scale)
    out = None if out_scale is None else float(out_scale)
    return QuantLayer(node.name or node.output[0], qtype, x_scale, out, bound)


def quantized_layers(model: Any, target: str = schema.DEFAULT_TARGET) -> list[QuantLayer]:
    """The quantized DCN layers an engine of ``model`` for ``target`` has.

    ``model`` is the original model (its Q/DQ DCNs are rewritten here, as ``build`` does) or the
    rewritten one (its quantized plugin nodes).
    """
    from dcnconvert.transform import quant as rewrite_quant
    from dcnconvert.transform.plugin import rewrite_model

    def quantized(graph_model: Any) -> list[Any]:
        return [n for n in graph_model.graph.node if schema.is_plugin_node(n)
                and any(a.name == schema.ATTR_QUANT_TYPE for a in n.attribute)]

    nodes = quantized(model)
    if not nodes and rewrite_quant.has_qdq(model):
        rewritten, _ = rewrite_model(model, target)
        nodes = quantized(rewritten)
    return [_layer(n) for n in nodes]


def atol_floor(layers: list[QuantLayer]) -> float:
    """The largest rounding bound of ``layers`` (0 without any)."""
    return max((layer.bound for layer in layers), default=0.0)
