"""Checks of a DCN node before anything is written.

:func:`problems` lists every problem of one :class:`~dcnconvert.match.finder.DcnMatch` as an error
object (:class:`~dcnconvert.errors.ValidationError` for bad values or shapes,
:class:`~dcnconvert.errors.UnsupportedNodeError` for forms or targets that cannot be served);
:func:`validate_matches` raises the first one (its message counts the others). Checks that need a
shape run only where the shape is known.
"""

from __future__ import annotations

from collections.abc import Sequence

from dcnconvert import schema
from dcnconvert.errors import DcnConvertError, UnsupportedNodeError, UsageError, ValidationError
from dcnconvert.match.finder import DcnMatch


def resolve_target(target: schema.Target | str | None) -> schema.Target:
    """A :class:`~dcnconvert.schema.Target` from a Target, its name, or None (the default).

    Raises:
        UsageError: unknown target name.
    """
    if target is None:
        return schema.TARGETS[schema.DEFAULT_TARGET]
    if isinstance(target, schema.Target):
        return target
    if target not in schema.TARGETS:
        raise UsageError(
            f"unknown target {target!r}",
            hint=f"use one of: {', '.join(schema.TARGETS)}",
        )
    return schema.TARGETS[target]


def _dim(match: DcnMatch, role: str, axis: int) -> int | None:
    shape = match.shapes.get(role)
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    value = shape[axis]
    return value if isinstance(value, int) else None


def _err(match: DcnMatch, message: str, hint: str) -> ValidationError:
    return ValidationError(f"node '{match.label}': {message}", hint=hint, node=match.label)


def problems(match: DcnMatch, target: schema.Target | str | None = None) -> list[DcnConvertError]:
    """Every problem of ``match`` for ``target``, most basic first (empty when it is fine)."""
    target = resolve_target(target)
    if not match.convertible or match.attrs is None:
        return [
            UnsupportedNodeError(
                f"node '{match.label}' ({match.form}, {match.domain or 'ai.onnx'}::{match.op_type}) "
                f"cannot be converted: {match.reason}",
                hint="dcnconvert converts 2-D deformable convolutions of the forms listed by "
                "`dcnconvert inspect`; re-export this layer in one of them",
                node=match.label,
            )
        ]
    found: list[DcnConvertError] = []
    a = match.attrs
    for name, pair, low in (("stride", a.stride, 1), ("dilation", a.dilation, 1), ("padding", a.padding, 0)):
        if any(v < low for v in pair):
            found.append(
                _err(match, f"{name} = {list(pair)}; every value must be >= {low}",
                     f"set {name} to values >= {low} in the exporter")
            )
    if match.prepad and any(v < 0 for v in match.prepad):
        found.append(
            _err(match, f"pads {list(match.prepad)} include negative values",
                 "negative padding (cropping) is not supported; crop with a Slice before the layer")
        )
    for name, value in (("group", a.group), ("deformable_group", a.deformable_group)):
        if value < 1:
            found.append(_err(match, f"{name} = {value}; it must be >= 1", f"set {name} to a positive value"))
    if found:
        return found
    found += _channel_problems(match)
    found += _spatial_problems(match)
    if target.square_only:
        found += _square_problems(match, target)
    return found


def _channel_problems(match: DcnMatch) -> list[DcnConvertError]:
    a = match.attrs
    found: list[DcnConvertError] = []
    cin = _dim(match, "x", 1)
    cout = _dim(match, "weight", 0)
    wc = _dim(match, "weight", 1)
    if cin is not None:
        if cin % a.group:
            found.append(_err(match, f"input has {cin} channels, not divisible by group = {a.group}",
                              "group must divide the input channels"))
        if cin % a.deformable_group:
            found.append(_err(match, f"input has {cin} channels, not divisible by deformable_group = "
                              f"{a.deformable_group}", "deformable_group must divide the input channels"))
    if cout is not None and cout % a.group:
        found.append(_err(match, f"weight has {cout} output channels, not divisible by group = {a.group}",
                          "group must divide the output channels"))
    if cin is not None and wc is not None and cin % a.group == 0 and wc * a.group != cin:
        found.append(_err(match, f"weight shape {match.shapes.get('weight')} does not fit an input of {cin} "
                          f"channels with group = {a.group} (expected weight.shape[1] = {cin // a.group})",
                          "check the group attribute and the weight"))
    bias_len = _dim(match, "bias", 0)
    bias_shape = match.shapes.get("bias")
    bad_bias = bias_shape is not None and (len(bias_shape) != 1 or bias_len not in (None, cout))
    if cout is not None and bad_bias:
        found.append(_err(match, f"bias shape {bias_shape}; expected [{cout}]",
                          "the bias needs one value per output channel"))
    if match.kernel is None:
        return found
    kh, kw = match.kernel
    k = kh * kw
    dg = a.deformable_group
    expected = {"offset": 2 * dg * k, "mask": dg * k, "offset_mask": 3 * dg * k}
    formula = {
        "offset": f"2 * deformable_group * kh * kw = 2*{dg}*{kh}*{kw}",
        "mask": f"deformable_group * kh * kw = {dg}*{kh}*{kw}",
        "offset_mask": f"3 * deformable_group * kh * kw = 3*{dg}*{kh}*{kw}",
    }
    for role in ("offset", "mask", "offset_mask"):
        channels = _dim(match, role, 1)
        if channels is not None and channels != expected[role]:
            found.append(_err(
                match,
                f"{role} has {channels} channels; expected {formula[role]} = {expected[role]}",
                f"check deformable_group ({dg}) and the kernel size ({kh}x{kw}), "
                f"or the layer producing the {role}",
            ))
    return found


