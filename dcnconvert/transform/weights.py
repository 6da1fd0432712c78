"""Constant weights embedded in the plugin node, or passed as its inputs (``--weights embed|input``).

Our plugin (target ``dcnconvert``) takes a constant weight and bias as node attributes
(:data:`dcnconvert.schema.ATTR_WEIGHT`, ``weight_shape``, ``bias``), which TensorRT's ONNX parser
hands to the creator as fields, so the plugin prepares them once instead of on every call.

* :func:`constant_sources` says whether a DCN node's weight and bias are constants: an initializer
  that is not also a graph input (a run-time feed could replace it), or the output of a ``Constant``
  node with a ``value`` tensor, of type FLOAT, FLOAT16 or BFLOAT16. Otherwise it says why not.
* :func:`add_weight_attributes` gives a plugin node the attributes, copying each tensor once (their
  element type kept); :func:`embed_pending` does that for the nodes of a rewrite, after the splice;
  :func:`embedded_tensors` reads them back; :func:`update_in_place` rewrites the other attributes of
  a node with embedded weights without copying them.
* :func:`move_to_initializers` turns embedded tensors into initializers again (retargeting to
  TensorRT's built-in plugin, ``--weights input``, and the standard-ONNX ``reference``);
  :func:`unembed_graph` does that for every plugin node of a graph.
* :func:`drop_unread` removes the initializers and ``Constant`` nodes that embedding left unread
  (a tensor something else still reads is kept).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import onnx
from onnx import helper

from dcnconvert import schema
from dcnconvert.match.finder import DcnMatch
from dcnconvert.model.strings import label

#: The weight roles and the attribute that carries each.
ATTRS: dict[str, str] = {"weight": schema.ATTR_WEIGHT, "bias": schema.ATTR_BIAS}
_DEFAULT = ("", "ai.onnx")


@dataclass(frozen=True)
class Source:
    """Where a constant weight or bias comes from in the main graph.

    Attributes:
        name: the tensor's name.
        initializer: its index in ``graph.initializer``, or -1 for the output of a ``Constant`` node.
    """

    name: str
    initializer: int = -1

    def tensor(self, graph: onnx.GraphProto, constants: dict[str, onnx.NodeProto]) -> onnx.TensorProto:
        """The tensor (with its data) in ``graph``; ``constants``: ``Constant`` nodes by output name."""
        if self.initializer >= 0:
            tensor = graph.initializer[self.initializer]
            if tensor.name == self.name:
                return tensor
        return next(a.t for a in constants[self.name].attribute if a.name == "value")


class Lookup:
    """What :func:`constant_sources` needs to know of the main graph, collected once."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph_inputs = {vi.name for vi in graph.input}
        self.initializers = {t.name: i for i, t in enumerate(graph.initializer)}
        self.producers: dict[str, int] = {}
        for index, node in enumerate(graph.node):
            for out in node.output:
                if out:
                    self.producers[out] = index
        self.graph = graph


