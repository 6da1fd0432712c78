"""``dcnconvert plugin build``: compile the plugin library for one TensorRT release and cache it.

Wheels carry a library per TensorRT major version and one for TensorRT-RTX; a source install, or a
TensorRT no wheel was built for, needs one compiled here. :func:`build_plugin` finds nvcc
(:func:`find_nvcc`), the runtime's version (given, else the installed one), the architectures (given,
else the local GPUs', :func:`gpu_archs`) and the headers (:mod:`dcnconvert.backend.plugin.headers`):
those of the TensorRT major, or TensorRT 11's for ``runtime="tensorrt-rtx"`` (the ABI TensorRT-RTX
1.5+ has, :mod:`dcnconvert.backend.plugin.runtimes`). Then it runs the plugin's own make rules (``make -C
<plugin sources> plugin-lib [PLUGIN_RUNTIME=tensorrt-rtx]``, plugin_src/trt/plugin.mk) and puts the
library in the cache::

    <cache>/plugins/<key>/libdcnconvert_plugin.so          what plugin_lib.choose_plugin_library() loads
    <cache>/plugins/<key>/libdcnconvert_rtx_forward.so     TensorRT-RTX only: the forwarding object the
                                                           library loads from its folder (runtimes.py)
    <cache>/plugins/<key>/build.json                       what it was built for and from
    <cache>/build/cuda<V>-<sources>/plugin-core/<archs>/   the CUDA core's objects, shared by the builds
                                                           for every TensorRT version
    <cache>/build/cuda<V>-<sources>/glue/<key>/            the TensorRT glue's objects

The key (:func:`cache_key`) covers the runtime and its version, the CUDA version, the architectures and
the plugin sources' hash; the same key again is a cache hit (no make) unless ``force``; an entry missing a
file is rebuilt. An entry appears whole or not at all: it is assembled in ``<cache>/tmp`` and renamed into
place. Builds sharing a build folder take turns (a lock file beside it).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dcnconvert import __version__, log
from dcnconvert.backend.plugin import headers as plugin_headers
from dcnconvert.backend.plugin import library as plugin_lib
from dcnconvert.backend.plugin import runtimes
from dcnconvert.backend.plugin.toolchain import Nvcc, check_archs, find_nvcc, gpu_archs, parse_archs, ptx_arch
from dcnconvert.backend.trt.versions import INSTALL_COMMAND, MIN_VERSION, api_for, version_tuple
from dcnconvert.errors import BuildError, MissingDependencyError, OutputError, UsageError

__all__ = ["BuildResult", "Nvcc", "build_plugin", "cache_key", "find_nvcc", "gpu_archs", "parse_archs",
           "ptx_arch"]

#: Variables that make would take from the environment and that change what is compiled behind the key.
_MAKE_ENV_DROPPED = ("MAKEFLAGS", "MFLAGS", "NVCCFLAGS", "EXTRA_NVCCFLAGS", "TRT_ROOT",
                     "TENSORRT_INCLUDE_DIR", "CUDA_ARCHS", "PTX_ARCH", "PLUGIN_INSTALL_DIR")


def cache_key(tensorrt_version: str, cuda_version: str, archs: Sequence[str], sources_digest: str,
              runtime: str = runtimes.TENSORRT) -> str:
    """The cache entry's folder name: readable, plus a digest of everything it depends on."""
    parts: list[Any] = [tensorrt_version, cuda_version, list(archs), ptx_arch(archs), sources_digest]
    ident = json.dumps(parts if runtime == runtimes.TENSORRT else [runtime, *parts])
    prefix = runtimes.bundled_folder_prefix(runtime)
    readable = re.sub(r"[^A-Za-z0-9._-]", "_",
                      f"{prefix}{tensorrt_version}-cuda{cuda_version}-{'-'.join(archs)}")
    return f"{readable}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