def _spatial_problems(match: DcnMatch) -> list[DcnConvertError]:
    a = match.attrs
    found: list[DcnConvertError] = []
    sample_role = "offset_mask" if match.mask_kind == "logits" else "offset"
    batch = {role: _dim(match, role, 0) for role in ("x", sample_role, "mask") if role in match.shapes}
    known = {role: n for role, n in batch.items() if n is not None}
    if len(set(known.values())) > 1:
        found.append(_err(match, f"batch sizes differ: {known}",
                          "x, offset and mask need the same batch size"))
    for role in (sample_role, "mask", "x"):
        shape = match.shapes.get(role)
        if shape is not None and len(shape) != 4:
            found.append(_err(match, f"{role} has rank {len(shape)} (shape {shape}); expected 4",
                              "a 2-D deformable convolution takes 4-D tensors"))
    if found:
        return found
    h, w = _dim(match, "x", 2), _dim(match, "x", 3)
    expected = None
    if h is not None and w is not None and match.kernel is not None:
        pre = match.prepad or (0, 0, 0, 0)
        oh, ow = a.output_hw(h + pre[0] + pre[2], w + pre[1] + pre[3], *match.kernel)
        if oh < 1 or ow < 1:
            found.append(_err(match, f"output would be {oh}x{ow} for a {h}x{w} input, kernel "
                              f"{match.kernel[0]}x{match.kernel[1]}, stride {list(a.stride)}, padding "
                              f"{list(a.padding)}, dilation {list(a.dilation)}",
                              "the kernel does not fit the input; check padding and dilation"))
            return found
        expected = (oh, ow)
    for role in (sample_role, "mask"):
        oh_, ow_ = _dim(match, role, 2), _dim(match, role, 3)
        if oh_ is None or ow_ is None:
            continue
        if expected is None:
            expected = (oh_, ow_)
        elif (oh_, ow_) != expected:
            found.append(_err(
                match,
                f"{role} spatial size {oh_}x{ow_} differs from the output size {expected[0]}x{expected[1]} "
                f"computed from the input and stride {list(a.stride)}, padding {list(a.padding)}, "
                f"dilation {list(a.dilation)}",
                f"the {role} must have the output's spatial size; check the attributes",
            ))
    return found


def _square_problems(match: DcnMatch, target: schema.Target) -> list[DcnConvertError]:
    a = match.attrs
    odd = [
        f"{name} = {list(pair)}"
        for name, pair in (("stride", a.stride), ("padding", a.padding), ("dilation", a.dilation))
        if pair[0] != pair[1]
    ]
    if not odd:
        return []
    return [
        UnsupportedNodeError(
            f"node '{match.label}': {', '.join(odd)} is not square; target '{target.name}' (TensorRT's "
            "built-in plugin) applies element 0 of each pair to the width axis, so the engine would be "
            "wrong (measured on an H200: non-square stride leaves outputs unwritten, non-square padding "
            "writes past the output, non-square dilation is 42% off)",
            hint="use the default target: --target dcnconvert",
            node=match.label,
        )
    ]


def validate_matches(matches: Sequence[DcnMatch], target: schema.Target | str | None = None) -> None:
    """Raise the first problem of ``matches`` (its message counts the others); return if none.

    Raises:
        ValidationError: bad attribute values or inconsistent shapes.
        UnsupportedNodeError: a node that cannot be converted, or not for this target.
    """
    found: list[DcnConvertError] = []
    for match in matches:
        found += problems(match, target)
    if not found:
        return
    first = found[0]
    if len(found) > 1:
        first.message += f" (and {len(found) - 1} more problem(s) in this model)"
        first.args = (first.message,)
    raise first
