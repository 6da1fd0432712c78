"""Build a TensorRT engine from an original or rewritten ONNX model (``dcnconvert build``/``convert``).

Steps, each timed into the payload's ``timings``:

1. :func:`check_environment` -- the runtime (TensorRT or TensorRT-RTX, ``--runtime``) importable and
   recent enough, the plugin library for it present (fail fast: exit code 4 before any work).
2. the caller loads the model and rewrites its DCN nodes into plugin nodes in memory
   (:func:`dcnconvert.steps.rewrite_in_memory`; a no-op for an already rewritten model).
3. :func:`prepare_model` -- input shapes -> optimization profiles; on the ``graph-cast`` precision
   path the graph is cast to FP16/BF16 (:mod:`dcnconvert.precision.cast`).
4. :func:`build_engine` -- the model goes to a temporary file (the parser reads a path, which also
   handles external data), a child process loads the plugins, parses and builds
   (:mod:`dcnconvert.backend.trt.isolated`: a crash there is an error here), and the engine is written
   atomically.

Precision paths (reported as ``precision_path``): ``none`` for FP32; ``builder-flag`` (TensorRT 10:
``CreateConfig(fp16=True)``/``bf16=True``, TensorRT picks layer precisions); ``graph-cast`` (the
default on TensorRT 11, where the flags no longer exist, or on request / with ``--io-precision``:
the ONNX graph is cast and the network is strongly typed; the only path on TensorRT-RTX).
TensorRT-RTX builds for target compute capabilities (``--compute-capabilities``; default
:func:`dcnconvert.backend.trt.runtimes.default_compute_capabilities`).
"""

from __future__ import annotations

import logging
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dcnconvert import schema
from dcnconvert.backend.trt import profiles as shapes
from dcnconvert.backend.trt.runtimes import default_compute_capabilities, parse_compute_capabilities
from dcnconvert.backend.trt.versions import RUNTIMES
from dcnconvert.errors import UsageError
from dcnconvert.log import Timer
from dcnconvert.model import io as onnx_io

LOG = logging.getLogger("dcnconvert.backend.trt.engine")

PRECISIONS = ("fp32", "fp16", "bf16")
PRECISION_PATHS = ("auto", "builder-flag", "graph-cast")
IO_PRECISIONS = ("fp32", "fp16", "bf16")
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


@dataclass
class BuildOptions:
    """Options of ``dcnconvert build`` (see ``dcnconvert build --help``)."""

    precision: str = "fp32"
    precision_path: str = "auto"
    io_precision: str | None = None
    keep_fp32: tuple[str, ...] = ()
    tf32: bool = False
    shapes: tuple[str, ...] = ()
    min_shapes: tuple[str, ...] = ()
    opt_shapes: tuple[str, ...] = ()
    max_shapes: tuple[str, ...] = ()
    workspace: int | None = None
    builder_optimization_level: int | None = None
    timing_cache: Path | None = None
    target: str = schema.DEFAULT_TARGET
    plugin_lib: Path | None = None
    progress: bool = True
    #: ``--weights``: ``embed``, ``input``, or None for the target's default (see :attr:`embed_weights`).
    weights: str | None = None
    #: ``--runtime``: ``tensorrt``, ``tensorrt-rtx``, or None for the installed one (TensorRT first).
    runtime: str | None = None
    #: ``--compute-capabilities`` (TensorRT-RTX): e.g. ``("8.6,12.0",)``; empty for the default.
    compute_capabilities: tuple[str, ...] = ()

    @property
    def embed_weights(self) -> bool:
        """Whether the rewrite puts constant weights into the plugin nodes (``--weights``; by default
        for ``--target dcnconvert``, never for ``trt-builtin``)."""
        return schema.resolve_weights(self.weights, schema.TARGETS[self.target])

    def validate(self) -> None:
        """Check option values and combinations that need neither the model nor TensorRT.

        Raises:
            UsageError: an unknown value or a contradictory combination.
        """
        for value, allowed, option in ((self.precision, PRECISIONS, "--precision"),
                                       (self.precision_path, PRECISION_PATHS, "--precision-path"),
                                       (self.target, tuple(schema.TARGETS), "--target")):
            if value not in allowed:
                raise UsageError(f"{option} {value!r} is not one of {', '.join(allowed)}")
        schema.resolve_weights(self.weights, schema.TARGETS[self.target])
        if self.io_precision is not None and self.io_precision not in IO_PRECISIONS:
            raise UsageError(f"--io-precision {self.io_precision!r} is not one of {', '.join(IO_PRECISIONS)}")
        if self.precision == "fp32" and self.io_precision not in (None, "fp32"):
            raise UsageError("--io-precision needs --precision fp16 or bf16",
                             hint="an FP32 engine keeps the model's input/output types")
        if self.io_precision not in (None, "fp32", self.precision):
            raise UsageError(f"--io-precision {self.io_precision} does not match "
                             f"--precision {self.precision}",
                             hint=f"use --io-precision fp32 or {self.precision}")
        if self.precision_path == "builder-flag" and self.io_precision not in (None, "fp32"):
            raise UsageError("--io-precision needs --precision-path graph-cast",
                             hint="the builder flags keep the graph's input/output types")
        if self.builder_optimization_level is not None and not 0 <= self.builder_optimization_level <= 5:
            raise UsageError(f"--builder-optimization-level {self.builder_optimization_level} is not in 0..5")
        if self.runtime not in (None, "auto", *RUNTIMES):
            raise UsageError(f"--runtime {self.runtime!r} is not one of {', '.join(RUNTIMES)}")
        if self.compute_capabilities:
            if self.runtime == "tensorrt":
                raise UsageError("--compute-capabilities needs --runtime tensorrt-rtx",
                                 hint="TensorRT builds for the GPU it runs on; TensorRT-RTX builds ahead of "
                                 "time for the GPUs named")
            parse_compute_capabilities(self.compute_capabilities)


