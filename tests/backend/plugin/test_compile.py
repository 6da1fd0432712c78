"""``dcnconvert plugin build`` (dcnconvert.backend.plugin.compile, the ``plugin`` CLI group): versions,
tags and architectures, the cache through a fake ``make`` and a fake ``nvcc`` (support.fake_build),
and one real build of the plugin (``trt_headers`` and nvcc: about a minute and a half on two cores).
The header sources are tested in test_headers.py, the nvcc lookup in test_toolchain.py.
"""

from __future__ import annotations

import json
import os
import tarfile
import time
from pathlib import Path

import pytest
from cli_runner import error_lines, invoke, one_json
from conftest import find_nvcc, trt_header_dirs
from support.fake_build import BUILD, empty, fake_include, script

from dcnconvert.backend.plugin import compile as plugin_build
from dcnconvert.backend.plugin import headers as plugin_headers
from dcnconvert.backend.plugin import library as plugin_lib
from dcnconvert.backend.plugin import runtimes
from dcnconvert.errors import UsageError

pytestmark = pytest.mark.plugin_build

# ------------------------------------------------------------------------------------------------
# versions, tags, architectures
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "tags"), [
    ("10.16.1.11", ["v10.16.1", "v10.16", "v10.16.0"]),
    ("10.3.0", ["v10.3.0", "v10.3"]),
    ("11.1", ["v11.1", "v11.1.0"]),
    ("10.13.2.6", ["v10.13.2", "v10.13", "v10.13.0"]),
])
def test_tag_candidates(version, tags):
    assert plugin_headers.tag_candidates(version) == tags


def test_tag_candidates_need_major_minor():
    with pytest.raises(UsageError, match="major.minor"):
        plugin_headers.tag_candidates("11")


def test_header_version_reads_both_forms(tmp_path):
    assert plugin_headers.header_version(fake_include(tmp_path / "a", 10, 16, 0)) == "10.16.0"
    assert plugin_headers.header_version(fake_include(tmp_path / "b", 10, 3, 0, indirect=False)) == "10.3.0"
    assert plugin_headers.header_version(tmp_path / "missing") is None


@pytest.mark.parametrize(("values", "expected"), [
    (["90"], ("sm_90",)),
    (["9.0"], ("sm_90",)),
    (["sm_90"], ("sm_90",)),
    (["sm_90a"], ("sm_90",)),  # the make rules build sm_90 as sm_90a
    (["sm_120,8.6", "sm_80"], ("sm_80", "sm_86", "sm_120")),
    (["sm_100a", "100"], ("sm_100", "sm_100a")),
    (["SM_89", "89", "8.9"], ("sm_89",)),
])
def test_parse_archs(values, expected):
    assert plugin_build.parse_archs(values) == expected
    assert plugin_build.ptx_arch(expected) == f"compute_{expected[-1][3:].rstrip('af')}"


@pytest.mark.parametrize("value", ["foo", "sm_", "9", "sm_9000", "compute_90", "sm_80a", "20", ",", "9.0.1"])
def test_parse_archs_refuses_nonsense(value):
    with pytest.raises(UsageError, match="--arch") as err:
        plugin_build.parse_archs([value])
    assert "sm_90" in (err.value.hint or "")


def test_cache_key_depends_on_every_part():
    base = ("10.16.1.11", "13.0.88", ("sm_90",), "a" * 64)
    key = plugin_build.cache_key(*base)
    assert key.startswith("trt10.16.1.11-cuda13.0.88-sm_90-")
    for i, other in enumerate(["10.16.2", "12.9.86", ("sm_80", "sm_90"), "b" * 64]):
        changed = list(base)
        changed[i] = other
        assert plugin_build.cache_key(*changed) != key


def test_no_arch_and_no_gpu_is_a_usage_error(fake_tools, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "fakebin"))  # no nvidia-smi
    res = invoke("plugin", "build", "--tensorrt-version", "10.16.1.11")
    assert res.exit_code == 2
    (line,) = error_lines(res)
    assert "no GPU" in line and "nvidia-smi" in line and "--arch sm_90" in res.stderr


def test_no_tensorrt_is_a_usage_error(fake_tools, monkeypatch):
    monkeypatch.setattr(plugin_lib, "installed_tensorrt", lambda: None)
    monkeypatch.setattr(plugin_lib.runtimes, "installed_rtx", lambda: None)  # nor TensorRT-RTX
    res = invoke("plugin", "build", "--arch", "sm_90")
    assert res.exit_code == 2
    (line,) = error_lines(res)
    assert "no TensorRT is installed" in line and "--tensorrt-version" in res.stderr


# ------------------------------------------------------------------------------------------------
# the cache, through a fake make
# ------------------------------------------------------------------------------------------------


