"""How the result of a running command fills up, for the CLI and the library API alike.

One :class:`~dcnconvert.report.CommandResult` is current while a command's work runs
(:func:`recording`): :func:`timed` adds a step's seconds to its ``timings``, :func:`add_input` /
:func:`add_output` record files, warnings logged on the ``dcnconvert`` or Polygraphy logger go into
its ``warnings`` (:func:`add_warning` logs one), and :func:`attach_payload` puts data into the result
of a command that fails. Outside a recording these calls only log. ``dcnconvert.cli.common.run_command``
and :mod:`dcnconvert.api` open the recording; the work itself does not know which.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from dcnconvert import errors, log
from dcnconvert.report import CommandResult

__all__ = ["add_input", "add_output", "add_warning", "attach_payload", "current_result", "recording", "timed"]

_CURRENT: contextvars.ContextVar[CommandResult | None] = contextvars.ContextVar(
    "dcnconvert_current_result", default=None
)


def current_result() -> CommandResult | None:
    """The :class:`CommandResult` of the command running now (``None`` outside :func:`run_command`)."""
    return _CURRENT.get()


@contextlib.contextmanager
def timed(step: str, message: str | None = None) -> Iterator[None]:
    """Time a step: its seconds go into ``timings[step]`` of the running command.

    Args:
        step: key in ``timings`` (repeated steps add up).
        message: if given, logged at INFO before (``message...``) and, for steps of a second or
            more, after (``message: done in 1.23 s``).
    """
    result = _CURRENT.get()
    with log.Timer(result.timings if result is not None else None).step(step, message):
        yield


def add_input(role: str, value: Any) -> None:
    """Record an input (``role`` -> path or description) in the running command's result."""
    result = _CURRENT.get()
    if result is not None:
        result.inputs[role] = value


def add_output(role: str, path: Any) -> None:
    """Record a file written by the running command (call it after the file is in place)."""
    result = _CURRENT.get()
    if result is not None:
        result.outputs[role] = path


def add_warning(message: str) -> None:
    """Log a warning on stderr and record it in the running command's ``warnings``."""
    log.get_logger().warning("%s", message)


def attach_payload(error: errors.DcnConvertError, payload: Mapping[str, Any]) -> errors.DcnConvertError:
    """Attach data to an error so that :func:`run_command` puts it into the JSON object.

    Example: ``raise attach_payload(AccuracyError("output 'y' differs", hint=...), {"comparison": rows})``.
    """
    existing = dict(getattr(error, "payload", None) or {})
    existing.update(payload)
    error.payload = existing  # type: ignore[attr-defined]
    return error


class _WarningCollector(logging.Handler):
    def __init__(self, result: CommandResult):
        super().__init__(level=logging.WARNING)
        self.result = result

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.WARNING:
            self.result.add_warning(record.getMessage())




@contextlib.contextmanager
def recording(name: str, inputs: Mapping[str, Any] | None = None) -> Iterator[CommandResult]:
    """Make a fresh result for command ``name`` the current one while the block runs; its ``total``
    time is set when the block ends."""
    result = CommandResult(command=name, inputs=dict(inputs or {}))
    token = _CURRENT.set(result)
    collector = _WarningCollector(result)
    watched = [logging.getLogger(log.LOGGER_NAME), logging.getLogger("Polygraphy")]
    for lg in watched:
        lg.addHandler(collector)
    start = time.perf_counter()
    try:
        yield result
    finally:
        for lg in watched:
            lg.removeHandler(collector)
        _CURRENT.reset(token)
        result.timings["total"] = time.perf_counter() - start
