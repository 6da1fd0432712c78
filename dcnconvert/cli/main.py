"""The ``dcnconvert`` command line: a thin click layer over the library.

Commands here: ``inspect``, ``rewrite``, ``reference``. ``quantize`` lives in
:mod:`dcnconvert.cli.quantize`; the engine commands (``build``, ``convert``,
``verify``, ``plugin-path``) live in :mod:`dcnconvert.cli.engine`, the ``plugin`` group (``plugin build``) in
:mod:`dcnconvert.cli.plugin`; each is added by its module's ``register(group)``.

Conventions (shared through :mod:`dcnconvert.cli.common`): every command takes ``-v``/``-q`` and
``--json`` after its name; results go to stdout, logs to stderr; exit codes are those of
:mod:`dcnconvert.errors`; nothing is left at an output path on failure and the input is never
modified.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from dcnconvert import __version__, errors
from dcnconvert.cli.common import WEIGHTS_OPTION, common_options, run_command
from dcnconvert.report import CommandResult, dumps, format_matches, format_summary
from dcnconvert.schema import DEFAULT_TARGET, TARGETS

_MODEL_ARG = click.Path(exists=True, dir_okay=False, path_type=Path)
_OUT_ARG = click.Path(dir_okay=False, path_type=Path)


class DcnGroup(click.Group):
    """A click group whose own usage errors follow dcnconvert's conventions.

    click prints its parse errors (missing option, bad choice) itself; here they become an
    ``error: ...`` line plus a ``hint:`` with the usage, exit code 2, and, when ``--json`` is on the
    command line, the one JSON object on stdout too.
    """

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        argv: list[str] = list(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            _report_click_error(exc, argv)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(errors.EXIT_ERROR)
        sys.exit(rv if isinstance(rv, int) else 0)


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


def _report_click_error(exc: click.ClickException, argv: Sequence[str]) -> None:
    ctx = getattr(exc, "ctx", None)
    if _NO_ARGS_IS_HELP and isinstance(exc, _NO_ARGS_IS_HELP):
        exc.show()  # the help text, as click prints it
        return
    click.echo(f"error: {exc.format_message()}", err=True)
    if ctx is not None:
        click.echo(f"hint: {ctx.get_usage()}  (see '{ctx.command_path} --help')", err=True)
    if "--json" in argv:
        name = ctx.info_name if ctx is not None and ctx.parent is not None else None
        kind = "UsageError" if isinstance(exc, click.UsageError) else "Error"
        result = CommandResult(command=name or "dcnconvert", exit_code=exc.exit_code)
        result.errors.append({"type": kind, "message": exc.format_message(), "hint": None,
                              "node": None, "exit_code": exc.exit_code})
        click.echo(dumps(result.to_dict()))


@click.group(name="dcnconvert", cls=DcnGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="dcnconvert", message="%(prog)s %(version)s")
def cli() -> None:
    """Rewrite deformable convolutions in ONNX models into TensorRT plugin nodes.

    Exit codes: 0 ok, 1 error, 2 usage, 3 accuracy mismatch, 4 TensorRT/GPU/plugin missing.
    Run 'dcnconvert COMMAND --help' for a command's options.
    """


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


_TARGET_OPTION = click.option(
    "--target",
    type=click.Choice(sorted(TARGETS)),
    default=DEFAULT_TARGET,
    show_default=True,
    help="dcnconvert: our bundled plugin (any stride/padding/dilation). "
    "trt-builtin: TensorRT's own ModulatedDeformConv2d (square values only).",
)


# --------------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------------


@cli.command()
@click.argument("model", type=_MODEL_ARG)
@_TARGET_OPTION
@common_options
def inspect(model: Path, target: str, json_mode: bool) -> None:
    """List the deformable convolutions in MODEL: form, attributes, shapes, convertible or why not.

    "convertible" is judged for --target (the same checks 'rewrite' makes before writing).
    """

    def work() -> dict[str, Any]:
        from dcnconvert import api

        return api.inspect(model, target)

    def render(result: dict[str, Any]) -> str:
        text = format_matches(result["matches"])
        if result["matches"]:
            text += f"\n{result['count']} node(s), {result['convertible']} convertible"
        return text

    run_command("inspect", json_mode, work, render=render, inputs={"model": str(model)})


@cli.command()
@click.argument("model", type=_MODEL_ARG)
@click.option("-o", "--output", type=_OUT_ARG, required=True, help="Path of the rewritten ONNX model.")
@_TARGET_OPTION
@click.option("--require-match", is_flag=True, help="Fail (exit 1) if the model has no DCN node.")
@click.option("--allow-tf32", is_flag=True,
              help="Write allow_tf32=1 on the plugin nodes: FP32 DCN layers may use TF32 math (10-bit "
              "mantissa); FP16/BF16 layers ignore it. --target dcnconvert only.")
@WEIGHTS_OPTION
@common_options
def rewrite(model: Path, output: Path, target: str, require_match: bool, allow_tf32: bool,
            weights: str | None, json_mode: bool) -> None:
    """Rewrite every DCN node of MODEL into a ModulatedDeformConv2d plugin node, saved to OUTPUT.

    A model without DCN nodes is a warning and is written unchanged (so the next step of a pipeline
    finds its file); with --require-match it is an error and nothing is written. Without
    --allow-tf32 the plugin computes FP32 layers FP32-accurately (plugin nodes that already carry
    allow_tf32=1 keep it). For --target dcnconvert, constant weights (initializers that are no graph
    input, Constant outputs) go into the plugin nodes unless --weights input.
    """

    def work() -> dict[str, Any]:
        from dcnconvert import api

        return api.rewrite(model, output, target=target, require_match=require_match, allow_tf32=allow_tf32,
                           weights=weights)

    run_command("rewrite", json_mode, work, render=format_summary, inputs={"model": str(model)})


@cli.command()
@click.argument("model", type=_MODEL_ARG)
@click.option("-o", "--output", type=_OUT_ARG, required=True, help="Path of the standard-ONNX model.")
@common_options
def reference(model: Path, output: Path, json_mode: bool) -> None:
    """Turn every DCN form in MODEL (plugin nodes included) into standard ONNX DeformConv.

    Valid standard DeformConv nodes are kept exactly as they are. The result runs in ONNX
    Runtime; it is the ground truth that 'verify' and 'polygraphy run --onnxrt' compare an engine
    against.
    """

    def work() -> dict[str, Any]:
        from dcnconvert import api

        return api.reference(model, output)

    run_command("reference", json_mode, work, render=format_summary, inputs={"model": str(model)})


def _register_engine_commands(group: click.Group) -> None:
    """Add ``quantize`` from :mod:`dcnconvert.cli.quantize`, ``build``/``convert``/``verify``/``plugin-path``
    from :mod:`dcnconvert.cli.engine` and the ``plugin`` group (``plugin build``) from
    :mod:`dcnconvert.cli.plugin`."""
    from dcnconvert.cli import engine as cli_engine
    from dcnconvert.cli import plugin as cli_plugin
    from dcnconvert.cli import quantize as cli_quantize

    cli_quantize.register(group)
    cli_engine.register(group)
    cli_plugin.register(group)


_register_engine_commands(cli)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (``dcnconvert``)."""
    cli.main(args=argv, prog_name="dcnconvert")


__all__ = ["cli", "main"]
