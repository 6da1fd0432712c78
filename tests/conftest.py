"""Shared pytest configuration: markers that skip, with a reason, what this machine cannot run."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

TRT_HEADER_CANDIDATES = (
    "/usr/include/x86_64-linux-gnu",
    "/usr/include/aarch64-linux-gnu",
    "/usr/include",
    "/usr/local/tensorrt/include",
    "/opt/tensorrt/include",
)


@functools.cache
def gpu_available() -> str | None:
    """None if a CUDA device is usable through CuPy, else the reason it is not."""
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return f"CuPy is not importable ({type(exc).__name__}: {exc}); install the 'gpu' extra"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"no CUDA device ({type(exc).__name__}: {exc})"
    if count < 1:
        return "no CUDA device"
    return None


def trt_header_dirs() -> list[Path]:
    """Folders holding NvInfer.h: $TENSORRT_INCLUDE_DIR (os.pathsep-separated) first, then the usual ones."""
    found = []
    env = os.environ.get("TENSORRT_INCLUDE_DIR", "")
    for item in [p for p in env.split(os.pathsep) if p] + list(TRT_HEADER_CANDIDATES):
        path = Path(item)
        if (path / "NvInfer.h").is_file() and path not in found:
            found.append(path)
    return found


@functools.cache
def tensorrt_available() -> str | None:
    """None if a real TensorRT (with __version__) imports, else the reason."""
    try:
        import tensorrt
    except Exception as exc:
        return (f"the tensorrt module is not importable ({type(exc).__name__}: {exc}); "
                "pip install 'dcnconvert[trt]'")
    if not getattr(tensorrt, "__version__", None):
        return "the tensorrt module has no __version__ (stubs or an empty namespace package, not TensorRT)"
    return gpu_available()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords:
            reason = gpu_available()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"gpu: {reason}"))
        if "trt_headers" in item.keywords and not trt_header_dirs():
            item.add_marker(
                pytest.mark.skip(
                    reason="trt_headers: TensorRT headers (NvInfer.h) not found; set TENSORRT_INCLUDE_DIR"
                )
            )
        if "tensorrt" in item.keywords:
            reason = tensorrt_available()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"tensorrt: {reason}"))
