"""Finding the plugin library (dcnconvert.plugin_lib)."""

from __future__ import annotations

import pytest

from dcnconvert import plugin_lib, schema
from dcnconvert.errors import PluginLoadError


@pytest.fixture
def fake_bundle(tmp_path, monkeypatch):
    """Point the bundled location at a temporary folder (absent file by default)."""
    lib = tmp_path / "_lib" / plugin_lib.LIB_NAME
    monkeypatch.setattr(plugin_lib, "bundled_path", lambda: lib)
    monkeypatch.delenv(plugin_lib.ENV_VAR, raising=False)
    return lib


def test_bundled_path_is_inside_the_package():
    path = plugin_lib.bundled_path()
    assert path.name == "libdcnconvert_plugin.so"
    assert path.parent.name == "_lib" and path.parent.parent.name == "dcnconvert"


def test_missing_bundled_library_has_make_hint(fake_bundle):
    with pytest.raises(PluginLoadError) as info:
        plugin_lib.find_plugin_library()
    assert info.value.exit_code == 4
    assert str(fake_bundle) in str(info.value) and "make plugin" in info.value.hint


def test_order_override_env_bundled(fake_bundle, tmp_path, monkeypatch):
    fake_bundle.parent.mkdir()
    fake_bundle.write_bytes(b"\x7fELF")
    assert plugin_lib.find_plugin_library() == fake_bundle.resolve()
    env_lib = tmp_path / "env.so"
    env_lib.write_bytes(b"\x7fELF")
    monkeypatch.setenv(plugin_lib.ENV_VAR, str(env_lib))
    assert plugin_lib.find_plugin_library() == env_lib.resolve()
    given = tmp_path / "given.so"
    given.write_bytes(b"\x7fELF")
    assert plugin_lib.find_plugin_library(given) == given.resolve()


@pytest.mark.parametrize("source", ["override", "env"])
def test_missing_explicit_library(fake_bundle, tmp_path, monkeypatch, source):
    missing = tmp_path / "nope.so"
    if source == "env":
        monkeypatch.setenv(plugin_lib.ENV_VAR, str(missing))
    with pytest.raises(PluginLoadError, match="does not exist") as info:
        plugin_lib.find_plugin_library(missing if source == "override" else None)
    assert str(missing) in str(info.value)


def test_targets(fake_bundle, tmp_path):
    assert plugin_lib.plugin_library_for_target(schema.TARGET_TRT_BUILTIN.name) is None
    with pytest.raises(PluginLoadError):
        plugin_lib.plugin_library_for_target("dcnconvert")
    given = tmp_path / "x.so"
    given.write_bytes(b"\x7fELF")
    assert plugin_lib.plugin_library_for_target(schema.TARGET_TRT_BUILTIN, given) == given.resolve()
    assert plugin_lib.plugin_library_for_target("dcnconvert", given) == given.resolve()
