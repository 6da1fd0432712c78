"""The engine commands: ``build``, ``convert``, ``verify``, ``plugin-path`` (added by :func:`register`).

A thin click layer over :mod:`dcnconvert.api` (the engine build is in
:mod:`dcnconvert.backend.trt.engine`, the verification in :mod:`dcnconvert.verification.runner`), using
the shared machinery of :mod:`dcnconvert.cli.common` (``-v/-q/--json``, one JSON object, exit codes,
logs on stderr). Without TensorRT, ``build``/``convert``/``verify`` stop with exit code 4 and the install
command; ``convert`` still writes the rewritten model next to the engine path (``OUT.onnx``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from dcnconvert import errors, log
from dcnconvert.cli.common import (
    WEIGHTS_OPTION,
    common_options,
    run_command,
)
from dcnconvert.report import format_summary
from dcnconvert.schema import DEFAULT_TARGET, TARGETS

_MODEL_ARG = click.Path(exists=True, dir_okay=False, path_type=Path)
_OUT_ARG = click.Path(dir_okay=False, path_type=Path)
_FILE_ARG = click.Path(dir_okay=False, path_type=Path)


def _target_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option(
        "--plugin-lib", type=_FILE_ARG, default=None,
        help="Plugin library to load instead of the bundled one (also $DCNCONVERT_PLUGIN_LIB).")(func)
    func = click.option(
        "--target", type=click.Choice(sorted(TARGETS)), default=DEFAULT_TARGET, show_default=True,
        help="dcnconvert: the bundled plugin; trt-builtin: TensorRT's own ModulatedDeformConv2d "
        "(square stride/padding/dilation only, no library).")(func)
    return func


def _runtime_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--runtime", type=click.Choice(["auto", "tensorrt", "tensorrt-rtx"]), default="auto",
        show_default=True,
        help="What builds (and runs) the engine: TensorRT, or TensorRT-RTX (RTX GPUs; builds without a "
        "GPU). auto: the installed one, TensorRT first.")(func)


def _build_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--compute-capabilities", multiple=True, metavar="LIST",
                     help="TensorRT-RTX: the GPUs the engine is for, e.g. 8.6,12.0 (default: this machine's "
                     "GPU, else TensorRT-RTX's portable set)."),
        click.option("--no-progress", is_flag=True, help="No TensorRT build-phase lines on stderr."),
        click.option("--timing-cache", type=_FILE_ARG, default=None,
                     help="Tactic timing cache: loaded if it exists, saved (merged) after the build."),
        click.option("--builder-optimization-level", type=click.IntRange(0, 5), default=None,
                     help="TensorRT builder optimization level (0-5; TensorRT's default 3)."),
        click.option("--workspace", default=None, metavar="SIZE",
                     help="Workspace memory limit, e.g. 1G or 512M."),
        click.option("--max-shapes", multiple=True, metavar="NAME:DIMS", help="Largest shapes of a profile."),
        click.option("--opt-shapes", multiple=True, metavar="NAME:DIMS",
                     help="Shapes TensorRT tunes for (default: the max shapes)."),
        click.option("--min-shapes", multiple=True, metavar="NAME:DIMS",
                     help="Smallest shapes of a profile; a name given again starts the next profile."),
        click.option("--shapes", multiple=True, metavar="NAME:DIMS",
                     help="Static input shape, e.g. --shapes images:1x3x512x512 (repeat per input)."),
        click.option("--tf32/--no-tf32", default=False, show_default=True,
                     help="Allow TF32 for FP32 math: TensorRT's builder flag, and allow_tf32=1 on the "
                     "plugin nodes (--target dcnconvert) so that FP32 DCN layers may use it too."),
        click.option("--keep-fp32", multiple=True, metavar="OP_OR_NODE",
                     help="graph-cast: keep this op type or node name in FP32 (repeatable)."),
        click.option("--io-precision", type=click.Choice(["fp32", "fp16", "bf16"]), default=None,
                     help="graph-cast: type of the engine's float inputs/outputs (default: as in the "
                     "model)."),
        click.option("--precision-path", type=click.Choice(["auto", "builder-flag", "graph-cast"]),
                     default="auto", show_default=True,
                     help="How FP16/BF16 is obtained: TensorRT 10 builder flags, or casting "
                     "the ONNX graph (the only way on TensorRT 11). auto: flags on 10, graph-cast on 11."),
        click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]), default="fp32",
                     show_default=True, help="Engine precision."),
        WEIGHTS_OPTION,
    ]
    for option in options:
        func = option(func)
    return _runtime_option(_target_options(func))


def _make_build_options(kw: dict[str, Any]) -> Any:
    from dcnconvert.backend.trt.engine import BuildOptions, parse_size

    return BuildOptions(
        precision=kw["precision"], precision_path=kw["precision_path"], io_precision=kw["io_precision"],
        keep_fp32=tuple(kw["keep_fp32"]), tf32=kw["tf32"], shapes=tuple(kw["shapes"]),
        min_shapes=tuple(kw["min_shapes"]), opt_shapes=tuple(kw["opt_shapes"]),
        max_shapes=tuple(kw["max_shapes"]),
        workspace=parse_size(kw["workspace"]) if kw["workspace"] is not None else None,
        builder_optimization_level=kw["builder_optimization_level"], timing_cache=kw["timing_cache"],
        target=kw["target"], plugin_lib=kw["plugin_lib"], progress=not kw["no_progress"],
        weights=kw["weights"], runtime=None if kw["runtime"] == "auto" else kw["runtime"],
        compute_capabilities=tuple(kw["compute_capabilities"]))


def _verify_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--print-commands", is_flag=True,
                     help="Print the equivalent polygraphy/trtexec command lines."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs."),
        click.option("--save-outputs", type=_FILE_ARG, default=None,
                     help="Save the ONNX Runtime reference outputs (Polygraphy RunResults JSON, for "
                     "--load-outputs)."),
        click.option("--save-inputs", type=_FILE_ARG, default=None,
                     help="Save the inputs (Polygraphy JSON, for --load-inputs)."),
        click.option("--inputs", "inputs_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     default=None,
                     help="Inputs to use: .npz or Polygraphy inputs JSON (default: seeded random)."),
        click.option("--rtol", type=float, default=None, help="Relative tolerance (default: per precision)."),
        click.option("--atol", type=float, default=None, help="Absolute tolerance (default: per precision)."),
    ]
    for option in options:
        func = option(func)
    return func


def _make_verify_options(kw: dict[str, Any], precision: str, shapes: tuple[str, ...] = ()) -> Any:
    from dcnconvert.verification.runner import VerifyOptions

    return VerifyOptions(precision=precision, atol=kw["atol"], rtol=kw["rtol"], inputs=kw["inputs_file"],
                         save_inputs=kw["save_inputs"], save_outputs=kw["save_outputs"], seed=kw["seed"],
                         shapes=tuple(shapes), target=kw["target"], plugin_lib=kw["plugin_lib"],
                         print_commands=kw["print_commands"],
                         runtime=None if kw.get("runtime", "auto") == "auto" else kw["runtime"])


def _render_build(result: dict[str, Any]) -> str:
    lines = [format_summary(result)]
    if result.get("precision_path"):
        runtime = result.get("runtime") or {}
        name = "TensorRT-RTX" if runtime.get("name") == "tensorrt-rtx" else "TensorRT"
        lines.append(f"precision: {result.get('precision')} ({result['precision_path']}), "
                     f"{name} {result.get('tensorrt_version')}")
    targets = (result.get("compute_capabilities") or {}).get("targets")
    if result.get("compute_capabilities") is not None:
        lines.append(f"compute capabilities: {', '.join(targets) if targets else 'TensorRT-RTX default'}")
    if result.get("comparison") is not None:
        lines.append(_verification_text(result))
    return "\n".join(line for line in lines if line)


def _verification_text(result: dict[str, Any]) -> str:
    from dcnconvert.verification.runner import format_rows

    tol = result.get("tolerances") or {}
    text = format_rows(result.get("comparison") or [], tol.get("atol", 0.0), tol.get("rtol", 0.0))
    layers = result.get("quantized") or []
    if layers:
        kinds = ", ".join(sorted({layer["quant_type"] for layer in layers}))
        bound = max(layer["rounding_bound"] for layer in layers)
        text += (f"\nquantized model: {len(layers)} DCN layer(s) ({kinds}), compared with the Q/DQ "
                 f"reference; their sample rounding moves an output by at most {bound:.3g}")
    if result.get("print_commands"):
        text += "\n" + "\n".join(result.get("commands") or [])
    return text


@contextlib.contextmanager
def _rows_on_mismatch(json_mode: bool) -> Iterator[None]:
    """Without --json, a failed verification's table goes to stderr before the error."""
    try:
        yield
    except errors.AccuracyError as exc:
        if not json_mode:
            from dcnconvert.verification import runner as verify

            payload = getattr(exc, "payload", {}) or {}
            tol = payload.get("tolerances") or {}
            click.echo(verify.format_rows(payload.get("comparison") or [], tol.get("atol", 0.0),
                                          tol.get("rtol", 0.0)), err=True)
        raise