def parse_size(text: str, option: str = "--workspace") -> int:
    """``"1G"``, ``"512M"``, ``"64KiB"``, ``"1.5g"`` or ``"1048576"`` -> bytes (binary units).

    Raises:
        UsageError: unreadable text or a size of zero.
    """
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UsageError(f"{option}: cannot read the size {text!r}",
                         hint=f"write e.g. {option} 1G or {option} 512M")
    number, unit = float(match.group(1)), match.group(2).lower()
    value = int(number * 1024 ** "_kmgt".index(unit or "_"))
    if value <= 0:
        raise UsageError(f"{option}: the size must be positive, got {text!r}")
    return value


def resolve_precision_path(precision: str, requested: str, api: Any, io_precision: str | None = None) -> str:
    """``none``, ``builder-flag`` or ``graph-cast`` for a precision on a TensorRT version (:class:`TrtApi`).

    Raises:
        UsageError: ``builder-flag`` asked of TensorRT 11.
    """
    if precision == "fp32":
        return "none"
    if requested == "builder-flag":
        if not api.precision_flags:
            raise UsageError(f"{api.label} has no {precision.upper()} builder flag",
                             hint="drop --precision-path (graph-cast is the default on TensorRT 11 and "
                             "TensorRT-RTX)")
        return "builder-flag"
    if requested == "graph-cast" or not api.precision_flags or io_precision not in (None, "fp32"):
        return "graph-cast"
    return "builder-flag"


def check_environment(options: BuildOptions, trt_adapter: Any = None) -> tuple[Any, Any, Path | None]:
    """Fail fast: the runtime and the plugin library. Returns ``(trt module, TrtApi, plugin library)``.

    Raises:
        MissingDependencyError, PluginLoadError: exit code 4, naming the missing piece.
        UsageError: a runtime that cannot serve the options (``--target trt-builtin`` on TensorRT-RTX).
    """
    from dcnconvert.backend.plugin import library as plugin_lib

    if trt_adapter is None:
        from dcnconvert.backend.trt import adapter as trt_adapter
    choice = trt_adapter.choose_runtime(options.runtime)
    trt = trt_adapter.load_tensorrt(choice.name)
    api = trt_adapter.api_of(trt)
    LOG.info("runtime: %s (%s)", api.label, choice.reason)
    if api.runtime == "tensorrt-rtx" and options.target != schema.DEFAULT_TARGET:
        raise UsageError(f"--target {options.target} needs TensorRT's own plugins; TensorRT-RTX ships none",
                         hint=f"use --target {schema.DEFAULT_TARGET} (the default), or install TensorRT")
    if options.compute_capabilities and not api.compute_capabilities:
        raise UsageError(f"--compute-capabilities: {api.label} builds for the GPU it runs on",
                         hint="build with --runtime tensorrt-rtx for other GPUs, or drop the option")
    library = plugin_lib.plugin_library_for_target(options.target, options.plugin_lib, trt.__version__,
                                                   runtime=api.runtime)
    return trt, api, library


