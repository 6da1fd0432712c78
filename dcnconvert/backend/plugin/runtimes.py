"""The runtimes a plugin library is built for: TensorRT (one library per major version) and TensorRT-RTX.

A library registers only inside the runtime it was built for (plugin_src/trt/runtimeGuard.h), and says
which one in its build-info line (``runtime=tensorrt`` or ``runtime=tensorrt-rtx``; older libraries
have no such key and are TensorRT's). TensorRT-RTX's plugin registry, ``ILogger`` and ``ILoggerFinder``
have TensorRT 11's layout from TensorRT-RTX 1.5 on (1.4 had TensorRT 10's), so its library is compiled
against TensorRT 11's headers and accepts TensorRT-RTX 1.5 and every later 1.x. Nothing here imports a
runtime: versions come from the installed distributions' metadata.

The TensorRT-RTX library does not travel alone: :data:`RTX_FORWARD_NAME` lies beside it, a forwarding
object with the soname ``libtensorrt_rtx.so`` that the library loads so that TensorRT-RTX's ONNX parser,
which opens that unversioned name, finds the ``libtensorrt_rtx.so.1`` in the process
(plugin_src/trt/rtxParserLink.cpp). :func:`companion_files` names what goes with a library.
"""

from __future__ import annotations

from dcnconvert.backend.trt.versions import RUNTIMES, version_tuple
from dcnconvert.errors import PluginLoadError, UsageError

__all__ = ["RTX_HEADERS_MAJOR", "RTX_HEADERS_VERSION", "RTX_MAJOR", "RTX_MIN_VERSION", "RUNTIMES",
           "RTX_FORWARD_NAME", "TENSORRT", "TENSORRT_RTX", "bundled_folder_prefix", "check_runtime",
           "check_rtx_version", "companion_files", "installed_rtx", "label", "library_runtime"]

TENSORRT, TENSORRT_RTX = RUNTIMES

#: The TensorRT-RTX major version the TensorRT-RTX library is built for.
RTX_MAJOR = 1
#: The oldest TensorRT-RTX with TensorRT 11's plugin interfaces (measured: 1.4 has 10's, 1.5-1.7 11's).
RTX_MIN_VERSION = (1, 5)
#: The TensorRT headers whose ABI TensorRT-RTX 1.5+ has: the major, and the release fetched when no
#: headers of that major are found on the machine.
RTX_HEADERS_MAJOR = 11
RTX_HEADERS_VERSION = "11.1"
#: The forwarding object beside the TensorRT-RTX library (plugin_src/trt/rtxParserLink.h).
RTX_FORWARD_NAME = "libdcnconvert_rtx_forward.so"

_LABELS = {TENSORRT: "TensorRT", TENSORRT_RTX: "TensorRT-RTX"}
_PREFIXES = {TENSORRT: "trt", TENSORRT_RTX: "rtx"}


def check_runtime(runtime: str) -> str:
    """``runtime`` if it is one of :data:`RUNTIMES`.

    Raises:
        UsageError: any other value.
    """
    if runtime not in RUNTIMES:
        raise UsageError(f"unknown runtime {runtime!r}", hint=f"give one of {', '.join(RUNTIMES)}")
    return runtime


def label(runtime: str) -> str:
    """``"TensorRT"`` or ``"TensorRT-RTX"``."""
    return _LABELS[check_runtime(runtime)]


def bundled_folder_prefix(runtime: str) -> str:
    """The folder name prefix of the package's libraries for ``runtime``: ``trt<major>``, ``rtx<major>``."""
    return _PREFIXES[check_runtime(runtime)]


def companion_files(runtime: str) -> tuple[str, ...]:
    """The files that must lie beside a library built for ``runtime`` (and be copied with it)."""
    return (RTX_FORWARD_NAME,) if check_runtime(runtime) == TENSORRT_RTX else ()


def library_runtime(info: dict[str, str]) -> str:
    """The runtime a library's build info names (``tensorrt`` for libraries from before the key)."""
    return info.get("runtime") or TENSORRT


def installed_rtx() -> tuple[str, str] | None:
    """``(version, "tensorrt-rtx")`` of the installed TensorRT-RTX, or ``None``; imports nothing of it."""
    from dcnconvert.backend.trt import rtx  # rtx imports this package's library module only lazily

    version = rtx.installed_version()
    return (version, "tensorrt-rtx") if version else None


def check_rtx_version(version: str, what: str) -> None:
    """Refuse a TensorRT-RTX ``version`` the TensorRT-RTX library does not serve.

    Args:
        version: e.g. ``"1.7.1.116"``.
        what: where the version came from, for the message (``"the installed TensorRT-RTX"``).

    Raises:
        PluginLoadError: another major, or older than :data:`RTX_MIN_VERSION` (exit code 4).
    """
    parts = version_tuple(version)
    oldest = ".".join(map(str, RTX_MIN_VERSION))
    install = f"pip install -U 'tensorrt-rtx>={oldest},<{RTX_MAJOR + 1}'"
    if len(parts) < 2 or parts[0] != RTX_MAJOR:
        raise PluginLoadError(f"{what} is TensorRT-RTX {version}, but dcnconvert's TensorRT-RTX plugin "
                              f"library is for TensorRT-RTX {RTX_MAJOR}.x ({oldest} or newer)",
                              hint=f"install TensorRT-RTX {RTX_MAJOR}.x: {install}")
    if parts[:2] < RTX_MIN_VERSION:
        raise PluginLoadError(f"{what} is TensorRT-RTX {version}, whose plugin interfaces are TensorRT 10's; "
                              f"dcnconvert's TensorRT-RTX plugin library needs {oldest} or newer (TensorRT "
                              "11's interfaces)", hint=f"upgrade TensorRT-RTX: {install}")
