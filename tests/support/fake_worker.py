"""A stand-in for ``dcnconvert.backend.trt.worker`` that needs no TensorRT: what it does is the
request's ``mode`` (``ok``, ``error``, ``abort``, ``exit``), so that the parent's handling of each
outcome of a real child process can be tested (tests/backend/trt/test_isolated.py)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from dcnconvert.backend.trt.isolated import LOG_MARK, RESULT_FILE, STAGE_FILE


def main() -> None:
    request_path = Path(sys.argv[1])
    folder = request_path.parent
    request = json.loads(request_path.read_text())
    (folder / STAGE_FILE).write_text("parse")
    record = {"name": "dcnconvert.trt", "levelno": logging.WARNING, "msg": "a warning from the child",
              "text": "[W] a warning from the child"}
    sys.stderr.write(LOG_MARK + json.dumps(record) + "\n")
    print("raw text from a native library", flush=True)
    sys.stderr.flush()
    mode = request["mode"]
    if mode == "abort":
        os.abort()
    if mode == "exit":
        sys.exit(3)
    if mode == "ok":
        Path(request["engine"]).write_bytes(b"plan")
        result = {"ok": True, "network": {"layers": 1, "plugin_layers": []}, "quieted": {}}
    else:
        result = {"ok": False, "error": {"type": "ValidationError", "message": "bad node", "hint": "fix it",
                                         "node": "dcn3"}}
    (folder / RESULT_FILE).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
