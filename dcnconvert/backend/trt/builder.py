"""Parse a model and build a serialized engine with TensorRT or TensorRT-RTX, through Polygraphy.

Called in the build's own process (:mod:`dcnconvert.backend.trt.worker`), after the plugin libraries
are loaded (:func:`dcnconvert.backend.trt.adapter.load_plugins`). Like the adapter, this module never
imports TensorRT: the module object comes in as ``trt``, and every TensorRT name used here is listed in
:data:`~dcnconvert.backend.trt.versions.TRT_API` (checked by ``tests/backend/trt/test_adapter.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dcnconvert import schema
from dcnconvert.backend.trt.adapter import _polygraphy_errors, _trt_logger, api_of
from dcnconvert.errors import BuildError, UsageError

__all__ = ["build_engine_bytes", "check_plugin_types", "describe_network", "make_progress_monitor",
           "parse_onnx"]

#: The tensor types our plugin takes (TensorRT's names), all of a layer's tensors of one type.
PLUGIN_TYPES = ("FLOAT", "HALF", "BF16")
#: The type of x of a quantized node (``quant_type`` int8 or fp8e4m3; the weights are embedded, so
#: the layer has the inputs x, offset, mask): offset and mask stay of :data:`PLUGIN_TYPES`.
QUANT_X_TYPES = ("INT8", "FP8")

LOG = logging.getLogger("dcnconvert.trt")

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


def parse_onnx(trt: Any, onnx_path: Path, *, strongly_typed: bool = False) -> tuple[Any, Any, Any]:
    """Parse ``onnx_path`` into a new network (plugins must be loaded already).

    Returns:
        ``(builder, network, parser)``, for :func:`build_engine_bytes` and :func:`describe_network`.

    Raises:
        BuildError: the parser rejected the model; names the first node it rejected.
    """
    from polygraphy.backend.trt import CreateNetwork

    api = api_of(trt)
    # TensorRT 11 and TensorRT-RTX networks are always strongly typed; their deprecated flag is not asked for
    typed = bool(strongly_typed and not api.always_strongly_typed)
    with _polygraphy_errors(f"{api.label} could not create a network", "run with -v for its log"):
        builder, network = CreateNetwork(strongly_typed=typed)()
    parser = trt.OnnxParser(network, _trt_logger())
    if parser.parse_from_file(str(onnx_path)):
        return builder, network, parser
    problems = []
    for index in range(parser.num_errors):
        parser_error = parser.get_error(index)
        problems.append((parser_error.node_name(), parser_error.node_operator(), parser_error.desc()))
    node = next((name for name, _op, _desc in problems if name), None)
    text = "; ".join(f"node '{name}' ({op}): {desc}" if name else desc for name, op, desc in problems[:3])
    raise BuildError(
        f"{api.label}'s ONNX parser rejected the model: {text or 'no reason given'}", node=node,
        hint="'Plugin not found' or a failed plugin creation means the plugin library was not loaded or the "
        "node's fields do not match the plugin (rewrite the model with this dcnconvert; see `dcnconvert "
        "plugin-path`); run with -v for the parser's log")


def describe_network(trt: Any, network: Any) -> dict[str, Any]:
    """What the parsed network holds: its layer count, and each plugin layer with its input and output
    types (TensorRT's names: FLOAT, HALF, BF16, ...)."""
    plugins = []
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        if layer.type != trt.LayerType.PLUGIN_V3:
            continue
        inputs = [layer.get_input(i) for i in range(layer.num_inputs)]
        plugins.append({"name": layer.name,
                        "inputs": [t.dtype.name if t is not None else None for t in inputs],
                        "outputs": [layer.get_output(i).dtype.name for i in range(layer.num_outputs)]})
    return {"layers": int(network.num_layers), "plugin_layers": plugins}


def check_plugin_types(described: dict[str, Any], ours: Sequence[str], strongly_typed: bool) -> None:
    """Refuse, naming the node, a plugin layer of ours whose input types the plugin cannot take (the
    builder would only say that no format combination was found, without naming the layer): every
    input FLOAT, HALF or BF16, and in a strongly typed network all of one type; a quantized node's x
    (3 inputs) may be INT8 or FP8 (the plugin checks it against its ``quant_type``).

    Args:
        described: :func:`describe_network`'s answer.
        ours: the names of our plugin's nodes.
        strongly_typed: whether the network is strongly typed.

    Raises:
        BuildError: a layer of ``ours`` with other input types.
    """
    names = set(ours)
    for layer in described.get("plugin_layers", []):
        if layer["name"] not in names:
            continue
        types = layer["inputs"]
        # a quantized node: x INT8/FP8, then offset and mask float, of one type
        first = 1 if len(types) == len(schema.EMBEDDED_INPUT_NAMES) and types[0] in QUANT_X_TYPES else 0
        wrong = [f"input {i} is {t}" for i, t in enumerate(types) if i >= first and t not in PLUGIN_TYPES]
        if not wrong and strongly_typed and len(set(types[first:])) > 1:
            wrong = [f"its inputs are {', '.join(map(str, types))}"]
        if wrong:
            raise BuildError(
                f"the plugin cannot take the types of node '{layer['name']}': {'; '.join(wrong)}",
                node=layer["name"],
                hint=f"the plugin takes {', '.join(PLUGIN_TYPES)} inputs, all of one type in a strongly "
                "typed network; cast the node's inputs in the model, or rewrite it from the original with "
                "dcnconvert (its graph cast keeps them consistent)")


def _builder_config(trt: Any, api: Any, kwargs: dict[str, Any], tf32: bool,
                    compute_capabilities: Sequence[tuple[int, int]] | None) -> Any:
    """Polygraphy's config loader: ``CreateConfig`` for TensorRT, ``CreateConfigRTX`` (target compute
    capabilities; TF32 set on the config it makes) for TensorRT-RTX."""
    if not api.compute_capabilities:
        from polygraphy.backend.trt import CreateConfig

        return CreateConfig(tf32=bool(tf32), **kwargs)
    from polygraphy.backend.tensorrt_rtx import CreateConfigRTX

    make = CreateConfigRTX(compute_capabilities=[tuple(cc) for cc in compute_capabilities or ()] or None,
                           **kwargs)
    if not tf32:
        return make

    def with_tf32(builder: Any, network: Any) -> Any:
        config = make(builder, network)
        config.set_flag(trt.BuilderFlag.TF32)
        return config

    return with_tf32


def build_engine_bytes(
    trt: Any,
    parsed: tuple[Any, Any, Any],
    *,
    precision_flags: dict[str, bool] | None = None,
    tf32: bool = False,
    profiles: Sequence[dict[str, tuple[Sequence[int], Sequence[int], Sequence[int]]]] = (),
    workspace: int | None = None,
    builder_optimization_level: int | None = None,
    timing_cache: Path | None = None,
    progress: bool = True,
    compute_capabilities: Sequence[tuple[int, int]] | None = None,
) -> bytes:
    """Build a serialized engine from :func:`parse_onnx`'s network through Polygraphy.

    Args:
        trt: the tensorrt or tensorrt_rtx module (from :func:`load_tensorrt`).
        parsed: ``(builder, network, parser)`` from :func:`parse_onnx`.
        precision_flags: ``{"fp16": True}`` / ``{"bf16": True}`` for the builder-flag path (TRT 10).
        tf32: allow TF32 for FP32 math.
        profiles: ``name -> (min, opt, max)`` per optimization profile.
        workspace: workspace memory pool limit in bytes.
        builder_optimization_level: 0..5.
        timing_cache: loaded if it exists, and saved (merged) after the build.
        progress: attach a progress monitor.
        compute_capabilities: TensorRT-RTX only: ``(major, minor)`` targets; empty or None for its default.

    Raises:
        UsageError: builder flags asked of a TensorRT without them.
        BuildError: the build failed (Polygraphy's message is included).
    """
    from polygraphy.backend.trt import EngineBytesFromNetwork, Profile

    api = api_of(trt)
    flags = {k: v for k, v in (precision_flags or {}).items() if v}
    if flags and not api.precision_flags:
        raise UsageError(
            f"{api.label} has no {'/'.join(k.upper() for k in flags)} builder flag",
            hint="use --precision-path graph-cast (the default on TensorRT 11 and TensorRT-RTX)",
        )
    kwargs: dict[str, Any] = dict(flags)
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
    loader = EngineBytesFromNetwork(
        parsed, config=_builder_config(trt, api, kwargs, tf32, compute_capabilities),
        save_timing_cache=str(timing_cache) if timing_cache is not None else None,
    )
    with _polygraphy_errors(f"{api.label} could not build the engine", "run with -v for its log"):
        data = loader()
    return bytes(data)
