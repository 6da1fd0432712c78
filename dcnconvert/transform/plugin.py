"""Rewrite every deformable convolution into the ``ModulatedDeformConv2d`` plugin node.

How it works:

1. A weight-less :func:`~dcnconvert.model.io.skeleton` of the model is shape-inferred and matched
   (:mod:`dcnconvert.match.finder`); every DCN node is validated for the target
   (:mod:`dcnconvert.match.validate`)
   before anything changes. The first problem is raised (its message counts the others).
2. The skeleton is imported with onnx-graphsurgeon; for each node to convert, the replacement is
   built there: an optional zero ``Pad`` of x (asymmetric pads), the mask (a ``Slice`` +
   ``Sigmoid`` of combined logits, or a ones tensor ``ConstantOfShape(Shape(offset)[0], dg*kh*kw,
   Shape(offset)[2:4])`` for DCNv1, which follows dynamic batch and spatial dims), and the plugin
   node with the original node's name and output tensor.
3. The new nodes are exported and spliced into the output model at the original node's position;
   embedded weights are then copied into the plugin nodes (:mod:`dcnconvert.transform.weights`).
   Everything else (other nodes, graph inputs/outputs, initializers, value_info, opsets, IR
   version, metadata, doc strings) is left exactly as it was, but for the initializers and
   ``Constant`` nodes that embedding left unread, which are dropped. Our domain is added to
   opset_import.

With ``embed_weights`` (the default) and a target whose plugin takes them (``dcnconvert``), a
constant weight and bias (:func:`dcnconvert.transform.weights.constant_sources`: an initializer that
is not also a graph input, or a ``Constant`` output) go into the plugin node as the attributes
``weight``, ``weight_shape`` and ``bias``, in their own element type; the node then has the inputs
``x, offset, mask``, and an initializer or ``Constant`` that nothing else reads is dropped. A weight
that is not a constant stays an input (an INFO log line names the node and why). Without
``embed_weights``, or for TensorRT's built-in plugin, weights are inputs: embedded ones move back
into initializers. Each tensor is copied once, into the model's own node or initializer; weights
whose external data is not loaded yet move as references
(:func:`dcnconvert.steps.rewrite_in_memory` reads the data after the rewrite).

A model whose nodes are already in plugin form for the target (weights as asked) is returned
unchanged; plugin nodes for the other target are retargeted. ``allow_tf32=True`` puts
``allow_tf32 = 1`` on every node; without it the attribute is never added, and a node that has it
keeps it (dropped, with a warning, for a target without the field). Op types that only look like a
DCN (``"unknown"`` form) are skipped with a warning; a recognised form that cannot be converted
raises. A caller's ``keep`` predicate can leave chosen recognised nodes exactly as they are (neither
validated nor converted).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import onnx
import onnx_graphsurgeon as gs
from onnx import helper
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter

from dcnconvert import schema
from dcnconvert.errors import ModelError, NoMatchError, UnsupportedNodeError
from dcnconvert.match.finder import DcnMatch, find_dcn_nodes, graph_info, infer_shapes_safely
from dcnconvert.match.validate import resolve_target, validate_matches
from dcnconvert.model import check as model_check
from dcnconvert.model import io as onnx_io
from dcnconvert.model.opsets import opset_version
from dcnconvert.transform import quant, weights
from dcnconvert.transform.builder import Builder, Names, element_type

LOG = logging.getLogger("dcnconvert.transform.plugin")

#: Default-domain opset added when a model imports none and helper nodes are needed.
FALLBACK_OPSET = 13


@dataclass
class RewriteReport:
    """What :func:`rewrite_model` did.

    Attributes:
        target: name of the target.
        allow_tf32: whether ``allow_tf32 = 1`` was asked for.
        weights: ``"embed"`` (constant weights asked into the plugin nodes) or ``"input"``.
        matches: every DCN node found (see :class:`~dcnconvert.match.finder.DcnMatch`).
        rewritten: names (labels) of the nodes replaced or retargeted.
        unchanged: names of nodes already in plugin form for the target.
        skipped: (name, reason) of nodes left alone (unknown DCN-like op types, or nodes the
            caller's ``keep`` predicate kept).
        warnings: messages for the user.
        embedded: names of the plugin nodes of the result that carry their weights as attributes.
        weights_as_inputs: (name, reason) of nodes whose weights stay inputs although embedding
            was asked for (a weight that is not a constant).
        quantized: (name, quant_type) of the quantized plugin nodes of the result (Q/DQ taken over,
            or already quantized plugin nodes).
    """

    target: str
    allow_tf32: bool = False
    weights: str = "embed"
    matches: list[DcnMatch] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    embedded: list[str] = field(default_factory=list)
    weights_as_inputs: list[tuple[str, str]] = field(default_factory=list)
    quantized: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "allow_tf32": self.allow_tf32,
            "weights": self.weights,
            "embedded": list(self.embedded),
            "weights_as_inputs": [{"node": n, "reason": r} for n, r in self.weights_as_inputs],
            "quantized": [{"node": n, "quant_type": q} for n, q in self.quantized],
            "matches": [m.to_dict() for m in self.matches],
            "rewritten": list(self.rewritten),
            "unchanged": list(self.unchanged),
            "skipped": [{"node": n, "reason": r} for n, r in self.skipped],
            "warnings": list(self.warnings),
        }


def _tf32_for(match: DcnMatch, target: schema.Target, allow_tf32: bool) -> bool:
    """``allow_tf32`` of the node written for ``match``: asked for or already there, if the target has it."""
    return target.has_allow_tf32 and (allow_tf32 or (match.attrs is not None and match.attrs.allow_tf32))


def _replace(builder: Builder, match: DcnMatch, target: schema.Target, old: gs.Node,
             warnings: list[str], allow_tf32: bool, weight_inputs: list[str],
             qdq: quant.QuantDcn | quant.Fallback | None = None) -> list[gs.Node]:
    """Build the plugin node (and helpers) for ``match`` in place of ``old``; ``weight_inputs`` are the
    names of its weight[, bias] inputs (none when they are embedded); ``qdq``: its Q/DQ
    (:mod:`dcnconvert.transform.quant`)."""
    builder.nodes = []
    base = match.node_name or match.output or "dcn"
    extra = quant.inputs(builder, match, qdq, base)
    t = {**builder.tensors, **{match.inputs[role]: v for role, v in extra.read.items()}}
    x = t[match.inputs["x"]] if extra.x is None else extra.x
    if match.prepad and extra.x is None:
        x = builder.pad(base, x, match.prepad)
    dg_k = match.attrs.deformable_group * match.kernel[0] * match.kernel[1] if match.kernel else None
    if match.mask_kind == "logits":
        if dg_k is None:
            raise UnsupportedNodeError(
                f"node '{match.label}': kernel size unknown, cannot split the offset/mask logits",
                hint="give the weight a static shape (an initializer)", node=match.label)
        om = t[match.inputs["offset_mask"]]
        offset = builder.channel_slice(f"{base}/dcnconvert_offset", om, 0, 2 * dg_k)
        logits = builder.channel_slice(f"{base}/dcnconvert_mask_logits", om, 2 * dg_k, 3 * dg_k)
        mask = builder.node("Sigmoid", f"{base}/dcnconvert_mask", [logits])[0]
    else:
        offset = t[match.inputs["offset"]]
        if match.mask_kind == "ones":
            static = match.shapes.get("offset")
            static = static if static and all(isinstance(d, int) for d in static) else None
            dtype = element_type(match, builder.dtypes, warnings)
            mask = builder.ones_mask(base, offset, dg_k, dtype, static)
        else:
            mask = t[match.inputs["mask"]]
    inputs = [x, offset, mask] + [t[name] if name in t else gs.Variable(name) for name in weight_inputs]
    outputs, after = list(old.outputs), []
    if extra.requantize is not None:
        outputs, after = quant.requantized(builder, base, extra.requantize, outputs)
    old.inputs.clear()
    old.outputs.clear()
    plugin = gs.Node(
        op=schema.PLUGIN_NAME,
        name=match.node_name,
        domain=schema.PLUGIN_DOMAIN,
        attrs=replace(match.attrs, allow_tf32=_tf32_for(match, target, allow_tf32)).node_attrs(target),
        inputs=inputs,
        outputs=outputs,
    )
    return builder.nodes + [plugin] + after


def rewrite_model(
    model: onnx.ModelProto,
    target: schema.Target | str = schema.DEFAULT_TARGET,
    *,
    require_match: bool = False,
    inplace: bool = False,
    keep: Callable[[DcnMatch], bool] | None = None,
    allow_tf32: bool = False,
    embed_weights: bool = True,
) -> tuple[onnx.ModelProto, RewriteReport]:
    """Replace every DCN node of ``model`` by a ``ModulatedDeformConv2d`` plugin node.

    Args:
        model: the model (with its weights loaded).
        target: ``"dcnconvert"`` (default, our bundled plugin) or ``"trt-builtin"``, or a Target.
        require_match: raise :class:`NoMatchError` when there is no DCN node.
        inplace: reuse ``model``'s memory for the result (the input object is then the result);
            with the default ``False`` the input is left untouched and the result is a copy.
        keep: called with the match of every recognised DCN node; a node for which it returns True
            is left exactly as it is (neither validated nor converted) and listed in
            ``report.skipped``. Kept nodes still count as DCN nodes for ``require_match``.
        allow_tf32: write ``allow_tf32 = 1`` on every plugin node: FLOAT32 layers of our plugin may
            then use TF32 math (FLOAT16/BFLOAT16 ignore it). Only for a target whose plugin has the
            field (``dcnconvert``).
        embed_weights: put constant weights and biases into the plugin nodes (where the target's
            plugin takes them: ``dcnconvert``; ``trt-builtin`` always gets inputs). ``False`` keeps
            them as node inputs (refittable by TensorRT) and moves embedded ones back into initializers.

    Returns:
        (the rewritten model, a :class:`RewriteReport`).

    Raises:
        ValidationError: a DCN node with invalid attributes or inconsistent shapes.
        UnsupportedNodeError: a DCN node that cannot be converted (or not for ``target``).
        NoMatchError: no DCN node and ``require_match``.
        UsageError: unknown target, or ``allow_tf32`` for a target without the field.
        ModelError: a graph TensorRT's parser refuses (:func:`dcnconvert.model.check.check_model`).
    """
    target = resolve_target(target)
    if allow_tf32 and not target.has_allow_tf32:
        raise schema.tf32_target_error(target, "allow_tf32=True")
    embed = bool(embed_weights) and target.has_embedded_weights
    report = RewriteReport(target=target.name, allow_tf32=bool(allow_tf32),
                           weights="embed" if embed else "input")
    model_check.check_model(model, warn=False, second_opinion=False)  # a ModelProto from a library caller
    light = onnx_io.skeleton(model)
    info = graph_info(light, infer_shapes_safely(light))
    matches = find_dcn_nodes(light, info=info)
    report.matches = matches
    known = [m for m in matches if m.form != "unknown"]
    for m in matches:
        if m.form == "unknown":
            report.skipped.append((m.label, m.reason or "unknown form"))
            report.warnings.append(f"node '{m.label}' ({m.op_type}) left as is: {m.reason}")
    if not known:
        message = "no deformable convolution found in the model"
        if require_match:
            raise NoMatchError(message, hint="check the model, or drop --require-match")
        report.warnings.append(message + "; nothing to rewrite")
    if keep is not None:
        flags = [bool(keep(m)) for m in known]
        report.skipped += [(m.label, "kept as is (keep)") for m, k in zip(known, flags, strict=True) if k]
        known = [m for m, k in zip(known, flags, strict=True) if not k]
    validate_matches(known, target)
    quant.check_quantized_nodes(known, target, embed)
    qdq = quant.plan(model, known, info, target, embed, report.warnings)
    sources = _weight_sources(light, [m for m in known if not qdq.quantized(m.index)], embed, report)
    work = []
    for m in known:
        had_tf32 = m.attrs is not None and m.attrs.allow_tf32
        embedded = m.index in sources or (embed and bool(m.embedded)) or bool(qdq.quantized(m.index))
        if qdq.quantized(m.index) or m.quant:
            report.quantized.append((m.label, m.quant or qdq.quantized(m.index).qtype))
        if embedded:
            report.embedded.append(m.label)
        if (m.form == "dcnconvert.ModulatedDeformConv2d" and m.node_target == target.name
                and had_tf32 == _tf32_for(m, target, allow_tf32) and bool(m.embedded) == embedded):
            report.unchanged.append(m.label)
        else:
            work.append(m)
            if had_tf32 and not target.has_allow_tf32:
                report.warnings.append(
                    f"node '{m.label}': {schema.ATTR_ALLOW_TF32} = 1 dropped: the plugin of --target "
                    f"{target.name} has no such field")
    out = model if inplace else _copy(model)
    if not work:
        return out, report

    opset = info.opset or FALLBACK_OPSET
    builder = Builder(_import(light), Names(light), opset, info.dtypes)
    replacements: dict[int, list[onnx.NodeProto]] = {}
    new_initializers: list[onnx.TensorProto] = []
    in_place: set[int] = set()  # plugin nodes that keep their embedded weights: updated where they are
    pending: dict[str, dict[str, weights.Source]] = {}  # plugin output -> weights to embed after the splice
    quantized: dict[str, tuple[quant.QuantDcn, str]] = {}  # plugin output -> quantized weights to embed
    for m in work:
        old = builder.graph.nodes[m.index]
        embedding = embed and (bool(m.embedded) or m.index in sources)
        found = qdq.quantized(m.index)
        if found is not None:
            weight_inputs, embedding = [], True
        elif embedding:
            weight_inputs = []
        elif m.embedded:  # copied into initializers now, before the splice drops the node
            weight_inputs = weights.move_to_initializers(out.graph, out.graph.node[m.index], builder.names)
        else:
            weight_inputs = [m.inputs[role] for role in weights.ATTRS if role in m.inputs]
        new_nodes = _replace(builder, m, target, old, report.warnings, allow_tf32, weight_inputs,
                             qdq.nodes.get(m.index))
        replacements[m.index] = [OnnxExporter.export_node(n) for n in new_nodes]
        written = next(n.output[0] for n in replacements[m.index] if schema.is_plugin_node(n))
        if found is not None:
            quantized[written] = (found, m.inputs["weight"])
        elif embedding and m.embedded:
            in_place.add(m.index)
        elif embedding:
            pending[written] = sources[m.index]
        for n in new_nodes:
            for tensor in n.inputs:
                if isinstance(tensor, gs.Constant) and tensor.name not in info.initializers:
                    new_initializers.append(OnnxExporter.export_tensor_proto(tensor))
        report.rewritten.append(m.label)
        how = " (weights embedded)" if embedding else ""
        LOG.info("rewrote %s (%s) -> %s%s", m.label, m.form, schema.PLUGIN_NAME, how)

    _splice(out, replacements, new_initializers, needs_default_opset=info.opset == 0, report=report,
            in_place=in_place)
    weights.embed_pending(out.graph, pending)
    dropped = quant.finish(out.graph, quantized)
    dropped += weights.drop_unread(out.graph, {s.name for found in sources.values() for s in found.values()})
    if dropped:
        LOG.debug("embedded and no longer read, dropped: %s", ", ".join(dropped))
    _check(light, out, report)
    return out, report


def _weight_sources(light: onnx.ModelProto, known: list[DcnMatch], embed: bool,
                    report: RewriteReport) -> dict[int, dict[str, weights.Source]]:
    """Node index -> constant sources of the weights to embed, for nodes that take them as inputs."""
    if not embed:
        return {}
    lookup = weights.Lookup(light.graph)
    found: dict[int, dict[str, weights.Source]] = {}
    for m in known:
        if m.embedded:
            continue
        sources = weights.constant_sources(m, lookup)
        if isinstance(sources, str):
            report.weights_as_inputs.append((m.label, sources))
            LOG.info("node '%s': the weights stay inputs of the plugin node: %s", m.label, sources)
        else:
            found[m.index] = sources
    return found


@contextlib.contextmanager
def _gs_output_to_log():
    """onnx-graphsurgeon prints its warnings on stdout; keep stdout for results (``--json``)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    text = buffer.getvalue().strip()
    if text:
        LOG.debug("onnx-graphsurgeon: %s", text)


def _import(light: onnx.ModelProto) -> gs.Graph:
    """The skeleton as a graphsurgeon graph whose ``nodes[i]`` is ``light.graph.node[i]``."""
    with _gs_output_to_log():
        graph = gs.import_onnx(light)
    if len(graph.nodes) != len(light.graph.node):  # pragma: no cover - graphsurgeon keeps node order
        raise ModelError("internal: graphsurgeon changed the node list", hint="report this as a bug")
    return graph


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _splice(out: onnx.ModelProto, replacements: dict[int, list[onnx.NodeProto]],
            initializers: list[onnx.TensorProto], needs_default_opset: bool, report: RewriteReport,
            in_place: set[int]) -> None:
    """Put the replacements where their nodes were (``in_place``: a plugin node with embedded weights
    that becomes one plugin node again is updated, so that its weights are not copied), add the new
    initializers and our domain."""
    nodes = out.graph.node
    for index in sorted(replacements, reverse=True):
        if index in in_place:
            (new,) = replacements[index]
            weights.update_in_place(nodes[index], new)
            continue
        doc = nodes[index].doc_string
        del nodes[index]
        for offset, new in enumerate(replacements[index]):
            if new.op_type == schema.PLUGIN_NAME and doc:
                new.doc_string = doc
            nodes.insert(index + offset, new)
    seen = set()
    for tensor in initializers:
        if tensor.name not in seen:
            out.graph.initializer.append(tensor)
            seen.add(tensor.name)
    domains = {entry.domain: entry for entry in out.opset_import}
    if schema.PLUGIN_DOMAIN not in domains:
        out.opset_import.append(helper.make_opsetid(schema.PLUGIN_DOMAIN, schema.PLUGIN_DOMAIN_VERSION))
    elif domains[schema.PLUGIN_DOMAIN].version != schema.PLUGIN_DOMAIN_VERSION:
        report.warnings.append(
            f"opset_import has domain '{schema.PLUGIN_DOMAIN}' version "
            f"{domains[schema.PLUGIN_DOMAIN].version}; kept"
        )
    helpers_added = any(n.domain == "" for new in replacements.values() for n in new)
    if needs_default_opset and helpers_added and opset_version(out) is None:
        out.opset_import.append(helper.make_opsetid("", FALLBACK_OPSET))
        report.warnings.append(f"the model imported no default ONNX opset; added version {FALLBACK_OPSET}")


def _check(original_light: onnx.ModelProto, out: onnx.ModelProto, report: RewriteReport) -> None:
    """onnx.checker on the weight-less result; an input that already failed only gives a warning."""
    try:
        onnx_io.check_skeleton(onnx_io.skeleton(out, 0))
    except onnx.checker.ValidationError as exc:
        try:
            onnx_io.check_skeleton(original_light)
        except onnx.checker.ValidationError as before:
            report.warnings.append(f"onnx.checker rejects the model (already before the rewrite): {before}")
            return
        raise ModelError(
            f"internal error: the rewritten model fails onnx.checker: {exc}",
            hint="report this as a bug with the model's `dcnconvert inspect --json` output",
        ) from None
