""".ci/run's first steps: which TensorRT headers it takes, and that a required header tier without
headers fails before anything is installed.

Each run uses ``PYTHON`` naming a missing interpreter, so a run that gets past the headers stops at
the creation of the virtual environment (exit 127) instead of installing anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO
from support.tiers import ENV_VAR

CI_RUN = REPO / ".ci" / "run"
VENV_STEP = "=== fresh virtual environment"


def fake_include(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "NvInfer.h").write_text("// stand-in\n")
    return folder


def ci_run(tmp_path: Path, script: Path = CI_RUN, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TENSORRT_INCLUDE_DIR", "TRT_HEADERS_ROOT", ENV_VAR)}
    environ.update(PYTHON=str(tmp_path / "no-python"), TMPDIR=str(tmp_path), **env)
    return subprocess.run(["bash", str(script)], env=environ, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.fixture
def headers(tmp_path) -> dict[str, Path]:
    root = tmp_path / "root"
    return {"root": root, "root_inc": fake_include(root / "v10.16" / "include"),
            "given": fake_include(tmp_path / "given" / "include"), "empty": Path(tmp_path / "empty")}


def test_no_headers_fails_early_naming_the_tier(tmp_path, headers):
    headers["empty"].mkdir()
    # an explicit TENSORRT_INCLUDE_DIR wins over TRT_HEADERS_ROOT, even when it holds no headers
    proc = ci_run(tmp_path, TENSORRT_INCLUDE_DIR=str(headers["empty"]), TRT_HEADERS_ROOT=str(headers["root"]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (f"error: the required trt_headers tier has no TensorRT headers: no NvInfer.h in "
            f"TENSORRT_INCLUDE_DIR={headers['empty']}") in proc.stderr
    assert ENV_VAR in proc.stderr and VENV_STEP not in proc.stdout
    proc = ci_run(tmp_path, TRT_HEADERS_ROOT=str(headers["empty"]))
    assert proc.returncode == 1 and f"TRT_HEADERS_ROOT={headers['empty']}" in proc.stderr


def test_header_precedence(tmp_path, headers):
    both = f"{headers['given']}:{headers['empty']}"
    proc = ci_run(tmp_path, TENSORRT_INCLUDE_DIR=both, TRT_HEADERS_ROOT=str(headers["root"]))
    assert f"TENSORRT_INCLUDE_DIR={headers['given']}\n" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 127 and VENV_STEP in proc.stdout  # got past the headers
    proc = ci_run(tmp_path, TRT_HEADERS_ROOT=str(headers["root"]))
    assert f"TENSORRT_INCLUDE_DIR={headers['root_inc']}\n" in proc.stdout, proc.stdout + proc.stderr


def test_headers_from_shared_beside_the_clone(tmp_path):
    """Unset variables: <clone>/../shared/trt-headers/<tag>/include, every tag found."""
    clone = tmp_path / "clone"
    (clone / ".ci").mkdir(parents=True)
    script = shutil.copy(CI_RUN, clone / ".ci" / "run")
    shared = tmp_path / "shared" / "trt-headers"
    found = [fake_include(shared / tag / "include") for tag in ("v10.3.0", "v11.1")]
    proc = ci_run(tmp_path, Path(script))
    assert f"TENSORRT_INCLUDE_DIR={found[0]}:{found[1]}\n" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 127
    shutil.rmtree(shared)
    proc = ci_run(tmp_path, Path(script))
    assert proc.returncode == 1 and "../shared/trt-headers beside the repository" in proc.stderr


def test_a_developer_may_drop_the_header_tier(tmp_path):
    proc = ci_run(tmp_path, TENSORRT_INCLUDE_DIR=str(tmp_path), **{ENV_VAR: "trt_lean wheel"})
    assert proc.returncode == 127 and VENV_STEP in proc.stdout, proc.stdout + proc.stderr
    assert "trt_headers is not required, so its tests will skip" in proc.stdout
    assert f"{ENV_VAR}=trt_lean wheel\n" in proc.stdout
