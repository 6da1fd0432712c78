"""The library API: what each ``dcnconvert`` command does, callable from Python.

Every function takes paths or an ``onnx.ModelProto`` and returns a :class:`Result`: the same object
the command prints with ``--json`` (``ok``, ``inputs``, ``outputs``, ``timings``, ``warnings`` and
the command's own keys). Errors are raised, never printed: the :class:`~dcnconvert.errors.DcnConvertError`
tree, whose ``exit_code`` is the command's, with the partial result as ``error.result``. A model is
never modified: a given ``ModelProto`` is copied before it is rewritten.

The click commands (:mod:`dcnconvert.cli.main`, :mod:`dcnconvert.cli.engine`) are a layer over these
functions; called while a command runs, a function's result joins that command's result.

>>> from dcnconvert import api
>>> found = api.inspect("sample_models/onnx_DeformConv.onnx")  # doctest: +SKIP
>>> found["count"], found["matches"][0]["form"]  # doctest: +SKIP
(1, 'onnx.DeformConv')
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Union

import onnx

from dcnconvert import errors, log, schema
from dcnconvert.model import check as model_check
from dcnconvert.recording import add_input, add_output, add_warning, attach_payload, current_result, recording
from dcnconvert.report import match_to_dict
from dcnconvert.steps import check_output_path, load_model_timed, rewrite_in_memory, save_model_timed

__all__ = ["Result", "build", "convert", "inspect", "quantize", "reference", "rewrite", "verify"]

ModelLike = Union[str, "os.PathLike[str]", onnx.ModelProto]


class Result(dict):
    """A command's result: the dict ``--json`` prints, and ``model``, the model a call produced in
    memory (``rewrite``/``reference`` without an output path), else None."""

    model: onnx.ModelProto | None = None


def _run(name: str, inputs: dict[str, Any], work: Callable[[], tuple[dict[str, Any], Any]]) -> Result:
    """Run ``work`` under a result of its own, or, inside a running command, as part of its result."""
    if current_result() is not None:
        payload, model = work()
        out = Result(payload)
        out.model = model
        return out
    with recording(name, inputs) as result:
        try:
            payload, model = work()
            result.merge(payload)
        except errors.DcnConvertError as exc:
            result.exit_code = exc.exit_code
            result.errors.append(exc.to_dict())
            result.merge(getattr(exc, "payload", None))
            exc.result = result.to_dict()  # type: ignore[attr-defined]
            raise
    out = Result(result.to_dict())
    out.model = model
    return out


def _describe(model: ModelLike) -> str:
    return "<ModelProto>" if isinstance(model, onnx.ModelProto) else str(model)


def _checked(model: ModelLike) -> ModelLike:
    """A given model gets the check a loaded one gets (:func:`dcnconvert.model.check.check_model`:
    errors and warnings); a path is checked when it is loaded."""
    if isinstance(model, onnx.ModelProto):
        model_check.check_model(model)
    return model


def _load(model: ModelLike) -> onnx.ModelProto:
    checked = _checked(model)
    return checked if isinstance(checked, onnx.ModelProto) else load_model_timed(Path(checked))


def _check_output(model: ModelLike, output: Path, option: str = "-o", *, derived: bool = False) -> None:
    """The checks of an output path; a ``ModelProto`` input has no path to collide with."""
    check_output_path(Path(os.devnull) if isinstance(model, onnx.ModelProto) else Path(model), output, option,
                      derived=derived)


def _like(model: ModelLike) -> Path | None:
    return None if isinstance(model, onnx.ModelProto) else Path(model)


# ----------------------------------------------------------------------------------------------
# inspect, rewrite, reference
# ----------------------------------------------------------------------------------------------


def inspect(model: ModelLike, target: str = schema.DEFAULT_TARGET) -> Result:
    """The DCN nodes of ``model``: ``matches`` (form, attributes, shapes, convertible for ``target`` or
    why not), ``count``, ``convertible``, ``target``."""

    def work() -> tuple[dict[str, Any], None]:
        from dcnconvert.match import finder as match
        from dcnconvert.match import validate
        from dcnconvert.recording import timed

        proto = _load(model)
        with timed("match"):
            matches = []
            for m in match.find_dcn_nodes(proto):
                d = match_to_dict(m)
                problems = validate.problems(m, target) if m.convertible else []
                d["problems"] = [p.to_dict() for p in problems]
                if problems:
                    d["convertible"] = False
                    more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
                    d["reason"] = str(problems[0]) + more
                matches.append(d)
        if not matches:
            add_warning(f"no deformable convolution node found in {_describe(model)}")
        n_ok = sum(1 for m in matches if m["convertible"])
        log.get_logger().info("%d DCN node(s), %d convertible for target '%s'", len(matches), n_ok, target)
        return {"target": target, "matches": matches, "count": len(matches), "convertible": n_ok}, None

    return _run("inspect", {"model": _describe(model)}, work)


def rewrite(model: ModelLike, output: str | os.PathLike[str] | None = None, *,
            target: str = schema.DEFAULT_TARGET, require_match: bool = False,
            allow_tf32: bool = False, weights: str | None = None) -> Result:
    """Every DCN node of ``model`` as a plugin node for ``target``; saved to ``output`` (atomically) or,
    without one, returned as ``result.model``. The result's ``rewrite`` key is the rewrite report.
    ``weights``: ``"embed"`` (constant weights into the plugin nodes), ``"input"`` (weights stay node
    inputs), or None for the target's default (embed for ``dcnconvert``, input for ``trt-builtin``).

    Raises:
        UsageError: ``allow_tf32`` for a target without the field, ``weights="embed"`` for
            ``trt-builtin``, or ``output`` is the input.
        NoMatchError: no DCN node and ``require_match``. ValidationError, UnsupportedNodeError.
    """

    def work() -> tuple[dict[str, Any], onnx.ModelProto]:
        if allow_tf32 and not schema.TARGETS[target].has_allow_tf32:
            raise schema.tf32_target_error(schema.TARGETS[target], "--allow-tf32")
        embed = schema.resolve_weights(weights, schema.TARGETS[target])
        if output is not None:
            _check_output(model, Path(output))
        new_model, payload = rewrite_in_memory(_checked(model), target, require_match, allow_tf32, embed)
        if output is not None:
            save_model_timed(new_model, Path(output), like=_like(model))
        payload["target"] = target
        return payload, new_model

    return _run("rewrite", {"model": _describe(model)}, work)


def reference(model: ModelLike, output: str | os.PathLike[str] | None = None) -> Result:
    """``model`` with every DCN form (plugin nodes included) as standard ONNX ``DeformConv``, the model
    ONNX Runtime runs as ground truth; saved to ``output`` or returned as ``result.model``."""

    def work() -> tuple[dict[str, Any], onnx.ModelProto]:
        from dcnconvert.recording import timed
        from dcnconvert.transform import standard

        if output is not None:
            _check_output(model, Path(output))
        proto = _load(model)
        with timed("convert", "Converting DCN nodes to standard ONNX DeformConv"):
            std = standard.to_standard_model(proto)
        if output is not None:
            save_model_timed(std, Path(output), like=_like(model))
        return {}, std

    return _run("reference", {"model": _describe(model)}, work)


def quantize(model: ModelLike, output: str | os.PathLike[str] | None = None, *, quant_type: str = "int8",
             inputs: Sequence[str | os.PathLike[str]] = (), samples: int = 8, seed: int = 0,
             shapes: Sequence[str] = (), quantize_output: bool = False, nodes: Sequence[str] = ()) -> Result:
    """``model`` with calibrated Q/DQ nodes around its DCN layers (:mod:`dcnconvert.quantize`): x per
    tensor, weights per output channel, ``quant_type`` ``"int8"`` or ``"fp8e4m3"``; saved to ``output``
    or returned as ``result.model``. Calibration runs the float model in ONNX Runtime on ``inputs``
    (``.npz`` files, one feed dict each) or on ``samples`` random inputs (``seed``; ``shapes`` such as
    ``"x:1x3x64x64"`` for dynamic inputs). The result's ``quantize`` key lists the layers and scales.

    Raises:
        UsageError: bad options or inputs files. NoMatchError: no DCN node can be quantized.
        ModelError: ONNX Runtime cannot run the model, or its opset cannot be upgraded.
    """

    def work() -> tuple[dict[str, Any], onnx.ModelProto]:
        from dcnconvert.quantize import calibrate, layers
        from dcnconvert.recording import timed

        if output is not None:
            _check_output(model, Path(output))
        for path in inputs:
            add_input("calibration", str(path))
        proto = _load(model)
        with timed("calibrate", "Calibrating the DCN layers in ONNX Runtime"):
            feeds = calibrate.calibration_feeds(proto, [Path(p) for p in inputs], samples, seed, shapes)
            new_model, report = layers.quantize_model(proto, quant_type, feeds,
                                                      quantize_output=quantize_output,
                                                      nodes=nodes)
        if output is not None:
            save_model_timed(new_model, Path(output), like=_like(model))
        return {"quantize": report}, new_model

    return _run("quantize", {"model": _describe(model)}, work)


# ----------------------------------------------------------------------------------------------
# engines
# ----------------------------------------------------------------------------------------------


def _check_timing_cache(model: ModelLike, engine: Path, cache: Path | None) -> None:
    """The timing cache is written after the build: its folder must exist before minutes are spent."""
    if cache is None:
        return
    _check_output(model, cache, "--timing-cache")
    if os.path.realpath(cache) == os.path.realpath(engine):
        raise errors.UsageError(f"--timing-cache {cache} is also the engine (-o)",
                                hint="give the timing cache its own path")


def _check_save_paths(model: ModelLike, others: dict[str, Path], vopts: Any) -> None:
    """--save-inputs/--save-outputs: not the input model, one of ``others`` (what -> path) or each other."""
    given = {"--" + key.replace("_", "-"): getattr(vopts, key) for key in ("save_inputs", "save_outputs")
             if getattr(vopts, key, None) is not None}
    for option, path in given.items():
        _check_output(model, Path(path), option)
        taken = dict(others, **{f"the {o} file": p for o, p in given.items() if o != option})
        for what, other in taken.items():
            if os.path.realpath(other) == os.path.realpath(path):
                raise errors.UsageError(f"{option} {path} is also {what}",
                                        hint="give every file its own path")


def plugin_tf32(options: Any) -> bool:
    """Whether ``tf32`` also writes ``allow_tf32 = 1`` on the plugin nodes: yes where the target's plugin
    has the field; for one without it (trt-builtin) the builder flag alone applies, with a warning."""
    if not options.tf32:
        return False
    target = schema.TARGETS[options.target]
    if target.has_allow_tf32:
        return True
    add_warning(f"--tf32 with --target {target.name}: TensorRT's built-in ModulatedDeformConv2d has no "
                f"{schema.ATTR_ALLOW_TF32} field, so TF32 applies to TensorRT's own layers only; use "
                f"--target {schema.DEFAULT_TARGET} for TF32 in the DCN layers too")
    return False


def build(model: ModelLike, output: str | os.PathLike[str], options: Any = None) -> Result:
    """A TensorRT engine from ``model`` (original or rewritten: DCN nodes are rewritten in memory),
    written to ``output``. ``options`` is a :class:`dcnconvert.backend.trt.engine.BuildOptions`
    (default: FP32).

    Raises:
        MissingDependencyError, PluginLoadError: no TensorRT, GPU or plugin library (exit code 4).
        UsageError, BuildError, ValidationError, UnsupportedNodeError.
    """
    from dcnconvert.backend.trt import engine as build_mod

    options = options or build_mod.BuildOptions()
    engine = Path(output)

    def work() -> tuple[dict[str, Any], None]:
        options.validate()
        _check_output(model, engine)
        _check_timing_cache(model, engine, options.timing_cache)
        env = build_mod.check_environment(options)
        proto, payload = rewrite_in_memory(_checked(model), options.target, False, plugin_tf32(options),
                                           options.embed_weights)
        payload.update(build_mod.build_engine(proto, engine, options, env=env))
        return payload, None

    return _run("build", {"model": _describe(model)}, work)


def convert(model: ModelLike, output: str | os.PathLike[str], options: Any = None,
            verify_options: Any = None) -> Result:
    """``rewrite`` + ``build``: the rewritten model goes next to the engine (``output`` with suffix
    ``.onnx``) first, then the engine is built; with ``verify_options`` (a
    :class:`dcnconvert.verification.runner.VerifyOptions`) it is then verified against ONNX Runtime.

    Raises:
        as :func:`build`; AccuracyError (exit code 3) when the verification fails. Without TensorRT
        the rewritten model is still written (MissingDependencyError, exit code 4).
    """
    from dcnconvert.backend.trt import engine as build_mod

    options = options or build_mod.BuildOptions()
    engine = Path(output)

    def work() -> tuple[dict[str, Any], None]:
        options.validate()
        if verify_options is not None and options.io_precision == "bf16":  # known before a build
            raise errors.UsageError("--verify cannot feed an engine with --io-precision bf16 (NumPy has no "
                                    "bfloat16)", hint="verify with --io-precision fp32 (the default) or fp16")
        onnx_out = engine.with_suffix(".onnx")
        if onnx_out == engine:
            raise errors.UsageError(
                f"-o {engine} names an ONNX file; convert writes an engine and puts the rewritten model next "
                "to it", hint="use -o model.engine (writes model.onnx too), or 'dcnconvert rewrite' for the "
                "ONNX alone")
        _check_output(model, engine)
        _check_timing_cache(model, engine, options.timing_cache)
        _check_output(model, onnx_out, derived=True)
        if verify_options is not None:
            _check_save_paths(model, {"the engine (-o)": engine, "the rewritten model": onnx_out},
                              verify_options)
        proto, payload = rewrite_in_memory(_checked(model), options.target, False, plugin_tf32(options),
                                           options.embed_weights)
        save_model_timed(proto, onnx_out, role="onnx", like=_like(model))  # keeps an external-data layout
        try:
            env = build_mod.check_environment(options)
        except errors.MissingDependencyError as exc:
            exc.message = (f"{exc.message}; the rewritten model was written to {onnx_out}, the engine was "
                           "not built")
            attach_payload(exc, payload)
            raise
        payload.update(build_mod.build_engine(proto, engine, options, env=env))
        add_output("engine", str(engine))
        if verify_options is not None:
            try:
                payload.update(_verify_payload(engine, proto, model, verify_options, env))
            except errors.AccuracyError as exc:
                attach_payload(exc, payload)
                raise
        return payload, None

    return _run("convert", {"model": _describe(model)}, work)


def _verify_payload(engine: Path, proto: onnx.ModelProto, model: ModelLike, vopts: Any,
                    env: Any) -> dict[str, Any]:
    from dcnconvert.verification import runner as verify_mod

    if vopts.inputs is not None:
        add_input("inputs_file", str(vopts.inputs))  # the JSON object names every file read
    path = Path("MODEL.onnx") if isinstance(model, onnx.ModelProto) else Path(model)
    payload = verify_mod.verify_engine(engine, proto, path, vopts, env=env)
    payload["print_commands"] = bool(vopts.print_commands)
    return payload


def verify(engine: str | os.PathLike[str], model: ModelLike, options: Any = None) -> Result:
    """Run ``engine`` and the original ``model``'s reference (ONNX Runtime) on the same inputs and
    compare: ``comparison`` rows, ``tolerances``, ``passed``, ``commands``. ``options`` is a
    :class:`dcnconvert.verification.runner.VerifyOptions`; give it the engine's precision.

    Raises:
        AccuracyError: an output differs beyond tolerance (exit code 3; the rows are in ``error.result``).
        MissingDependencyError, PluginLoadError, BuildError, UsageError, ModelError.
    """
    from dcnconvert.backend.trt import engine as build_mod
    from dcnconvert.verification import runner as verify_mod

    vopts = options or verify_mod.VerifyOptions()
    engine_path = Path(engine)

    def work() -> tuple[dict[str, Any], None]:
        verify_mod.tolerances(vopts.precision, vopts.atol, vopts.rtol)
        _check_save_paths(model, {"the engine to verify": engine_path}, vopts)
        needs = build_mod.BuildOptions(target=vopts.target, plugin_lib=vopts.plugin_lib)
        env = build_mod.check_environment(needs)
        proto = _load(model)
        return _verify_payload(engine_path, proto, model, vopts, env), None

    return _run("verify", {"engine": str(engine_path), "model": _describe(model)}, work)
