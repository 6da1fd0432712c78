"""Names and strings of an ONNX model: how messages name a node, and refusing text that is not UTF-8.

Protobuf hands a string field whose bytes are not valid UTF-8 to Python as ``bytes``; copying or
re-encoding it then fails deep inside onnx. :func:`check_names` finds every such field right after
a model is parsed, so that the error names the string instead. Used by :mod:`dcnconvert.model.check`
and, as a fallback for library callers, by :mod:`dcnconvert.model.tensors`.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from dcnconvert.errors import ModelError

__all__ = ["check_names", "escape", "label", "node_ref"]

#: The fields of a TensorProto that hold text (its data fields are never read: no copy of the weights).
_TENSOR_TEXT = ("name", "doc_string", "external_data", "metadata_props")
_PLACES = {"input": "graph input", "output": "graph output", "initializer": "initializer",
           "value_info": "value_info", "graph": "the main graph"}



def escape(value: str | bytes) -> str:
    """``value`` as text; bytes that are not UTF-8 are shown as ``\\xNN``."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def label(node: onnx.NodeProto, index: int) -> str:
    return escape(node.name) or f"<unnamed {escape(node.op_type)} #{index}>"


def node_ref(node: onnx.NodeProto, index: int) -> str:
    """How messages name a node: ``node 'conv1' (Conv)``, or ``node '<unnamed Conv #3>'``."""
    op = f" ({escape(node.op_type)})" if node.name else ""
    return f"node '{label(node, index)}'{op}"


def _repeated(fd) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 5; older ones only have label
    return bool(flag) if flag is not None else fd.label == fd.LABEL_REPEATED


def _bad_strings(msg, where: str, node: str | None) -> Iterator[tuple[str, str | None, bytes | None]]:
    """(where, node label, bytes) of every string field of ``msg`` (recursively) that is not UTF-8.

    Protobuf (upb) hands such a field to Python as ``bytes`` instead of ``str``.
    """
    try:
        if isinstance(msg, onnx.TensorProto):
            by_name = msg.DESCRIPTOR.fields_by_name
            fields = [(by_name[n], getattr(msg, n)) for n in _TENSOR_TEXT if n in by_name]
        else:
            fields = msg.ListFields()
    except UnicodeDecodeError:  # a protobuf backend that decodes on access
        yield where, node, None
        return
    for fd, value in fields:
        if fd.type not in (fd.TYPE_STRING, fd.TYPE_MESSAGE):
            continue
        for i, item in list(enumerate(value)) if _repeated(fd) else [(None, value)]:
            if fd.type == fd.TYPE_STRING:
                if isinstance(item, bytes):
                    yield f"{'the ' + fd.name if i is None else f'{fd.name} #{i}'} of {where}", node, item
            elif isinstance(item, onnx.NodeProto):
                yield from _bad_strings(item, node_ref(item, i or 0), label(item, i or 0))
            else:
                place = _PLACES.get(fd.name) if isinstance(msg, (onnx.GraphProto, onnx.ModelProto)) else None
                if place is None:
                    here = f"{fd.name}{'' if i is None else f' #{i}'} of {where}"
                else:
                    here = place + ("" if i is None else f" #{i}")
                    here += "" if where in ("the model", "the main graph") else f" of {where}"
                yield from _bad_strings(item, here, node)


def check_names(model: onnx.ModelProto) -> None:
    """Refuse a model with a string (a tensor, node or graph name, ...) that is not valid UTF-8.

    Raises:
        ModelError: naming the first such string, its bad bytes escaped, and counting the others.
    """
    bad = list(_bad_strings(model, "the model", None))
    if bad:
        where, node, raw = bad[0]
        shown = f": '{escape(raw)}'" if raw is not None else ""
        more = f" (and {len(bad) - 1} more such string(s))" if len(bad) > 1 else ""
        raise ModelError(f"{where} is not valid UTF-8{shown}{more}; ONNX names and strings must be UTF-8",
                         hint="the file is probably damaged: re-export or re-download it (or rewrite that "
                         "string with a tool that writes UTF-8, e.g. onnx-graphsurgeon)", node=node)