def _target_capabilities(options: BuildOptions, api: Any) -> tuple[list[tuple[int, int]] | None, str | None]:
    """TensorRT-RTX's targets and why (None, None for TensorRT): the given ones, else the default."""
    if not api.compute_capabilities:
        return None, None
    if options.compute_capabilities:
        return parse_compute_capabilities(options.compute_capabilities), "given by --compute-capabilities"
    return default_compute_capabilities()


def quiet_field_budget(model: Any, target: str) -> dict[str, int]:
    """How often the parser will warn "Attribute NAME not found in plugin node" for each optional field
    of our plugin: once per plugin node of ``model`` (for ``target``) that does not carry it."""
    if target != schema.DEFAULT_TARGET:
        return {}
    optional = ([f[0] for f in schema.OPTIONAL_PLUGIN_FIELDS] + [f[0] for f in schema.WEIGHT_FIELDS]
                + [f[0] for f in schema.QUANT_FIELDS])
    budget: dict[str, int] = {}
    for node in model.graph.node:
        if schema.is_plugin_node(node):
            present = {a.name for a in node.attribute}
            for name in optional:
                if name not in present:
                    budget[name] = budget.get(name, 0) + 1
    return budget


def _keep_sets(model: Any, keep: tuple[str, ...]) -> tuple[frozenset, frozenset]:
    from dcnconvert.precision import cast as fp16

    ops = {n.op_type for n in model.graph.node}
    names = {n.name for n in model.graph.node if n.name}
    for value in keep:
        if value not in ops and value not in names:
            raise UsageError(f"--keep-fp32 {value!r} is neither an op type nor a node name in the model",
                             hint="give an op type (e.g. Softmax) or a node name of the model")
    return fp16.KEEP_FP32_OPS | {v for v in keep if v in ops}, frozenset(v for v in keep if v in names)


def prepare_model(model: Any, options: BuildOptions, precision_path: str,
                  timer: Timer | None = None) -> tuple[Any, list[shapes.Profile], Any | None]:
    """Shapes -> profiles, and the graph cast on the ``graph-cast`` path. Needs no TensorRT.

    Returns:
        ``(model to parse, profiles, CastReport or None)``.

    Raises:
        UsageError: bad shapes (see :func:`dcnconvert.backend.trt.profiles.build_profiles`) or
            --keep-fp32 values.
    """
    from dcnconvert.precision import cast as fp16

    timer = timer or Timer()
    profiles = shapes.build_profiles(shapes.model_inputs(model), options.shapes, options.min_shapes,
                                     options.opt_shapes, options.max_shapes)
    cast_report = None
    if precision_path == "graph-cast":
        keep_ops, keep_nodes = _keep_sets(model, options.keep_fp32)
        with timer.step("cast", f"Casting the graph to {options.precision.upper()}"):
            model, cast_report = fp16.cast_model(model, options.precision, io_precision=options.io_precision,
                                                 keep_fp32_ops=keep_ops, keep_fp32_nodes=keep_nodes)
        LOG.info("%d node(s) in %s, %d kept in FP32, %d Cast(s) inserted", cast_report.low_nodes,
                 options.precision.upper(), len(cast_report.kept_fp32), cast_report.casts_inserted)
    elif options.keep_fp32:
        raise UsageError("--keep-fp32 applies to the graph-cast precision path only",
                         hint="add --precision-path graph-cast")
    return model, profiles, cast_report


def cast_warnings(cast_report: Any) -> list[str]:
    """User-facing warnings from a CastReport (clamped weights, ops held in FP32 by their schema)."""
    if cast_report is None:
        return []
    out = []
    if cast_report.clamped_values:
        names = ", ".join(cast_report.clamped_initializers[:5])
        limit = "+-65504" if cast_report.precision == "fp16" else "the largest BF16 value (+-3.39e38)"
        out.append(f"{cast_report.clamped_values} weight value(s) beyond the {cast_report.precision.upper()} "
                   f"range were clamped to {limit} (tensors: {names})")
    by_schema = [k for k in cast_report.kept_fp32 if "does not accept" in k["reason"]]
    if by_schema:
        ops = sorted({k["op"] for k in by_schema})
        out.append(f"{len(by_schema)} node(s) ({', '.join(ops)}) stay FP32 because the model's opset does "
                   f"not allow {cast_report.precision.upper()} for them; re-export the model at a newer "
                   "opset (22 for BF16 convolutions) to convert them")
    return out


