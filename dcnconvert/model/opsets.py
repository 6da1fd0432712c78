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
#: Initializers larger than this are held aside (not copied) while the version converter runs.
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
    initializers of the same name."""
    originals = {init.name: init for init in model.graph.initializer}
    for init in converted.graph.initializer:
        original = originals.get(init.name)
        if original is not None and onnx_io.is_skeleton_tensor(init):
            init.CopyFrom(original)
    left = [i.name for i in converted.graph.initializer
            if onnx_io.is_skeleton_tensor(i) and i.name not in originals]
    if left:
        raise ModelError(
            f"internal error: initializers {left[:5]} lost their data during the opset conversion"
        )


def raise_default_opset(model: onnx.ModelProto, opset: int, needed_by: str) -> onnx.ModelProto:
    """Convert ``model`` to default-domain ``opset`` with ``onnx.version_converter`` (no-op if already there).

    Custom-domain nodes pass through unchanged. Large initializers are held aside during the conversion.
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
