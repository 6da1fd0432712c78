"""The nvcc lookup of ``plugin build`` (dcnconvert.backend.plugin.toolchain): $NVCC, PATH, $CUDA_HOME,
the fallback folders and the nvcc wheels, and the exit code without one."""

from __future__ import annotations

import sys

import pytest
from cli_runner import error_lines, invoke, one_json
from support.fake_build import BUILD, FAKE_NVCC, script

from dcnconvert.backend.plugin import compile as plugin_build
from dcnconvert.backend.plugin import toolchain
from dcnconvert.errors import MissingDependencyError

pytestmark = pytest.mark.plugin_build

# ------------------------------------------------------------------------------------------------
# nvcc
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def no_nvcc(tmp_path, monkeypatch):
    """PATH without nvcc, no $NVCC/$CUDA_HOME/$CUDA_PATH, no fallback folder, no nvcc wheel."""
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for var in ("NVCC", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(toolchain, "FALLBACK_NVCC_DIRS", ())
    monkeypatch.setattr(toolchain, "wheel_nvcc_dirs", lambda: [])
    return empty


def test_nvcc_from_each_place(no_nvcc, tmp_path, monkeypatch):
    with pytest.raises(MissingDependencyError) as err:
        plugin_build.find_nvcc()
    assert "nvcc" in err.value.message and "$CUDA_HOME/bin (unset)" in err.value.message
    assert "pip install nvidia-cuda-nvcc" in err.value.hint and "NVCC" in err.value.hint

    cuda = script(tmp_path / "cuda" / "bin" / "nvcc", FAKE_NVCC)
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "cuda"))
    assert plugin_build.find_nvcc() == plugin_build.Nvcc(cuda, "13.0.88")
    wheel = script(tmp_path / "site" / "nvidia" / "cu13" / "bin" / "nvcc", FAKE_NVCC)
    monkeypatch.delenv("CUDA_PATH")
    monkeypatch.setattr(toolchain, "wheel_nvcc_dirs", lambda: [wheel.parent])
    assert plugin_build.find_nvcc().path == wheel
    on_path = script(no_nvcc / "nvcc", FAKE_NVCC)
    assert plugin_build.find_nvcc().path == on_path  # PATH comes before the wheel
    given = script(tmp_path / "elsewhere" / "my-nvcc", FAKE_NVCC)
    monkeypatch.setenv("NVCC", str(given))
    assert plugin_build.find_nvcc().path == given


def test_wheel_nvcc_dirs_look_on_sys_path(tmp_path, monkeypatch):
    wheel = script(tmp_path / "site" / "nvidia" / "cu13" / "bin" / "nvcc", FAKE_NVCC)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "nowhere"), str(tmp_path / "site")])
    assert toolchain.wheel_nvcc_dirs() == [wheel.parent]


def test_missing_nvcc_exits_4(no_nvcc, isolated, monkeypatch):
    res = invoke(*BUILD, "--json")
    assert res.exit_code == 4
    (line,) = error_lines(res)
    assert "nvcc" in line and "not found" in line and "PATH" in line
    assert "pip install nvidia-cuda-nvcc" in res.stderr
    obj = one_json(res.stdout)
    assert obj["errors"][0]["type"] == "MissingDependencyError" and obj["exit_code"] == 4

    monkeypatch.setenv("NVCC", "/nowhere/nvcc")
    res = invoke("plugin", "build", "--tensorrt-version", "10.16.1.11", "--arch", "sm_90")
    assert res.exit_code == 4
    (line,) = error_lines(res)
    assert "$NVCC=/nowhere/nvcc" in line