def build_engine(
    model: Any,
    output: Path,
    options: BuildOptions,
    *,
    env: tuple[Any, Any, Path | None] | None = None,
    trt_adapter: Any = None,
    timer: Timer | None = None,
) -> dict[str, Any]:
    """Build an engine from a rewritten model and write it atomically to ``output``.

    Args:
        model: the rewritten model (``ModelProto``, weights loaded).
        output: engine path.
        options: build options (validated here).
        env: the result of :func:`check_environment` (called here when ``None``).
        trt_adapter: the adapter module (tests pass a fake).
        timer: collects timings.

    Returns:
        A payload for the command's JSON object: ``engine``, ``tensorrt_version``, ``precision``,
        ``precision_path``, ``profiles``, ``cast``, ``plugin_library``, ``outputs``, ``timings``,
        ``warnings``.

    Raises:
        UsageError, MissingDependencyError, PluginLoadError, BuildError, OutputError.
    """

    if trt_adapter is None:
        from dcnconvert.backend.trt import adapter as trt_adapter
    options.validate()
    timer = timer or Timer()
    trt, api, library = env if env is not None else check_environment(options, trt_adapter)
    path = resolve_precision_path(options.precision, options.precision_path, api, options.io_precision)
    parsed, profiles, cast_report = prepare_model(model, options, path, timer)
    target = schema.TARGETS[options.target]
    libraries = [library] if library is not None else []
    capabilities, why = _target_capabilities(options, api)
    if why is not None:
        LOG.info("compute capabilities: %s (%s)",
                 ", ".join(f"{a}.{b}" for a, b in capabilities or []) or "TensorRT-RTX's default", why)
    build: dict[str, Any] = dict(
        precision_flags={options.precision: True} if path == "builder-flag" else None,
        tf32=options.tf32, profiles=[p.shapes for p in profiles], workspace=options.workspace,
        builder_optimization_level=options.builder_optimization_level,
        timing_cache=options.timing_cache, progress=options.progress)
    if capabilities is not None:
        build["compute_capabilities"] = capabilities
    with tempfile.TemporaryDirectory(prefix="dcnconvert-") as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        with timer.step("save_tmp"):
            onnx_io.save_model(parsed, onnx_path)
        what = f"{options.precision.upper()} engine ({path}) with {api.label}"
        with timer.step("build", f"Building the {what}"):
            built = trt_adapter.build_isolated(
                api, onnx_path, plugin_libraries=libraries,
                plugin=(schema.PLUGIN_NAME, target.plugin_version, target.plugin_namespace,
                        not target.needs_plugin_library),
                strongly_typed=path == "graph-cast",
                quiet_fields=quiet_field_budget(parsed, options.target),
                plugin_nodes=[n.name for n in parsed.graph.node if schema.is_plugin_node(n)], **build)
    data = built["data"]
    with timer.step("save", f"Writing {output}"):
        onnx_io.write_atomic(output, [data])
    outputs: dict[str, Any] = {"engine": str(output)}
    if options.timing_cache is not None and Path(options.timing_cache).is_file():
        outputs["timing_cache"] = str(options.timing_cache)
    return {
        "engine": {"path": str(output), "bytes": len(data)},
        "tensorrt_version": api.version,
        "runtime": {"name": api.runtime, "version": api.version},
        "compute_capabilities": None if capabilities is None else {
            "targets": [f"{a}.{b}" for a, b in capabilities], "reason": why},
        "network": built.get("network"),
        "parser_warnings_quieted": built.get("quieted") or {},
        "precision": options.precision,
        "precision_path": path,
        "io_precision": options.io_precision or "fp32",
        "target": options.target,
        "plugin_library": str(library) if library is not None else None,
        "profiles": [p.to_dict() for p in profiles],
        "cast": cast_report,
        "outputs": outputs,
        "timings": dict(timer.timings),
        "warnings": cast_warnings(cast_report),
    }


__all__ = [
    "PRECISIONS",
    "PRECISION_PATHS",
    "BuildOptions",
    "build_engine",
    "cast_warnings",
    "check_environment",
    "parse_size",
    "prepare_model",
    "resolve_precision_path",
]