@dataclasses.dataclass(frozen=True)
class BuildResult:
    """What :func:`build_plugin` built, or found in the cache."""

    library: Path
    cache_hit: bool
    key: str
    tensorrt_version: str
    headers_version: str
    headers_dir: str
    archs: tuple[str, ...]
    ptx_arch: str
    cuda_version: str
    seconds: float
    build_info: dict[str, str] = dataclasses.field(default_factory=dict)
    runtime: str = runtimes.TENSORRT  #: ``tensorrt_version`` is TensorRT-RTX's for ``tensorrt-rtx``

    @classmethod
    def from_record(cls, lib: Path, record: dict[str, Any], cache_hit: bool, seconds: float) -> BuildResult:
        """The result for the library whose ``build.json`` holds ``record``."""
        got = {name: str(record.get(name)) for name in ("tensorrt_version", "headers_version", "headers_dir",
                                                         "ptx_arch", "cuda_version")}
        return cls(lib, cache_hit, lib.parent.name, archs=tuple(record.get("archs") or ()), seconds=seconds,
                   build_info=plugin_lib.library_build_info(lib),
                   runtime=str(record.get("runtime") or runtimes.TENSORRT), **got)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``plugin build --json``): the fields, ``library`` as ``plugin_library``."""
        obj = {"plugin_library": str(self.library), **dataclasses.asdict(self)}
        del obj["library"]
        return {**obj, "archs": list(self.archs), "seconds": round(self.seconds, 3)}


def _tensorrt_version(given: str | None) -> str:
    if given:
        parts = version_tuple(given)
        if len(parts) < 2 or parts[:2] < MIN_VERSION:
            raise UsageError(f"--tensorrt-version {given}: not a TensorRT version dcnconvert supports "
                             f"(>= {MIN_VERSION[0]}.{MIN_VERSION[1]})", hint="give one such as 10.16.1.11")
        return given
    found = plugin_lib.installed_tensorrt()
    if found is None:
        raise UsageError("no TensorRT is installed to build the plugin for, and no --tensorrt-version given",
                         hint=f"install TensorRT ({INSTALL_COMMAND}) or pass --tensorrt-version X.Y.Z")
    api_for(found[0])  # an installed TensorRT too old: MissingDependencyError with the upgrade command
    return found[0]


def _rtx_version(given: str | None) -> str:
    """The TensorRT-RTX to build for: the given one, else the installed one, else just its major (the
    library is the same for every TensorRT-RTX it serves)."""
    if given:
        parts = version_tuple(given)
        oldest = ".".join(map(str, runtimes.RTX_MIN_VERSION))
        if len(parts) < 2 or parts[0] != runtimes.RTX_MAJOR or parts[:2] < runtimes.RTX_MIN_VERSION:
            raise UsageError(f"--tensorrt-version {given}: not a TensorRT-RTX version the TensorRT-RTX "
                             f"library serves ({oldest} or newer {runtimes.RTX_MAJOR}.x)",
                             hint="give one such as 1.7.1.116")
        return given
    found = runtimes.installed_rtx()
    if found is not None:
        runtimes.check_rtx_version(found[0], "the installed TensorRT-RTX")
        return found[0]
    return str(runtimes.RTX_MAJOR)


def _rtx_headers(headers: str | os.PathLike[str] | None, source: str | None) -> plugin_headers.Headers:
    """TensorRT 11's headers for the TensorRT-RTX library (its ABI), ``headers`` as given if it holds them."""
    wanted = runtimes.RTX_HEADERS_MAJOR
    if headers is not None:
        version = plugin_headers.header_version(headers)
        if (Path(headers) / "NvInfer.h").is_file() and version_tuple(version or "")[:1] != (wanted,):
            since = ".".join(map(str, runtimes.RTX_MIN_VERSION))
            raise UsageError(f"--headers {headers} holds TensorRT {version or '(unknown version)'} headers, "
                             f"but the TensorRT-RTX library is built with TensorRT {wanted}'s (the plugin "
                             f"interfaces TensorRT-RTX {since}+ has)",
                             hint=f"give the include/ folder of TensorRT {wanted}, or drop --headers")
    return plugin_headers.find_headers(runtimes.RTX_HEADERS_VERSION, headers, source)


