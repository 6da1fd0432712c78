"""Which TensorRT builds the engine (``--runtime``), and for which GPUs (``--compute-capabilities``).

Two runtimes: full TensorRT (module ``tensorrt``, 10.3 and newer) and TensorRT-RTX (module
``tensorrt_rtx``, 1.7 and newer). Without ``--runtime`` the installed one is used, TensorRT first. The
choice is made from package metadata (nothing is imported here) and reported with its reason.

TensorRT builds for the GPU it runs on. TensorRT-RTX builds ahead of time for the compute capabilities
it is given, with or without a GPU: by default for this machine's GPU when TensorRT-RTX supports it,
else for TensorRT-RTX's own default, its portable set (Ampere and later; Turing only when asked for).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

from dcnconvert.backend.trt import rtx
from dcnconvert.backend.trt.versions import INSTALL_HINT, RTX_INSTALL_COMMAND, RUNTIMES
from dcnconvert.errors import MissingDependencyError, UsageError

__all__ = ["RTX_TARGETS", "RuntimeChoice", "check_rtx_can_run", "choose_runtime",
           "default_compute_capabilities", "installed_runtimes", "local_compute_capability",
           "parse_compute_capabilities"]

#: Distributions that install the full TensorRT's ``tensorrt`` module (never the lean or dispatch ones:
#: they cannot build).
TENSORRT_DISTRIBUTIONS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu13-bindings",
                          "tensorrt-cu12-bindings")
#: Compute capabilities TensorRT-RTX 1.7 builds for (its ``ComputeCapability`` members SM75 ... SM121).
RTX_TARGETS = ((7, 5), (8, 0), (8, 6), (8, 9), (12, 0), (12, 1))
_CC_RE = re.compile(r"^(?:sm_?)?(\d{1,3})(?:\.(\d))?$", re.IGNORECASE)


@dataclass(frozen=True)
class RuntimeChoice:
    """The runtime to build with, its installed version, and why it was chosen."""

    name: str  #: "tensorrt" or "tensorrt-rtx"
    version: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "reason": self.reason}


def _tensorrt_version() -> str | None:
    import importlib.util

    from dcnconvert.backend.plugin.library import installed_tensorrt

    if importlib.util.find_spec("tensorrt") is None:
        return None
    found = installed_tensorrt(TENSORRT_DISTRIBUTIONS)
    return found[0] if found else None


def installed_runtimes() -> dict[str, str]:
    """``{runtime: version}`` of the runtimes installed here (metadata only; a stubs-only ``tensorrt``
    has no distribution of its own and is not counted)."""
    found = {"tensorrt": _tensorrt_version(), "tensorrt-rtx": rtx.installed_version()}
    return {name: version for name, version in found.items() if version}


def choose_runtime(requested: str | None = None) -> RuntimeChoice:
    """The runtime for ``--runtime`` (``None`` or ``"auto"``: the installed one, TensorRT first).

    Raises:
        UsageError: an unknown runtime name.
        MissingDependencyError: the runtime asked for, or any, is not installed (exit code 4).
    """
    installed = installed_runtimes()
    if requested in (None, "auto"):
        for name in RUNTIMES:
            if name in installed:
                others = [n for n in RUNTIMES if n != name and n in installed]
                why = "the only runtime installed" if not others else \
                    f"installed; preferred over {', '.join(others)} (choose with --runtime)"
                return RuntimeChoice(name, installed[name], why)
        raise MissingDependencyError(
            "TensorRT is not installed (nor TensorRT-RTX): nothing here can build an engine",
            hint=f"{INSTALL_HINT}; or, for RTX GPUs and builds on a machine without a GPU: "
            f"{RTX_INSTALL_COMMAND}")
    if requested not in RUNTIMES:
        raise UsageError(f"--runtime {requested!r} is not one of {', '.join(RUNTIMES)}")
    if requested not in installed:
        hint = RTX_INSTALL_COMMAND if requested == "tensorrt-rtx" else INSTALL_HINT
        raise MissingDependencyError(f"--runtime {requested}: it is not installed", hint=hint)
    return RuntimeChoice(requested, installed[requested], "given by --runtime")


def parse_compute_capabilities(values: tuple[str, ...] | list[str] | str) -> list[tuple[int, int]]:
    """``"8.6,12.0"`` (or repeated values; ``86``, ``sm_86`` and ``sm86`` too) -> ``[(8, 6), (12, 0)]``,
    in the given order without repeats.

    Raises:
        UsageError: an unreadable value, or one TensorRT-RTX cannot build for.
    """
    items = [values] if isinstance(values, str) else list(values)
    out: list[tuple[int, int]] = []
    for item in items:
        for text in (t.strip() for t in str(item).split(",")):
            if not text:
                continue
            match = _CC_RE.match(text)
            if match is None:
                raise UsageError(f"--compute-capabilities: cannot read {text!r}",
                                 hint="write major.minor values, e.g. --compute-capabilities 8.6,12.0")
            if match.group(2) is not None:
                cc = (int(match.group(1)), int(match.group(2)))
            else:  # "86" or "sm_120": the last digit is the minor version
                digits = match.group(1) if len(match.group(1)) > 1 else match.group(1) + "0"
                cc = (int(digits[:-1]), int(digits[-1]))
            if cc not in RTX_TARGETS:
                known = ", ".join(f"{a}.{b}" for a, b in RTX_TARGETS)
                raise UsageError(f"--compute-capabilities: TensorRT-RTX cannot build for {cc[0]}.{cc[1]}",
                                 hint=f"choose among {known}")
            if cc not in out:
                out.append(cc)
    return out


def local_compute_capability() -> tuple[int, int] | None:
    """The compute capability of this machine's first GPU (through the CUDA driver), or ``None``."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    count, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
    try:
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            return None
        # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76, of device ordinal 0
        if cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, 0) != 0 or \
                cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, 0) != 0:
            return None
    except (AttributeError, OSError):
        return None
    return major.value, minor.value