def test_build_cache_hit_force_and_plugin_path(fake_tools, tmp_path):
    headers = fake_include(tmp_path / "inc", 10, 16, 0)
    args = ["plugin", "build", "--tensorrt-version", "10.16.1.11", "--arch", "9.0", "--headers", headers]
    res = invoke(*args, "-j", "3")
    assert res.exit_code == 0, res.stderr
    lib = Path(res.stdout.strip())
    assert lib.parent.parent == tmp_path / "cache" / "plugins" and lib.name == plugin_lib.LIB_NAME
    assert "compiling core/dcnFused.cu" in res.stderr and "compiling trt/registration.cpp" in res.stderr
    assert "linking libdcnconvert_plugin.so" in res.stderr
    (call,) = fake_tools.read_text().splitlines()
    build_dir = tmp_path / "cache" / "build"
    assert "plugin-lib" in call and "-j3" in call and "CUDA_ARCHS=sm_90 " in call
    assert "PTX_ARCH=compute_90" in call and f"BUILD_DIR={build_dir}/cuda13.0.88-" in call
    assert f"TENSORRT_INCLUDE_DIR={headers.resolve()}" in call
    assert f"-C {plugin_lib.plugin_sources()}" in call and " -B " not in call

    record = json.loads((lib.parent / plugin_lib.BUILD_INFO_FILE).read_text())
    assert record["tensorrt_version"] == "10.16.1.11" and record["source_hash"] == plugin_lib.source_hash()
    assert record["headers_version"] == "10.16.0" and record["headers_dir"] == str(headers.resolve())
    assert record["cuda_version"] == "13.0.88" and record["archs"] == ["sm_90"]
    assert record["ptx_arch"] == "compute_90" and record["key"] == lib.parent.name
    assert {"dcnconvert_version", "created"} <= set(record)
    assert not any((tmp_path / "cache" / "tmp").iterdir())

    res = invoke("plugin-path", "--tensorrt-version", "10.16.1.11", "--json")
    obj = one_json(res.stdout)
    assert obj["origin"] == "cache" and obj["plugin_library"] == str(lib)

    start = time.perf_counter()
    res = invoke(*args, "--json")
    assert res.exit_code == 0 and time.perf_counter() - start < 2
    obj = one_json(res.stdout)
    assert obj["cache_hit"] is True and obj["plugin_library"] == str(lib) and obj["key"] == lib.parent.name
    assert obj["build_info"]["tensorrt_headers"] == "10.16.0"
    assert len(fake_tools.read_text().splitlines()) == 1  # make did not run

    res = invoke(*args, "--force", "--json")
    assert res.exit_code == 0 and one_json(res.stdout)["cache_hit"] is False
    assert " -B " in fake_tools.read_text().splitlines()[-1]


def test_tensorrt_rtx_build_uses_tensorrt_11_headers(fake_tools, tmp_path, monkeypatch):
    ten = fake_include(tmp_path / "trt10" / "include", 10, 16, 0)
    eleven = fake_include(tmp_path / "trt11" / "include", 11, 1, 0)
    monkeypatch.setenv("TENSORRT_INCLUDE_DIR", f"{ten}{os.pathsep}{eleven}")
    args = ["plugin", "build", "--runtime", "tensorrt-rtx", "--tensorrt-version", "1.7.1.116", "--arch",
            "sm_86"]
    res = invoke(*args, "--json")
    assert res.exit_code == 0, res.stderr
    obj = one_json(res.stdout)
    assert obj["runtime"] == "tensorrt-rtx" and obj["tensorrt_version"] == "1.7.1.116"
    assert obj["headers_dir"] == str(eleven.resolve())
    assert obj["key"].startswith("rtx1.7.1.116-cuda13.0.88-sm_86-")
    assert obj["build_info"]["runtime"] == "tensorrt-rtx" and obj["cache_hit"] is False
    (call,) = fake_tools.read_text().splitlines()
    assert "PLUGIN_RUNTIME=tensorrt-rtx" in call and f"TENSORRT_INCLUDE_DIR={eleven.resolve()}" in call
    lib = Path(obj["plugin_library"])
    record = json.loads((lib.parent / plugin_lib.BUILD_INFO_FILE).read_text())
    assert record["runtime"] == "tensorrt-rtx" and record["headers_version"] == "11.1.0"
    # the forwarding object travels with the library into the entry (and only for TensorRT-RTX)
    assert sorted(p.name for p in lib.parent.iterdir()) == sorted(
        [plugin_lib.LIB_NAME, runtimes.RTX_FORWARD_NAME, plugin_lib.BUILD_INFO_FILE])
    assert (lib.parent / runtimes.RTX_FORWARD_NAME).read_bytes() == b"ELF forwarder\0"
    assert "linking libdcnconvert_rtx_forward.so" in res.stderr
    assert "linking libdcnconvert_plugin.so" in res.stderr
    # the TensorRT build of the same sources is another entry; each runtime finds its own
    res = invoke("plugin", "build", "--tensorrt-version", "11.4.0", "--arch", "sm_86", "--headers", eleven)
    assert res.exit_code == 0 and Path(res.stdout.strip()) != lib
    assert not (Path(res.stdout.strip()).parent / runtimes.RTX_FORWARD_NAME).exists()
    assert "PLUGIN_RUNTIME=tensorrt " in fake_tools.read_text().splitlines()[-1]
    found = invoke("plugin-path", "--runtime", "tensorrt-rtx", "--tensorrt-version", "1.6.1", "--json")
    obj = one_json(found.stdout)
    assert obj["origin"] == "cache" and obj["plugin_library"] == str(lib) and obj["runtime"] == "tensorrt-rtx"
    obj = one_json(invoke("plugin-path", "--tensorrt-version", "11.4.0", "--json").stdout)
    assert obj["plugin_library"] == res.stdout.strip() and obj["runtime"] == "tensorrt"
    assert one_json(invoke(*args, "--json").stdout)["cache_hit"] is True


