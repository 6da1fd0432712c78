"""Result objects of dcnconvert commands and their JSON / text rendering.

Every command's ``--json`` output is one object built by :class:`CommandResult`::

    {"schema_version": 1, "command": "rewrite", "version": "0.1.0", "ok": true, "exit_code": 0,
     "inputs": {"model": "in.onnx"}, "outputs": {"onnx": "out.onnx"}, "timings": {"total": 0.41},
     "warnings": [], "errors": [], ...command-specific keys...}

``errors`` holds :meth:`dcnconvert.errors.DcnConvertError.to_dict` objects (type, message, hint,
node, exit_code). The keys above are stable (``schema_version`` changes if one is removed or
changes meaning); commands add their own keys next to them (``matches``, ``rewrite``, ...).

This module needs only the standard library; objects from other modules (``DcnMatch``,
``RewriteReport``, ``DcnAttrs``) are read through their attributes.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

SCHEMA_VERSION = 1

#: Keys every command's JSON object has, in this order.
STANDARD_KEYS = (
    "schema_version",
    "command",
    "version",
    "ok",
    "exit_code",
    "inputs",
    "outputs",
    "timings",
    "warnings",
    "errors",
)


def to_jsonable(value: Any) -> Any:
    """Convert ``value`` into plain JSON types.

    Handles dataclasses, mappings, sequences, sets, paths, enums, NumPy scalars/arrays (through
    ``tolist``/``item``) and non-finite floats (written as strings ``"nan"``, ``"inf"``, ``"-inf"``
    so that the output stays strict JSON).
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [to_jsonable(v) for v in items]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return to_jsonable(value.tolist())
    if hasattr(value, "item"):
        return to_jsonable(value.item())
    return str(value)


def dumps(obj: Any) -> str:
    """One-line strict JSON text of ``obj`` (after :func:`to_jsonable`)."""
    return json.dumps(to_jsonable(obj), allow_nan=False, separators=(", ", ": "))


@dataclasses.dataclass
class CommandResult:
    """What one command did; rendered as the ``--json`` object.

    Attributes:
        command: the command name (``inspect``, ``rewrite``, ``build`` ...).
        inputs: role -> path (``{"model": "in.onnx"}``) or other input descriptions.
        outputs: role -> path of files written (``{"onnx": "out.onnx", "engine": "out.engine"}``).
        timings: step -> seconds.
        warnings: warning messages (also logged on stderr).
        errors: error dicts (:meth:`DcnConvertError.to_dict`).
        exit_code: the process exit code.
        extra: command-specific keys.
    """

    command: str
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    outputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)
    errors: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    exit_code: int = 0
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.errors

    def add_warning(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def merge(self, payload: Mapping[str, Any] | None) -> None:
        """Merge a command's payload: ``inputs``/``outputs``/``timings`` update, ``warnings``/``errors``
        extend, every other key is set at the top level (standard keys cannot be overwritten)."""
        if not payload:
            return
        for key, value in payload.items():
            if key in ("inputs", "outputs", "timings") and isinstance(value, Mapping):
                getattr(self, key).update(value)
            elif key == "warnings":
                for item in value or ():
                    self.add_warning(str(item))
            elif key == "errors":
                self.errors.extend(value or ())
            elif key in STANDARD_KEYS:
                continue
            else:
                self.extra[key] = value

    def to_dict(self) -> dict[str, Any]:
        from dcnconvert import __version__

        obj: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "command": self.command,
            "version": __version__,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "timings": {k: round(float(v), 4) for k, v in self.timings.items()},
            "warnings": self.warnings,
            "errors": self.errors,
        }
        for key, value in self.extra.items():
            obj.setdefault(key, value)
        return to_jsonable(obj)


# --------------------------------------------------------------------------------------------
# DCN matches and rewrite reports
# --------------------------------------------------------------------------------------------

def attrs_to_dict(attrs: Any) -> dict[str, Any] | None:
    """``schema.DcnAttrs`` (or ``None``) as a dict of lists/ints."""
    if attrs is None:
        return None
    return {
        "stride": list(attrs.stride),
        "padding": list(attrs.padding),
        "dilation": list(attrs.dilation),
        "group": int(attrs.group),
        "deformable_group": int(attrs.deformable_group),
    }


