"""Machinery shared by every dcnconvert command (``cli.py`` and ``cli_engine.py``).

A command looks like this::

    @group.command()
    @click.argument("model", type=click.Path(dir_okay=False))
    @click.option("-o", "--output", required=True)
    @common_options
    def rewrite(model, output, json_mode):
        '''Help text.'''
        def work():
            with timed("rewrite"):
                ...
            return {"inputs": {"model": model}, "outputs": {"onnx": output}, "rewrite": {...}}
        run_command("rewrite", json_mode, work, render=lambda p: ...)

:func:`common_options` adds ``-v/--verbose`` and ``-q/--quiet`` (counted; stored in the click
context, not passed to the function) and ``--json`` (passed as ``json_mode``); :data:`WEIGHTS_OPTION`
is the ``--weights`` option of the commands that rewrite.

:func:`run_command` sets up logging on stderr, runs ``fn()`` with ``sys.stdout`` pointed at stderr
(so that no library can write into the JSON stream), catches :class:`DcnConvertError` once, prints
``error: ...`` and ``hint: ...`` on stderr (the traceback only with ``-vv``), prints the one JSON
object on stdout with ``--json`` (or ``render(result)`` without it) and exits with the error's exit
code. Unexpected exceptions are bugs: their traceback is always printed, and the exit code is 1.

Inside ``fn`` the result is being recorded (:mod:`dcnconvert.recording`, re-exported here):
:func:`timed` records a step's seconds in ``timings``; warnings logged on the ``dcnconvert`` (or
Polygraphy) logger are collected into ``warnings``; :func:`add_output` / :func:`add_input` record
files; :func:`attach_payload` puts data (e.g. per-output errors of a failed verification) into the
JSON object of a command that fails.

The model steps the commands share (load, rewrite, save, output path checks) are in
:mod:`dcnconvert.steps`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import click

from dcnconvert import errors, log
from dcnconvert.recording import (
    add_input,
    add_output,
    add_warning,
    attach_payload,
    current_result,
    recording,
    timed,
)
from dcnconvert.report import dumps
from dcnconvert.schema import WEIGHTS_MODES

__all__ = [
    "WEIGHTS_OPTION",
    "add_input",
    "add_output",
    "add_warning",
    "attach_payload",
    "common_options",
    "current_result",
    "error_lines",
    "run_command",
    "timed",
]

#: ``--weights`` of every command that rewrites (``rewrite``, and ``build``/``convert`` in cli.engine).
WEIGHTS_OPTION = click.option(
    "--weights",
    type=click.Choice(list(WEIGHTS_MODES)),
    default=None,
    help="embed: put constant weights and biases into the plugin nodes (the plugin prepares them once; "
    "TensorRT's refitter cannot change them); input: keep them as node inputs. "
    "Default: embed for --target dcnconvert; trt-builtin takes inputs only.",
)

_META_VERBOSE = "dcnconvert.verbose"
_META_QUIET = "dcnconvert.quiet"
_META_JSON = "dcnconvert.json"

def _store(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        ctx.meta[key] = value
        return value

    return callback


def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``-v/--verbose``, ``-q/--quiet`` (counted) and ``--json`` (as ``json_mode``) to a command."""
    func = click.option(
        "--json",
        "json_mode",
        is_flag=True,
        default=False,
        callback=_store(_META_JSON),
        help="Print one JSON object on stdout (logs stay on stderr).",
    )(func)
    func = click.option(
        "-q",
        "--quiet",
        count=True,
        expose_value=False,
        callback=_store(_META_QUIET),
        help="Less logging on stderr (-q: warnings, -qq: errors only).",
    )(func)
    func = click.option(
        "-v",
        "--verbose",
        count=True,
        expose_value=False,
        callback=_store(_META_VERBOSE),
        help="More logging on stderr (-v: details, -vv: tracebacks and Polygraphy verbose).",
    )(func)
    return func


def error_lines(error: BaseException) -> list[str]:
    """The ``error: ...`` / ``hint: ...`` lines printed for an error."""
    lines = [f"error: {error}"]
    hint = getattr(error, "hint", None)
    if hint:
        lines.append(f"hint: {hint}")
    return lines


