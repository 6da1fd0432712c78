"""The tensors of an ONNX model, and copies of a model without its weights.

* :func:`iter_tensors` walks every TensorProto (initializers, tensor attributes, subgraphs,
  functions); :func:`tensor_nbytes` / :func:`model_size_bytes` size them without serialising.
* :func:`skeleton` makes a cheap copy of a model whose large tensors (main-graph initializers, and
  the weights embedded in plugin nodes) carry no data (an external reference to a file that does not
  exist), for shape inference, matching and checking without duplicating the weights;
  :func:`check_skeleton` runs the ONNX checker on one.
* :func:`copy_light` copies a model with every main-graph initializer, and every TENSOR attribute of
  a main-graph plugin node (:func:`dcnconvert.schema.is_plugin_node`), routed through a callback
  (the building block of skeletons and of :mod:`dcnconvert.model.io`'s streamed and external-data
  saves); :func:`externalize` turns a tensor's copy into an external reference.

The ModelProto passed in is never modified.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx

from dcnconvert.schema import is_plugin_node

#: ``location`` written into data-less tensors of a :func:`skeleton`.
SKELETON_LOCATION = "__dcnconvert_skeleton__.bin"
#: Skeletons keep the data of tensors up to this size (shape-like constants that inference reads).
SKELETON_KEEP_BYTES = 4096


def iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto of the model: initializers and tensor attributes, in subgraphs and functions too."""

    def from_graph(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
        yield from graph.initializer
        for node in graph.node:
            yield from from_nodes_attrs(node)

    def from_nodes_attrs(node: onnx.NodeProto) -> Iterator[onnx.TensorProto]:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from from_graph(attr.g)
            for sub in attr.graphs:
                yield from from_graph(sub)

    yield from from_graph(model.graph)
    for func in model.functions:
        for node in func.node:
            yield from from_nodes_attrs(node)


def uses_external_data(model: onnx.ModelProto) -> bool:
    """Whether any tensor of ``model`` refers to an external data file."""
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in iter_tensors(model))


def tensor_nbytes(tensor: onnx.TensorProto) -> int:
    """Size of a tensor's data in bytes (0 for external or empty tensors)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return 0
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data)
    count = int(np.prod(tensor.dims)) if len(tensor.dims) else 1
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        itemsize = 4
    return count * itemsize if _has_typed_data(tensor) else 0


def _has_typed_data(tensor: onnx.TensorProto) -> bool:
    return any(
        len(getattr(tensor, field))
        for field in ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")
    )


def model_size_bytes(model: onnx.ModelProto) -> int:
    """Serialized size of ``model`` in bytes (within a few bytes per large tensor).

    ``ByteSize()`` of a model with large weights costs two extra copies of them with protobuf's upb
    backend, so the size is that of a :func:`skeleton` plus the bytes of the tensors it leaves out.
    """
    dropped = sum(n for n in (tensor_nbytes(t) for t in routed_tensors(model)) if n > SKELETON_KEEP_BYTES)
    light = skeleton(model) if dropped else model
    try:
        return light.ByteSize() + dropped
    except (ValueError, OverflowError, MemoryError):  # pragma: no cover - protobuf refuses > 2 GB
        return sum(tensor_nbytes(t) for t in iter_tensors(model))


def externalize(src: onnx.TensorProto, dst: onnx.TensorProto, location: str, offset: int,
                length: int) -> None:
    """Fill ``dst`` with ``src``'s metadata and an external reference instead of data."""
    dst.name = src.name
    dst.dims.extend(src.dims)
    dst.data_type = src.data_type
    if src.doc_string:
        dst.doc_string = src.doc_string
    if src.HasField("segment"):
        dst.segment.CopyFrom(src.segment)
    for field in ("metadata_props",):
        if hasattr(src, field):
            getattr(dst, field).extend(getattr(src, field))
    dst.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = dst.external_data.add()
        entry.key = key
        entry.value = value


def routed_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """The tensors :func:`copy_light` routes: main-graph initializers, then the TENSOR attributes of
    main-graph plugin nodes."""
    yield from model.graph.initializer
    for node in model.graph.node:
        if is_plugin_node(node):
            yield from (a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR)