def test_tensorrt_rtx_entry_without_its_forwarding_object_is_not_used(fake_tools, tmp_path, monkeypatch):
    eleven = fake_include(tmp_path / "trt11" / "include", 11, 1, 0)
    args = ["plugin", "build", "--runtime", "tensorrt-rtx", "--tensorrt-version", "1.7.1.116", "--arch",
            "sm_86", "--headers", str(eleven), "--json"]
    res = invoke(*args)
    assert res.exit_code == 0, res.stderr
    lib = Path(one_json(res.stdout)["plugin_library"])
    forwarder = lib.parent / runtimes.RTX_FORWARD_NAME
    forwarder.unlink()
    # plugin-path no longer offers the entry (its library alone makes TensorRT-RTX's parser abort) ...
    found = invoke("plugin-path", "--runtime", "tensorrt-rtx", "--tensorrt-version", "1.7.1.116", "--json")
    assert found.exit_code != 0 or one_json(found.stdout)["plugin_library"] != str(lib), found.stdout
    # ... and plugin build is no cache hit: it builds the entry again, whole
    obj = one_json(invoke(*args).stdout)
    assert obj["cache_hit"] is False and obj["plugin_library"] == str(lib) and forwarder.is_file()
    assert len(fake_tools.read_text().splitlines()) == 2
    # a make that leaves no forwarding object is a failed build: no entry is replaced or written
    monkeypatch.setenv("FAKE_MAKE_NO_FORWARD", "1")
    res = invoke(*args[:-1], "--force")
    assert res.exit_code == 1
    (line,) = error_lines(res)
    assert runtimes.RTX_FORWARD_NAME in line and "goes with libdcnconvert_plugin.so, is missing" in line
    assert forwarder.is_file() and empty(tmp_path / "cache" / "tmp")


def test_tensorrt_rtx_build_refuses_other_headers_and_versions(fake_tools, tmp_path):
    ten = fake_include(tmp_path / "trt10" / "include", 10, 16, 0)
    res = invoke("plugin", "build", "--runtime", "tensorrt-rtx", "--arch", "sm_86", "--headers", ten)
    assert res.exit_code == 2
    (line,) = error_lines(res)
    assert f"--headers {ten} holds TensorRT 10.16.0 headers" in line and "TensorRT 11's" in line
    res = invoke("plugin", "build", "--runtime", "tensorrt-rtx", "--tensorrt-version", "1.4.0", "--arch",
                 "sm_86")
    assert res.exit_code == 2 and "1.5 or newer 1.x" in error_lines(res)[0]
    assert not fake_tools.exists()


