"""The opsets a model imports: which version of a domain, and raising the default domain's version.

One lookup for every stage (finding DCN nodes, the standard-ONNX conversion, the FP16/BF16 cast):
the default domain is named ``""`` or ``"ai.onnx"``, and both count as the same domain.
"""

from __future__ import annotations

import onnx

from dcnconvert.errors import ModelError
from dcnconvert.model import io as onnx_io

__all__ = ["opset_version", "raise_default_opset"]

_DEFAULT_DOMAINS = ("", "ai.onnx")
#: Initializers (and plugin-node weights) larger than this are held aside (not copied) while the version
#: converter runs.
_HOLD_ASIDE_BYTES = 1024


def opset_version(model: onnx.ModelProto, domain: str = "") -> int | None:
    """The version of ``domain`` that ``model`` imports (``""`` and ``"ai.onnx"`` alike), or None."""
    wanted = _DEFAULT_DOMAINS if domain in _DEFAULT_DOMAINS else (domain,)
    for entry in model.opset_import:
        if entry.domain in wanted:
            return int(entry.version)
    return None


def _restore(converted: onnx.ModelProto, model: onnx.ModelProto) -> None:
    """Give the stand-ins of a converted :func:`~dcnconvert.model.io.skeleton` the data of ``model``'s
    initializers of the same name, and of the TENSOR attributes of ``model``'s node with the same
    first output (the weights embedded in plugin nodes, which the converter passes through)."""
    originals = {init.name: init for init in model.graph.initializer}
    for init in converted.graph.initializer:
        original = originals.get(init.name)
        if original is not None and onnx_io.is_skeleton_tensor(init):
            init.CopyFrom(original)
    left = [i.name for i in converted.graph.initializer
            if onnx_io.is_skeleton_tensor(i) and i.name not in originals]
    by_output = {n.output[0]: n for n in model.graph.node if n.output}
    for node in converted.graph.node:
        stand_ins = [a for a in node.attribute
                     if a.type == onnx.AttributeProto.TENSOR and onnx_io.is_skeleton_tensor(a.t)]
        if not stand_ins:
            continue
        source = {a.name: a.t for a in by_output[node.output[0]].attribute} if node.output and \
            node.output[0] in by_output else {}
        for attr in stand_ins:
            if attr.name in source:
                attr.t.CopyFrom(source[attr.name])
            else:
                left.append(f"{node.name or node.output[0]}.{attr.name}")
    if left:
        raise ModelError(
            f"internal error: tensors {left[:5]} lost their data during the opset conversion",
            hint="report this as a bug with the model's `dcnconvert inspect --json` output",
        )


def raise_default_opset(model: onnx.ModelProto, opset: int, needed_by: str) -> onnx.ModelProto:
    """Convert ``model`` to default-domain ``opset`` with ``onnx.version_converter`` (no-op if already there).

    Custom-domain nodes pass through unchanged. Large initializers and the weights embedded in plugin
    nodes are held aside during the conversion.
    ``needed_by`` says in the error what needs the newer opset.

    Raises:
        ModelError: the converter has no adapter for some op (the message names it).
    """
    from onnx import version_converter

    current = opset_version(model) or 1
    if current >= opset:
        return model
    light = onnx_io.skeleton(model, _HOLD_ASIDE_BYTES)  # large initializers held aside, not copied
    try:
        converted = version_converter.convert_version(light, opset)
    except Exception as exc:  # the C++ converter raises RuntimeError/ValidationError with its text
        raise ModelError(
            f"cannot convert the model from opset {current} to opset {opset} (needed by {needed_by}): {exc}",
            hint=f"re-export the model at opset >= {opset}",
        ) from exc
    _restore(converted, model)
    return converted
