"""One exception tree for dcnconvert. The CLI catches :class:`DcnConvertError` once.

Exit codes (also in the README):

====  =======================================================
code  meaning
====  =======================================================
0     success
1     error (bad model, unsupported node, build failure, ...)
2     usage error (click's own, or :class:`UsageError`)
3     accuracy mismatch (:class:`AccuracyError`)
4     TensorRT, the plugin library or a GPU is missing
====  =======================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_MISMATCH = 3
EXIT_MISSING = 4


class DcnConvertError(Exception):
    """Base of every error dcnconvert raises on purpose.

    Args:
        message: what is wrong; names the node and the value where there is one.
        hint: how to fix it.
        node: name of the ONNX node concerned, if any.
    """

    exit_code = EXIT_ERROR

    def __init__(self, message: str, hint: str | None = None, node: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.node = node

    def __str__(self) -> str:
        text = self.message
        if self.node and f"'{self.node}'" not in text:
            text = f"node '{self.node}': {text}"
        return text

    def to_dict(self) -> dict:
        return {
            "type": type(self).__name__,
            "message": str(self),
            "hint": self.hint,
            "node": self.node,
            "exit_code": self.exit_code,
        }


class UsageError(DcnConvertError):
    """A bad option value or combination that click itself cannot see."""

    exit_code = EXIT_USAGE


class ModelError(DcnConvertError):
    """The model file cannot be read, is not ONNX, or is inconsistent."""


class UnsupportedNodeError(DcnConvertError):
    """A DCN node whose form or attributes cannot be converted exactly."""


class ValidationError(DcnConvertError):
    """A DCN node with invalid attributes or shapes (zero stride, channel mismatch, ...)."""


class NoMatchError(DcnConvertError):
    """No DCN node was found and ``--require-match`` was given."""


class OutputError(DcnConvertError):
    """The output cannot be written."""


class BuildError(DcnConvertError):
    """TensorRT failed to parse the model or to build the engine."""


class AccuracyError(DcnConvertError):
    """The engine's outputs do not match the reference within tolerance."""

    exit_code = EXIT_MISMATCH


class MissingDependencyError(DcnConvertError):
    """TensorRT, the plugin library, CUDA or a GPU is not available."""

    exit_code = EXIT_MISSING


class PluginLoadError(MissingDependencyError):
    """The plugin library is missing or does not load."""