def _dtype_name(data_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(data_type)
    except ValueError:
        return str(data_type)


def _source(role: str, name: str, lookup: Lookup) -> Source | str:
    """The constant behind ``name``, or why it is none."""
    what = f"{role} '{name}'"
    graph = lookup.graph
    if name in lookup.initializers:
        if name in lookup.graph_inputs:
            return f"{what} is an initializer that is also a graph input (a run-time feed may replace it)"
        tensor = graph.initializer[lookup.initializers[name]]
        source = Source(name, initializer=lookup.initializers[name])
    elif name in lookup.graph_inputs:
        return f"{what} is a graph input (its value is known at run time only)"
    elif name in lookup.producers:
        index = lookup.producers[name]
        node = graph.node[index]
        value = next((a for a in node.attribute
                      if a.name == "value" and a.type == onnx.AttributeProto.TENSOR), None)
        if node.op_type != "Constant" or node.domain not in _DEFAULT:
            return f"{what} is computed by {node.op_type} node '{label(node, index)}'"
        if value is None:
            return f"{what} comes from Constant node '{label(node, index)}' without a 'value' tensor"
        tensor = value.t
        source = Source(name)
    else:
        return f"{what} has no producer"
    if tensor.data_type not in schema.WEIGHT_DTYPES:
        return (f"{what} is {_dtype_name(tensor.data_type)}; the plugin embeds "
                f"{', '.join(schema.WEIGHT_DTYPES.values())} only")
    return source


def constant_sources(match: DcnMatch, lookup: Lookup) -> dict[str, Source] | str:
    """Role (``weight``, ``bias``) -> constant source of a node that takes them as inputs, or the reason
    (for the log) why they stay inputs."""
    found: dict[str, Source] = {}
    for role in ATTRS:
        name = match.inputs.get(role)
        if not name:
            continue
        source = _source(role, name, lookup)
        if isinstance(source, str):
            return source
        found[role] = source
    if "weight" not in found:
        return "the node has no weight input"
    return found


def add_weight_attributes(node: onnx.NodeProto, tensors: dict[str, onnx.TensorProto], shape: Iterable[int],
                          names: dict[str, str] | None = None) -> None:
    """Give the plugin ``node`` the ``weight``, ``weight_shape`` and (with a bias) ``bias`` attributes,
    in place, before its ``plugin_version`` (the C++ creator's field order).

    Args:
        node: the plugin node, where it stays (each tensor is copied once, into its model).
        tensors: role -> tensor; copied with its data (or its external-data reference) and type.
        shape: the weight's ``[Cout, C/group, kh, kw]``.
        names: role -> the name the copy gets (the tensor it came from, so that moving it back into
            an initializer restores that name); default: the tensor's own name.
    """
    names = names or {}
    at = next((i for i, a in enumerate(node.attribute) if a.name == schema.ATTR_PLUGIN_VERSION),
              len(node.attribute))
    tail = [_copy(a) for a in node.attribute[at:]]
    del node.attribute[at:]
    for role in ATTRS:
        if role not in tensors:
            continue
        attr = node.attribute.add(name=ATTRS[role], type=onnx.AttributeProto.TENSOR)
        attr.t.CopyFrom(tensors[role])
        if role in names:
            attr.t.name = names[role]
        if role == "weight":
            node.attribute.append(helper.make_attribute(schema.ATTR_WEIGHT_SHAPE, [int(d) for d in shape]))
    node.attribute.extend(tail)


def _copy(attr: onnx.AttributeProto) -> onnx.AttributeProto:
    out = onnx.AttributeProto()
    out.CopyFrom(attr)
    return out


def embedded_tensors(node: onnx.NodeProto) -> dict[str, onnx.TensorProto]:
    """Role -> the tensor of our plugin node's ``weight``/``bias`` attribute (empty for input weights)."""
    by_name = {a.name: a for a in node.attribute if a.type == onnx.AttributeProto.TENSOR}
    return {role: by_name[attr].t for role, attr in ATTRS.items() if attr in by_name}


#: The attributes that travel with an embedded weight (a quantized node's fields among them).
WEIGHT_ATTRIBUTES = (schema.ATTR_WEIGHT, schema.ATTR_WEIGHT_SHAPE, schema.ATTR_BIAS,
                     *(name for name, _, _ in schema.QUANT_FIELDS))


def is_weight_attribute(attr: onnx.AttributeProto) -> bool:
    return attr.name in WEIGHT_ATTRIBUTES


def _weight_shape(node: onnx.NodeProto, weight: onnx.TensorProto) -> list[int]:
    found = (list(a.ints) for a in node.attribute if a.name == schema.ATTR_WEIGHT_SHAPE)
    return next(found, list(weight.dims))


def move_to_initializers(graph: onnx.GraphProto, node: onnx.NodeProto,
                         unique: Callable[[str], str]) -> list[str]:
    """Copy the embedded weight and bias of the plugin ``node`` into new initializers of ``graph`` (dims
    ``weight_shape`` and ``[Cout]``, each copied once); returns their names, the node's inputs 4 and 5.
    ``unique(base)`` names them (base: the tensor's own name). The node itself is not changed."""
    tensors = embedded_tensors(node)
    shape = _weight_shape(node, tensors["weight"])
    base = node.name or node.output[0]
    names = []
    for role, tensor in tensors.items():
        name = unique(tensor.name or f"{base}/{role}")
        init = graph.initializer.add()
        init.CopyFrom(tensor)
        init.name = name
        del init.dims[:]
        init.dims.extend(int(d) for d in (shape if role == "weight" else shape[:1]))
        names.append(name)
    return names


def unembed_graph(graph: onnx.GraphProto, unique: Callable[[str], str]) -> int:
    """Move the embedded weight and bias of every float plugin node of ``graph`` into initializers (the
    node's inputs 4 and 5; quantized nodes keep theirs); returns how many nodes changed.
    ``unique(base)`` names the initializers."""
    changed = 0
    for node in graph.node:
        if not schema.is_plugin_node(node) or "weight" not in embedded_tensors(node):
            continue
        if any(a.name == schema.ATTR_QUANT_TYPE for a in node.attribute):
            continue  # quantized weights exist embedded only (transform.standard_quant expands the node)
        node.input.extend(move_to_initializers(graph, node, unique))
        for i in reversed(range(len(node.attribute))):
            if is_weight_attribute(node.attribute[i]):
                del node.attribute[i]
        changed += 1
    return changed


def update_in_place(node: onnx.NodeProto, new: onnx.NodeProto) -> None:
    """Make the plugin ``node`` with embedded weights what ``new`` (the same node without them, as the
    rewrite exported it) says, keeping its weight attributes where they are (not copied)."""
    node.name, node.op_type, node.domain = new.name, new.op_type, new.domain
    for field in ("input", "output"):
        del getattr(node, field)[:]
        getattr(node, field).extend(getattr(new, field))
    for i in reversed(range(len(node.attribute))):
        if not is_weight_attribute(node.attribute[i]):
            del node.attribute[i]
    at = next((i for i, a in enumerate(new.attribute) if a.name == schema.ATTR_PLUGIN_VERSION),
              len(new.attribute))
    for i, attr in enumerate(new.attribute[:at]):
        node.attribute.insert(i, attr)
    node.attribute.extend(new.attribute[at:])


def embed_pending(graph: onnx.GraphProto, pending: dict[str, dict[str, Source]]) -> None:
    """Embed the weights of the plugin nodes named by their output in ``pending`` (output -> role ->
    source), in place: each tensor is copied once, from its initializer or ``Constant`` in ``graph``."""
    wanted = {src.name for found in pending.values() for src in found.values() if src.initializer < 0}
    constants = {n.output[0]: n for n in graph.node
                 if n.op_type == "Constant" and n.domain in _DEFAULT and n.output and n.output[0] in wanted}
    for node in graph.node:
        found = pending.get(node.output[0]) if schema.is_plugin_node(node) and node.output else None
        if found is None:
            continue
        tensors = {role: src.tensor(graph, constants) for role, src in found.items()}
        add_weight_attributes(node, tensors, list(tensors["weight"].dims),
                              {role: src.name for role, src in found.items()})


def reads(graph: onnx.GraphProto) -> Iterator[str]:
    """Every name read in ``graph`` and its subgraphs (node inputs, graph outputs)."""
    yield from (o.name for o in graph.output)
    for node in graph.node:
        yield from node.input
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from reads(sub)


def drop_unread(graph: onnx.GraphProto, names: Iterable[str]) -> list[str]:
    """Remove the initializers and ``Constant`` nodes among ``names`` that nothing reads any more, and
    their value_info; returns the names dropped."""
    read = set(reads(graph))
    gone = {n for n in names if n not in read}
    if not gone:
        return []
    for seq, key in ((graph.initializer, lambda t: t.name), (graph.value_info, lambda v: v.name)):
        for i in reversed(range(len(seq))):
            if key(seq[i]) in gone:
                del seq[i]
    for i in reversed(range(len(graph.node))):
        node = graph.node[i]
        if node.op_type == "Constant" and node.domain in _DEFAULT and list(node.output) and \
                all(o in gone for o in node.output):
            del graph.node[i]
    return sorted(gone)
