"""Reading plugin nodes out of rewritten models (test-only)."""

from __future__ import annotations

import onnx
from onnx import helper

from dcnconvert import schema


def plugin_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The graph's plugin nodes (``schema.is_plugin_node``), in graph order."""
    return [n for n in model.graph.node if schema.is_plugin_node(n)]


def node_attrs(node: onnx.NodeProto) -> dict:
    """A node's attributes as Python values, by name."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}
