"""Fixtures of the ``plugin build`` tests (test_compile.py, test_headers.py, test_toolchain.py): an
isolated cache and header search, and the fake nvcc and make of support.fake_build."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.fake_build import FAKE_MAKE, FAKE_NVCC, script

from dcnconvert.backend.plugin import headers as plugin_headers
from dcnconvert.backend.plugin import library as plugin_lib


@pytest.fixture
def isolated(tmp_path, monkeypatch) -> Path:
    """An empty cache, no TensorRT headers anywhere on this machine, no plugin-library override."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(plugin_lib.CACHE_ENV_VAR, str(cache))
    for var in ("TENSORRT_INCLUDE_DIR", "TRT_ROOT", "CONDA_PREFIX", plugin_headers.SOURCE_ENV_VAR,
                plugin_lib.ENV_VAR):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(plugin_headers, "SYSTEM_HEADER_DIRS", ())
    return cache


@pytest.fixture
def fake_tools(tmp_path, monkeypatch, isolated) -> Path:
    """A fake nvcc ($NVCC) and a fake make first on PATH; returns make's log of its command lines."""
    bin_dir = tmp_path / "fakebin"
    script(bin_dir / "make", FAKE_MAKE)
    monkeypatch.setenv("NVCC", str(script(bin_dir / "nvcc", FAKE_NVCC)))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    log = tmp_path / "make.log"
    monkeypatch.setenv("FAKE_MAKE_LOG", str(log))
    return log
