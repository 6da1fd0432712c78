"""The build's own process: ``python -m dcnconvert.backend.trt.worker REQUEST.json``.

Started by :func:`dcnconvert.backend.trt.isolated.run_worker`, which reads what this process leaves in
the request's folder: ``stage`` (the step it is in, written before each), the engine file, and
``result.json`` (``ok`` with ``network`` and ``quieted``, or ``error``: an exception of the
:class:`~dcnconvert.errors.DcnConvertError` tree by class name, message, hint and node). Log records go
to stderr as marked JSON lines (:data:`~dcnconvert.backend.trt.isolated.LOG_MARK`).

The parser's warning "Attribute NAME not found in plugin node!" is dropped for our plugin's optional
fields, as many times as the request says the model's plugin nodes lack each one (the creator has a
default for every optional field, so the warning says nothing wrong), and counted in ``quieted``.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

from dcnconvert import errors, log
from dcnconvert.backend.trt.isolated import LOG_MARK, RESULT_FILE, STAGE_FILE

_MISSING_FIELD = re.compile(r"Attribute (\w+) not found in plugin node")


class _Forward(logging.Formatter):
    """Formats a record as one marked JSON line for the parent (the text as this process would show it)."""

    def __init__(self, text: logging.Formatter | None):
        super().__init__()
        self._text = text

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        text = self._text.format(record) if self._text is not None else message
        return LOG_MARK + json.dumps({"name": record.name, "levelno": record.levelno, "msg": message,
                                      "text": text})


class _QuietFields(logging.Filter):
    """Drops the parser's missing-field warnings for the given fields, at most ``budget[field]`` each."""

    def __init__(self, budget: dict[str, int]):
        super().__init__()
        self.budget = {k: int(v) for k, v in budget.items() if int(v) > 0}
        self.counts: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        match = _MISSING_FIELD.search(record.getMessage())
        if match is None or self.budget.get(match.group(1), 0) <= 0:
            return True
        field = match.group(1)
        self.budget[field] -= 1
        self.counts[field] = self.counts.get(field, 0) + 1
        return False


def _setup_logging(verbosity: int) -> None:
    log.setup_logging(verbose=max(verbosity, 0), quiet=max(-verbosity, 0), stream=sys.stderr)
    handler = getattr(logging.getLogger(log.LOGGER_NAME), "_dcnconvert_handler", None)
    if handler is not None:
        handler.setFormatter(_Forward(handler.formatter))


def _build(request: dict[str, Any], folder: Path) -> dict[str, Any]:
    from dcnconvert.backend.trt import adapter, builder

    def stage(name: str) -> None:
        (folder / STAGE_FILE).write_text(name)

    runtime = request["runtime"]
    stage("import")
    trt = adapter.load_tensorrt(runtime)
    api = adapter.api_of(trt)
    log.configure_polygraphy()
    quiet = _QuietFields(request.get("quiet_fields") or {})
    logging.getLogger("Polygraphy").addFilter(quiet)
    stage("load plugins")
    libraries = [Path(p) for p in request.get("plugin_libraries") or []]
    if request.get("plugin"):
        name, version, namespace, builtin = request["plugin"]
        adapter.load_plugins(trt, libraries, name, version, namespace, builtin=bool(builtin))
    stage("parse")
    typed = bool(request.get("strongly_typed"))
    parsed = builder.parse_onnx(trt, Path(request["onnx"]), strongly_typed=typed)
    network = builder.describe_network(trt, parsed[1])
    builder.check_plugin_types(network, request.get("plugin_nodes") or [], typed or api.always_strongly_typed)
    stage("build")
    options = dict(request.get("build") or {})
    if options.get("timing_cache"):
        options["timing_cache"] = Path(options["timing_cache"])
    data = builder.build_engine_bytes(trt, parsed, **options)
    stage("write")
    Path(request["engine"]).write_bytes(data)
    return {"ok": True, "network": network, "quieted": quiet.counts, "bytes": len(data)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m dcnconvert.backend.trt.worker REQUEST.json", file=sys.stderr)
        return 2
    request_path = Path(args[0])
    folder = request_path.parent
    request = json.loads(request_path.read_text())
    _setup_logging(int(request.get("verbosity", 0)))
    sys.stdout = sys.stderr  # nothing of this process belongs on the parent's stdout
    try:
        result = _build(request, folder)
    except errors.DcnConvertError as exc:
        result = {"ok": False, "error": {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint,
                                         "node": exc.node}}
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it as a BuildError
        logging.getLogger("dcnconvert.trt").debug("build failed", exc_info=True)
        result = {"ok": False, "error": {"type": "BuildError", "message": f"{type(exc).__name__}: {exc}",
                                         "hint": "run with -vv for the traceback", "node": None}}
    tmp = folder / (RESULT_FILE + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(folder / RESULT_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
