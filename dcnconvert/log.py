"""Logging for dcnconvert: everything goes to stderr, stdout is kept for results.

Verbosity is one number, ``verbose - quiet`` (the counts of ``-v`` and ``-q``), mapped as Polygraphy's
``LoggerArgs`` does:

=========  ==========  ===========================================================
net count  level       what you see
=========  ==========  ===========================================================
<= -2      ERROR       errors only
-1         WARNING     warnings and errors
0          INFO        one line per step (default)
1          DEBUG       details (matched nodes, file sizes, ...)
>= 2       DEBUG       ... plus tracebacks of handled errors and Polygraphy VERBOSE
=========  ==========  ===========================================================

Polygraphy is never imported here. Code that imports it (the engine commands) calls
:func:`configure_polygraphy` afterwards; it routes Polygraphy's ``G_LOGGER`` (which otherwise prints
to stdout) through Python logging onto stderr, at the same verbosity. TensorRT's own log reaches
the same place: the adapter uses Polygraphy's TensorRT logger, which follows ``G_LOGGER``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

#: Root logger name of the package; modules use ``logging.getLogger(__name__)``.
LOGGER_NAME = "dcnconvert"

_HANDLER_ATTR = "_dcnconvert_handler"

_state = {"net": 0}

_LETTERS = {
    logging.DEBUG: "V",
    logging.INFO: "I",
    logging.WARNING: "W",
    logging.ERROR: "E",
    logging.CRITICAL: "!",
}


def get_logger(name: str | None = None) -> logging.Logger:
    """Return the package logger or one of its children.

    Args:
        name: a module name such as ``"dcnconvert.transform.plugin"`` or a suffix such as ``"plugin"``.
    """
    if not name or name == LOGGER_NAME:
        return logging.getLogger(LOGGER_NAME)
    if not name.startswith(LOGGER_NAME + "."):
        name = f"{LOGGER_NAME}.{name}"
    return logging.getLogger(name)


def level_for(verbose: int = 0, quiet: int = 0) -> int:
    """The Python logging level for ``verbose`` ``-v`` and ``quiet`` ``-q`` flags."""
    net = int(verbose) - int(quiet)
    if net <= -2:
        return logging.ERROR
    if net == -1:
        return logging.WARNING
    if net == 0:
        return logging.INFO
    return logging.DEBUG


def verbosity() -> int:
    """The net verbosity (``verbose - quiet``) set by the last :func:`setup_logging`."""
    return _state["net"]


def show_tracebacks() -> bool:
    """Whether handled errors should print their traceback (``-vv`` or more)."""
    return _state["net"] >= 2


class _Formatter(logging.Formatter):
    """``[I] message`` style prefixes (as Polygraphy) with the logger's short name at DEBUG."""

    def format(self, record: logging.LogRecord) -> str:
        letter = _LETTERS.get(record.levelno, "I")
        message = record.getMessage()
        if record.name == "Polygraphy":
            # Polygraphy already prefixes its messages with its own letter.
            text = message
        elif _state["net"] >= 1 and record.name != LOGGER_NAME:
            text = f"[{letter}] {record.name.removeprefix(LOGGER_NAME + '.')}: {message}"
        else:
            text = f"[{letter}] {message}"
        if record.exc_info and _state["net"] >= 2:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _StderrHandler(logging.StreamHandler):
    """A handler that looks up ``sys.stderr`` at emit time (works under CliRunner and redirects)."""

    def __init__(self, stream: TextIO | None = None):
        super().__init__(stream)
        self._fixed = stream is not None

    def emit(self, record: logging.LogRecord) -> None:
        if not self._fixed:
            self.stream = sys.stderr
        super().emit(record)


def setup_logging(verbose: int = 0, quiet: int = 0, stream: TextIO | None = None) -> int:
    """Configure the ``dcnconvert`` logger (and Polygraphy's, if already imported) for a command.

    Calling it again replaces the previous configuration (tests invoke many commands in one process).

    Args:
        verbose: number of ``-v`` flags.
        quiet: number of ``-q`` flags.
        stream: where to write; ``None`` means the current ``sys.stderr`` at each message.

    Returns:
        The Python logging level now in force.
    """
    _state["net"] = int(verbose) - int(quiet)
    level = level_for(verbose, quiet)
    logger = logging.getLogger(LOGGER_NAME)
    old = getattr(logger, _HANDLER_ATTR, None)
    if old is not None:
        logger.removeHandler(old)
    handler = _StderrHandler(stream)
    handler.setFormatter(_Formatter())
    handler.setLevel(level)
    logger.addHandler(handler)
    setattr(logger, _HANDLER_ATTR, handler)
    # The logger itself lets warnings through even with -qq, so that a command's JSON ``warnings``
    # (collected by another handler) are complete; the stderr handler filters by ``level``.
    logger.setLevel(min(level, logging.WARNING))
    logger.propagate = False
    if "polygraphy" in sys.modules:
        configure_polygraphy()
    return level


def polygraphy_severity(net: int | None = None) -> int:
    """Polygraphy's ``G_LOGGER`` severity number for a net verbosity (default: the current one).

    The numbers are Polygraphy's documented constants (ERROR 40, WARNING 30, INFO 20, VERBOSE 10,
    EXTRA_VERBOSE 0); they are written out so this function works without importing Polygraphy.
    Polygraphy's INFO messages are chatty, so the default level shows its warnings only.
    """
    net = _state["net"] if net is None else net
    if net <= -1:
        return 40
    if net == 0:
        return 30
    if net == 1:
        return 20
    if net == 2:
        return 10
    return 0


def configure_polygraphy() -> None:
    """Send Polygraphy's ``G_LOGGER`` output to stderr at dcnconvert's verbosity.

    Call this right after importing Polygraphy (``setup_logging`` also calls it when Polygraphy is
    already imported). Polygraphy prints to stdout by default, which would break ``--json``; here its
    messages go through the Python ``logging`` logger ``"Polygraphy"`` to our stderr handler.
    """
    from polygraphy.logger import G_LOGGER  # imported only by callers that already use Polygraphy

    G_LOGGER.module_severity = polygraphy_severity()
    G_LOGGER.colors = False
    G_LOGGER.use_python_logging_system = True
    py_logger = logging.getLogger("Polygraphy")
    ours = getattr(logging.getLogger(LOGGER_NAME), _HANDLER_ATTR, None)
    old = getattr(py_logger, _HANDLER_ATTR, None)
    if old is not None:
        py_logger.removeHandler(old)
    if ours is not None:
        py_logger.addHandler(ours)
        setattr(py_logger, _HANDLER_ATTR, ours)
    py_logger.setLevel(1)  # Polygraphy filters by module_severity itself
    py_logger.propagate = False


class Timer:
    """Step timings in seconds (a repeated step adds up), with the step's message on stderr.

    A step with a message logs ``message...`` before it and, when it took a second or more,
    ``message: done in 1.23 s`` after it; otherwise its time goes to the debug log only.
    ``timings`` is the dict the seconds go into (a new one by default), e.g. a command's result's.
    """

    def __init__(self, timings: dict[str, float] | None = None) -> None:
        self.timings: dict[str, float] = {} if timings is None else timings

    @contextmanager
    def step(self, name: str, message: str | None = None) -> Iterator[None]:
        logger = get_logger()
        if message:
            logger.info("%s...", message)
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.timings[name] = self.timings.get(name, 0.0) + seconds
            if message and seconds >= 1.0:
                logger.info("%s: done in %.2f s", message, seconds)
            else:
                logger.debug("%s: %.3f s", name, seconds)
