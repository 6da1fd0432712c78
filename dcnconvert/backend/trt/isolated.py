"""Engine builds in a process of their own, so that a crash in a library we load becomes an error.

TensorRT's parser, its builder and plugin libraries are native code that can abort the process that
runs them (TensorRT-RTX 1.7's parser does, on every plugin node, when ``libtensorrt_rtx.so`` cannot be
opened). dcnconvert therefore parses and builds in a child (``python -m dcnconvert.backend.trt.worker``):

* the request (model path, plugin libraries, build options) goes in as a JSON file, the engine and a
  JSON result come back as files in the same temporary folder;
* the child's log records come back over its stderr, one marked JSON line each, and are logged here
  under their own logger names and levels (so ``-v``/``-q`` and ``--json``'s ``warnings`` work as for
  in-process code); anything else the child's libraries print goes to stderr as it is;
* the child writes the stage it is in to a file before each stage. When it dies by a signal, the
  :class:`~dcnconvert.errors.BuildError` names the stage, the signal and the last log lines, and its
  payload carries them for ``--json``. No engine is written then (the caller writes the engine only
  from a successful result).

For TensorRT-RTX the child starts with :func:`dcnconvert.backend.trt.rtx.loader_environment` and
``POLYGRAPHY_USE_TENSORRT_RTX=1``.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import site
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dcnconvert import errors, log

__all__ = ["LOG_MARK", "build_isolated", "run_worker"]

#: Prefix of the child's log lines on its stderr (a record as JSON follows).
LOG_MARK = "\x1edcnconvert-log "
#: Log lines kept for the message of a child that died.
TAIL_LINES = 20
WORKER_MODULE = "dcnconvert.backend.trt.worker"
STAGE_FILE = "stage"
RESULT_FILE = "result.json"


def _environment(runtime: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("POLYGRAPHY_USE_TENSORRT_RTX", None)
    if runtime == "tensorrt-rtx":
        from dcnconvert.backend.trt import rtx

        env = rtx.loader_environment(env)
        env["POLYGRAPHY_USE_TENSORRT_RTX"] = "1"
    # the child imports this very dcnconvert: from a source tree put on sys.path here, that tree goes on
    # its PYTHONPATH (an installed one it finds by itself, and site-packages never goes before the
    # standard library)
    package_root = str(Path(__file__).resolve().parents[3])
    installed = {str(Path(p).resolve()) for p in site.getsitepackages() + [site.getusersitepackages()]}
    if package_root not in installed:
        rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != package_root]
        env["PYTHONPATH"] = os.pathsep.join([package_root, *rest])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _relay(stream: Any, tail: collections.deque) -> None:
    """Log the child's marked records here; pass its other output to stderr; keep the last lines."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if line.startswith(LOG_MARK):
            try:
                item = json.loads(line[len(LOG_MARK):])
                record = logging.makeLogRecord({
                    "name": item["name"], "levelno": item["levelno"],
                    "levelname": logging.getLevelName(item["levelno"]), "msg": item["msg"], "args": None})
            except (ValueError, KeyError, TypeError):
                record = None
            if record is not None:
                logging.getLogger(record.name).handle(record)
                tail.append(item.get("text") or item["msg"])
                continue
        tail.append(line)
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _crash_error(what: str, returncode: int, stage: str, tail: Sequence[str]) -> errors.BuildError:
    sig: str | None = None
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode).name
        except ValueError:
            sig = str(-returncode)
        how = f"died of signal {sig}"
    else:
        how = f"exited with code {returncode} without a result"
    last = "\n".join(f"  {line}" for line in tail) or "  (no output)"
    error = errors.BuildError(
        f"{what}: the build process {how} during stage '{stage}'. Its last log lines:\n{last}",
        hint="a library loaded for the build (the TensorRT parser or builder, or a plugin library) crashed; "
        "run with -v for more of its log. No engine was written")
    crash = {"stage": stage, "signal": sig, "returncode": returncode, "log_tail": list(tail)}
    error.payload = {"crash": crash}  # type: ignore[attr-defined]
    return error


def run_worker(request: dict[str, Any], folder: Path, runtime: str, what: str) -> dict[str, Any]:
    """Run the worker on ``request`` in ``folder`` and return its result.

    Raises:
        BuildError: the child died (signal or exit without a result), with ``payload["crash"]``.
        DcnConvertError: the error the child reported, of the same class.
    """
    log.configure_polygraphy()
    request = dict(request, verbosity=log.verbosity())
    request_path = folder / "request.json"
    request_path.write_text(json.dumps(request))
    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    proc = subprocess.Popen([sys.executable, "-m", WORKER_MODULE, str(request_path)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=_environment(runtime))
    relay = threading.Thread(target=_relay, args=(proc.stdout, tail), daemon=True)
    relay.start()
    try:
        returncode = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        relay.join(timeout=10)
        proc.stdout.close()
    result_path = folder / RESULT_FILE
    if returncode != 0 or not result_path.is_file():
        stage_path = folder / STAGE_FILE
        stage = stage_path.read_text().strip() if stage_path.is_file() else "start"
        raise _crash_error(what, returncode, stage, list(tail))
    result = json.loads(result_path.read_text())
    if not result.get("ok"):
        raise _error_from(result.get("error") or {})
    return result


def _error_from(item: dict[str, Any]) -> errors.DcnConvertError:
    cls = getattr(errors, str(item.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.DcnConvertError)):
        cls = errors.BuildError
    return cls(str(item.get("message") or "the build failed"), hint=item.get("hint"), node=item.get("node"))


def build_isolated(api: Any, onnx_path: Path, *, plugin_libraries: Sequence[Path] = (),
                   plugin: tuple[str, str, str, bool] | None = None, strongly_typed: bool = False,
                   quiet_fields: dict[str, int] | None = None, plugin_nodes: Sequence[str] = (),
                   **build: Any) -> dict[str, Any]:
    """Load the plugins, parse ``onnx_path`` and build an engine in a child process.

    Args:
        api: the :class:`~dcnconvert.backend.trt.versions.TrtApi` of the runtime to build with.
        onnx_path: the model to parse (rewritten, possibly cast).
        plugin_libraries: loaded in the child before parsing.
        plugin: ``(name, version, namespace, builtin)`` of the creator that must be registered then.
        strongly_typed: parse into a strongly typed network.
        quiet_fields: parser warnings "Attribute NAME not found in plugin node" to drop, by NAME: at
            most this many each (our plugin's optional fields that its nodes do not carry).
        plugin_nodes: the names of our plugin's nodes, whose input types are checked after parsing.
        **build: the keyword arguments of :func:`dcnconvert.backend.trt.builder.build_engine_bytes`.

    Returns:
        ``data`` (the serialized engine), ``network`` (what
        :func:`~dcnconvert.backend.trt.builder.describe_network` saw) and ``quieted`` (the parser warnings
        dropped, by field).
    """
    with tempfile.TemporaryDirectory(prefix="dcnconvert-build-") as tmp:
        folder = Path(tmp)
        engine = folder / "engine.plan"
        request = {
            "runtime": api.runtime, "onnx": str(onnx_path), "engine": str(engine),
            "plugin_libraries": [str(p) for p in plugin_libraries],
            "plugin": list(plugin) if plugin else None,
            "strongly_typed": bool(strongly_typed), "quiet_fields": dict(quiet_fields or {}),
            "plugin_nodes": list(plugin_nodes),
            "build": {k: (str(v) if isinstance(v, Path) else v) for k, v in build.items()},
        }
        result = run_worker(request, folder, api.runtime, f"building the engine with {api.label}")
        result["data"] = engine.read_bytes()
    return result
