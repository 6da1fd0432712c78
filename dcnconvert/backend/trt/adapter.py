"""Every call into TensorRT, and into Polygraphy's TensorRT backend, lives in this module.

Nothing else in dcnconvert imports ``tensorrt``. The module object is passed around explicitly
(``trt``) so that tests can hand in fakes for TensorRT 10 and 11.

Version handling is by ``tensorrt.__version__`` (never by enum numbers, which shifted between 10 and
11, and never by a bare ``import tensorrt``: with the ``tensorrt-stubs`` wheel installed that import
succeeds as an empty namespace package). What a version offers (builder flags, strong typing,
plugin-registry methods) is :func:`~dcnconvert.backend.trt.versions.api_for`'s answer
(:mod:`dcnconvert.backend.trt.versions`, which holds no TensorRT calls).

:data:`~dcnconvert.backend.trt.versions.TRT_API` lists every TensorRT name this module uses, with the major
versions that use it; :data:`TRT_OBJECTS` names the local variables that hold TensorRT objects.
``tests/backend/trt/test_adapter.py`` reads this module's source and checks both tables against the
TensorRT 10.x Python API as published in the ``tensorrt-stubs`` wheel, and that no name removed in
11 is on the 11 code path.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dcnconvert.backend.trt.versions import INSTALL_HINT, TRT11_REMOVED, TRT_API, api_for
from dcnconvert.errors import BuildError, MissingDependencyError, PluginLoadError, UsageError

#: ``TRT_API``, ``TRT11_REMOVED`` and ``api_for`` live in :mod:`dcnconvert.backend.trt.versions`
#: (re-exported).
__all__ = ["TRT11_REMOVED", "TRT_API", "TRT_OBJECTS", "api_for", "build_engine_bytes", "engine_inputs",
           "find_creator", "list_creators", "load_plugins", "load_tensorrt", "make_progress_monitor",
           "run_engine", "tensorrt_status"]

LOG = logging.getLogger("dcnconvert.trt")

#: Local variable names in this module that hold TensorRT objects -> their TensorRT class.
TRT_OBJECTS: dict[str, str] = {
    "registry": "IPluginRegistry",
    "creator": "IPluginCreatorV3One",
    "engine": "ICudaEngine",
}


def load_tensorrt() -> Any:
    """Import TensorRT and check it is real (has ``__version__``) and recent enough.

    Raises:
        MissingDependencyError: not installed, fails to load (e.g. libnvinfer missing), a stubs-only
            namespace package, or too old. The message names the missing piece, the hint the
            install command.
    """
    try:
        import tensorrt as trt  # the only import of tensorrt in dcnconvert
    except ImportError as exc:
        raise MissingDependencyError(
            f"TensorRT's Python package is not installed (import tensorrt: {exc})", hint=INSTALL_HINT
        ) from None
    except Exception as exc:  # noqa: BLE001 - e.g. OSError when libnvinfer.so cannot be loaded
        raise MissingDependencyError(
            f"TensorRT is installed but does not load ({type(exc).__name__}: {exc})",
            hint="check that the TensorRT libraries match the Python package and the NVIDIA driver; "
            + INSTALL_HINT,
        ) from None
    version = getattr(trt, "__version__", None)
    if not isinstance(version, str) or not version:
        raise MissingDependencyError(
            "the importable 'tensorrt' module has no __version__: it is an empty namespace package "
            "(for example from the tensorrt-stubs wheel), not TensorRT",
            hint=INSTALL_HINT,
        )
    api_for(version)
    return trt


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
    api = api_for(trt.__version__)
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
    api = api_for(trt.__version__)
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


def make_progress_monitor(trt: Any) -> Any:
    """A ``trt.IProgressMonitor`` that logs build phases on stderr, or ``None`` if unavailable."""
    base = getattr(trt, "IProgressMonitor", None)
    if base is None:
        return None

    class _ProgressMonitor(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self._lock = threading.Lock()
            self._started: dict[str, float] = {}

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            with self._lock:
                self._started[phase_name] = time.perf_counter()
            level = logging.INFO if parent_phase is None else logging.DEBUG
            plural = "" if num_steps == 1 else "s"
            LOG.log(level, "TensorRT build: %s (%d step%s)", phase_name, num_steps, plural)

        def step_complete(self, phase_name: str, step: int) -> bool:
            LOG.debug("TensorRT build: %s step %d done", phase_name, step + 1)
            return True

        def phase_finish(self, phase_name: str) -> None:
            with self._lock:
                start = self._started.pop(phase_name, None)
            if start is not None:
                LOG.debug("TensorRT build: %s finished in %.1f s", phase_name, time.perf_counter() - start)

    return _ProgressMonitor()


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


def build_engine_bytes(
    trt: Any,
    onnx_path: Path,
    *,
    plugin_libraries: Sequence[Path] = (),
    precision_flags: dict[str, bool] | None = None,
    strongly_typed: bool = False,
    tf32: bool = False,
    profiles: Sequence[dict[str, tuple[Sequence[int], Sequence[int], Sequence[int]]]] = (),
    workspace: int | None = None,
    builder_optimization_level: int | None = None,
    timing_cache: Path | None = None,
    progress: bool = True,
) -> bytes:
    """Parse ``onnx_path`` with the plugins loaded and build a serialized engine through Polygraphy.

    Args:
        trt: the tensorrt module (from :func:`load_tensorrt`).
        onnx_path: the (rewritten, possibly cast) model file.
        plugin_libraries: loaded by ``LoadPlugins`` before parsing.
        precision_flags: ``{"fp16": True}`` / ``{"bf16": True}`` for the builder-flag path (TRT 10).
        strongly_typed: build a strongly typed network (graph-cast path on TRT 10; TRT 11 always is).
        tf32: allow TF32 for FP32 math.
        profiles: ``name -> (min, opt, max)`` per optimization profile.
        workspace: workspace memory pool limit in bytes.
        builder_optimization_level: 0..5.
        timing_cache: loaded if it exists, and saved (merged) after the build.
        progress: attach a progress monitor.

    Raises:
        UsageError: builder flags asked of a TensorRT without them.
        BuildError: parsing or building failed (Polygraphy's message is included).
    """
    from polygraphy.backend.trt import (
        CreateConfig,
        EngineBytesFromNetwork,
        LoadPlugins,
        NetworkFromOnnxPath,
        Profile,
    )

    api = api_for(trt.__version__)
    flags = {k: v for k, v in (precision_flags or {}).items() if v}
    if flags and not api.precision_flags:
        raise UsageError(
            f"TensorRT {api.version} has no {'/'.join(k.upper() for k in flags)} builder flag",
            hint="use --precision-path graph-cast (the default on TensorRT 11)",
        )
    kwargs: dict[str, Any] = dict(flags)
    kwargs["tf32"] = bool(tf32)
    if profiles:
        poly_profiles = []
        for prof in profiles:
            p = Profile()
            for name, (mn, op, mx) in prof.items():
                p.add(name, min=list(mn), opt=list(op), max=list(mx))
            poly_profiles.append(p)
        kwargs["profiles"] = poly_profiles
    if workspace:
        kwargs["memory_pool_limits"] = {trt.MemoryPoolType.WORKSPACE: int(workspace)}
    if builder_optimization_level is not None:
        kwargs["builder_optimization_level"] = int(builder_optimization_level)
    if timing_cache is not None and Path(timing_cache).is_file():
        kwargs["load_timing_cache"] = str(timing_cache)
    if progress:
        monitor = make_progress_monitor(trt)
        if monitor is not None:
            kwargs["progress_monitor"] = monitor
    # TensorRT 11 networks are always strongly typed; its deprecated flag is not asked for there
    typed = bool(strongly_typed and not api.always_strongly_typed)
    network = NetworkFromOnnxPath(str(onnx_path), strongly_typed=typed)
    loader = EngineBytesFromNetwork(
        LoadPlugins(plugins=[str(p) for p in plugin_libraries], obj=network),
        config=CreateConfig(**kwargs),
        save_timing_cache=str(timing_cache) if timing_cache is not None else None,
    )
    with _polygraphy_errors(
        "TensorRT could not build the engine",
        "run with -v for TensorRT's log; 'Plugin not found' means the plugin library was not loaded "
        "(see `dcnconvert plugin-path`)",
    ):
        data = loader()
    return bytes(data)


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
