"""Which plugin library to load, and why: the one built for the runtime that will load it.

A library registers only inside the runtime it was built for (plugin_src/trt/runtimeGuard.h): TensorRT
of its headers' major version, or TensorRT-RTX (:mod:`.runtimes`). So the choice follows the runtime
(``runtime="tensorrt"``, the default, or ``"tensorrt-rtx"``) and its version. The places looked at, in
order:

1. an explicit path (``--plugin-lib``), then ``$DCNCONVERT_PLUGIN_LIB``: used as given, unless the
   library says it was built for another runtime or major;
2. a library built by ``dcnconvert plugin build`` in the user's cache folder (:func:`cache_root`),
   for the same runtime and major version and the package's current plugin sources;
3. the library the package carries: ``dcnconvert/_lib/trt<major>/libdcnconvert_plugin.so`` for
   TensorRT, ``dcnconvert/_lib/rtx1/`` for TensorRT-RTX (wheels carry one per major and one for
   TensorRT-RTX; ``make plugin`` / ``make plugin-rtx`` put one there in a source tree).

The version comes from the caller (the engine commands pass ``tensorrt.__version__``), else from the
installed distributions' metadata (:func:`installed_tensorrt`, :func:`.runtimes.installed_rtx`; nothing
is imported). Every library says what it was built for in a line compiled into it
(:func:`library_build_info`). Loading happens in :mod:`dcnconvert.backend.trt.adapter`; this module only
finds files and needs neither CUDA nor TensorRT.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import json
import mmap
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from dcnconvert import schema
from dcnconvert.backend.plugin import runtimes
from dcnconvert.backend.plugin.runtimes import TENSORRT, TENSORRT_RTX
from dcnconvert.backend.trt.versions import version_tuple
from dcnconvert.cache import CACHE_ENV_VAR, cache_root
from dcnconvert.errors import PluginLoadError, UsageError

__all__ = ["BUILD_INFO_FILE", "CACHE_ENV_VAR", "ENV_VAR", "LIB_NAME", "TENSORRT", "TENSORRT_RTX",
           "PluginChoice", "bundled_libraries", "cache_root", "cached_libraries", "choose_plugin_library",
           "default_runtime",
           "find_plugin_library", "installed_tensorrt", "library_build_info", "plugin_library_for_target",
           "plugin_sources", "source_hash"]

LIB_NAME = "libdcnconvert_plugin.so"
ENV_VAR = "DCNCONVERT_PLUGIN_LIB"
#: Written beside each library that ``dcnconvert plugin build`` puts in the cache.
BUILD_INFO_FILE = "build.json"
BUILD_HINT = (
    "build one for the installed TensorRT with `dcnconvert plugin build` (needs nvcc), install a "
    "dcnconvert wheel that carries it, or pass --plugin-lib PATH / set DCNCONVERT_PLUGIN_LIB"
)

#: Distributions that install a TensorRT Python module, in the order their version is trusted: the
#: full TensorRT (what the engine commands import), then the lean and dispatch runtimes.
TENSORRT_DISTRIBUTIONS = (
    "tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu13-bindings", "tensorrt-cu12-bindings",
    "tensorrt-lean", "tensorrt-lean-cu13", "tensorrt-lean-cu12", "tensorrt-lean-cu13-bindings",
    "tensorrt-lean-cu12-bindings", "tensorrt-dispatch", "tensorrt-dispatch-cu13", "tensorrt-dispatch-cu12",
    "tensorrt-dispatch-cu13-bindings", "tensorrt-dispatch-cu12-bindings",
)

_BUILD_INFO_TAG = b"dcnconvert-plugin-build-info: "
_BUILD_INFO_RE = re.compile(re.escape(_BUILD_INFO_TAG) + rb"([ -~]*)\x00")

PathLike = Union[str, "os.PathLike[str]"]


# ----------------------------------------------------------------------------------------------
# what is installed
# ----------------------------------------------------------------------------------------------


def _package_dir() -> Path:
    return Path(__file__).resolve().parents[2]


def bundled_libraries(runtime: str = TENSORRT) -> dict[int, Path]:
    """``{major: path}`` of the libraries the package carries for ``runtime`` (``_lib/trt<major>/``, or
    ``_lib/rtx<major>/`` for TensorRT-RTX)."""
    prefix = runtimes.bundled_folder_prefix(runtime)
    found = {}
    lib_dir = _package_dir() / "_lib"
    for sub in sorted(lib_dir.glob(f"{prefix}*")) if lib_dir.is_dir() else []:
        digits = sub.name[len(prefix):]
        if digits.isdigit() and (sub / LIB_NAME).is_file():
            found[int(digits)] = sub / LIB_NAME
    return found


def plugin_sources() -> Path:
    """The plugin's sources: ``dcnconvert/_plugin_src`` in an installed package, else the source tree's
    ``plugin_src/``.

    Raises:
        PluginLoadError: neither exists (a package installed without its sources).
    """
    for candidate in (_package_dir() / "_plugin_src", _package_dir().parent / "plugin_src"):
        if (candidate / "Makefile").is_file() and (candidate / "trt" / "plugin.mk").is_file():
            return candidate
    raise PluginLoadError(
        f"the plugin sources are not in this installation (looked for {_package_dir() / '_plugin_src'})",
        hint="reinstall dcnconvert from a wheel or sdist of this version, or build from a source clone",
    )


#: What the plugin is compiled from (the Makefile has no suffix).
_SOURCE_SUFFIXES = frozenset({".cu", ".cuh", ".h", ".c", ".cpp", ".map", ".mk", ""})


def _source_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in _SOURCE_SUFFIXES)


def source_hash(root: Path | None = None) -> str:
    """SHA-256 over the plugin sources' relative paths and contents (the cache key's source part)."""
    root = plugin_sources() if root is None else Path(root)
    digest = hashlib.sha256()
    for path in _source_files(root):
        if "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def installed_tensorrt(distributions: tuple[str, ...] = TENSORRT_DISTRIBUTIONS) -> tuple[str, str] | None:
    """``(version, distribution)`` of the installed TensorRT Python package (the first of
    ``distributions`` installed), or ``None``; imports nothing."""
    for name in distributions:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if version_tuple(version):
            return version, name
    return None


def default_runtime(version: str | None = None) -> tuple[str, str]:
    """``(runtime, why)`` for a library chosen or built without ``--runtime``: the runtime a given
    ``version`` belongs to (TensorRT-RTX numbers its releases 1.x, TensorRT 8 and up), else TensorRT where
    a TensorRT package (full, lean or dispatch) is installed, else TensorRT-RTX where it is, else
    TensorRT. The engine commands choose their runtime the same way, TensorRT first."""
    if version:
        rtx_version = version_tuple(version)[:1] == (runtimes.RTX_MAJOR,)
        return (TENSORRT_RTX if rtx_version else TENSORRT), f"the version given, {version}"
    found = installed_tensorrt()
    if found is not None:
        return TENSORRT, f"the installed {found[1]} {found[0]}"
    rtx = runtimes.installed_rtx()
    if rtx is not None:
        return TENSORRT_RTX, f"no TensorRT is installed, TensorRT-RTX {rtx[0]} is"
    return TENSORRT, "neither TensorRT nor TensorRT-RTX is installed"


def library_build_info(path: PathLike) -> dict[str, str]:
    """What a plugin library says it was built for: ``tensorrt_headers``, ``runtime`` (``tensorrt`` or
    ``tensorrt-rtx``), ``runtime_major`` (and ``runtime_min_minor`` for TensorRT-RTX), ``cuda_runtime``,
    ``archs`` (libraries from before the ``runtime`` keys have only the others).

    Empty when the file carries no such line (not our library, or one from before the line existed).
    """
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            match = _BUILD_INFO_RE.search(data)
            line = bytes(match.group(1)).decode("ascii") if match is not None else ""
    except (OSError, ValueError):
        return {}
    info: dict[str, str] = {}
    for item in line.split(" ") if line else []:
        key, sep, value = item.partition("=")
        if sep:
            info[key] = value
        elif item and "archs" in info:  # the architecture list holds spaces
            info["archs"] += " " + item
    return info


def _major_of_info(info: dict[str, str]) -> int | None:
    """The major version of the runtime the library is built for (TensorRT's: its headers')."""
    if runtimes.library_runtime(info) == TENSORRT_RTX:
        major = info.get("runtime_major", "")
        return int(major) if major.isdigit() else None
    parts = version_tuple(info.get("tensorrt_headers", ""))
    return parts[0] if parts else None


def _built_for(info: dict[str, str]) -> str:
    """What a library is built for, in words: "TensorRT 10 (headers 10.16.0)", "TensorRT-RTX 1.5+ (...)"."""
    headers = info.get("tensorrt_headers")
    if runtimes.library_runtime(info) == TENSORRT_RTX:
        since = f"{info.get('runtime_major', '?')}.{info.get('runtime_min_minor', '?')}"
        return f"TensorRT-RTX {since} or newer (TensorRT {headers} headers)"
    return f"TensorRT {_major_of_info(info)} (headers {headers})"


@dataclass(frozen=True)
class CachedLibrary:
    """A library built by ``dcnconvert plugin build``, from its ``build.json``."""

    path: Path
    info: dict[str, Any] = field(hash=False)

    @property
    def major(self) -> int | None:
        """The major version of the runtime it was built for (``tensorrt_version`` holds that version)."""
        parts = version_tuple(str(self.info.get("tensorrt_version", "")))
        return parts[0] if parts else None

    @property
    def runtime(self) -> str:
        return str(self.info.get("runtime") or TENSORRT)


def _has_companions(lib: Path, runtime: str) -> bool:
    try:
        return all((lib.parent / name).is_file() for name in runtimes.companion_files(runtime))
    except UsageError:  # a runtime this version does not know
        return False


def cached_libraries(sources_digest: str | None = None) -> list[CachedLibrary]:
    """Libraries in the cache built from the sources with hash ``sources_digest`` (default: this
    package's), newest first; an entry lacking a file that goes with its library
    (:func:`.runtimes.companion_files`) is not one."""
    root = cache_root() / "plugins"
    if not root.is_dir():
        return []
    if sources_digest is None:
        try:
            sources_digest = source_hash()
        except PluginLoadError:
            return []
    found = []
    for info_path in root.glob(f"*/{BUILD_INFO_FILE}"):
        try:
            info = json.loads(info_path.read_text())
        except (OSError, ValueError):
            continue
        lib = info_path.parent / LIB_NAME
        if (isinstance(info, dict) and info.get("source_hash") == sources_digest and lib.is_file()
                and _has_companions(lib, str(info.get("runtime") or TENSORRT))):
            found.append((info_path.stat().st_mtime, CachedLibrary(lib, info)))
    return [entry for _mtime, entry in sorted(found, key=lambda item: -item[0])]


# ----------------------------------------------------------------------------------------------
# the choice
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PluginChoice:
    """The library to load, where it came from, and why.

    For ``runtime="tensorrt-rtx"``, ``tensorrt_version`` and ``library_major`` are TensorRT-RTX's.
    """

    path: Path
    origin: str  #: "--plugin-lib", "$DCNCONVERT_PLUGIN_LIB", "cache" or "bundled"
    reason: str
    tensorrt_version: str | None
    library_major: int | None
    build_info: dict[str, str]
    runtime: str = TENSORRT

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``plugin-path --json``)."""
        return {"plugin_library": str(self.path), "origin": self.origin, "reason": self.reason,
                "runtime": self.runtime, "tensorrt_version": self.tensorrt_version,
                "library_tensorrt_major": self.library_major, "build_info": dict(self.build_info)}


def _build_hint(runtime: str) -> str:
    if runtime == TENSORRT:
        return BUILD_HINT
    return (f"build one with `dcnconvert plugin build --runtime {runtime}` (needs nvcc and TensorRT "
            f"{runtimes.RTX_HEADERS_MAJOR}'s headers), install a dcnconvert wheel that carries it, or pass "
            "--plugin-lib PATH / set DCNCONVERT_PLUGIN_LIB")


def _given(path: Path, origin: str, version: str | None, version_origin: str, runtime: str) -> PluginChoice:
    if not path.is_file():
        raise PluginLoadError(f"the plugin library given by {origin} does not exist: {path}",
                              hint=f"give the path of {LIB_NAME}; " + _build_hint(runtime))
    info = library_build_info(path)
    major = _major_of_info(info)
    label = runtimes.label(runtime)
    running = f"{version_origin} is {label} {version}" if version else f"the runtime in use is {label}"
    mismatch = (f"the plugin library given by {origin} ({path}) was built for {_built_for(info)}, but "
                f"{running}: it would register nothing there")
    if info and runtimes.library_runtime(info) != runtime:
        option = "" if runtime == TENSORRT else f" --runtime {runtime}"
        raise PluginLoadError(mismatch, hint=f"give the library built for {label} (`dcnconvert plugin-path"
                              f"{option}` names it); or " + _build_hint(runtime))
    if runtime == TENSORRT_RTX:
        if version:
            runtimes.check_rtx_version(version, version_origin)
    elif major is not None and version and major != version_tuple(version)[0]:
        wanted = version_tuple(version)[0]
        raise PluginLoadError(mismatch, hint=f"give the library built for TensorRT {wanted}; " + BUILD_HINT)
    return PluginChoice(path.resolve(), origin, f"given by {origin}", version, major, info, runtime)


def _version_in_use(tensorrt_version: str | None, runtime: str) -> tuple[str | None, str]:
    """The runtime's version (the caller's, else the installed one's) and where it came from."""
    if tensorrt_version:
        return tensorrt_version, f"the {runtimes.label(runtime)} in use"
    found = installed_tensorrt() if runtime == TENSORRT else runtimes.installed_rtx()
    return (found[0], f"the installed {found[1]}") if found else (None, "")


def choose_plugin_library(override: PathLike | None = None, tensorrt_version: str | None = None,
                          runtime: str = TENSORRT) -> PluginChoice:
    """The plugin library for ``runtime`` at ``tensorrt_version`` (default: the installed one's), with the
    reason.

    Args:
        override: a library to use (``--plugin-lib``); checked against the runtime.
        tensorrt_version: the runtime's version (TensorRT's, or TensorRT-RTX's for ``tensorrt-rtx``).
        runtime: ``"tensorrt"`` or ``"tensorrt-rtx"``.

    Raises:
        UsageError: an unknown runtime.
        PluginLoadError: the given library is missing or built for another runtime or major, the
            TensorRT-RTX is one no library serves, or no library exists for this runtime (exit code 4,
            with the ``plugin build`` hint).
    """
    runtimes.check_runtime(runtime)
    version, version_origin = _version_in_use(tensorrt_version, runtime)
    if override:
        return _given(Path(override), "--plugin-lib", version, version_origin, runtime)
    env = os.environ.get(ENV_VAR)
    if env:
        return _given(Path(env), f"${ENV_VAR}", version, version_origin, runtime)
    if runtime == TENSORRT_RTX and version:
        runtimes.check_rtx_version(version, version_origin)

    label = runtimes.label(runtime)
    bundled = bundled_libraries(runtime)
    cached = [entry for entry in cached_libraries() if entry.runtime == runtime]
    if version:
        major = version_tuple(version)[0]
        # an entry built for exactly this version first, else the newest of the same major
        same = sorted((e for e in cached if e.major == major),
                      key=lambda e: str(e.info.get("tensorrt_version")) != version)
        if same:
            entry = same[0]
            built_for = entry.info.get("tensorrt_version")
            reason = (f"built by `dcnconvert plugin build` for {label} {built_for}, the major version of "
                      f"{version_origin} {version}")
            return PluginChoice(entry.path, "cache", reason, version, major, library_build_info(entry.path),
                                runtime)
        if major in bundled:
            return PluginChoice(bundled[major], "bundled", f"carried by the package for {label} {major}, "
                                f"the major version of {version_origin} {version}", version, major,
                                library_build_info(bundled[major]), runtime)
        have = ", ".join(f"{label} {m}" for m in sorted(bundled)) or "none"
        raise PluginLoadError(
            f"no plugin library for {label} {major} ({version_origin} {version}): the package carries "
            f"{have}, and the cache ({cache_root() / 'plugins'}) has none built from this version's sources",
            hint=_build_hint(runtime))
    if bundled:
        major = max(bundled)
        return PluginChoice(bundled[major], "bundled", f"no {label} is installed; the package's library "
                            f"for the newest major it carries ({label} {major})", None, major,
                            library_build_info(bundled[major]), runtime)
    if cached:
        entry = cached[0]
        return PluginChoice(entry.path, "cache", f"no {label} is installed; the newest library built by "
                            "`dcnconvert plugin build`", None, entry.major, library_build_info(entry.path),
                            runtime)
    raise PluginLoadError(
        f"no plugin library for {label}: the package carries none ({_package_dir() / '_lib'}) and the cache "
        f"({cache_root() / 'plugins'}) has none built from this version's sources", hint=_build_hint(runtime))


def find_plugin_library(override: PathLike | None = None, tensorrt_version: str | None = None,
                        runtime: str = TENSORRT) -> Path:
    """The path of :func:`choose_plugin_library`'s choice."""
    return choose_plugin_library(override, tensorrt_version, runtime).path


def plugin_library_for_target(target: str | schema.Target, override: PathLike | None = None,
                              tensorrt_version: str | None = None, runtime: str = TENSORRT) -> Path | None:
    """The library a target needs: ours for ``dcnconvert``; none for ``trt-builtin`` unless given.

    Args:
        runtime: ``"tensorrt"`` or ``"tensorrt-rtx"`` (see :func:`choose_plugin_library`).

    Raises:
        PluginLoadError: the library is needed (or given) and missing, or built for another runtime.
    """
    tgt = schema.TARGETS[target] if isinstance(target, str) else target
    if tgt.needs_plugin_library or override:
        return choose_plugin_library(override, tensorrt_version, runtime).path
    return None