def match_to_dict(match: Any) -> dict[str, Any]:
    """One ``match.DcnMatch`` as a JSON-ready dict (its own ``to_dict``; keys ``node``, ``form``,
    ``attrs``, ``kernel``, ``shapes``, ``with_bias``, ``mask``, ``convertible``, ``reason``, ...)."""
    if hasattr(match, "to_dict"):
        return to_jsonable(match.to_dict())
    names = ("op_type", "domain", "form", "kernel", "shapes", "with_bias", "convertible", "reason")
    out = {name: to_jsonable(getattr(match, name, None)) for name in names}
    out["node"] = getattr(match, "node_name", None)
    out["attrs"] = attrs_to_dict(getattr(match, "attrs", None))
    return out


def rewrite_report_to_dict(report: Any) -> dict[str, Any]:
    """A ``rewrite.RewriteReport`` as a JSON-ready dict (``target``, ``matches``, ``rewritten``,
    ``unchanged``, ``skipped``, ``warnings``; from the report's own ``to_dict`` also ``allow_tf32``,
    ``weights``, ``embedded``, ``weights_as_inputs``)."""
    if hasattr(report, "to_dict"):
        return to_jsonable(report.to_dict())
    target = getattr(report, "target", None)
    return {
        "target": getattr(target, "name", target),
        "matches": [match_to_dict(m) for m in getattr(report, "matches", ()) or ()],
        "rewritten": to_jsonable(list(getattr(report, "rewritten", ()) or ())),
        "unchanged": to_jsonable(list(getattr(report, "unchanged", ()) or ())),
        "skipped": to_jsonable(list(getattr(report, "skipped", ()) or ())),
        "warnings": [str(w) for w in getattr(report, "warnings", ()) or ()],
    }


# --------------------------------------------------------------------------------------------
# Text rendering
# --------------------------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain fixed-width text table (no colours; safe to paste into an issue)."""
    text_rows = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in text_rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


def _pair_text(pair: Any) -> str:
    if pair is None:
        return "-"
    values = list(pair)
    return "x".join(str(v) for v in values)


def _shape_text(shape: Any) -> str:
    if shape is None:
        return "?"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _mask_text(match: Mapping[str, Any]) -> str:
    shapes = match.get("shapes") or {}
    kind = match.get("mask")
    if "mask" in shapes:
        return _shape_text(shapes.get("mask"))
    if "offset_mask" in shapes:
        return "logits in offset"
    if kind == "ones":
        return "ones (DCNv1)"
    return "-"


def _offset_text(match: Mapping[str, Any]) -> str:
    shapes = match.get("shapes") or {}
    if "offset" in shapes:
        return _shape_text(shapes.get("offset"))
    if "offset_mask" in shapes:
        return _shape_text(shapes.get("offset_mask")) + " (+mask)"
    return "-"


def format_matches(matches: Sequence[Mapping[str, Any]]) -> str:
    """The ``inspect`` table for match dicts (from :func:`match_to_dict`); a weight or bias that a plugin
    node carries as an attribute reads ``embedded``."""
    if not matches:
        return "no deformable convolution nodes found"
    headers = ["node", "form", "stride", "pad", "dil", "grp", "dg", "kernel", "x", "offset", "mask",
               "weight", "bias", "convertible"]
    rows = []
    for m in matches:
        attrs = m.get("attrs") or {}
        shapes = m.get("shapes") or {}
        embedded = m.get("embedded") or ()
        status = "yes" if m.get("convertible") else f"no: {m.get('reason') or 'unknown reason'}"
        rows.append([
            m.get("node") or m.get("node_name") or "(unnamed)",
            m.get("form"),
            _pair_text(attrs.get("stride")),
            _pair_text(attrs.get("padding")),
            _pair_text(attrs.get("dilation")),
            attrs.get("group"),
            attrs.get("deformable_group"),
            _pair_text(m.get("kernel")),
            _shape_text(shapes.get("x")),
            _offset_text(m),
            _mask_text(m),
            _shape_text(shapes.get("weight")) + (" embedded" if "weight" in embedded else ""),
            ("embedded" if "bias" in embedded else "yes") if m.get("with_bias") else "no",
            status,
        ])
    return format_table(headers, rows)


def format_summary(result: Mapping[str, Any]) -> str:
    """A short human summary of a command's JSON object: what was written."""
    outputs = result.get("outputs") or {}
    lines = [f"{role}: {path}" for role, path in outputs.items() if path]
    return "\n".join(lines)