def register(group: click.Group) -> None:
    """Add ``build``, ``convert``, ``verify`` and ``plugin-path`` to ``group``."""

    @group.command()
    @click.argument("model", type=_MODEL_ARG)
    @click.option("-o", "--output", type=_OUT_ARG, required=True, help="Path of the engine to write.")
    @_build_options
    @common_options
    def build(model: Path, output: Path, json_mode: bool, **kw: Any) -> None:
        """Build a TensorRT engine from MODEL (original or rewritten; DCN nodes are rewritten in memory)."""

        def work() -> dict[str, Any]:
            from dcnconvert import api

            return api.build(model, output, _make_build_options(kw))

        run_command("build", json_mode, work, render=_render_build, inputs={"model": str(model)})

    @group.command()
    @click.argument("model", type=_MODEL_ARG)
    @click.option("-o", "--output", type=_OUT_ARG, required=True,
                  help="Engine path; the rewritten model is written next to it with suffix .onnx.")
    @click.option("--verify", "do_verify", is_flag=True,
                  help="Verify the engine against ONNX Runtime afterwards.")
    @_verify_options
    @_build_options
    @common_options
    def convert(model: Path, output: Path, do_verify: bool, json_mode: bool, **kw: Any) -> None:
        """Rewrite MODEL, write the rewritten ONNX (OUTPUT with suffix .onnx) and build the engine.

        The rewritten model is always written first (it is what polygraphy/trtexec parse). With --verify
        the engine is then compared with ONNX Runtime on the original model (exit 3 on a mismatch).
        Without TensorRT the rewritten model is still written, and the exit code is 4.
        """

        def work() -> dict[str, Any]:
            from dcnconvert import api

            options = _make_build_options(kw)
            vopts = _make_verify_options(kw, options.precision, options.shapes) if do_verify else None
            with _rows_on_mismatch(json_mode):
                return api.convert(model, output, options, vopts)

        run_command("convert", json_mode, work, render=_render_build, inputs={"model": str(model)})

    @group.command()
    @click.argument("engine", type=click.Path(exists=True, dir_okay=False, path_type=Path))
    @click.option("--model", "model", type=_MODEL_ARG, required=True,
                  help="The original ONNX model (any DCN form) the engine was built from.")
    @click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]), default="fp32",
                  show_default=True, help="The precision the engine was built with; selects the default "
                  "tolerances (an FP16/BF16 engine checked with the fp32 default is held to FP32 ones).")
    @click.option("--shapes", multiple=True, metavar="NAME:DIMS",
                  help="Input shapes for dynamic inputs (default: the engine's profile-0 opt shapes).")
    @_verify_options
    @_runtime_option
    @_target_options
    @common_options
    def verify(engine: Path, model: Path, precision: str, shapes: tuple[str, ...], json_mode: bool,
               **kw: Any) -> None:
        """Compare ENGINE with the original MODEL run in ONNX Runtime on the same inputs (exit 3 on mismatch).

        Default tolerances (an element fails if abs > atol and rel > rtol): fp32 1e-4/1e-3,
        fp16 1e-2/1e-2, bf16 5e-2/5e-2.
        """

        def work() -> dict[str, Any]:
            from dcnconvert import api

            with _rows_on_mismatch(json_mode):
                return api.verify(engine, model, _make_verify_options(kw, precision, shapes))

        run_command("verify", json_mode, work, render=_verification_text,
                    inputs={"engine": str(engine), "model": str(model)})

    @group.command("plugin-path")
    @click.option("--plugin-lib", type=_FILE_ARG, default=None, help="Check this library instead.")
    @click.option("--runtime", type=click.Choice(["auto", "tensorrt", "tensorrt-rtx"]), default="auto",
                  show_default=True, help="The runtime that will load the library: TensorRT, or TensorRT-RTX "
                  "(e.g. POLYGRAPHY_USE_TENSORRT_RTX=1 polygraphy ... --plugins). auto: TensorRT if it is "
                  "installed, else TensorRT-RTX if it is.")
    @click.option("--tensorrt-version", default=None, metavar="VERSION",
                  help="Choose for this TensorRT version (e.g. 10.16 for trtexec), not the installed one; "
                  "with --runtime tensorrt-rtx, a TensorRT-RTX version.")
    @common_options
    def plugin_path(plugin_lib: Path | None, runtime: str, tensorrt_version: str | None,
                    json_mode: bool) -> None:
        """Print the path of the plugin library (for polygraphy --plugins / trtexec --staticPlugins).

        The library is the one built for the runtime (--runtime) and the installed version's major (a
        library built for another runtime or major registers nothing); the reason for the choice goes
        to stderr, and into --json.
        """

        def work() -> dict[str, Any]:
            from dcnconvert.backend.plugin import library as plugin_lib_mod

            chosen = runtime
            if runtime == "auto":
                chosen, why = plugin_lib_mod.default_runtime(tensorrt_version)
                log.get_logger().info("runtime: %s (%s; choose with --runtime)", chosen, why)
            choice = plugin_lib_mod.choose_plugin_library(plugin_lib, tensorrt_version, runtime=chosen)
            log.get_logger().info("plugin library: %s (%s)", choice.path, choice.reason)
            return choice.to_dict()

        run_command("plugin-path", json_mode, work, render=lambda r: r.get("plugin_library"))


__all__ = ["register"]
