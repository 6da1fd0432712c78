"""Verify an engine against the original model run in ONNX Runtime (``dcnconvert verify``).

The reference is the original model with every DCN node turned into standard ONNX ``DeformConv``
(:func:`dcnconvert.transform.standard.to_standard_model`, what ``dcnconvert reference`` writes), run by
Polygraphy's ``OnnxrtRunner`` on the CPU. The engine runs in Polygraphy's ``TrtRunner`` with the plugin
library loaded (:mod:`dcnconvert.backend.trt.adapter`). Both see the same inputs: seeded uniform random values
in [-1, 1) (never all zeros) or a file (``--inputs``: Polygraphy's JSON list of feed dicts, or an
``.npz``). Polygraphy's ``Comparator.compare_accuracy`` with ``SimpleCompareFunc`` decides, element by
element: an element fails only if ``|engine - ref| > atol`` **and** ``|engine - ref| / |ref| > rtol``.

Feeds and saved files: :mod:`dcnconvert.verification.io`; tolerances and the comparison:
:mod:`dcnconvert.verification.compare` (their names are importable from here too). A model with
quantized DCN layers is compared with its Q/DQ semantics; the default ``atol`` is raised to the most
the layers' sample rounding can move an output (:mod:`dcnconvert.verification.quant`), and the
payload's ``quantized`` lists the layers.

Saved files are Polygraphy's JSON formats, so the printed commands re-run the check without
dcnconvert: ``polygraphy run OUT.engine --model-type engine --trt --plugins $(dcnconvert plugin-path)
--load-inputs INPUTS.json --load-outputs REF.json``.

Everything up to the TensorRT run (inputs, reference model, ONNX Runtime run, saving) needs no GPU.
"""

from __future__ import annotations

import logging
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dcnconvert.backend.trt import profiles as shapes
from dcnconvert.errors import AccuracyError, ModelError, UsageError
from dcnconvert.verification.compare import DEFAULT_TOLERANCES, compare, format_rows, tolerances
from dcnconvert.verification.io import (
    cast_feeds,
    check_feeds,
    load_inputs,
    make_inputs,
    save_inputs,
    save_run_results,
)
from dcnconvert.verification.quant import atol_floor, quantized_layers

LOG = logging.getLogger("dcnconvert.verification.runner")

REFERENCE_RUNNER = "onnxrt-reference"
ENGINE_RUNNER = "tensorrt"


def reference_model(model: Any) -> Any:
    """The standard-ONNX model that ONNX Runtime runs (every DCN form -> ``DeformConv``)."""
    from dcnconvert.transform import standard

    return standard.to_standard_model(model)


