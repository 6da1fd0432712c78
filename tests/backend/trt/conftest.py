"""Fixtures of the TensorRT-RTX build tests (test_rtx_builds.py, test_rtx_quant_builds.py): the plugin
library and a cache folder of the session's own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import REPO, trt_header_dirs


@pytest.fixture(scope="session")
def plugin_lib() -> Path:
    """The TensorRT-RTX plugin library (built against TensorRT 11's headers, whose plugin ABI
    TensorRT-RTX 1.5 and newer share)."""
    sys.path.insert(0, str(REPO / "tests" / "harness"))
    import plugin_build as pb

    if pb.nvcc() is None:
        pytest.skip("trt_rtx: nvcc is needed to build the plugin library")
    elevens = pb.oldest_per_major(trt_header_dirs()).get(11)
    if elevens is None:
        pytest.skip("trt_rtx: TensorRT 11 headers are needed to build the TensorRT-RTX plugin library")
    return pb.build_rtx(elevens)


@pytest.fixture(scope="session")
def rtx_cache_dir(tmp_path_factory):
    """dcnconvert's cache (where the loader link goes) in a folder of the session's own."""
    folder = tmp_path_factory.mktemp("dcn-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DCNCONVERT_CACHE_DIR", str(folder))
        yield folder