def test_make_failure_leaves_no_entry(fake_tools, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MAKE_FAIL", "1")
    headers = fake_include(tmp_path / "inc", 10, 16, 0)
    res = invoke(*BUILD, "--headers", headers)
    assert res.exit_code == 1
    assert "make failed (exit code 2)" in error_lines(res)[0]
    assert "core/dcnFused.cu(12): error: something is wrong" in res.stderr  # the tail of make's output
    assert empty(tmp_path / "cache" / "plugins") and empty(tmp_path / "cache" / "tmp")


# ------------------------------------------------------------------------------------------------
# the real build
# ------------------------------------------------------------------------------------------------


def _ten_headers() -> Path | None:
    """The TensorRT 10 headers found here, 10.16 first."""
    found = {d: plugin_headers.header_version(d) or "" for d in trt_header_dirs()}
    tens = sorted((d for d, v in found.items() if v.startswith("10.")),
                  key=lambda d: not found[d].startswith("10.16."))
    return tens[0] if tens else None


@pytest.mark.trt_headers
def test_real_build_from_a_fetched_tarball(tmp_path, monkeypatch):
    """One real compile: headers fetched from a file:// stand-in of the GitHub tarball, the library
    found by plugin-path, then a cache hit without make."""
    nvcc = find_nvcc()
    headers = _ten_headers()
    if nvcc is None or headers is None:
        pytest.skip("needs nvcc (or $NVCC) and TensorRT 10 headers")
    major, minor = plugin_headers.header_version(headers).split(".")[:2]
    version = f"{major}.{minor}.1.11"  # 10.16.1.11 with the 10.16 headers: found at tag v10.16
    src = tmp_path / "src"
    src.mkdir()
    with tarfile.open(src / f"v{major}.{minor}.tar.gz", "w:gz") as tar:
        tar.add(headers, arcname=f"TensorRT-{major}.{minor}/include")
    cache = tmp_path / "cache"
    monkeypatch.setenv(plugin_lib.CACHE_ENV_VAR, str(cache))
    for var in ("TENSORRT_INCLUDE_DIR", "TRT_ROOT", "CONDA_PREFIX", plugin_lib.ENV_VAR):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(plugin_headers, "SYSTEM_HEADER_DIRS", ())
    args = ["plugin", "build", "--tensorrt-version", version, "--arch", "sm_90",
            "--headers-source", f"file://{src}/{{tag}}.tar.gz"]

    res = invoke(*args)
    assert res.exit_code == 0, res.stderr
    lib = Path(res.stdout.strip())
    assert lib.is_file() and lib.parent.parent == cache / "plugins"
    info = plugin_lib.library_build_info(lib)
    assert info["tensorrt_headers"].startswith(f"{major}.{minor}.") and "sm_90a" in info["archs"]
    assert (cache / "headers" / f"v{major}.{minor}" / "include" / "NvInfer.h").is_file()
    assert list((cache / "build").glob("cuda*/plugin-core/sm_90-compute_90/dcnFused.o"))

    obj = one_json(invoke("plugin-path", "--tensorrt-version", version, "--json").stdout)
    assert obj["origin"] == "cache" and obj["plugin_library"] == str(lib)

    # Again: a cache hit. A make first on PATH that fails would show if it ran.
    marker = tmp_path / "make-ran"
    script(tmp_path / "trap" / "make", f"#!/bin/sh\ntouch {marker}\nexit 3\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'trap'}{os.pathsep}{os.environ['PATH']}")
    start = time.perf_counter()
    res = invoke(*args, "--json")
    seconds = time.perf_counter() - start
    assert res.exit_code == 0, res.stderr
    obj = one_json(res.stdout)
    assert obj["cache_hit"] is True and obj["plugin_library"] == str(lib) and seconds < 2
    assert not marker.exists()


def test_text_output_is_the_path_alone(fake_tools, tmp_path):
    """Without --json stdout is the library path alone (logs and make's progress go to stderr); -q
    silences the progress."""
    headers = fake_include(tmp_path / "inc", 10, 16, 0)
    res = invoke(*BUILD, "--headers", headers)
    assert res.exit_code == 0 and res.stdout.splitlines() == [res.stdout.strip()]
    assert Path(res.stdout.strip()).is_file() and "compiling" in res.stderr
    res = invoke(*BUILD, "--headers", headers,
                 "--force", "-q")
    assert res.exit_code == 0 and res.stderr == "" and Path(res.stdout.strip()).is_file()


def test_a_relative_cache_is_given_to_make_as_absolute_paths(fake_tools, tmp_path, monkeypatch):
    """make runs in the plugin sources (-C), where a relative path would point elsewhere."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(plugin_lib.CACHE_ENV_VAR, "rel-cache")
    fake_include(tmp_path / "src" / "v10.16" / "include", 10, 16, 0)
    res = invoke(*BUILD, "--headers-source", "src")
    assert res.exit_code == 0, res.stderr
    (call,) = fake_tools.read_text().splitlines()
    assert f"BUILD_DIR={tmp_path}/rel-cache/build/" in call and f"NVCC={tmp_path}/fakebin/nvcc" in call
    assert f"TENSORRT_INCLUDE_DIR={tmp_path}/rel-cache/headers/v10.16/include" in call
    assert f"PLUGIN_BUILD_DIR={tmp_path}/rel-cache/build/" in call
    lib = Path(res.stdout.strip())
    assert lib.is_absolute() and lib.parent.parent == tmp_path / "rel-cache" / "plugins"
