"""TensorRT-RTX on disk: where its libraries are, and the loader link its ONNX parser needs.

TensorRT-RTX 1.7's ONNX parser ``dlopen``\\ s the unversioned ``libtensorrt_rtx.so`` when it imports a
plugin node. Its wheel ships only ``libtensorrt_rtx.so.1``, and the parser does not catch the failure:
the process aborts (SIGABRT). dcnconvert therefore keeps a folder in its cache with a link
``libtensorrt_rtx.so -> .../tensorrt_rtx_libs/libtensorrt_rtx.so.1`` and starts every process that
imports TensorRT-RTX with that folder first on ``LD_LIBRARY_PATH`` (the dynamic loader reads the
variable once, at process start, so it cannot be set from inside the process that needs it). Nothing
is written into site-packages. (dcnconvert's TensorRT-RTX plugin library also brings its own way
around this for other tools, a forwarding object beside it, plugin_src/trt/rtxParserLink.h; the link
here serves any library given with ``--plugin-lib``, one without that object included.)

Nothing here imports ``tensorrt_rtx``: the library is found through the ``tensorrt_rtx_libs`` package's
location and the installed distributions' metadata.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

from dcnconvert.cache import cache_root
from dcnconvert.errors import MissingDependencyError, OutputError

__all__ = ["CORE_LIBRARY", "DISTRIBUTIONS", "INSTALL_COMMAND", "MODULE", "core_library", "installed_version",
           "link_dir", "loader_environment"]

#: The Python module TensorRT-RTX installs.
MODULE = "tensorrt_rtx"
#: The package holding its shared libraries.
LIBS_PACKAGE = "tensorrt_rtx_libs"
#: The unversioned name the parser asks the dynamic loader for.
CORE_LIBRARY = "libtensorrt_rtx.so"
#: Distributions whose version is TensorRT-RTX's, in the order they are trusted.
DISTRIBUTIONS = ("tensorrt-rtx-cu13-bindings", "tensorrt-rtx-cu12-bindings", "tensorrt-rtx-cu13",
                 "tensorrt-rtx-cu12", "tensorrt-rtx")
INSTALL_COMMAND = "pip install 'dcnconvert[rtx]'"


def installed_version() -> str | None:
    """The installed TensorRT-RTX's version (from package metadata), or None; imports nothing."""
    if importlib.util.find_spec(MODULE) is None:
        return None
    for name in DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def core_library() -> Path:
    """The versioned ``libtensorrt_rtx.so.N`` of the installed TensorRT-RTX.

    Raises:
        MissingDependencyError: TensorRT-RTX's libraries are not installed.
    """
    spec = importlib.util.find_spec(LIBS_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        found = sorted(Path(folder).glob(CORE_LIBRARY + ".*"))
        if found:
            return found[0]
    raise MissingDependencyError(
        f"TensorRT-RTX's libraries ({CORE_LIBRARY}.N in the {LIBS_PACKAGE} package) are not installed",
        hint=INSTALL_COMMAND)


def link_dir(cache: Path | None = None) -> Path:
    """A folder holding ``libtensorrt_rtx.so`` -> the installed ``libtensorrt_rtx.so.N`` (made or mended
    here, atomically: concurrent processes never see a half-made link).

    Args:
        cache: dcnconvert's cache folder (default :func:`dcnconvert.cache.cache_root`).

    Raises:
        MissingDependencyError: TensorRT-RTX's libraries are not installed.
        OutputError: the cache folder cannot be written.
    """
    target = core_library()
    folder = (cache if cache is not None else cache_root()) / "tensorrt-rtx" / "lib"
    link = folder / CORE_LIBRARY
    try:
        if link.is_symlink() and os.readlink(link) == str(target):
            return folder
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{CORE_LIBRARY}.{os.getpid()}"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(target)
        os.replace(tmp, link)
    except OSError as exc:
        raise OutputError(f"cannot make the TensorRT-RTX loader link {link} -> {target}: {exc}",
                          hint="set DCNCONVERT_CACHE_DIR to a writable folder") from None
    return folder


def loader_environment(base: Mapping[str, str] | None = None, cache: Path | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with :func:`link_dir` first on ``LD_LIBRARY_PATH``:
    the environment of a process that imports TensorRT-RTX and parses plugin nodes."""
    env = dict(os.environ if base is None else base)
    first = str(link_dir(cache))
    rest = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != first]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([first, *rest])
    return env
