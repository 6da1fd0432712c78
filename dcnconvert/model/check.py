"""Structural checks of a loaded ONNX model: refuse what TensorRT's parser refuses, warn on the unusual.

Why: a broken graph (a node reading a tensor nothing produces, a tensor produced twice) used to be
rewritten with exit 0 into an output just as broken, and TensorRT's parser then refused it far from the
cause. :func:`check_model` runs on every load (:func:`dcnconvert.model.io.load_model`) and at the start
of :func:`dcnconvert.transform.plugin.rewrite_model`, and names the node, the tensor and the fix.

Refused (:class:`~dcnconvert.errors.ModelError`), because TensorRT's ONNX parser refuses it too
(onnx-tensorrt 8.6-10.1: ``ModelImporter.cpp``, ``toposort.hpp``, ``ImporterContext.cpp``):

* a node input that is no graph input, initializer or node output ("Node input was not registered");
  TensorRT sorts the nodes first, so an input produced by a *later* node only gets a warning here,
  but a cycle is refused ("Failed to sort the model topologically");
* a tensor produced twice: by two nodes ("Output name is not unique"), by a node and as a graph input
  or initializer, or a graph input or initializer listed twice ("ONNX graph has duplicate tensor name");
* a graph output that nothing produces (TensorRT reserves output names with empty entries and has no
  tensor to mark);
* a graph input (not an initializer) or output without a tensor element type ("Failed to convert ONNX
  date type to TensorRT data type");
* a string field that is not valid UTF-8 (protobuf then hands Python ``bytes``, which every copy of
  the model trips over), shown with the bad bytes escaped.

Warned (on the ``dcnconvert.model.check`` logger: stderr, and ``warnings`` of ``--json``), because
TensorRT accepts it: a graph that is not topologically sorted, value_info without a type, unused
initializers, empty or duplicate node names, a graph output listed twice, odd opset imports, and what
``onnx.checker`` (a second opinion, on a weight-less copy) still rejects when none of that was found.

Subgraphs (If/Loop/Scan bodies) may read every name of the graphs around them; those are not flagged.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator

import onnx

from dcnconvert.errors import ModelError
from dcnconvert.model.strings import check_names, escape, label, node_ref

__all__ = ["check_model", "check_names", "checker_opinion", "escape", "node_ref"]
LOG = logging.getLogger("dcnconvert.model.check")
_DEFAULT = ("", "ai.onnx")
_HIDDEN_DOMAIN = "dcnconvert.model.check.unregistered"  # unknown default-domain ops, for the checker
_EXAMPLES = 3
#: TensorRT's parser warns below this default-domain opset ("... not guaranteed to work").
TRT_MIN_OPSET = 7
class Findings:
    """What one check found: ``errors`` (what TensorRT would refuse) and ``warnings``."""

    def __init__(self) -> None:
        self.errors: list[ModelError] = []
        self.warnings: list[str] = []

    def error(self, message: str, hint: str, node: str | None = None) -> None:
        self.errors.append(ModelError(message, hint=hint, node=node))


def _has_elem_type(vi: onnx.ValueInfoProto) -> bool:
    return vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type != 0


def _subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.name, attr.g
        for i, sub in enumerate(attr.graphs):
            yield f"{attr.name}[{i}]", sub


def _names_read(graph: onnx.GraphProto) -> Iterator[str]:
    """Every tensor name read in ``graph`` and its subgraphs (node inputs, graph outputs)."""
    for node in graph.node:
        yield from node.input
        for _, sub in _subgraphs(node):
            yield from _names_read(sub)
    yield from (o.name for o in graph.output)


def _examples(items: list[str]) -> str:
    return ", ".join(items[:_EXAMPLES]) + (" ..." if len(items) > _EXAMPLES else "")


def _check_graph(graph: onnx.GraphProto, outer: frozenset[str] | None, where: str, found: Findings) -> None:
    """Check one graph; ``outer``: the names its enclosing graphs define (None for the main graph)."""
    main, outer = outer is None, outer or frozenset()
    inits, inputs = [t.name for t in graph.initializer], [vi.name for vi in graph.input]
    for kind, names in (("initializer", inits), ("graph input", inputs)):
        for name, count in Counter(names).items():
            if count > 1:
                found.error(f"{kind} '{name}' is listed {count} times in {where}; TensorRT refuses a "
                            "duplicate tensor name", hint=f"keep one {kind} named '{name}'")
    sources, producer = set(inits) | set(inputs), {}
    in_where = "" if main else f" in {where}"
    for i, node in enumerate(graph.node):
        for out in (o for o in node.output if o):
            if out in producer:
                first = node_ref(graph.node[producer[out]], producer[out])
                found.error(f"{node_ref(node, i)} writes tensor '{out}', which {first} already produces"
                            f"{in_where}; TensorRT refuses a tensor produced twice", node=label(node, i),
                            hint="give one of the two outputs another name (and update its readers)")
            elif out in sources:
                kind = "initializer" if out in inits else "graph input"
                found.error(f"{node_ref(node, i)} writes tensor '{out}', which is also a {kind}{in_where}; "
                            "TensorRT refuses a duplicate tensor name", node=label(node, i),
                            hint=f"rename the node's output or the {kind}")
            else:
                producer[out] = i
    late: list[tuple[int, int, str]] = []
    visible: frozenset[str] = frozenset()  # what subgraphs may read: every name here and around
    for i, node in enumerate(graph.node):
        for name in (n for n in node.input if n and n not in sources and n not in outer):
            if name not in producer:
                around = "" if main else " or of the graphs around it"
                found.error(f"{node_ref(node, i)} reads tensor '{name}', which is no graph input, "
                            f"initializer or node output of {where}{around}", node=label(node, i),
                            hint=f"the node producing '{name}' is missing (a damaged or badly edited export)"
                            f": re-export the model, or make '{name}' a graph input")
            elif producer[name] >= i:
                late.append((i, producer[name], name))
        for attr, sub in _subgraphs(node):
            visible = visible or frozenset(outer | sources | set(producer))
            _check_graph(sub, visible, f"the '{attr}' body of {node_ref(node, i)}", found)
    if late:
        _order_findings(graph, late, where, found)
    for vi in graph.output:
        if vi.name not in sources and vi.name not in producer and vi.name not in outer:
            found.error(f"graph output '{vi.name}'{in_where} is produced by no node and is no graph input "
                        "or initializer", hint=f"drop '{vi.name}' from the graph outputs, or name the tensor "
                        "that should be the output")
        elif main and not _has_elem_type(vi):
            found.error(f"graph output '{vi.name}' has no tensor element type; TensorRT's parser refuses it",
                        hint="give the output its type (re-export, or set it with onnx-graphsurgeon)")
    for name, count in Counter(vi.name for vi in graph.output).items():
        if count > 1:
            found.warnings.append(f"graph output '{name}' is listed {count} times{in_where}")
    if main:
        _main_graph_findings(graph, set(inits), found)


def _order_findings(graph: onnx.GraphProto, late: list[tuple[int, int, str]], where: str,
                    found: Findings) -> None:
    """Inputs produced by later nodes: a cycle is an error (Kahn's algorithm), an unsorted graph a warning."""
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    readers: list[list[int]] = [[] for _ in graph.node]
    waiting = [0] * len(graph.node)
    for i, node in enumerate(graph.node):
        for p in {producer[n] for n in node.input if n in producer}:
            readers[p].append(i)
            waiting[i] += 1
    ready, done = [i for i, count in enumerate(waiting) if count == 0], set()
    while ready:
        done.add(p := ready.pop())
        for i in readers[p]:
            waiting[i] -= 1
            if waiting[i] == 0:
                ready.append(i)
    if len(done) < len(graph.node):
        stuck = [node_ref(node, i) for i, node in enumerate(graph.node) if i not in done]
        found.error(f"{where} has a cycle: {len(stuck)} node(s) wait, through their inputs, for their own "
                    f"outputs ({_examples(stuck)}); TensorRT refuses a graph with a cycle",
                    hint="re-export the model; a cycle is not a valid ONNX graph")
        return
    i, p, name = late[0]
    found.warnings.append(
        f"{where} is not topologically sorted: {node_ref(graph.node[i], i)} reads '{name}', produced later "
        f"by {node_ref(graph.node[p], p)} ({len(late)} such input(s)); TensorRT sorts the nodes itself, but "
        "onnx.checker and other ONNX tools refuse it (sort it: polygraphy surgeon sanitize --toposort)")


def _main_graph_findings(graph: onnx.GraphProto, inits: set[str], found: Findings) -> None:
    for vi in graph.input:
        if vi.name not in inits and not _has_elem_type(vi):
            found.error(f"graph input '{vi.name}' has no tensor element type; TensorRT's parser refuses it",
                        hint="give the input its type and shape (re-export, or use onnx-graphsurgeon)")
    untyped = [f"'{vi.name}'" for vi in graph.value_info if not vi.HasField("type")]
    if untyped:
        found.warnings.append(f"value_info without a type for {len(untyped)} tensor(s) "
                              f"({_examples(untyped)}); it tells nothing (TensorRT ignores value_info, "
                              "onnx.checker refuses this)")
    read = set(_names_read(graph))
    unused = [f"'{t.name}'" for t in graph.initializer if t.name not in read]
    if unused:
        found.warnings.append(f"{len(unused)} initializer(s) no node reads ({_examples(unused)}); they are "
                              "kept, TensorRT ignores them")
    unnamed = [f"'{label(n, i)}'" for i, n in enumerate(graph.node) if not n.name]
    if unnamed:
        found.warnings.append(f"{len(unnamed)} node(s) without a name ({_examples(unnamed)}); messages name "
                              "them by op type and position, TensorRT gives them generated layer names")
    counts = Counter(n.name for n in graph.node if n.name)
    twice = [f"'{name}' ({count} nodes)" for name, count in counts.items() if count > 1]
    if twice:
        found.warnings.append(f"node names used more than once: {_examples(twice)}; TensorRT makes layer "
                              "names unique, but messages naming these nodes are ambiguous")


def _opset_findings(model: onnx.ModelProto, found: Findings) -> None:
    versions: dict[str, list[int]] = {}
    for entry in model.opset_import:
        versions.setdefault("" if entry.domain in _DEFAULT else entry.domain, []).append(int(entry.version))
    for domain, vs in versions.items():
        shown = repr(domain) if domain else "the default ONNX domain"
        if len(vs) > 1:
            found.warnings.append(f"opset_import lists {shown} {len(vs)} times (versions {vs}); tools "
                                  "disagree on which one counts")
    default = versions.get("", [TRT_MIN_OPSET])[0]
    if default < TRT_MIN_OPSET:
        found.warnings.append(f"default ONNX opset {default} is older than {TRT_MIN_OPSET}; TensorRT's "
                              "parser warns that such models are not guaranteed to work")
    functions = {(f.domain, f.name) for f in model.functions}
    used = {"" if n.domain in _DEFAULT else n.domain for n in model.graph.node
            if (n.domain, n.op_type) not in functions}
    for domain in sorted(used - set(versions)):
        found.warnings.append(f"nodes use {repr(domain) if domain else 'the default ONNX domain'}, which "
                              "opset_import does not list; onnx.checker refuses this")


def checker_opinion(model: onnx.ModelProto) -> str | None:
    """What ``onnx.checker`` rejects in ``model`` (None: nothing, or it cannot run cheaply).

    It runs on a copy without the weights (external ones too, so nothing is read twice), where
    default-domain ops ONNX does not know (exporters' custom DCN ops, served by TensorRT plugins) are
    moved to a private domain and tensor types without a shape get an empty one: the checker stops at
    its first problem, and these are no problems for TensorRT.
    """
    from dcnconvert.model import tensors as onnx_tensors

    def drop(tensor: onnx.TensorProto, into: onnx.TensorProto) -> None:
        onnx_tensors.externalize(tensor, into, onnx_tensors.SKELETON_LOCATION, 0, 0)
        del into.external_data[1:]

    light = onnx.ModelProto()
    onnx_tensors.copy_light(model, light, drop)
    if any(t.data_location == onnx.TensorProto.EXTERNAL and not onnx_tensors.is_skeleton_tensor(t)
           for t in onnx_tensors.iter_tensors(light)):
        return None  # external data in subgraphs or attributes: the checker would read the files
    opset = next((e.version for e in light.opset_import if e.domain in _DEFAULT), 0)

    def hide(graph: onnx.GraphProto) -> bool:
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
                vi.type.tensor_type.shape.SetInParent()
        hidden = False
        for node in graph.node:
            hidden = any([hide(sub) for _, sub in _subgraphs(node)]) or hidden
            if node.domain in _DEFAULT and not onnx.defs.has(node.op_type, opset, ""):
                node.domain, hidden = _HIDDEN_DOMAIN, True
        return hidden

    if hide(light.graph):
        light.opset_import.add(domain=_HIDDEN_DOMAIN, version=1)
    try:
        onnx_tensors.check_skeleton(light)
    except onnx.checker.ValidationError as exc:
        text, _, context = str(exc).partition("==> Context:")
        return " ".join(text.split()) + (f" ({' '.join(context.split())})" if context.strip() else "")
    except Exception as exc:  # noqa: BLE001 - a second opinion that cannot be had is no finding
        LOG.debug("onnx.checker could not run (%s: %s)", type(exc).__name__, exc)
    return None


def check_model(model: onnx.ModelProto, *, warn: bool = True, second_opinion: bool = True) -> list[str]:
    """Check ``model`` (not modified); raise what TensorRT would refuse, return (and log) the warnings.

    Args:
        model: the model; its external data need not be loaded (nothing here reads tensor data).
        warn: log the warnings on the ``dcnconvert.model.check`` logger (the CLI collects them).
        second_opinion: also run :func:`checker_opinion` when nothing else was found.

    Raises:
        ModelError: the first problem (its message counts the others), naming the node and tensor.
    """
    check_names(model)
    found = Findings()
    _check_graph(model.graph, None, "the main graph", found)
    _opset_findings(model, found)
    if found.errors:
        first = found.errors[0]
        if len(found.errors) > 1:
            first.message += f" (and {len(found.errors) - 1} more problem(s) in this model)"
            first.args = (first.message,)
        raise first
    if second_opinion and not found.warnings:
        verdict = checker_opinion(model)
        if verdict:
            found.warnings.append(f"onnx.checker rejects the model: {verdict}; TensorRT's parser does not "
                                  "make this check, other ONNX tools may")
    if warn:
        for text in found.warnings:
            LOG.warning("%s", text)
    return found.warnings
