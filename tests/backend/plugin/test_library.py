"""Choosing the plugin library (dcnconvert.backend.plugin.library): by the runtime (TensorRT or
TensorRT-RTX) and its major version, with a reason."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from cli_runner import error_lines, invoke, one_json

from dcnconvert import schema
from dcnconvert.backend.plugin import library as plugin_lib
from dcnconvert.backend.plugin import runtimes
from dcnconvert.errors import PluginLoadError, UsageError

RTX = "tensorrt-rtx"
RTX_KEYS = "runtime=tensorrt-rtx runtime_major=1 runtime_min_minor=5"


def fake_library(path: Path, headers: str, archs: str = "sm_90a compute_90", runtime: str = "") -> Path:
    """A file that carries the build-info line the real library has (between other bytes); ``runtime``
    adds the runtime keys ("" leaves them out, as libraries from before them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = {"": "", "tensorrt": f" runtime=tensorrt runtime_major={headers.split('.')[0]}",
            RTX: " " + RTX_KEYS}
    line = (f"dcnconvert-plugin-build-info: tensorrt_headers={headers}{keys[runtime]} cuda_runtime=13000 "
            f"archs={archs}")
    path.write_bytes(b"\x7fELF" + os.urandom(64) + b"\0" + line.encode() + b"\0" + os.urandom(64))
    return path


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """An empty package folder, an empty cache, no environment override and no installed TensorRT."""
    pkg = tmp_path / "pkg"
    (pkg / "_lib").mkdir(parents=True)
    monkeypatch.setattr(plugin_lib, "_package_dir", lambda: pkg)
    monkeypatch.setenv(plugin_lib.CACHE_ENV_VAR, str(tmp_path / "cache"))
    monkeypatch.delenv(plugin_lib.ENV_VAR, raising=False)
    monkeypatch.setattr(plugin_lib, "installed_tensorrt", lambda: None)
    monkeypatch.setattr(plugin_lib.runtimes, "installed_rtx", lambda: None)
    monkeypatch.setattr(plugin_lib, "source_hash", lambda root=None: "src-1")
    return pkg


def bundle(pkg: Path, major: int, headers: str) -> Path:
    return fake_library(pkg / "_lib" / f"trt{major}" / plugin_lib.LIB_NAME, headers)


def rtx_bundle(pkg: Path) -> Path:
    return fake_library(pkg / "_lib" / "rtx1" / plugin_lib.LIB_NAME, "11.1.0", runtime=RTX)


def cache_entry(key: str, trt: str, headers: str, source: str = "src-1", runtime: str = "",
                forwarder: bool = True) -> Path:
    """An entry as `plugin build` writes it; a TensorRT-RTX one has its forwarding object unless not
    ``forwarder``."""
    folder = plugin_lib.cache_root() / "plugins" / key
    lib = fake_library(folder / plugin_lib.LIB_NAME, headers, runtime=runtime)
    if runtime == RTX and forwarder:
        (folder / runtimes.RTX_FORWARD_NAME).write_bytes(b"\x7fELF forwarder")
    info = {"tensorrt_version": trt, "source_hash": source, **({"runtime": runtime} if runtime else {})}
    (folder / plugin_lib.BUILD_INFO_FILE).write_text(json.dumps(info))
    return lib


def test_build_info_is_read_from_the_file(tmp_path):
    lib = fake_library(tmp_path / "x.so", "11.1.0", archs="sm_75 sm_90a compute_120")
    assert plugin_lib.library_build_info(lib) == {
        "tensorrt_headers": "11.1.0", "cuda_runtime": "13000", "archs": "sm_75 sm_90a compute_120"}
    other = tmp_path / "other.so"
    other.write_bytes(b"\x7fELF no line here")
    assert plugin_lib.library_build_info(other) == {}
    assert plugin_lib.library_build_info(tmp_path / "absent.so") == {}


@pytest.mark.parametrize(("trt", "expected"), [("10.16.1.11", 10), ("10.3.0", 10), ("11.4.0.106", 11)])
def test_bundled_library_of_the_installed_major(tree, monkeypatch, trt, expected):
    libs = {10: bundle(tree, 10, "10.3.0"), 11: bundle(tree, 11, "11.1.0")}
    monkeypatch.setattr(plugin_lib, "installed_tensorrt", lambda: (trt, "tensorrt-lean-cu13-bindings"))
    choice = plugin_lib.choose_plugin_library()
    assert choice.path == libs[expected] and choice.origin == "bundled"
    assert choice.library_major == expected and choice.tensorrt_version == trt
    assert f"TensorRT {expected}" in choice.reason and "tensorrt-lean-cu13-bindings" in choice.reason
    # the caller's version (the tensorrt module in use) wins over the installed metadata
    other = 21 - expected
    assert plugin_lib.choose_plugin_library(tensorrt_version=f"{other}.0.0").path == libs[other]


def test_no_library_for_the_installed_major_names_plugin_build(tree, monkeypatch):
    bundle(tree, 11, "11.1.0")
    monkeypatch.setattr(plugin_lib, "installed_tensorrt", lambda: ("10.16.1", "tensorrt"))
    with pytest.raises(PluginLoadError) as info:
        plugin_lib.choose_plugin_library()
    assert info.value.exit_code == 4
    assert "TensorRT 10" in str(info.value) and "carries TensorRT 11" in str(info.value)
    assert "dcnconvert plugin build" in info.value.hint


def test_without_tensorrt_the_newest_bundled_major(tree):
    bundle(tree, 10, "10.3.0")
    newest = bundle(tree, 11, "11.1.0")
    choice = plugin_lib.choose_plugin_library()
    assert choice.path == newest and "no TensorRT is installed" in choice.reason


def test_nothing_at_all(tree):
    with pytest.raises(PluginLoadError, match="carries none") as info:
        plugin_lib.choose_plugin_library()
    assert "plugin build" in info.value.hint


def test_cache_of_the_same_major_and_sources_wins_over_the_bundle(tree, monkeypatch):
    bundle(tree, 10, "10.3.0")
    monkeypatch.setattr(plugin_lib, "installed_tensorrt", lambda: ("10.16.1.11", "tensorrt"))
    cache_entry("other-major", "11.4.0", "11.1.0")
    cache_entry("old-sources", "10.16.1.11", "10.16.0", source="src-0")
    assert plugin_lib.choose_plugin_library().origin == "bundled"
    built = cache_entry("ok", "10.16.1.11", "10.16.0")
    choice = plugin_lib.choose_plugin_library()
    assert (choice.path, choice.origin) == (built, "cache")
    assert "dcnconvert plugin build" in choice.reason and "10.16.1.11" in choice.reason
    # an entry for exactly the version in use first, else the newest of the major
    time.sleep(0.01)
    newer = cache_entry("newer", "10.15.1", "10.15.1")
    assert plugin_lib.choose_plugin_library().path == built
    assert plugin_lib.choose_plugin_library(tensorrt_version="10.14.1").path == newer


def test_explicit_library_order_and_checks(tree, tmp_path, monkeypatch):
    bundled = bundle(tree, 11, "11.1.0")
    assert plugin_lib.find_plugin_library() == bundled
    env_lib = fake_library(tmp_path / "env.so", "11.1.0")
    monkeypatch.setenv(plugin_lib.ENV_VAR, str(env_lib))
    choice = plugin_lib.choose_plugin_library()
    assert (choice.path, choice.origin) == (env_lib.resolve(), "$DCNCONVERT_PLUGIN_LIB")
    given = fake_library(tmp_path / "given.so", "11.1.0")
    assert plugin_lib.choose_plugin_library(given).origin == "--plugin-lib"
    # a library of the other major is refused before TensorRT would silently register nothing
    with pytest.raises(PluginLoadError, match="built for TensorRT 11") as info:
        plugin_lib.choose_plugin_library(given, tensorrt_version="10.16.1")
    assert "TensorRT 10" in info.value.hint
    # a file without the build-info line is taken as given
    plain = tmp_path / "plain.so"
    plain.write_bytes(b"\x7fELF")
    assert plugin_lib.choose_plugin_library(plain, tensorrt_version="10.16.1").library_major is None


@pytest.mark.parametrize("source", ["override", "env"])
def test_missing_explicit_library(tree, tmp_path, monkeypatch, source):
    missing = tmp_path / "nope.so"
    if source == "env":
        monkeypatch.setenv(plugin_lib.ENV_VAR, str(missing))
    with pytest.raises(PluginLoadError, match="does not exist") as info:
        plugin_lib.find_plugin_library(missing if source == "override" else None)
    assert str(missing) in str(info.value)


def test_targets(tree, tmp_path):
    assert plugin_lib.plugin_library_for_target(schema.TARGET_TRT_BUILTIN.name) is None
    with pytest.raises(PluginLoadError):
        plugin_lib.plugin_library_for_target("dcnconvert")
    given = fake_library(tmp_path / "x.so", "10.16.0")
    assert plugin_lib.plugin_library_for_target(schema.TARGET_TRT_BUILTIN, given) == given.resolve()
    assert plugin_lib.plugin_library_for_target("dcnconvert", given, "10.16.1") == given.resolve()


def test_installed_tensorrt_reads_distribution_metadata(monkeypatch):
    versions = {"tensorrt-lean-cu13-bindings": "11.4.0.106", "tensorrt-dispatch-cu13": "11.4.0.106",
                "tensorrt-cu12": "10.16.1.11"}

    def fake_version(name):
        if name in versions:
            return versions[name]
        raise plugin_lib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(plugin_lib.metadata, "version", fake_version)
    assert plugin_lib.installed_tensorrt() == ("10.16.1.11", "tensorrt-cu12")  # the full TensorRT first
    del versions["tensorrt-cu12"]
    assert plugin_lib.installed_tensorrt() == ("11.4.0.106", "tensorrt-lean-cu13-bindings")
    versions.clear()
    assert plugin_lib.installed_tensorrt() is None


def test_sources_and_their_hash():
    root = plugin_lib.plugin_sources()
    assert (root / "trt" / "registration.cpp").is_file()
    digest = plugin_lib.source_hash(root)
    assert len(digest) == 64 and digest == plugin_lib.source_hash(root)


def test_source_hash_follows_content_and_names(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "a.cu").write_text("x")
    first = plugin_lib.source_hash(tmp_path)
    (tmp_path / "core" / "a.cu").write_text("y")
    second = plugin_lib.source_hash(tmp_path)
    (tmp_path / "core" / "a.cu").rename(tmp_path / "core" / "b.cu")
    assert len({first, second, plugin_lib.source_hash(tmp_path)}) == 3


# ------------------------------------------------------------------------------------------------
# TensorRT-RTX
# ------------------------------------------------------------------------------------------------


def test_build_info_names_the_runtime(tmp_path):
    info = plugin_lib.library_build_info(fake_library(tmp_path / "r.so", "11.1.0", runtime=RTX))
    assert info == {"tensorrt_headers": "11.1.0", "runtime": RTX, "runtime_major": "1",
                    "runtime_min_minor": "5", "cuda_runtime": "13000", "archs": "sm_90a compute_90"}


def test_tensorrt_rtx_gets_its_own_library(tree, monkeypatch):
    bundle(tree, 10, "10.3.0")
    eleven = bundle(tree, 11, "11.1.0")
    rtx_lib = rtx_bundle(tree)
    assert plugin_lib.bundled_libraries(RTX) == {1: rtx_lib}
    assert plugin_lib.bundled_libraries() == {10: tree / "_lib" / "trt10" / plugin_lib.LIB_NAME, 11: eleven}
    choice = plugin_lib.choose_plugin_library(runtime=RTX)  # none installed: the bundled one
    assert (choice.path, choice.origin, choice.runtime) == (rtx_lib, "bundled", RTX)
    assert "no TensorRT-RTX is installed" in choice.reason
    monkeypatch.setattr(plugin_lib.runtimes, "installed_rtx", lambda: ("1.7.1.116", "tensorrt-rtx"))
    monkeypatch.setattr(plugin_lib, "installed_tensorrt", lambda: ("11.4.0.106", "tensorrt"))
    choice = plugin_lib.choose_plugin_library(runtime=RTX)
    assert choice.path == rtx_lib and choice.tensorrt_version == "1.7.1.116" and choice.library_major == 1
    assert "TensorRT-RTX 1, the major version of the installed tensorrt-rtx 1.7.1.116" in choice.reason
    assert choice.to_dict()["runtime"] == RTX and choice.to_dict()["build_info"]["runtime"] == RTX
    assert plugin_lib.choose_plugin_library().path == eleven  # the default runtime is TensorRT's
    assert plugin_lib.choose_plugin_library().to_dict()["runtime"] == "tensorrt"
    assert plugin_lib.plugin_library_for_target("dcnconvert", runtime=RTX) == rtx_lib
    assert plugin_lib.find_plugin_library(runtime=RTX) == rtx_lib


def test_tensorrt_rtx_without_its_library_names_the_fix(tree):
    bundle(tree, 11, "11.1.0")
    with pytest.raises(PluginLoadError) as info:
        plugin_lib.choose_plugin_library(tensorrt_version="1.7.1.116", runtime=RTX)
    assert info.value.exit_code == 4
    assert "no plugin library for TensorRT-RTX 1 (the TensorRT-RTX in use 1.7.1.116)" in str(info.value)
    assert "`dcnconvert plugin build --runtime tensorrt-rtx`" in info.value.hint


@pytest.mark.parametrize(("version", "said"), [("1.4.0.76", "needs 1.5 or newer"),
                                                ("2.0.1", "is for TensorRT-RTX 1.x")])
def test_a_tensorrt_rtx_no_library_serves_is_refused(tree, version, said):
    rtx_bundle(tree)
    with pytest.raises(PluginLoadError, match=said) as info:
        plugin_lib.choose_plugin_library(tensorrt_version=version, runtime=RTX)
    assert info.value.exit_code == 4 and "pip install" in info.value.hint


def test_a_library_built_for_another_runtime_is_refused(tree, tmp_path, monkeypatch):
    trt11 = fake_library(tmp_path / "trt11.so", "11.1.0", runtime="tensorrt")
    with pytest.raises(PluginLoadError) as info:
        plugin_lib.choose_plugin_library(trt11, "1.7.1.116", runtime=RTX)
    assert ("was built for TensorRT 11 (headers 11.1.0), but the TensorRT-RTX in use is TensorRT-RTX "
            "1.7.1.116") in str(info.value)
    assert "`dcnconvert plugin-path --runtime tensorrt-rtx` names it" in info.value.hint
    old = fake_library(tmp_path / "old.so", "10.16.0")  # no runtime key: a TensorRT library
    with pytest.raises(PluginLoadError, match="built for TensorRT 10"):
        plugin_lib.plugin_library_for_target("dcnconvert", old, "1.7.1.116", runtime=RTX)
    rtx_lib = fake_library(tmp_path / "rtx.so", "11.1.0", runtime=RTX)
    monkeypatch.setenv(plugin_lib.ENV_VAR, str(rtx_lib))
    with pytest.raises(PluginLoadError) as info:
        plugin_lib.choose_plugin_library(tensorrt_version="11.4.0")
    assert "$DCNCONVERT_PLUGIN_LIB" in str(info.value)
    assert "built for TensorRT-RTX 1.5 or newer (TensorRT 11.1.0 headers)" in str(info.value)
    assert "`dcnconvert plugin-path` names it" in info.value.hint
    choice = plugin_lib.choose_plugin_library(tensorrt_version="1.7.1.116", runtime=RTX)
    assert (choice.path, choice.origin) == (rtx_lib.resolve(), "$DCNCONVERT_PLUGIN_LIB")
    assert choice.library_major == 1


def test_cache_entries_serve_their_own_runtime(tree):
    bundle(tree, 11, "11.1.0")
    rtx_bundle(tree)
    rtx_built = cache_entry("rtx", "1.7.1.116", "11.1.0", runtime=RTX)
    trt_built = cache_entry("trt", "11.4.0", "11.1.0")
    assert plugin_lib.choose_plugin_library(tensorrt_version="11.4.0").path == trt_built
    choice = plugin_lib.choose_plugin_library(tensorrt_version="1.6.1", runtime=RTX)
    assert (choice.path, choice.origin) == (rtx_built, "cache")
    assert "built by `dcnconvert plugin build` for TensorRT-RTX 1.7.1.116" in choice.reason
    # an entry whose library lacks its forwarding object is passed over (the bundled one is used)
    (rtx_built.parent / runtimes.RTX_FORWARD_NAME).unlink()
    choice = plugin_lib.choose_plugin_library(tensorrt_version="1.6.1", runtime=RTX)
    assert choice.origin == "bundled" and choice.path != rtx_built


def test_unknown_runtime(tree):
    with pytest.raises(UsageError, match="unknown runtime"):
        plugin_lib.choose_plugin_library(runtime="tensorrt-llm")


def test_plugin_path_command_runtime_option(tree, tmp_path):
    rtx_lib = rtx_bundle(tree)
    res = invoke("plugin-path", "--runtime", RTX, "--tensorrt-version", "1.7.1.116", "--json")
    obj = one_json(res.stdout)
    assert obj["plugin_library"] == str(rtx_lib) and obj["runtime"] == RTX and obj["origin"] == "bundled"
    assert obj["tensorrt_version"] == "1.7.1.116" and obj["library_tensorrt_major"] == 1
    res = invoke("plugin-path", "--runtime", RTX, "--plugin-lib", fake_library(tmp_path / "t.so", "10.16.0"))
    assert res.exit_code == 4 and "built for TensorRT 10" in error_lines(res)[0]
    res = invoke("plugin-path", "--runtime", "tensorrt-llm")
    assert res.exit_code == 2


@pytest.mark.parametrize("trt, rtx, version, expected", [
    (("10.16.1.11", "tensorrt-lean-cu13-bindings"), ("1.7.1.116", "tensorrt-rtx"), None, "tensorrt"),
    (None, ("1.7.1.116", "tensorrt-rtx"), None, "tensorrt-rtx"),
    (None, None, None, "tensorrt"),
    (None, None, "1.7.1.116", "tensorrt-rtx"),
    (None, ("1.7.1.116", "tensorrt-rtx"), "10.16", "tensorrt"),
])
def test_default_runtime(monkeypatch, trt, rtx, version, expected):
    """Without --runtime: the version's runtime if one is given, else TensorRT first, then TensorRT-RTX."""
    monkeypatch.setattr(plugin_lib, "installed_tensorrt", lambda: trt)
    monkeypatch.setattr(plugin_lib.runtimes, "installed_rtx", lambda: rtx)
    runtime, why = plugin_lib.default_runtime(version)
    assert runtime == expected and why
