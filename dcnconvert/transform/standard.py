"""Any DCN form -> standard ONNX ``DeformConv`` that ONNX Runtime runs (the ``reference`` command).

Pipeline: :func:`dcnconvert.transform.plugin.rewrite_model` turns every DCN form (mmcv, mmdeploy, TAO,
CenterNet, Paddle2ONNX, swapped or non-standard ``DeformConv``, already rewritten plugin nodes of
either target, ...) into canonical plugin nodes with weight inputs; :func:`plugin_model_to_standard`
then turns each plugin node into ``DeformConv`` (inputs ``X, W, offset, B, mask``, weights embedded in
a plugin node becoming initializers; attributes ``strides``, ``pads`` ``[ph, pw, ph, pw]``,
``dilations``, ``group``, ``offset_group``, ``kernel_shape``). A quantized plugin node (``quant_type``)
becomes ``DequantizeLinear -> DeformConv [-> QuantizeLinear]`` with its dequantized weight
(:mod:`dcnconvert.transform.standard_quant`): the Q/DQ semantics of the graph it was made from. The
rewrite leaves quantized plugin nodes as they are here; a Q/DQ model's DCNs become float plugin nodes
with the Q/DQ kept (weights as inputs), which is the same meaning.

Nodes that already are valid standard ``DeformConv`` (:func:`is_valid_standard_deformconv`) are left
exactly as they are, so that the reference runs them through ONNX Runtime's own parser and kernel: a
parsing bug of ours in the ``onnx.DeformConv`` form then shows up as a mismatch in ``verify`` instead
of being reproduced by the reference.

``DeformConv`` exists from default-domain opset 19 on. A model below 19 is raised to 19 with
``onnx.version_converter`` *while the DCN nodes are still plugin nodes in their own domain* (the
converter passes custom-domain nodes through, but has no adapter for a ``DeformConv`` below 19), with
large initializers held aside during the conversion so that it neither copies the weights nor hits the
2 GB protobuf limit. The IR version is raised to at least 9 (what opset 19 needs). Unused custom
domain imports are dropped and the result passes ``onnx.checker``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import onnx
from onnx import helper

from dcnconvert import schema
from dcnconvert.errors import ModelError, UnsupportedNodeError
from dcnconvert.match.finder import DcnMatch
from dcnconvert.match.validate import problems
from dcnconvert.model import io as onnx_io
from dcnconvert.model.opsets import opset_version, raise_default_opset
from dcnconvert.transform import standard_quant, weights
from dcnconvert.transform.builder import Names

__all__ = [
    "MIN_IR_VERSION",
    "STANDARD_OPSET",
    "is_valid_standard_deformconv",
    "plugin_model_to_standard",
    "to_standard_model",
]

#: Lowest default-domain opset that has ``DeformConv``.
STANDARD_OPSET = 19
#: IR version that goes with opset 19.
MIN_IR_VERSION = 9
#: Initializers larger than this (bytes) are held aside during the opset conversion.
#: Models larger than this are checked with their weights held aside (protobuf's 2 GB limit).
_CHECKER_LIMIT_BYTES = 2**31 - 2**20
#: The attributes of a 2-D standard ``DeformConv``: name -> (type, number of values; None for an INT).
_DEFORMCONV_ATTRS = {
    "strides": (onnx.AttributeProto.INTS, 2),
    "dilations": (onnx.AttributeProto.INTS, 2),
    "kernel_shape": (onnx.AttributeProto.INTS, 2),
    "pads": (onnx.AttributeProto.INTS, 4),
    "group": (onnx.AttributeProto.INT, None),
    "offset_group": (onnx.AttributeProto.INT, None),
}


def is_valid_standard_deformconv(match: DcnMatch, model: onnx.ModelProto) -> bool:
    """Whether ``match`` is a standard ONNX ``DeformConv`` that ONNX Runtime runs as it is.

    True for a main-graph node of form ``onnx.DeformConv`` (default domain, inputs ``X, W, offset[,
    B][, mask]`` in the operator's order, so not ``onnx.DeformConv.swapped``, ``paddle2onnx.DeformConv``
    or ``nonstandard.DeformConv``) in a model of default-domain opset >= :data:`STANDARD_OPSET`, whose
    attributes have the operator's types and lengths, whose own ``group`` and ``offset_group``
    (default 1) are what the parser derived from the shapes (an ``offset_group`` left out while the
    offset channels say otherwise is not valid) and that has no problem
    (:func:`dcnconvert.match.validate.problems`: attribute values, channels and spatial sizes where known).
    Asymmetric ``pads`` are valid.

    Args:
        match: a match from :func:`dcnconvert.match.finder.find_dcn_nodes` on ``model`` (or on a
            skeleton of it).
        model: the model the match comes from.
    """
    if match.form != "onnx.DeformConv" or not match.convertible or match.attrs is None:
        return False
    if (opset_version(model) or 0) < STANDARD_OPSET or not 0 <= match.index < len(model.graph.node):
        return False
    node = model.graph.node[match.index]
    if node.op_type != "DeformConv" or node.domain not in ("", "ai.onnx") or node.name != match.node_name:
        return False
    roles = ("x", "weight", "offset", "bias", "mask")
    if any(name and match.inputs.get(role) != name for role, name in zip(roles, node.input, strict=False)):
        return False  # an input the parser dropped (an empty tensor) or moved
    for attr in node.attribute:
        kind, length = _DEFORMCONV_ATTRS.get(attr.name, (None, None))
        if attr.type != kind or (length is not None and len(attr.ints) != length):
            return False
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    own = (attrs.get("group", 1), attrs.get("offset_group", 1))
    if own != (match.attrs.group, match.attrs.deformable_group):
        return False
    return not problems(match, schema.DEFAULT_TARGET)


def to_standard_model(model: onnx.ModelProto, *, target_opset: int | None = None) -> onnx.ModelProto:
    """Turn every DCN node of ``model`` (any source form, or plugin nodes) into standard ``DeformConv``.

    Nodes that already are valid standard ``DeformConv`` (:func:`is_valid_standard_deformconv`) are
    kept byte for byte; every other DCN node goes through the rewrite to plugin nodes and
    :func:`plugin_model_to_standard`.

    Args:
        model: the model; not modified.
        target_opset: default-domain opset of the result when the model's is lower
            (default :data:`STANDARD_OPSET`); a model already at or above it keeps its opset.

    Returns:
        A new model that ONNX Runtime (>= 1.25, CPUExecutionProvider) runs. A model without DCN nodes
        to convert (none, or only valid standard ``DeformConv``) comes back unchanged (a copy).

    Raises:
        UnsupportedNodeError, ValidationError: from the rewrite (a DCN node that cannot be converted).
        ModelError: the opset conversion failed or the result does not pass the ONNX checker.
    """
    from dcnconvert.transform.plugin import rewrite_model

    canonical, _report = rewrite_model(
        model, target=schema.DEFAULT_TARGET, embed_weights=False,
        keep=lambda m: bool(m.quant) or is_valid_standard_deformconv(m, model),
    )
    return plugin_model_to_standard(canonical, target_opset=target_opset)


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph nested in its nodes' attributes."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def _initializer_dims(graph: onnx.GraphProto) -> dict[str, list[int]]:
    dims: dict[str, list[int]] = {}
    for sub in _graphs(graph):
        for init in sub.initializer:
            dims[init.name] = list(init.dims)
        for node in sub.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for attr in node.attribute:
                    if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                        dims[node.output[0]] = list(attr.t.dims)
        for vi in list(sub.value_info) + list(sub.input):
            shape = vi.type.tensor_type.shape
            has_shape = vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
            if has_shape and all(d.HasField("dim_value") for d in shape.dim):
                dims.setdefault(vi.name, [d.dim_value for d in shape.dim])
    return dims


def _pair_attr(attrs: dict[str, object], name: str, node: onnx.NodeProto) -> list[int]:
    value = attrs.get(name)
    if isinstance(value, int):
        return [value, value]
    if not isinstance(value, list) or len(value) != 2:
        raise ModelError(
            f"plugin node '{node.name}': attribute '{name}' must be INTS [h, w], got {value!r}",
            hint="rewrite the model with 'dcnconvert rewrite' first",
            node=node.name,
        )
    return [int(v) for v in value]


def _deform_conv_node(node: onnx.NodeProto, weight_dims: dict[str, list[int]]) -> onnx.NodeProto:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if len(node.input) not in (4, 5) or not all(node.input[:4]):
        raise ModelError(
            f"plugin node '{node.name}' has inputs {list(node.input)}; "
            "expected x, offset, mask, weight[, bias]",
            node=node.name,
        )
    if len(node.output) != 1:
        raise ModelError(f"plugin node '{node.name}' must have exactly one output", node=node.name)
    stride = _pair_attr(attrs, schema.ATTR_STRIDE, node)
    padding = _pair_attr(attrs, schema.ATTR_PADDING, node)
    dilation = _pair_attr(attrs, schema.ATTR_DILATION, node)
    group = int(attrs.get(schema.ATTR_GROUP, 1))  # type: ignore[arg-type]
    deformable_group = int(attrs.get(schema.ATTR_DEFORMABLE_GROUP, 1))  # type: ignore[arg-type]
    x, offset, mask, weight = node.input[:4]
    bias = node.input[4] if len(node.input) == 5 else ""
    extra = {}
    dims = weight_dims.get(weight)
    if dims is not None:
        if len(dims) != 4:
            raise UnsupportedNodeError(
                f"plugin node '{node.name}': weight '{weight}' has shape {dims}; "
                "only 2-D DCN (4-D weight) exists",
                node=node.name,
            )
        extra["kernel_shape"] = [int(dims[2]), int(dims[3])]
    return helper.make_node(
        "DeformConv",
        [x, weight, offset, bias, mask],
        list(node.output),
        name=node.name,
        strides=stride,
        pads=[padding[0], padding[1], padding[0], padding[1]],
        dilations=dilation,
        group=group,
        offset_group=deformable_group,
        **extra,
    )


def _element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element types of the main graph's tensors, as far as inference knows them."""
    from dcnconvert.match.finder import graph_info, infer_shapes_safely

    light = onnx_io.skeleton(model)
    return graph_info(light, infer_shapes_safely(light)).dtypes