def _cached(entry: Path, sources_digest: str) -> dict[str, Any] | None:
    """The ``build.json`` of a complete entry built from these sources, else ``None``."""
    try:
        record = json.loads((entry / plugin_lib.BUILD_INFO_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("source_hash") != sources_digest:
        return None
    try:
        runtime = str(record.get("runtime") or runtimes.TENSORRT)
        names = (plugin_lib.LIB_NAME, *runtimes.companion_files(runtime))
    except UsageError:
        return None
    return record if all((entry / name).is_file() for name in names) else None


@contextlib.contextmanager
def _cache_errors(root: Path) -> Iterator[None]:
    """File-system failures in the cache become an :class:`OutputError` naming the cache and the fix."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"cannot write the cache {root}: {exc}", hint="make it writable, or set "
                          f"{plugin_lib.CACHE_ENV_VAR} to a writable folder") from exc


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.get_logger(__name__).info("waiting for another `dcnconvert plugin build` (lock %s)", path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _run_make(cmd: list[str], nvcc: Path, what: str) -> None:
    """Run make: one INFO line per file it compiles, all of its output at DEBUG.

    Raises:
        BuildError: make failed, with the tail of its output.
    """
    logger = log.get_logger(__name__)
    logger.debug("running %s", " ".join(cmd))
    env = {k: v for k, v in os.environ.items() if k not in _MAKE_ENV_DROPPED}
    tail: collections.deque[str] = collections.deque(maxlen=30)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=env, start_new_session=True)
    try:
        for raw in proc.stdout or ():
            tail.append(raw.rstrip("\n"))
            logger.debug("make: %s", tail[-1])
            compiled = re.search(r"\s-c\s+-o\s+\S+\s+(\S+)\s*$", tail[-1])  # an echoed recipe line
            linked = re.search(r"\s-o\s+(?:\S*/)?(\S+?)(?:\.tmp)?(?:\s|$)", tail[-1])  # the file made
            made = linked.group(1) if linked else "?"
            step = f"compiling {compiled.group(1)}" if compiled else f"linking {made}"
            if tail[-1].startswith(str(nvcc)) and (compiled or " -shared " in tail[-1]):
                logger.info("[%6.1f s] %s", time.perf_counter() - start, step)
        code = proc.wait()
    finally:
        if proc.poll() is None:  # interrupted: stop make and its compilers
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
    if code != 0:
        raise BuildError(f"make failed (exit code {code}) building {what}; its last lines:\n"
                         + "\n".join(tail), hint="rerun with -v for make's whole output; the build needs a "
                         "host C++ compiler (g++) and an nvcc that supports the architectures")
    logger.info("make: done in %.1f s", time.perf_counter() - start)


def _install(entry: Path, lib: Path, record: dict[str, Any], companions: Sequence[str] = ()) -> None:
    """Put ``lib``, the ``companions`` beside it and its ``build.json`` at ``entry`` by one rename (an older
    entry is replaced)."""
    work = plugin_lib.cache_root() / "tmp"
    work.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"plugin-{entry.name}-", dir=work))
    old = work / f"old-{tmp.name}"
    try:
        shutil.copy2(lib, tmp / plugin_lib.LIB_NAME)
        for name in companions:
            shutil.copy2(lib.parent / name, tmp / name)
        (tmp / plugin_lib.BUILD_INFO_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        entry.parent.mkdir(parents=True, exist_ok=True)
        replaced = entry.exists()
        if replaced:
            os.rename(entry, old)
        try:
            os.rename(tmp, entry)
        except OSError:
            if replaced:
                os.rename(old, entry)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def build_plugin(tensorrt_version: str | None = None, archs: Sequence[str] = (),
                 headers: str | os.PathLike[str] | None = None, headers_source: str | None = None,
                 force: bool = False, jobs: int | None = None,
                 runtime: str = runtimes.TENSORRT) -> BuildResult:
    """Build (or find in the cache) the plugin library for a TensorRT release; see the module docstring.

    Args:
        tensorrt_version: the TensorRT to build for (default: the installed one); with
            ``runtime="tensorrt-rtx"``, the TensorRT-RTX (default: the installed one, else any 1.5+).
        archs: ``--arch`` values (default: the local GPUs').
        headers: a folder holding ``NvInfer.h``, used as given (a cached library built with other
            headers is rebuilt).
        headers_source: where to fetch headers from (:func:`dcnconvert.backend.plugin.headers.fetch_headers`).
        force: build even when the cache has the library (``make -B``: everything is recompiled).
        jobs: make's ``-j`` (default: the number of CPUs).
        runtime: ``"tensorrt"`` or ``"tensorrt-rtx"``: the runtime the library registers in.

    Raises:
        UsageError: no TensorRT version, no architecture, a bad value.
        MissingDependencyError: no nvcc, no make, no plugin sources, no headers.
        BuildError: make failed.
        OutputError: the cache cannot be written.
    """
    started = time.perf_counter()
    logger = log.get_logger(__name__)
    rtx = runtimes.check_runtime(runtime) == runtimes.TENSORRT_RTX
    trt = _rtx_version(tensorrt_version) if rtx else _tensorrt_version(tensorrt_version)
    nvcc = find_nvcc()
    arch_list = parse_archs(archs) if archs else gpu_archs()
    check_archs(arch_list, nvcc)
    ptx = ptx_arch(arch_list)
    sources = plugin_lib.plugin_sources()
    digest = plugin_lib.source_hash(sources)
    key = cache_key(trt, nvcc.version, arch_list, digest, runtime)
    root = plugin_lib.cache_root().absolute()  # make runs in the plugin sources: no relative path
    entry = root / "plugins" / key
    if rtx:
        given = _rtx_headers(headers, None) if headers is not None else None
    else:
        given = plugin_headers.find_headers(trt, headers) if headers is not None else None

    def hit() -> BuildResult | None:
        record = None if force else _cached(entry, digest)
        if record is not None and given is not None and record.get("headers_dir") != str(given.include_dir):
            logger.info("the cached %s was built with the headers in %s, not --headers %s: rebuilding",
                        entry.name, record.get("headers_dir"), given.include_dir)
            return None
        if record is None:
            return None
        logger.info("cache hit: %s (built %s; --force rebuilds it)", entry, record.get("created"))
        return BuildResult.from_record(entry / plugin_lib.LIB_NAME, record, True,
                                       time.perf_counter() - started)

    found = hit()
    if found is not None:
        return found
    make = shutil.which("make")
    if make is None:
        raise MissingDependencyError("make not found on PATH (the plugin's build rules are a Makefile)",
                                     hint="install GNU make (e.g. apt-get install make)")
    with _cache_errors(root):
        if given is not None:
            hdr = given
        elif rtx:
            hdr = _rtx_headers(None, headers_source)
        else:
            hdr = plugin_headers.find_headers(trt, None, headers_source)
    build_dir = root / "build" / f"cuda{nvcc.version}-{digest[:12]}"
    glue = build_dir / "glue" / key
    for path in (p for p in (sources, build_dir, hdr.include_dir, nvcc.path) if re.search(r"\s", str(p))):
        raise UsageError(f"make cannot build with a path holding spaces: {path}", hint="set "
                         f"{plugin_lib.CACHE_ENV_VAR} (the cache), or --headers, to a path without")
    with _cache_errors(root), _locked(build_dir.with_name(build_dir.name + ".lock")):
        found = hit()  # another process may have built it meanwhile
        if found is not None:
            return found
        what = f"the plugin for {runtimes.label(runtime)} {trt}"
        jobs = jobs or os.cpu_count() or 1
        logger.info("building %s: headers %s (%s, %s), CUDA %s (%s), SASS %s + PTX %s, make -j%d; the CUDA "
                    "core takes minutes per architecture the first time, later builds reuse it (%s)", what,
                    hdr.version, hdr.include_dir, hdr.origin, nvcc.version, nvcc.path, " ".join(arch_list),
                    ptx, jobs, build_dir)
        _run_make([make, "-C", str(sources), f"-j{jobs}", *(["-B"] if force else []), "plugin-lib",
                   f"PLUGIN_RUNTIME={runtime}", f"TENSORRT_INCLUDE_DIR={hdr.include_dir}",
                   f"CUDA_ARCHS={' '.join(arch_list)}",
                   f"PTX_ARCH={ptx}", f"BUILD_DIR={build_dir}", f"PLUGIN_BUILD_DIR={glue}",
                   f"NVCC={nvcc.path}"], nvcc.path, what)
        lib = glue / plugin_lib.LIB_NAME
        companions = runtimes.companion_files(runtime)
        info = plugin_lib.library_build_info(lib)
        headers_major = runtimes.RTX_HEADERS_MAJOR if rtx else version_tuple(trt)[0]
        if (not lib.is_file() or version_tuple(info.get("tensorrt_headers", ""))[:1] != (headers_major,)
                or runtimes.library_runtime(info) != runtime):
            raise BuildError(f"make succeeded but {lib} is missing or not built for "
                             f"{runtimes.label(runtime)} {trt} (its build info: {info or 'none'})",
                             hint="rerun with --force -v")
        missing = [name for name in companions if not (glue / name).is_file()]
        if missing:
            raise BuildError(f"make succeeded but {glue / missing[0]}, which goes with {lib.name}, is "
                             "missing", hint="rerun with --force -v")
        record = {"runtime": runtime, "tensorrt_version": trt, "source_hash": digest,
                  "headers_version": hdr.version,
                  "headers_dir": str(hdr.include_dir), "headers_origin": hdr.origin,
                  "cuda_version": nvcc.version, "nvcc": str(nvcc.path), "archs": list(arch_list),
                  "ptx_arch": ptx, "key": key, "dcnconvert_version": __version__, "library_build_info": info,
                  "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        _install(entry, lib, record, companions)
    return BuildResult.from_record(entry / plugin_lib.LIB_NAME, record, False, time.perf_counter() - started)
