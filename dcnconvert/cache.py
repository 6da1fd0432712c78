"""Where dcnconvert keeps what it builds and fetches: plugin libraries, TensorRT headers, loader links.

A module of its own so that both the plugin library's choice (:mod:`dcnconvert.backend.plugin.library`)
and the TensorRT-RTX loader link (:mod:`dcnconvert.backend.trt.rtx`) can use it without importing
each other.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV_VAR", "cache_root"]

CACHE_ENV_VAR = "DCNCONVERT_CACHE_DIR"


def cache_root() -> Path:
    """``$DCNCONVERT_CACHE_DIR``, else ``$XDG_CACHE_HOME/dcnconvert``, else ``~/.cache/dcnconvert``."""
    env = os.environ.get(CACHE_ENV_VAR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "dcnconvert"