@contextlib.contextmanager
def _stdout_to_stderr(real_stdout: Any) -> Iterator[None]:
    """Send everything written to stdout, by Python code or by C libraries writing to file
    descriptor 1, to stderr; stdout is kept for the command's result."""
    fd_saved = None
    try:
        if real_stdout.fileno() == 1 and sys.stderr.fileno() == 2:
            real_stdout.flush()
            fd_saved = os.dup(1)
            os.dup2(2, 1)
    except (AttributeError, OSError, ValueError):  # not a real file (CliRunner, pytest capture)
        fd_saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if fd_saved is not None:
            try:
                sys.stderr.flush()
            finally:
                os.dup2(fd_saved, 1)
                os.close(fd_saved)


def _echo_err(text: str) -> None:
    click.echo(text, err=True)


def run_command(
    name: str,
    json_mode: bool | None,
    fn: Callable[[], Mapping[str, Any] | None],
    *,
    render: Callable[[dict[str, Any]], str | None] | None = None,
    inputs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one command's work with dcnconvert's logging, error and output conventions.

    Args:
        name: command name, as in the JSON ``command`` key.
        json_mode: print the JSON object on stdout; ``None`` reads ``--json`` from the click context.
        fn: the work; returns a payload dict merged into the result (see ``CommandResult.merge``).
        render: text for stdout in non-JSON mode, from the JSON-ready result dict; ``None`` prints
            nothing on stdout.
        inputs: recorded as the result's ``inputs`` before ``fn`` runs (so they appear on failure).

    Returns:
        The JSON-ready result dict, when the command succeeded (exit code 0). On failure this
        function exits (``SystemExit`` / click's ``Exit``) with the error's exit code.
    """
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    if json_mode is None:
        json_mode = bool(meta.get(_META_JSON, False))
    log.setup_logging(int(meta.get(_META_VERBOSE, 0) or 0), int(meta.get(_META_QUIET, 0) or 0))
    logger = log.get_logger()

    real_stdout = sys.stdout
    with recording(name, inputs) as result:
        try:
            with _stdout_to_stderr(real_stdout):
                payload = fn()
            result.merge(payload)
        except errors.DcnConvertError as exc:
            result.exit_code = exc.exit_code
            result.errors.append(exc.to_dict())
            result.merge(getattr(exc, "payload", None))
            for line in error_lines(exc):
                _echo_err(line)
            if log.show_tracebacks():
                _echo_err(traceback.format_exc().rstrip())
        except click.exceptions.Exit:
            raise
        except click.ClickException as exc:
            # A usage problem detected inside the command (an option combination, a bad value).
            result.exit_code = exc.exit_code
            kind = "UsageError" if isinstance(exc, click.UsageError) else "Error"
            result.errors.append({"type": kind, "message": exc.format_message(), "hint": None,
                                  "node": None, "exit_code": exc.exit_code})
            _echo_err(f"error: {exc.format_message()}")
        except KeyboardInterrupt:
            result.exit_code = 130
            result.errors.append({"type": "KeyboardInterrupt", "message": "interrupted", "hint": None,
                                  "node": None, "exit_code": 130})
            _echo_err("error: interrupted")
        except Exception as exc:  # noqa: BLE001  (a bug: keep the traceback, honour the JSON contract)
            result.exit_code = errors.EXIT_ERROR
            result.errors.append({"type": "InternalError", "message": f"{type(exc).__name__}: {exc}",
                                  "hint": "this is a bug in dcnconvert; please report it with the "
                                          "traceback above", "node": None,
                                  "exit_code": errors.EXIT_ERROR})
            _echo_err(traceback.format_exc().rstrip())
            _echo_err(f"error: internal error: {type(exc).__name__}: {exc}")
    obj = result.to_dict()

    if json_mode:
        real_stdout.write(dumps(obj) + "\n")
        real_stdout.flush()
    elif result.ok and render is not None:
        text = render(obj)
        if text:
            click.echo(text, file=real_stdout)
    if result.exit_code != 0:
        logger.debug("exit code %d", result.exit_code)
        if ctx is not None:
            ctx.exit(result.exit_code)
        sys.exit(result.exit_code)
    return obj
