"""Run an ONNX graph that contains dcnconvert plugin nodes, on the CPU, without TensorRT.

Plugin nodes (op_type ``ModulatedDeformConv2d`` in the ``dcnconvert`` domain, inputs
``x, offset, mask, weight[, bias]``, or ``x, offset, mask`` with the weight and bias embedded as the
TENSOR attributes ``weight``/``bias`` and ``weight_shape``) are computed by :mod:`support.reference`
in float64 and cast back to the dtype of their ``x`` input. Everything else runs on one of two
backends:

``"onnxruntime"`` (default)
    The graph is cut at the plugin nodes: each run of ordinary nodes between them becomes a small
    model run by ONNX Runtime (CPUExecutionProvider), each plugin node runs in NumPy in between.
    Chosen as the default because ORT is the runtime the ``reference``/``verify`` ground truth uses
    anyway, it is fast, and it is right for old opsets (see below). ORT's CPU provider computes FP16
    nodes that lack an FP16 kernel in FP32 (it inserts casts), so an FP16 graph comes out a little
    closer to FP32 than real FP16 arithmetic would. Plugin nodes inside subgraphs (If/Loop) are
    refused with a ModelError.

``"reference"``
    ``onnx.reference.ReferenceEvaluator`` with the plugin registered through ``new_ops``: an
    implementation independent of ONNX Runtime that keeps FP16 in FP16 and handles plugin nodes in
    subgraphs; slow for large tensors (pure NumPy per op). onnx 1.23's ``BatchNormalization`` for
    opsets 9-13 uses batch statistics (the schema default ``momentum`` is always filled in, so its
    inference branch is never taken); this module overrides it with inference-mode
    BatchNormalization (single output), which is what every exported model means.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from dcnconvert import schema
from dcnconvert.errors import ModelError, UsageError
from support.reference import modulated_deform_conv2d

__all__ = ["BACKENDS", "is_plugin_node", "plugin_node_forward", "run_model"]

BACKENDS = ("onnxruntime", "reference")


is_plugin_node = schema.is_plugin_node


def _pair(attrs: Mapping[str, object], name: str, default: Sequence[int]) -> tuple:
    value = attrs.get(name, default)
    if isinstance(value, (int, np.integer)):
        return (int(value), int(value))
    return tuple(int(v) for v in value)  # type: ignore[union-attr]


def _embedded(attrs: Mapping[str, object], name: str, shape: Sequence[int]) -> np.ndarray | None:
    """An embedded TENSOR attribute (a TensorProto, or an array) as float64 of ``shape``."""
    value = attrs.get(name)
    if value is None:
        return None
    array = numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)
    return np.asarray(array, dtype=np.float64).reshape(tuple(int(d) for d in shape))


def plugin_node_forward(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, object]) -> np.ndarray:
    """Compute one plugin node from its inputs and attributes (as Python values).

    Args:
        inputs: ``x, offset, mask, weight[, bias]``; a missing bias may be ``None``. With the
            ``weight`` attribute: ``x, offset, mask``.
        attrs: the node's attributes by name (``stride``, ``padding``, ... as in :mod:`dcnconvert.schema`;
            ``weight``/``bias`` as TensorProtos or arrays, ``weight_shape`` as a list).

    Returns:
        The output, in the dtype of ``x`` (computed in float64).
    """
    if schema.ATTR_WEIGHT in attrs:
        if len(inputs) != 3 or any(v is None for v in inputs):
            raise ModelError(f"a {schema.PLUGIN_NAME} node with an embedded weight needs inputs x, offset, "
                             f"mask; got {len(inputs)} inputs")
        shape = attrs[schema.ATTR_WEIGHT_SHAPE]
        weight = _embedded(attrs, schema.ATTR_WEIGHT, shape)  # type: ignore[arg-type]
        bias = _embedded(attrs, schema.ATTR_BIAS, shape[:1])  # type: ignore[index]
    elif schema.ATTR_BIAS in attrs or schema.ATTR_WEIGHT_SHAPE in attrs:
        raise ModelError(f"a {schema.PLUGIN_NAME} node with an embedded bias or weight_shape needs the "
                         "embedded weight too")
    elif len(inputs) not in (4, 5) or any(v is None for v in inputs[:4]):
        raise ModelError(
            f"a {schema.PLUGIN_NAME} node needs inputs x, offset, mask, weight[, bias]; "
            f"got {len(inputs)} inputs"
        )
    else:
        weight = inputs[3]
        bias = inputs[4] if len(inputs) == 5 else None
    x = np.asarray(inputs[0])
    out = modulated_deform_conv2d(
        x,
        inputs[1],
        inputs[2],
        weight,
        bias,
        stride=_pair(attrs, schema.ATTR_STRIDE, (1, 1)),
        padding=_pair(attrs, schema.ATTR_PADDING, (0, 0)),
        dilation=_pair(attrs, schema.ATTR_DILATION, (1, 1)),
        group=int(attrs.get(schema.ATTR_GROUP, 1)),  # type: ignore[arg-type]
        deformable_group=int(attrs.get(schema.ATTR_DEFORMABLE_GROUP, 1)),  # type: ignore[arg-type]
    )
    return out.astype(x.dtype)


def _node_attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _reference_new_ops() -> list:
    """OpRun classes for ReferenceEvaluator: the plugin node, and an inference BatchNormalization."""
    from onnx.reference.op_run import OpRun

    class ModulatedDeformConv2d(OpRun):  # the class name must equal the op_type
        op_domain = schema.PLUGIN_DOMAIN

        def _run(self, *inputs, **attrs):
            return (plugin_node_forward(list(inputs), _node_attrs(self.onnx_node)),)

    class BatchNormalization(OpRun):
        op_domain = ""

        def _run(self, x, scale, bias, mean, var, **attrs):
            node = self.onnx_node
            node_attrs = _node_attrs(node)
            if len([o for o in node.output if o]) != 1 or node_attrs.get("training_mode", 0):
                raise ModelError(
                    f"BatchNormalization '{node.name}' in training mode is not supported",
                    hint="export the model in eval mode",
                    node=node.name,
                )
            eps = float(node_attrs.get("epsilon", 1e-5))
            shape = (1, -1) + (1,) * (x.ndim - 2)
            y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape)
            return ((y + bias.reshape(shape)).astype(x.dtype),)

    return [ModulatedDeformConv2d, BatchNormalization]


def _check_feeds(graph: onnx.GraphProto, feeds: Mapping[str, np.ndarray]) -> None:
    initializers = {init.name for init in graph.initializer}
    missing = [i.name for i in graph.input if i.name not in feeds and i.name not in initializers]
    if missing:
        raise UsageError(
            f"no value given for graph input(s) {missing}", hint="pass a feed for every graph input"
        )
    unknown = sorted(set(feeds) - {i.name for i in graph.input})
    if unknown:
        raise UsageError(
            f"feeds {unknown} are not graph inputs", hint=f"inputs: {[i.name for i in graph.input]}"
        )


def ort_outputs(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], names: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """``model`` (standard ONNX operators only) run by ONNX Runtime on the CPU: the outputs ``names``,
    or every graph output in order, by name. Feeds for names the model does not take are left out."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    names = list(names) if names else [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted}), strict=True))