def default_compute_capabilities() -> tuple[list[tuple[int, int]], str]:
    """TensorRT-RTX's targets when none are given: ``([cc], why)`` for a supported GPU here, else
    ``([], why)``, meaning TensorRT-RTX's own default (its portable set)."""
    local = local_compute_capability()
    if local is not None and local in RTX_TARGETS:
        return [local], f"this machine's GPU (compute capability {local[0]}.{local[1]})"
    portable = "TensorRT-RTX's default portable set (compute capability 8.0 and newer)"
    if local is None:
        return [], f"no GPU here: {portable}; name the GPUs the engine is for with --compute-capabilities"
    return [], (f"this machine's GPU (compute capability {local[0]}.{local[1]}) is not one TensorRT-RTX "
                f"runs on: {portable}")


def check_rtx_can_run(engine: object = "the engine") -> None:
    """Raise unless this machine has a GPU that TensorRT-RTX engines run on.

    Raises:
        MissingDependencyError: no GPU, or one of a compute capability TensorRT-RTX does not run on
            (exit code 4; the engine itself may be fine for the GPUs it was built for).
    """
    local = local_compute_capability()
    runs_on = ", ".join(f"{a}.{b}" for a, b in RTX_TARGETS)
    if local is None:
        raise MissingDependencyError(
            f"cannot run {engine} here: no GPU (a TensorRT-RTX engine runs on GPUs of compute capability "
            f"{runs_on} that it was built for)",
            hint="verify on a machine with such a GPU; building needs none")
    if local not in RTX_TARGETS:
        raise MissingDependencyError(
            f"cannot run {engine} here: this GPU has compute capability {local[0]}.{local[1]}, and "
            f"TensorRT-RTX runs only on {runs_on}",
            hint="verify on an RTX-class GPU (Ampere, Ada, Blackwell), or build and verify with TensorRT")
