"""Every call into TensorRT, and into Polygraphy's TensorRT backend, lives in this module and in
:mod:`dcnconvert.backend.trt.builder` (parsing and building).

Nothing else in dcnconvert imports ``tensorrt`` or ``tensorrt_rtx``. The module object is passed around
explicitly (``trt``) so that tests can hand in fakes for TensorRT 10 and 11. Engines are built in a
process of their own (:func:`build_isolated`, :mod:`dcnconvert.backend.trt.worker`): a parser, builder or
plugin that aborts ends that process, not dcnconvert.

Version handling is by ``tensorrt.__version__`` (never by enum numbers, which shifted between 10 and
11, and never by a bare ``import tensorrt``: with the ``tensorrt-stubs`` wheel installed that import
succeeds as an empty namespace package). What a version offers (builder flags, strong typing,
plugin-registry methods) is :func:`~dcnconvert.backend.trt.versions.api_for`'s answer
(:mod:`dcnconvert.backend.trt.versions`, which holds no TensorRT calls).

:data:`~dcnconvert.backend.trt.versions.TRT_API` lists every TensorRT name this module uses, with the major
versions that use it; :data:`TRT_OBJECTS` names the local variables that hold TensorRT objects.
``tests/backend/trt/test_adapter.py`` reads this module's and the builder's source and checks both
tables against the TensorRT 10.x Python API as published in the ``tensorrt-stubs`` wheel, and that no
name removed in 11 is on the 11 code path.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dcnconvert.backend.trt.isolated import build_isolated
from dcnconvert.backend.trt.runtimes import choose_runtime
from dcnconvert.backend.trt.versions import (
    INSTALL_HINT,
    RTX_INSTALL_COMMAND,
    RUNTIME_MODULES,
    TRT11_REMOVED,
    TRT_API,
    api_for,
)
from dcnconvert.errors import BuildError, MissingDependencyError, PluginLoadError

#: ``TRT_API``, ``TRT11_REMOVED`` and ``api_for`` live in :mod:`dcnconvert.backend.trt.versions`
#: (re-exported).
__all__ = ["TRT11_REMOVED", "TRT_API", "TRT_OBJECTS", "api_for", "api_of", "build_isolated", "choose_runtime",
           "engine_inputs",
           "find_creator", "list_creators", "load_plugins", "load_tensorrt", "run_engine", "tensorrt_status"]

LOG = logging.getLogger("dcnconvert.trt")

#: Local variable names in this module that hold TensorRT objects -> their TensorRT class.
TRT_OBJECTS: dict[str, str] = {
    "registry": "IPluginRegistry",
    "creator": "IPluginCreatorV3One",
    "engine": "ICudaEngine",
    "parser": "OnnxParser",
    "parser_error": "ParserError",
    "network": "INetworkDefinition",
    "layer": "ILayer",
    "config": "IBuilderConfig",
}


def load_tensorrt(runtime: str = "tensorrt") -> Any:
    """Import TensorRT (``runtime="tensorrt"``) or TensorRT-RTX (``"tensorrt-rtx"``) and check it is real
    (has ``__version__``) and recent enough.

    Raises:
        MissingDependencyError: not installed, fails to load (e.g. libnvinfer missing), a stubs-only
            namespace package, or too old. The message names the missing piece, the hint the
            install command.
    """
    hint = RTX_INSTALL_COMMAND if runtime == "tensorrt-rtx" else INSTALL_HINT
    name = "TensorRT-RTX" if runtime == "tensorrt-rtx" else "TensorRT"
    try:
        if runtime == "tensorrt-rtx":
            _use_rtx_in_polygraphy()
            import tensorrt_rtx as trt
        else:
            import tensorrt as trt  # the only imports of TensorRT in dcnconvert
    except ImportError as exc:
        raise MissingDependencyError(
            f"{name}'s Python package is not installed (import {RUNTIME_MODULES[runtime]}: {exc})", hint=hint
        ) from None
    except Exception as exc:  # noqa: BLE001 - e.g. OSError when libnvinfer.so cannot be loaded
        raise MissingDependencyError(
            f"{name} is installed but does not load ({type(exc).__name__}: {exc})",
            hint="check that its libraries match the Python package and the NVIDIA driver; " + hint,
        ) from None
    version = getattr(trt, "__version__", None)
    if not isinstance(version, str) or not version:
        raise MissingDependencyError(
            f"the importable '{RUNTIME_MODULES[runtime]}' module has no __version__: it is an empty "
            "namespace package (for example from the tensorrt-stubs wheel), not TensorRT",
            hint=hint,
        )
    api_for(version, runtime)
    return trt


def _use_rtx_in_polygraphy() -> None:
    """Make Polygraphy drive TensorRT-RTX: its switch is read when Polygraphy is imported, and its
    TensorRT backend binds the module when that is imported, so this must come first."""
    import os

    os.environ["POLYGRAPHY_USE_TENSORRT_RTX"] = "1"
    if "polygraphy.config" in sys.modules:
        sys.modules["polygraphy.config"].USE_TENSORRT_RTX = True


def api_of(trt: Any) -> Any:
    """The :class:`~dcnconvert.backend.trt.versions.TrtApi` of a loaded TensorRT or TensorRT-RTX module."""
    rtx = trt is not None and sys.modules.get(RUNTIME_MODULES["tensorrt-rtx"]) is trt
    return api_for(trt.__version__, "tensorrt-rtx" if rtx else "tensorrt")


def tensorrt_status() -> tuple[str | None, str | None]:
    """``(version, None)`` when TensorRT is usable, else ``(None, reason)``; never raises."""
    try:
        trt = load_tensorrt()
    except MissingDependencyError as exc:
        return None, str(exc)
    return trt.__version__, None


# ----------------------------------------------------------------------------------------------
# plugins
# ----------------------------------------------------------------------------------------------


def _trt_logger() -> Any:
    from polygraphy.backend.trt import util as trt_util

    return trt_util.get_trt_logger()


def find_creator(trt: Any, name: str, version: str, namespace: str) -> Any:
    """The registered plugin creator ``name``/``version``/``namespace``, or ``None``."""
    api = api_of(trt)
    registry = trt.get_plugin_registry()
    for method in api.creator_lookup:
        lookup = getattr(registry, method, None)
        if lookup is None:
            continue
        creator = lookup(name, version, namespace)
        if creator is not None:
            return creator
    return None


def list_creators(trt: Any) -> list[tuple[str, str, str]]:
    """``(name, version, namespace)`` of every registered plugin creator (first listing that exists)."""
    api = api_of(trt)
    registry = trt.get_plugin_registry()
    for prop in api.creator_listing:
        creators = getattr(registry, prop, None)
        if creators is None:
            continue
        out = []
        for creator in creators:
            out.append((str(getattr(creator, "name", "?")), str(getattr(creator, "plugin_version", "?")),
                        str(getattr(creator, "plugin_namespace", ""))))
        return out
    return []


def load_plugins(trt: Any, libraries: Sequence[Path], name: str, version: str, namespace: str,
                 builtin: bool = False) -> None:
    """Load plugin libraries with ``ctypes`` (they register at load) and check the creator is there.

    Args:
        trt: the tensorrt module.
        libraries: shared libraries to load (Polygraphy's ``LoadPlugins`` loads the same ones again,
            which is a no-op for the dynamic loader).
        name, version, namespace: the creator that must be registered afterwards.
        builtin: also register TensorRT's own plugins (``init_libnvinfer_plugins``).

    Raises:
        PluginLoadError: a library does not load or the creator is not registered.
    """
    for lib in libraries:
        try:
            ctypes.CDLL(str(lib))
        except OSError as exc:
            raise PluginLoadError(
                f"the plugin library {lib} does not load: {exc}",
                hint="rebuild it with `make plugin` (TENSORRT_INCLUDE_DIR=<TensorRT include folder>) and "
                "check that the CUDA driver (libcuda.so.1) is installed",
            ) from None
    if builtin:
        trt.init_libnvinfer_plugins(_trt_logger(), "")
    if libraries and find_creator(trt, name, version, namespace) is None:
        # The library registers itself when it is loaded after libnvinfer. Loaded earlier in this
        # process (before `import tensorrt`), it found no registry: hand it to the registry's own
        # loader, which calls its getCreators entry point (that never registers twice).
        registry = trt.get_plugin_registry()
        for lib in libraries:
            if registry.load_library(str(lib)) is None:
                LOG.debug("IPluginRegistry.load_library(%s) returned None", lib)
    if find_creator(trt, name, version, namespace) is None:
        same = [c for c in list_creators(trt) if c[0] == name]
        seen = ", ".join(f"v{v} in namespace '{ns}'" for _n, v, ns in same) or "none"
        where = (f"after loading {', '.join(map(str, libraries))}" if libraries
                 else "in TensorRT's built-in plugins")
        raise PluginLoadError(
            f"no plugin creator {name} version {version} in namespace '{namespace}' is registered {where} "
            f"(creators named {name}: {seen})",
            hint="the library may be linked against a different libnvinfer than the tensorrt Python module "
            "(rebuild with `make plugin` against the installed TensorRT); TensorRT's built-in "
            "ModulatedDeformConv2d v2 needs TensorRT >= 10.11",
        )


# ----------------------------------------------------------------------------------------------
# engine build
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _polygraphy_errors(what: str, hint: str) -> Iterator[None]:
    from polygraphy.exception import PolygraphyException

    from dcnconvert import log

    log.configure_polygraphy()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except PolygraphyException as exc:
        raise BuildError(f"{what}: {exc}", hint=hint) from None


# ----------------------------------------------------------------------------------------------
# engine inspection and inference
# ----------------------------------------------------------------------------------------------


def _engine_loader(engine_path: Path, plugin_libraries: Sequence[Path]) -> Any:
    from polygraphy.backend.trt import EngineFromPath, LoadPlugins

    return LoadPlugins(plugins=[str(p) for p in plugin_libraries], obj=EngineFromPath(str(engine_path)))


def engine_inputs(trt: Any, engine_path: Path, plugin_libraries: Sequence[Path] = ()) -> list[dict[str, Any]]:
    """Inputs of an engine: name, numpy dtype name, shape (-1 = dynamic), profile 0 (min, opt, max).

    Raises:
        BuildError: the engine cannot be deserialized.
    """
    import numpy as np
    from polygraphy.datatype import DataType

    with _polygraphy_errors(f"cannot load the engine {engine_path}",
                            "was it built with this TensorRT version and with the same plugin library?"):
        engine = _engine_loader(engine_path, plugin_libraries)()
    out = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        if engine.get_tensor_mode(name) != trt.TensorIOMode.INPUT:
            continue
        dtype = DataType.from_dtype(engine.get_tensor_dtype(name), source_module="tensorrt")
        if dtype == DataType.BFLOAT16:  # NumPy has no bfloat16 (Polygraphy's to_dtype would fail loudly)
            np_name = "bfloat16"
        else:
            np_name = np.dtype(DataType.to_dtype(dtype, "numpy")).name
        shape = [int(d) for d in engine.get_tensor_shape(name)]
        profile = None
        if engine.num_optimization_profiles > 0 and any(d < 0 for d in shape):
            profile = [[int(d) for d in dims] for dims in engine.get_tensor_profile_shape(name, 0)]
        out.append({"name": name, "dtype": np_name, "shape": shape, "profile0": profile})
    return out


def run_engine(trt: Any, engine_path: Path, feeds: Sequence[dict[str, Any]],
               plugin_libraries: Sequence[Path] = (), runner_name: str = "tensorrt") -> Any:
    """Run the engine on each feed dict with Polygraphy's ``TrtRunner``; returns ``RunResults``.

    Raises:
        BuildError: loading or running the engine failed.
    """
    from polygraphy.backend.trt import TrtRunner
    from polygraphy.comparator import Comparator

    del trt  # the engine loader imports what it needs; the argument keeps the call sites uniform
    runner = TrtRunner(_engine_loader(engine_path, plugin_libraries), name=runner_name)
    with _polygraphy_errors(f"running the engine {engine_path} failed",
                            "check the input shapes against the engine's optimization profiles"):
        return Comparator.run([runner], data_loader=list(feeds))