def _used_domains(model: onnx.ModelProto) -> set[str]:
    used: set[str] = set()
    for sub in _graphs(model.graph):
        used |= {n.domain for n in sub.node}
    for function in model.functions:
        used.add(function.domain)
        used |= {n.domain for n in function.node}
    return used


def plugin_model_to_standard(model: onnx.ModelProto, *, target_opset: int | None = None) -> onnx.ModelProto:
    """Replace every dcnconvert plugin node of ``model`` by standard ONNX ``DeformConv``.

    Args:
        model: a model whose DCN nodes are plugin nodes (``ModulatedDeformConv2d`` in the
            ``dcnconvert`` domain, either target; embedded weights become initializers); not modified.
        target_opset: default-domain opset to raise to when lower (default :data:`STANDARD_OPSET`).

    Returns:
        A new model; unchanged copy if it holds no plugin node.

    Raises:
        ModelError: bad plugin node, opset conversion failure, or a result that fails the checker.
    """
    opset = STANDARD_OPSET if target_opset is None else int(target_opset)
    if opset < STANDARD_OPSET:
        raise ModelError(f"target opset {opset} is below {STANDARD_OPSET}, the first with DeformConv")
    if not any(schema.is_plugin_node(n) for g in _graphs(model.graph) for n in g.node):
        return copy.deepcopy(model)
    source = model
    plugins = [n for g in _graphs(model.graph) for n in g.node if schema.is_plugin_node(n)]
    if any(weights.embedded_tensors(n) for n in plugins):
        source = onnx.ModelProto()
        source.CopyFrom(model)
        names = Names(source)
        for graph in _graphs(source.graph):
            weights.unembed_graph(graph, names)
    work = raise_default_opset(source, opset, "DeformConv")
    if work is model:
        work = onnx.ModelProto()
        work.CopyFrom(model)
    weight_dims = _initializer_dims(work.graph)
    dtypes = _element_types(work) if any(standard_quant.is_quantized(n) for n in plugins) else {}
    names = Names(work)
    for graph in _graphs(work.graph):
        nodes = list(graph.node)
        if not any(schema.is_plugin_node(n) for n in nodes):
            continue
        new_nodes = []
        for n in nodes:
            if standard_quant.is_quantized(n):
                new_nodes += standard_quant.expand(n, graph, names, dtypes, _deform_conv_node)
            else:
                new_nodes.append(_deform_conv_node(n, weight_dims) if schema.is_plugin_node(n) else n)
        del graph.node[:]
        graph.node.extend(new_nodes)
    used = _used_domains(work)
    kept = [o for o in work.opset_import if o.domain in ("", "ai.onnx") or o.domain in used]
    if len(kept) != len(work.opset_import):
        del work.opset_import[:]
        work.opset_import.extend(kept)
    work.ir_version = max(int(work.ir_version), MIN_IR_VERSION)
    _check(work)
    return work


def _check(model: onnx.ModelProto) -> None:
    """Run onnx.checker.

    A model over protobuf's 2 GB limit is checked as a weight-less copy
    (:func:`dcnconvert.model.io.check_skeleton`).
    """
    try:
        if model.ByteSize() <= _CHECKER_LIMIT_BYTES:
            onnx.checker.check_model(model)
            return
        onnx_io.check_skeleton(model)
    except onnx.checker.ValidationError as exc:
        raise ModelError(f"the standard-ONNX model does not pass the ONNX checker: {exc}") from exc
