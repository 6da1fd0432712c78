"""Where the bundled TensorRT plugin library is, and which library a target needs.

The library ``dcnconvert/_lib/libdcnconvert_plugin.so`` is built by ``make plugin`` (CUDA + TensorRT
headers) and registers the creator ``ModulatedDeformConv2d`` version ``1`` in namespace
``dcnconvert`` when it is loaded (``ctypes.CDLL``, which is what Polygraphy's ``--plugins`` /
``LoadPlugins`` and trtexec's ``--staticPlugins`` do).

Lookup order: an explicit path (``--plugin-lib``), then the environment variable
``DCNCONVERT_PLUGIN_LIB``, then the bundled file. The ``trt-builtin`` target uses TensorRT's own
plugin and needs no library (an explicit one is still loaded). Loading happens in
:mod:`dcnconvert.trt_adapter`; this module only finds files and needs neither CUDA nor TensorRT.
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path
from typing import Union

from dcnconvert import schema
from dcnconvert.errors import PluginLoadError

__all__ = ["ENV_VAR", "LIB_NAME", "MAKE_HINT", "bundled_path", "find_plugin_library",
           "plugin_library_for_target"]

LIB_NAME = "libdcnconvert_plugin.so"
ENV_VAR = "DCNCONVERT_PLUGIN_LIB"
MAKE_HINT = (
    "build it with `make plugin` in the dcnconvert source tree (needs nvcc and the TensorRT headers: "
    "make plugin TENSORRT_INCLUDE_DIR=/path/to/TensorRT/include), or pass --plugin-lib PATH / set "
    "DCNCONVERT_PLUGIN_LIB"
)

PathLike = Union[str, "os.PathLike[str]"]


def bundled_path() -> Path:
    """Where the bundled library is (or would be) inside the installed package."""
    try:
        base = Path(str(importlib.resources.files("dcnconvert")))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - unusual import machinery
        base = Path(__file__).resolve().parent
    return base / "_lib" / LIB_NAME


def _existing(path: Path, origin: str) -> Path:
    if not path.is_file():
        raise PluginLoadError(f"the plugin library given by {origin} does not exist: {path}",
                              hint="give the path of libdcnconvert_plugin.so; " + MAKE_HINT)
    return path.resolve()


def find_plugin_library(override: PathLike | None = None) -> Path:
    """The plugin library to load: ``override``, else ``$DCNCONVERT_PLUGIN_LIB``, else the bundled one.

    Raises:
        PluginLoadError: the chosen file does not exist (exit code 4), with a ``make plugin`` hint.
    """
    if override:
        return _existing(Path(override), "--plugin-lib")
    env = os.environ.get(ENV_VAR)
    if env:
        return _existing(Path(env), f"${ENV_VAR}")
    path = bundled_path()
    if not path.is_file():
        raise PluginLoadError(f"the bundled plugin library is missing: {path}", hint=MAKE_HINT)
    return path


def plugin_library_for_target(target: str | schema.Target, override: PathLike | None = None) -> Path | None:
    """The library a target needs: ours for ``dcnconvert``; none for ``trt-builtin`` unless given.

    Raises:
        PluginLoadError: the library is needed (or given) and missing.
    """
    tgt = schema.TARGETS[target] if isinstance(target, str) else target
    if tgt.needs_plugin_library:
        return find_plugin_library(override)
    if override:
        return _existing(Path(override), "--plugin-lib")
    return None
