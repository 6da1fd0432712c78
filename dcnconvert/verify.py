"""Verify an engine against the original model run in ONNX Runtime (``dcnconvert verify``).

The reference is the original model with every DCN node turned into standard ONNX ``DeformConv``
(:func:`dcnconvert.standard.to_standard_model`, what ``dcnconvert reference`` writes), run by
Polygraphy's ``OnnxrtRunner`` on the CPU. The engine runs in Polygraphy's ``TrtRunner`` with the plugin
library loaded (:mod:`dcnconvert.trt_adapter`). Both see the same inputs: seeded uniform random values
in [-1, 1) (never all zeros) or a file (``--inputs``: Polygraphy's JSON list of feed dicts, or an
``.npz``). Polygraphy's ``Comparator.compare_accuracy`` with ``SimpleCompareFunc`` decides, element by
element: an element fails only if ``|engine - ref| > atol`` **and** ``|engine - ref| / |ref| > rtol``.

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

from dcnconvert import shapes
from dcnconvert.errors import AccuracyError, ModelError, UsageError

LOG = logging.getLogger("dcnconvert.verify")

#: Default ``(atol, rtol)`` per engine precision (also in the README).
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "fp32": (1e-4, 1e-3),
    "fp16": (1e-2, 1e-2),
    "bf16": (5e-2, 5e-2),
}
REFERENCE_RUNNER = "onnxrt-reference"
ENGINE_RUNNER = "tensorrt"


def tolerances(precision: str, atol: float | None = None, rtol: float | None = None) -> tuple[float, float]:
    """``(atol, rtol)``: the given values, else the defaults for ``precision``.

    Raises:
        UsageError: an unknown precision or a negative tolerance.
    """
    if precision not in DEFAULT_TOLERANCES:
        raise UsageError(f"--precision {precision!r} is not one of {', '.join(DEFAULT_TOLERANCES)}")
    d_atol, d_rtol = DEFAULT_TOLERANCES[precision]
    a = d_atol if atol is None else float(atol)
    r = d_rtol if rtol is None else float(rtol)
    if a < 0 or r < 0:
        raise UsageError(f"tolerances must be >= 0, got atol={a}, rtol={r}")
    return a, r


def make_inputs(
    inputs: Sequence[shapes.InputInfo], concrete: Mapping[str, Sequence[int]], seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded random feeds: floats uniform in [-1, 1), integers in [0, 4), booleans at random.

    Args:
        inputs: the model's inputs (name, dims, ONNX element type).
        concrete: a shape for every input (:func:`dcnconvert.shapes.concrete_shapes`).
        seed: the random seed (the same seed gives the same feeds).

    Raises:
        ModelError: an input type NumPy cannot hold (e.g. bfloat16).
    """
    from onnx import helper

    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in inputs:
        shape = tuple(int(d) for d in concrete[info.name])
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(info.elem_type))
        except (KeyError, TypeError, ValueError):
            raise ModelError(f"input '{info.name}' has element type {info.elem_type}, which NumPy cannot "
                             "hold",
                             hint="give the inputs in a file with --inputs") from None
        if dtype.kind == "f" and dtype.itemsize >= 2 and dtype.name in ("float16", "float32", "float64"):
            feeds[info.name] = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[info.name] = rng.integers(0, 4, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[info.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise ModelError(f"input '{info.name}' has dtype {dtype}, for which no random data is generated",
                             hint="give the inputs in a file with --inputs")
    return feeds


def load_inputs(path: Path) -> dict[str, np.ndarray]:
    """Feeds from ``.npz`` (name -> array) or Polygraphy JSON (a list of feed dicts; the first is used).

    Raises:
        ModelError: the file cannot be read or holds no feed dict.
    """
    path = Path(path)
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return {k: np.asarray(data[k]) for k in data.files}
        from polygraphy.json import from_json

        obj = from_json(path.read_text())
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise ModelError(f"cannot read inputs from {path}: {exc}",
                         hint="give an .npz file or a Polygraphy JSON inputs file "
                         "(polygraphy run --save-inputs)") from None
    if isinstance(obj, list) and obj and isinstance(obj[0], Mapping):
        obj = obj[0]
    if not isinstance(obj, Mapping):
        raise ModelError(f"{path} holds no feed dict", hint="expected a list of {input name: array} dicts")
    return {str(k): np.asarray(v) for k, v in obj.items()}


def check_feeds(inputs: Sequence[shapes.InputInfo], feeds: Mapping[str, np.ndarray]) -> None:
    """Every model input is fed, nothing else, with the model's rank and fixed dims.

    Raises:
        UsageError: a missing, unknown or misshapen feed.
    """
    names = [i.name for i in inputs]
    missing = [n for n in names if n not in feeds]
    extra = sorted(set(feeds) - set(names))
    if missing or extra:
        raise UsageError(f"the inputs file does not match the model: missing {missing}, unknown {extra}",
                         hint=f"the model's inputs are {names}")
    for info in inputs:
        arr = feeds[info.name]
        if info.dims and (arr.ndim != len(info.dims) or any(
                isinstance(d, int) and d >= 0 and d != s for d, s in zip(info.dims, arr.shape))):
            raise UsageError(f"input '{info.name}' has shape {list(arr.shape)}, the model wants "
                             f"{shapes.format_dims(info.dims)}")


def _to_json_text(obj: Any) -> str:
    from polygraphy.json import to_json

    return to_json(obj)


def save_inputs(path: Path, feeds: Mapping[str, np.ndarray]) -> None:
    """Save feeds as Polygraphy's inputs JSON (``--load-inputs``), atomically."""
    from collections import OrderedDict

    from dcnconvert.build import write_bytes_atomic

    write_bytes_atomic(Path(path), _to_json_text([OrderedDict(feeds)]).encode())


def save_run_results(path: Path, results: Any) -> None:
    """Save Polygraphy ``RunResults`` as JSON (``--load-outputs``), atomically."""
    from dcnconvert.build import write_bytes_atomic

    write_bytes_atomic(Path(path), _to_json_text(results).encode())


def reference_model(model: Any) -> Any:
    """The standard-ONNX model that ONNX Runtime runs (every DCN form -> ``DeformConv``)."""
    from dcnconvert import standard

    return standard.to_standard_model(model)


def run_reference(std_model: Any, feeds: Sequence[Mapping[str, np.ndarray]]) -> Any:
    """Run the reference model in ONNX Runtime (CPU) through Polygraphy; returns ``RunResults``."""
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
    from polygraphy.comparator import Comparator

    from dcnconvert import log, onnx_io

    log.configure_polygraphy()
    with tempfile.TemporaryDirectory(prefix="dcnconvert-ref-") as tmp:
        path = Path(tmp) / "reference.onnx"
        onnx_io.save_model(std_model, path)
        runner = OnnxrtRunner(SessionFromOnnx(str(path), providers=["cpu"]), name=REFERENCE_RUNNER)
        return Comparator.run([runner], data_loader=[dict(f) for f in feeds])


def cast_feeds(
    feeds: Mapping[str, np.ndarray], engine_inputs: Sequence[Mapping[str, Any]]
) -> dict[str, np.ndarray]:
    """Feeds in the engine's input dtypes (an FP16-I/O engine gets FP16 arrays).

    Raises:
        UsageError: an engine input in a type NumPy cannot hold (bfloat16).
    """
    out = dict(feeds)
    for info in engine_inputs:
        name, dtype = info["name"], info["dtype"]
        if name not in out:
            continue
        try:
            if dtype == "bfloat16":
                raise TypeError(dtype)
            np_dtype = np.dtype(dtype)
        except TypeError:
            raise UsageError(f"engine input '{name}' is {dtype}, which NumPy cannot feed",
                             hint="build with --io-precision fp32 (the default) to verify the engine",
                             ) from None
        out[name] = out[name].astype(np_dtype)
    return out


def _compare_func(atol: float, rtol: float) -> Any:
    from polygraphy.comparator import compare as poly_compare

    simple = getattr(poly_compare, "SimpleCompareFunc", None)  # Polygraphy >= 0.53; CompareFunc.simple before
    if simple is not None:
        return simple(atol=atol, rtol=rtol, check_error_stat="elemwise")
    return poly_compare.CompareFunc.simple(atol=atol, rtol=rtol, check_error_stat="elemwise")


def compare(
    engine_results: Any, reference_results: Any, atol: float, rtol: float
) -> tuple[bool, list[dict[str, Any]]]:
    """Compare engine outputs with the reference (Polygraphy ``compare_accuracy``, elementwise rule).

    Returns:
        ``(passed, rows)``; one row per output: name, shape, max/mean absolute and relative error,
        the number of failing elements and ``passed``.
    """
    from polygraphy.comparator import Comparator
    from polygraphy.comparator.struct import RunResults

    from dcnconvert import log

    log.configure_polygraphy()
    combined = RunResults()
    for name, iters in list(engine_results.items()) + list(reference_results.items()):
        combined[name] = iters
    func = _compare_func(atol, rtol)
    accuracy = Comparator.compare_accuracy(combined, compare_func=func)
    engine_out = next(iter(engine_results.values()))[0]
    ref_out = next(iter(reference_results.values()))[0]
    rows = []
    for name in list(ref_out.keys()):
        ref = np.asarray(ref_out[name], dtype=np.float64)
        if name not in engine_out:
            rows.append({"output": name, "passed": False, "error": "missing in the engine's outputs"})
            continue
        got = np.asarray(engine_out[name], dtype=np.float64)
        if got.shape != ref.shape:
            rows.append({"output": name, "passed": False,
                         "error": f"shape {list(got.shape)} != reference {list(ref.shape)}"})
            continue
        absdiff = np.abs(got - ref)
        reldiff = absdiff / np.where(ref == 0, np.finfo(np.float64).eps, np.abs(ref))
        bad = ((absdiff > atol) | np.isnan(absdiff)) & ((reldiff > rtol) | np.isnan(reldiff))
        rows.append({
            "output": name, "shape": list(ref.shape),
            "max_abs": float(np.nanmax(absdiff)) if absdiff.size else 0.0,
            "mean_abs": float(np.nanmean(absdiff)) if absdiff.size else 0.0,
            "max_rel": float(np.nanmax(reldiff)) if reldiff.size else 0.0,
            "mean_rel": float(np.nanmean(reldiff)) if reldiff.size else 0.0,
            "mismatches": int(bad.sum()), "elements": int(bad.size), "passed": not bool(bad.any()),
        })
    passed = bool(accuracy) and all(r["passed"] for r in rows)
    return passed, rows


def format_rows(rows: Sequence[Mapping[str, Any]], atol: float, rtol: float) -> str:
    """A text table of the comparison."""
    from dcnconvert.report import format_table

    body = []
    for r in rows:
        if "error" in r:
            body.append([r["output"], "-", "-", "-", "-", "-", f"FAIL: {r['error']}"])
            continue
        body.append([r["output"], "x".join(map(str, r["shape"])),
                     f"{r['max_abs']:.3g}", f"{r['mean_abs']:.3g}",
                     f"{r['max_rel']:.3g}", f"{r['mean_rel']:.3g}",
                     "ok" if r["passed"] else f"FAIL ({r['mismatches']}/{r['elements']})"])
    table = format_table(["output", "shape", "max abs", "mean abs", "max rel", "mean rel", "result"], body)
    return f"{table}\n(an element fails if abs > {atol:g} and rel > {rtol:g})"


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


def prepare_reference(model: Any, options: VerifyOptions, engine_inputs: Sequence[Mapping[str, Any]] = (),
                      timer: Any = None) -> tuple[dict[str, np.ndarray], Any, dict[str, Any]]:
    """Everything before TensorRT: feeds, reference model, ORT run, saved files. Needs no GPU.

    Args:
        model: the original (or rewritten) model.
        options: verify options.
        engine_inputs: :func:`dcnconvert.trt_adapter.engine_inputs` (profile 0 opt shapes fill in
            dynamic dims that neither the model nor ``--shapes`` fix).

    Returns:
        ``(feeds, reference RunResults, outputs written)``.
    """
    from dcnconvert.build import Timer

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
        env: ``(trt, api, plugin library)`` from :func:`dcnconvert.build.check_environment`.
        trt_adapter: the adapter module (tests pass a fake).

    Returns:
        The payload: ``comparison`` rows, ``tolerances``, ``passed``, ``commands``, ``outputs``, ``timings``.

    Raises:
        AccuracyError: an output differs beyond tolerance (exit code 3); the payload is attached.
        MissingDependencyError, PluginLoadError, BuildError, UsageError, ModelError.
    """
    from dcnconvert.build import BuildOptions, Timer, check_environment

    if trt_adapter is None:
        from dcnconvert import trt_adapter
    timer = timer or Timer()
    atol, rtol = tolerances(options.precision, options.atol, options.rtol)
    if not Path(engine).is_file():
        raise UsageError(f"the engine {engine} does not exist", hint="build it with 'dcnconvert build' first")
    if env is None:
        env = check_environment(BuildOptions(target=options.target, plugin_lib=options.plugin_lib),
                                trt_adapter)
    trt, _api, library = env
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
