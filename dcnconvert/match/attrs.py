"""Attribute readers for the DCN form parsers (:mod:`dcnconvert.match.forms`).

Every reader turns an ONNX attribute into canonical values or raises :class:`NotConvertible` with a
message that names the attribute and says why the conversion could not be exact (unknown
attributes, disagreeing aliases, 1-D/3-D values, ambiguous padding). :func:`plugin_padding` turns
a padding attribute of one of the exporters' styles into the plugin's padding plus an explicit
zero pre-pad of ``x`` for asymmetric pads.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper


class NotConvertible(Exception):
    """Raised inside a parser; becomes ``convertible=False`` with the message as reason."""


_TYPE_NAMES = {v: k for k, v in onnx.AttributeProto.AttributeType.items()}


def attr_value(attr: onnx.AttributeProto):
    """The Python value of an attribute (bytes decoded as UTF-8)."""
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return value


def read_attrs(
    node: onnx.NodeProto,
    known: dict[str, Sequence[str]],
    ignored: Sequence[str] = (),
) -> dict[str, object]:
    """Read ``node``'s attributes into canonical keys.

    Args:
        node: the node.
        known: canonical key -> accepted attribute names (aliases).
        ignored: attribute names that carry no meaning for the conversion.

    Raises:
        NotConvertible: an attribute is not known, or two aliases disagree.
    """
    alias = {name: key for key, names in known.items() for name in names}
    values: dict[str, object] = {}
    for attr in node.attribute:
        if attr.name in ignored:
            continue
        key = alias.get(attr.name)
        if key is None:
            raise NotConvertible(
                f"unknown attribute '{attr.name}' ({_TYPE_NAMES.get(attr.type, attr.type)}) "
                f"for {node.op_type}: its meaning is unknown, so the conversion could not be exact"
            )
        value = attr_value(attr)
        if key in values and values[key] != value:
            raise NotConvertible(f"attributes {list(known[key])} disagree ({values[key]} vs {value})")
        values[key] = value
    return values


def as_int(value, name: str) -> int:
    """An INT attribute (or a one-element INTS) as an int."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], int):
            return int(value[0])
        raise NotConvertible(f"attribute '{name}' is {value!r}; expected one integer")
    return int(value)


def pair(value, name: str) -> tuple[int, int]:
    """An INT or INTS attribute as an (h, w) pair."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value), int(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        if len(value) == 1:
            return int(value[0]), int(value[0])
        if len(value) == 2:
            return int(value[0]), int(value[1])
        if len(value) == 3:
            raise NotConvertible(
                f"3-D deformable convolution ('{name}' has 3 values {list(value)}); only 2-D is supported")
    raise NotConvertible(f"attribute '{name}' is {value!r}; expected an integer or a pair of integers")


def begin_end_pads(pads, name: str) -> tuple[int, int, int, int]:
    """ONNX-style pads [h_begin, w_begin, h_end, w_end]."""
    if not isinstance(pads, (list, tuple)) or not all(isinstance(v, int) for v in pads):
        raise NotConvertible(f"attribute '{name}' is {pads!r}; expected 4 integers")
    if len(pads) == 6:
        raise NotConvertible(f"3-D deformable convolution ('{name}' has 6 values); only 2-D is supported")
    if len(pads) == 2:
        raise NotConvertible(f"1-D deformable convolution ('{name}' has 2 values); only 2-D is supported")
    if len(pads) != 4:
        raise NotConvertible(f"attribute '{name}' has {len(pads)} values {list(pads)}; expected 4")
    return tuple(int(v) for v in pads)  # type: ignore[return-value]


def doubled_pads(pads, name: str) -> tuple[int, int]:
    """mmdeploy / OpenVINO 4-value padding ``[pH, pH, pW, pW]`` -> (pH, pW)."""
    if isinstance(pads, (list, tuple)) and len(pads) == 4 and all(isinstance(v, int) for v in pads):
        if pads[0] == pads[1] and pads[2] == pads[3]:
            return int(pads[0]), int(pads[2])
        raise NotConvertible(
            f"attribute '{name}' = {list(pads)} is ambiguous: mmdeploy writes [pH, pH, pW, pW], ONNX "
            "order would be [h_begin, w_begin, h_end, w_end]; the two readings differ here"
        )
    return pair(pads, name)


def split_asymmetric(
    pads: tuple[int, int, int, int],
) -> tuple[tuple[int, int], tuple[int, int, int, int] | None]:
    """(plugin padding, prepad) for begin/end pads.

    Symmetric pads stay in the plugin. Otherwise all padding moves into an explicit zero ``Pad`` of
    x and the plugin pads nothing (exact: padded zeros and out-of-image samples are both 0), which
    also keeps the plugin's padding square.
    """
    hb, wb, he, we = pads
    if hb == he and wb == we:
        return (hb, wb), None
    return (0, 0), (hb, wb, he, we)


def plugin_padding(style: str, value) -> tuple[tuple[int, int], tuple[int, int, int, int] | None]:
    """(plugin padding, prepad) from a padding attribute of the given style."""
    if style == "begin_end":
        return split_asymmetric(begin_end_pads(value, "pads"))
    if style == "doubled":
        return doubled_pads(value, "padding"), None
    if style == "paddle" and isinstance(value, (list, tuple)) and len(value) == 4:
        top, bottom, left, right = (as_int(v, "paddings") for v in value)
        return split_asymmetric((top, left, bottom, right))
    return pair(value, "padding"), None