def run_model(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    backend: str = "onnxruntime",
    output_names: Iterable[str] | None = None,
) -> dict[str, np.ndarray]:
    """Run ``model`` (which may contain dcnconvert plugin nodes) on ``feeds``.

    Args:
        model: the model; not modified.
        feeds: a value for every graph input that has no initializer, by name.
        backend: ``"onnxruntime"`` (default) or ``"reference"`` (onnx.reference.ReferenceEvaluator)
            for the non-plugin nodes; see the module docstring.
        output_names: which outputs to return (default: every graph output).

    Returns:
        ``{output name: array}``; plugin outputs have the dtype of the plugin's ``x`` input.

    Raises:
        UsageError: a bad backend name, missing or unknown feeds.
        ModelError: a plugin node nested in a subgraph (onnxruntime backend) or with bad inputs.
    """
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}", hint=f"use one of {', '.join(BACKENDS)}")
    _check_feeds(model.graph, feeds)
    names = list(output_names) if output_names is not None else [o.name for o in model.graph.output]
    if backend == "reference":
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(model, new_ops=_reference_new_ops())
        results = evaluator.run(names, dict(feeds))
        return dict(zip(names, results, strict=True))
    return _run_split(model, feeds, names)


# --------------------------------------------------------------------------------------------------
# ONNX Runtime backend: cut the graph at the plugin nodes.


