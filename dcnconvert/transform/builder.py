"""Helpers of the plugin rewrite (:mod:`dcnconvert.transform.plugin`): unique names, and the helper
nodes a replacement needs in a graphsurgeon graph.

* :class:`Names` hands out tensor and node names that the model does not use yet.
* :class:`Builder` makes the helper nodes of one replacement: an explicit zero ``Pad`` of x
  (asymmetric pads), a channel ``Slice`` (offset/mask logits), and a ones mask that follows the
  offset's (possibly dynamic) shape for DCNv1; each in the form the model's default-domain opset has.
* :func:`element_type` is the element type a synthesised mask gets.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from dcnconvert.errors import UnsupportedNodeError
from dcnconvert.match.finder import DcnMatch


class Names:
    """Unique names for new nodes and tensors."""

    def __init__(self, model: onnx.ModelProto):
        self.used: set[str] = set()

        def walk(graph: onnx.GraphProto) -> None:
            self.used.update(t.name for t in graph.initializer)
            self.used.update(v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info))
            for node in graph.node:
                self.used.add(node.name)
                self.used.update(node.input)
                self.used.update(node.output)
                for attr in node.attribute:
                    for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                        walk(sub)

        walk(model.graph)

    def __call__(self, base: str) -> str:
        name, count = base, 1
        while name in self.used:
            name = f"{base}_{count}"
            count += 1
        self.used.add(name)
        return name


class Builder:
    """Builds the replacement of one node in a graphsurgeon graph."""

    def __init__(self, graph: gs.Graph, names: Names, opset: int, dtypes: dict[str, int]):
        self.graph = graph
        self.names = names
        self.opset = opset
        self.dtypes = dtypes
        self.tensors = graph.tensors()
        self.nodes: list[gs.Node] = []

    def const(self, base: str, values: np.ndarray) -> gs.Constant:
        return gs.Constant(self.names(base), values)

    def node(self, op: str, base: str, inputs, attrs=None, n_out: int = 1) -> list[gs.Variable]:
        outs = [gs.Variable(self.names(f"{base}_out" if n_out == 1 else f"{base}_out{i}"))
                for i in range(n_out)]
        self.nodes.append(gs.Node(op=op, name=self.names(base), attrs=attrs or {}, inputs=list(inputs),
                                  outputs=outs))
        return outs

    def pad(self, base: str, x: gs.Tensor, prepad: tuple[int, int, int, int]) -> gs.Tensor:
        hb, wb, he, we = prepad
        pads = [0, 0, hb, wb, 0, 0, he, we]
        if self.opset >= 11:
            pads_const = self.const(f"{base}/dcnconvert_pads", np.array(pads, np.int64))
            return self.node("Pad", f"{base}/dcnconvert_pad", [x, pads_const], {"mode": "constant"})[0]
        return self.node("Pad", f"{base}/dcnconvert_pad", [x],
                         {"mode": "constant", "pads": pads, "value": 0.0})[0]

    def channel_slice(self, base: str, data: gs.Tensor, start: int, end: int) -> gs.Tensor:
        if self.opset >= 10:
            inputs = [data] + [self.const(f"{base}_{k}", np.array([v], np.int64)) for k, v in
                               (("starts", start), ("ends", end), ("axes", 1))]
            return self.node("Slice", base, inputs)[0]
        return self.node("Slice", base, [data], {"starts": [start], "ends": [end], "axes": [1]})[0]

    def ones_mask(self, base: str, offset: gs.Tensor, channels: int | None, dtype: int,
                  static_shape: list[int] | None) -> gs.Tensor:
        """Ones of shape [N, dg*kh*kw, oH, oW] following the offset's (possibly dynamic) shape."""
        if self.opset < 9:
            if static_shape is None or channels is None:
                raise UnsupportedNodeError(
                    f"a DCNv1 node needs a mask of ones; with default-domain opset {self.opset} (< 9, no "
                    "ConstantOfShape) this needs a static offset shape",
                    hint="re-export the model with opset >= 9 or with static shapes",
                )
            shape = [static_shape[0], channels, static_shape[2], static_shape[3]]
            values = np.ones(shape, helper.tensor_dtype_to_np_dtype(dtype))
            return self.const(f"{base}/dcnconvert_ones_mask", values)
        shape = self.node("Shape", f"{base}/dcnconvert_offset_shape", [offset])[0]
        batch = self.node("Gather", f"{base}/dcnconvert_batch",
                          [shape, self.const(f"{base}/dcnconvert_idx0", np.array([0], np.int64))],
                          {"axis": 0})[0]
        spatial = self.node("Gather", f"{base}/dcnconvert_spatial",
                            [shape, self.const(f"{base}/dcnconvert_idx23", np.array([2, 3], np.int64))],
                            {"axis": 0})[0]
        if channels is not None:
            chan = self.const(f"{base}/dcnconvert_mask_channels", np.array([channels], np.int64))
        else:  # kernel unknown: mask channels = offset channels / 2
            off_c = self.node("Gather", f"{base}/dcnconvert_offset_channels",
                              [shape, self.const(f"{base}/dcnconvert_idx1", np.array([1], np.int64))],
                              {"axis": 0})[0]
            chan = self.node("Div", f"{base}/dcnconvert_mask_channels",
                             [off_c, self.const(f"{base}/dcnconvert_two", np.array([2], np.int64))])[0]
        mask_shape = self.node("Concat", f"{base}/dcnconvert_mask_shape", [batch, chan, spatial],
                               {"axis": 0})[0]
        one = helper.make_tensor("value", dtype, [1], [1])
        return self.node("ConstantOfShape", f"{base}/dcnconvert_ones_mask", [mask_shape], {"value": one})[0]


def element_type(match: DcnMatch, info_dtypes: dict[str, int], warnings: list[str]) -> int:
    for role in ("offset", "offset_mask", "x", "weight"):
        name = match.inputs.get(role)
        if name and info_dtypes.get(name):
            return info_dtypes[name]
    warnings.append(f"node '{match.label}': element type unknown; the ones mask is float32")
    return onnx.TensorProto.FLOAT