def _runtime_errors() -> tuple[type[BaseException], ...]:
    """What ONNX Runtime (its pybind exception classes) and Polygraphy raise when a run fails."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
    from polygraphy.exception import PolygraphyException

    ort = [v for v in vars(ort_state).values() if isinstance(v, type) and issubclass(v, Exception)]
    return (PolygraphyException, *ort)


def run_reference(std_model: Any, feeds: Sequence[Mapping[str, np.ndarray]]) -> Any:
    """Run the reference model in ONNX Runtime (CPU) through Polygraphy; returns ``RunResults``.

    Raises:
        ModelError: ONNX Runtime cannot load or run the reference model (e.g. another custom op in
            the model, or an ONNX Runtime without ``DeformConv``); ONNX Runtime's message is included.
    """
    import onnxruntime
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
    from polygraphy.comparator import Comparator

    from dcnconvert import log
    from dcnconvert.model import io as onnx_io

    log.configure_polygraphy()
    with tempfile.TemporaryDirectory(prefix="dcnconvert-ref-") as tmp:
        path = Path(tmp) / "reference.onnx"
        onnx_io.save_model(std_model, path)
        runner = OnnxrtRunner(SessionFromOnnx(str(path), providers=["cpu"]), name=REFERENCE_RUNNER)
        try:
            return Comparator.run([runner], data_loader=[dict(f) for f in feeds])
        except _runtime_errors() as exc:
            raise ModelError(
                f"ONNX Runtime {onnxruntime.__version__} cannot run the reference model: "
                f"{' '.join(str(exc).split())}",
                hint="every node besides the DCNs must run in ONNX Runtime (CPU); DeformConv needs "
                "onnxruntime >= 1.25. Check the reference model with 'dcnconvert reference', or compare "
                "the engine with outputs made another way: polygraphy run ENGINE --load-outputs FILE",
            ) from None


def polygraphy_commands(
    engine: Path,
    model: Path,
    *,
    plugin: str | None,
    inputs_file: str,
    ref_file: str,
    atol: float,
    rtol: float,
    engine_shapes: Mapping[str, Sequence[int]] = (),
) -> list[str]:
    """The equivalent command lines: reference model, ORT outputs, TensorRT check, trtexec timing.

    Args:
        plugin: ``--plugins`` value (``"$(dcnconvert plugin-path)"`` or a path), ``None`` for none.
        engine_shapes: input shapes for trtexec's ``--shapes`` (dynamic engines).
    """
    q = shlex.quote
    ref_model = model.with_name(model.stem + ".reference.onnx")
    plug = "" if plugin is None else f" --plugins {plugin if plugin.startswith('$(') else q(plugin)}"
    static = "" if plugin is None else f" --staticPlugins={plugin if plugin.startswith('$(') else q(plugin)}"
    shape_arg = ""
    if engine_shapes:
        pairs = [f"{n}:{'x'.join(map(str, s))}" for n, s in dict(engine_shapes).items()]
        shape_arg = " --shapes=" + ",".join(pairs)
    return [
        f"dcnconvert reference {q(str(model))} -o {q(str(ref_model))}",
        (f"polygraphy run {q(str(ref_model))} --onnxrt --load-inputs {q(inputs_file)} "
         f"--save-outputs {q(ref_file)}"),
        (f"polygraphy run {q(str(engine))} --model-type engine --trt{plug} --load-inputs {q(inputs_file)} "
         f"--load-outputs {q(ref_file)} --atol {atol:g} --rtol {rtol:g} --check-error-stat elemwise"),
        f"trtexec --loadEngine={q(str(engine))}{static}{shape_arg}",
    ]


@dataclass
class VerifyOptions:
    """Options of ``dcnconvert verify`` (see ``dcnconvert verify --help``)."""

    precision: str = "fp32"
    atol: float | None = None
    rtol: float | None = None
    inputs: Path | None = None
    save_inputs: Path | None = None
    save_outputs: Path | None = None
    seed: int = 0
    shapes: tuple[str, ...] = ()
    target: str = "dcnconvert"
    plugin_lib: Path | None = None
    print_commands: bool = False
    #: ``--runtime``: ``tensorrt``, ``tensorrt-rtx``, or None for the installed one (TensorRT first).
    runtime: str | None = None


def prepare_reference(model: Any, options: VerifyOptions, engine_inputs: Sequence[Mapping[str, Any]] = (),
                      timer: Any = None) -> tuple[dict[str, np.ndarray], Any, dict[str, Any]]:
    """Everything before TensorRT: feeds, reference model, ORT run, saved files. Needs no GPU.

    Args:
        model: the original (or rewritten) model.
        options: verify options.
        engine_inputs: :func:`dcnconvert.backend.trt.adapter.engine_inputs` (profile 0 opt shapes fill in
            dynamic dims that neither the model nor ``--shapes`` fix).

    Returns:
        ``(feeds, reference RunResults, outputs written)``.
    """
    from dcnconvert.log import Timer

    timer = timer or Timer()
    infos = shapes.model_inputs(model)
    if options.inputs is not None:
        feeds = load_inputs(options.inputs)
        check_feeds(infos, feeds)
    else:
        profiles = shapes.build_profiles(infos, options.shapes) if options.shapes else []
        engine_shapes = {e["name"]: e["profile0"][1] for e in engine_inputs if e.get("profile0")}
        concrete = shapes.concrete_shapes(infos, profiles, engine_shapes)
        feeds = make_inputs(infos, concrete, options.seed)
    with timer.step("reference", "Running the reference model in ONNX Runtime"):
        std = reference_model(model)
        ref = run_reference(std, [feeds])
    written: dict[str, Any] = {}
    if options.save_inputs is not None:
        save_inputs(options.save_inputs, feeds)
        written["inputs"] = str(options.save_inputs)
    if options.save_outputs is not None:
        save_run_results(options.save_outputs, ref)
        written["reference_outputs"] = str(options.save_outputs)
    return feeds, ref, written


def verify_engine(engine: Path, model: Any, model_path: Path, options: VerifyOptions, *, env: Any = None,
                  trt_adapter: Any = None, timer: Any = None) -> dict[str, Any]:
    """Run the engine and the reference on the same inputs and compare.

    Args:
        engine: the engine file.
        model: the original model (loaded), or its rewritten form.
        model_path: its path (for the printed commands).
        options: verify options.
        env: ``(trt, api, plugin library)`` from :func:`dcnconvert.backend.trt.engine.check_environment`.
        trt_adapter: the adapter module (tests pass a fake).

    Returns:
        The payload: ``comparison`` rows, ``tolerances``, ``passed``, ``commands``, ``outputs``, ``timings``.

    Raises:
        AccuracyError: an output differs beyond tolerance (exit code 3); the payload is attached.
        MissingDependencyError, PluginLoadError, BuildError, UsageError, ModelError.
    """
    from dcnconvert.backend.trt.engine import BuildOptions, check_environment
    from dcnconvert.log import Timer

    if trt_adapter is None:
        from dcnconvert.backend.trt import adapter as trt_adapter
    timer = timer or Timer()
    atol, rtol = tolerances(options.precision, options.atol, options.rtol)
    if not Path(engine).is_file():
        raise UsageError(f"the engine {engine} does not exist", hint="build it with 'dcnconvert build' first")
    layers = quantized_layers(model, options.target)
    if layers and options.atol is None:  # the kernels round each sample; the reference does not
        atol = max(atol, atol_floor(layers))
    if env is None:
        env = check_environment(BuildOptions(target=options.target, plugin_lib=options.plugin_lib,
                                             runtime=options.runtime), trt_adapter)
    trt, api, library = env
    if getattr(api, "runtime", "tensorrt") == "tensorrt-rtx":
        from dcnconvert.backend.trt.runtimes import check_rtx_can_run

        check_rtx_can_run(f"the TensorRT-RTX engine {engine}")
    libraries = [library] if library is not None else []
    with timer.step("engine_info"):
        e_inputs = trt_adapter.engine_inputs(trt, Path(engine), libraries)
    feeds, ref, written = prepare_reference(model, options, e_inputs, timer)
    with timer.step("engine_run", "Running the engine in TensorRT"):
        engine_feeds = [cast_feeds(feeds, e_inputs)]
        got = trt_adapter.run_engine(trt, Path(engine), engine_feeds, libraries, ENGINE_RUNNER)
    passed, rows = compare(got, ref, atol, rtol)
    plugin = None
    if library is not None:
        plugin = str(library) if options.plugin_lib else "$(dcnconvert plugin-path)"
    commands = polygraphy_commands(
        Path(engine), Path(model_path), plugin=plugin,
        inputs_file=str(options.save_inputs or "INPUTS.json"),
        ref_file=str(options.save_outputs or "REF.json"),
        atol=atol, rtol=rtol, engine_shapes={k: v.shape for k, v in feeds.items()})
    for line in commands:
        LOG.debug("equivalent: %s", line)
    payload = {"passed": passed, "comparison": rows, "tolerances": {"atol": atol, "rtol": rtol,
               "precision": options.precision, "rule": "fail if abs > atol and rel > rtol"},
               "quantized": [layer.to_dict() for layer in layers],
               "commands": commands, "outputs": written, "timings": dict(timer.timings)}
    if not passed:
        bad = [r["output"] for r in rows if not r["passed"]]
        exc = AccuracyError(f"the engine's output(s) {bad} differ from the ONNX Runtime reference beyond "
                            f"atol={atol:g}/rtol={rtol:g}",
                            hint=("if the engine is FP16/BF16, pass --precision fp16/bf16 (its default "
                                  "tolerances); " if options.precision == "fp32" else "")
                            + "see the table for the errors; loosen --atol/--rtol if they are expected for "
                            "this precision")
        exc.payload = payload  # type: ignore[attr-defined] # read by cli_common.run_command
        raise exc
    return payload


__all__ = [
    "DEFAULT_TOLERANCES",
    "ENGINE_RUNNER",
    "REFERENCE_RUNNER",
    "VerifyOptions",
    "cast_feeds",
    "check_feeds",
    "compare",
    "format_rows",
    "load_inputs",
    "make_inputs",
    "polygraphy_commands",
    "prepare_reference",
    "reference_model",
    "run_reference",
    "save_inputs",
    "save_run_results",
    "tolerances",
    "verify_engine",
]