def _subgraph_inputs(graph: onnx.GraphProto) -> set[str]:
    """Names a (sub)graph reads from the enclosing scope (inputs of its nodes not produced inside)."""
    produced = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        used |= _node_reads(node)
        produced |= set(node.output)
    return used - produced


def _node_reads(node: onnx.NodeProto) -> set[str]:
    reads = {name for name in node.input if name}
    for attr in node.attribute:
        subgraphs = ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else []) + list(attr.graphs)
        for sub in subgraphs:
            for inner in sub.node:
                if is_plugin_node(inner):
                    raise ModelError(
                        f"plugin node '{inner.name}' sits inside a subgraph of '{node.name}'",
                        hint="use backend='reference'",
                    )
            reads |= _subgraph_inputs(sub)
    return reads


def _run_segment(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    known: dict[str, np.ndarray],
    initializers: dict[str, onnx.TensorProto],
    wanted: set[str],
) -> None:
    import onnxruntime as ort

    produced: set[str] = set()
    reads: list[str] = []
    for node in nodes:
        for name in sorted(_node_reads(node)):
            if name not in produced and name not in reads:
                reads.append(name)
        produced |= {o for o in node.output if o}
    outputs = [name for node in nodes for name in node.output if name in wanted]
    if not outputs:
        return
    graph_inputs, graph_inits = [], []
    for name in reads:
        if name in known:
            arr = known[name]
            elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, elem, arr.shape))
        elif name in initializers:
            graph_inits.append(initializers[name])
        else:
            raise ModelError(
                f"tensor '{name}' is read before it is produced (graph not topologically sorted)"
            )
    graph = helper.make_graph(
        nodes,
        "segment",
        graph_inputs,
        [onnx.ValueInfoProto(name=name) for name in outputs],
        initializer=graph_inits,
        value_info=[vi for vi in model.graph.value_info if vi.name in produced],
    )
    seg = helper.make_model(
        graph,
        opset_imports=[o for o in model.opset_import if o.domain != schema.PLUGIN_DOMAIN],
        ir_version=model.ir_version,
    )
    seg.functions.extend(model.functions)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(seg.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: known[i.name] for i in graph_inputs}
    for name, value in zip(outputs, session.run(outputs, feeds), strict=True):
        known[name] = value


def _run_split(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], names: list[str]
) -> dict[str, np.ndarray]:
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    known: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in feeds.items()}
    # Every tensor that something after its producer (or the caller) needs.
    needed_later: set[str] = set(names)
    for node in graph.node:
        needed_later |= _node_reads(node)
    segment: list[onnx.NodeProto] = []
    for node in graph.node:
        if not is_plugin_node(node):
            segment.append(node)
            continue
        _run_segment(model, segment, known, initializers, needed_later)
        segment = []
        values: list[np.ndarray | None] = []
        for name in node.input:
            if not name:
                values.append(None)
            elif name in known:
                values.append(known[name])
            elif name in initializers:
                values.append(numpy_helper.to_array(initializers[name]))
            else:
                raise ModelError(f"input '{name}' of plugin node '{node.name}' has no value")
        if len(values) == 5 and values[4] is None:
            values = values[:4]
        known[node.output[0]] = plugin_node_forward(values, _node_attrs(node))
    _run_segment(model, segment, known, initializers, needed_later)
    out = {}
    for name in names:
        if name in known:
            out[name] = known[name]
        elif name in initializers:
            out[name] = numpy_helper.to_array(initializers[name])
        else:
            raise ModelError(f"output '{name}' was not computed")
    return out