def skeleton(model: onnx.ModelProto, keep_bytes: int = SKELETON_KEEP_BYTES) -> onnx.ModelProto:
    """A copy of ``model`` whose main-graph initializers and plugin-node weights (TENSOR attributes)
    above ``keep_bytes`` carry no data.

    Their data (and that of tensors whose external data is not loaded) is replaced by an external
    reference to :data:`SKELETON_LOCATION` (a file that does not exist), so shape inference and
    graphsurgeon see names, types and shapes only. Used to inspect or rewrite large models without
    copying their weights.
    """

    def drop(tensor: onnx.TensorProto, into: onnx.TensorProto) -> None:
        externalize(tensor, into, SKELETON_LOCATION, 0, 0)
        del into.external_data[1:]

    light = onnx.ModelProto()
    limit = max(keep_bytes, 0)

    def write(tensor: onnx.TensorProto, into: onnx.TensorProto) -> None:
        if tensor_nbytes(tensor) > limit or tensor.data_location == onnx.TensorProto.EXTERNAL:
            drop(tensor, into)
        else:
            into.CopyFrom(tensor)

    copy_light(model, light, write)
    return light


def _is_repeated(field) -> bool:
    # protobuf >= 5 has is_repeated; older ones only label.
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == field.LABEL_REPEATED


def _copy_fields(src, dst, *skip: str) -> None:
    """Copy every set field of the message ``src`` but those in ``skip`` into ``dst`` (repeated ones
    appended)."""
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        if _is_repeated(field):
            getattr(dst, field.name).extend(value)
        elif field.message_type:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def copy_light(model: onnx.ModelProto, light: onnx.ModelProto, write, *, nodes: bool = True) -> None:
    """Copy ``model`` into ``light``, every main-graph initializer, and every TENSOR attribute of a
    main-graph plugin node (its embedded weights), through ``write(src, dst)``.

    ``write=None`` leaves the initializers out and copies the nodes as they are; ``nodes=False``
    leaves the main graph's nodes out.

    Raises:
        ModelError: a string of ``model`` is not valid UTF-8. Protobuf hands such a field to Python
            as ``bytes`` and refuses to assign them back (``UnicodeDecodeError``); models loaded by
            :func:`dcnconvert.model.io.load_model` were refused already, this names it for others.
    """
    try:
        _copy_fields(model, light, "graph")
        graph = light.graph
        _copy_fields(model.graph, graph, "initializer", "node")
        if nodes:
            for node in model.graph.node:
                routed = write if write is not None and is_plugin_node(node) else None
                _copy_node(node, graph.node.add(), routed)
        if write is not None:
            for tensor in model.graph.initializer:
                write(tensor, graph.initializer.add())
    except UnicodeDecodeError:
        from dcnconvert.model.strings import check_names

        check_names(model)  # raises the ModelError naming the string
        raise


def _copy_node(node: onnx.NodeProto, into: onnx.NodeProto, write) -> None:
    """Copy ``node``; with ``write``, each TENSOR attribute's tensor goes through it."""
    if write is None or not any(a.type == onnx.AttributeProto.TENSOR for a in node.attribute):
        into.CopyFrom(node)
        return
    _copy_fields(node, into, "attribute")
    for attr in node.attribute:
        copy = into.attribute.add()
        if attr.type != onnx.AttributeProto.TENSOR:
            copy.CopyFrom(attr)
            continue
        _copy_fields(attr, copy, "t")
        write(attr.t, copy.t)


def check_skeleton(model: onnx.ModelProto) -> None:
    """Run ``onnx.checker.check_model`` on a :func:`skeleton` (or any model) without its weights.

    Raises:
        onnx.checker.ValidationError: what the checker finds.
    """
    light = model if any(is_skeleton_tensor(t) for t in routed_tensors(model)) else skeleton(model, 0)
    with tempfile.TemporaryDirectory(prefix="dcnconvert-check-") as folder:
        Path(folder, SKELETON_LOCATION).touch()
        model_path = Path(folder, "model.onnx")
        model_path.write_bytes(light.SerializeToString())
        onnx.checker.check_model(str(model_path))


def is_skeleton_tensor(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` is a data-less stand-in written by :func:`skeleton`."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == SKELETON_LOCATION for e in tensor.external_data
    )
