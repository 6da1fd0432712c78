"""The TensorRT adapter's version handling, with fake TensorRT 10 and 11 modules (the names it uses
are checked against the published API in test_adapter_api.py, its Polygraphy glue in
test_adapter_build.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from dcnconvert.backend.trt import adapter as trt_adapter
from dcnconvert.backend.trt import builder as trt_builder
from dcnconvert.errors import MissingDependencyError, PluginLoadError, UsageError

# ------------------------------------------------------------------------------------------------
# version handling with fake modules
# ------------------------------------------------------------------------------------------------


class _Registry:
    """A fake plugin registry that records attribute reads; removed names raise as on TensorRT 11."""

    def __init__(self, creators, removed=()):
        self._creators = creators
        self._removed = set(removed)
        self.reads = []
        self.loaded = []  # paths given to load_library
        self.on_load = []  # creators that load_library registers

    def __getattr__(self, name):
        self.reads.append(name)
        if name in self._removed:
            raise AttributeError(name)
        if name in ("get_creator", "get_plugin_creator"):

            def lookup(n, v, ns):
                return next(
                    (
                        c
                        for c in self._creators
                        if (c.name, c.plugin_version, c.plugin_namespace) == (n, v, ns)
                    ),
                    None,
                )

            return lookup
        if name == "load_library":

            def load_library(path):
                self.loaded.append(path)
                self._creators.extend(self.on_load)
                return object()

            return load_library
        if name in ("all_creators", "plugin_creator_list"):
            return list(self._creators)
        raise AttributeError(name)


def _creator(name="ModulatedDeformConv2d", version="1", namespace="dcnconvert"):
    return types.SimpleNamespace(name=name, plugin_version=version, plugin_namespace=namespace)


def fake_trt(version: str, creators=()):
    removed = {"get_plugin_creator", "plugin_creator_list"} if version.startswith("11") else set()
    registry = _Registry(list(creators), removed)
    module = types.SimpleNamespace(
        __version__=version,
        get_plugin_registry=lambda: registry,
        init_libnvinfer_plugins=lambda logger, ns: True,
    )
    return module, registry


class TestVersions:
    @pytest.mark.parametrize(
        "version, flags, strongly",
        [
            ("10.3.0", True, False),
            ("10.16.0", True, False),
            ("11.1.0", False, True),
            ("11.0.0.1", False, True),
        ],
    )
    def test_api_for(self, version, flags, strongly):
        api = trt_adapter.api_for(version)
        assert (api.precision_flags, api.always_strongly_typed) == (flags, strongly)
        assert api.creator_lookup[0] == "get_creator"
        assert ("get_plugin_creator" in api.creator_lookup) == flags

    @pytest.mark.parametrize("version", ["8.6.1", "10.2.0", "", "abc"])
    def test_unsupported(self, version):
        with pytest.raises(MissingDependencyError) as info:
            trt_adapter.api_for(version)
        assert info.value.exit_code == 4 and "10.3" in str(info.value)

    @pytest.mark.parametrize("version", ["10.16.0", "11.1.0"])
    def test_find_and_list_creators(self, version):
        trt, registry = fake_trt(version, [_creator(), _creator(version="2", namespace="")])
        assert (
            trt_adapter.find_creator(trt, "ModulatedDeformConv2d", "1", "dcnconvert").plugin_namespace
            == "dcnconvert"
        )
        assert trt_adapter.find_creator(trt, "ModulatedDeformConv2d", "3", "") is None
        assert trt_adapter.list_creators(trt) == [
            ("ModulatedDeformConv2d", "1", "dcnconvert"),
            ("ModulatedDeformConv2d", "2", ""),
        ]
        if version.startswith("11"):
            assert not {"get_plugin_creator", "plugin_creator_list"} & set(registry.reads)
        else:  # on 10 the legacy lookup is tried after get_creator misses
            assert "get_plugin_creator" in registry.reads

    @pytest.mark.parametrize("version", ["10.16.0", "11.1.0"])
    def test_load_plugins_reports_missing_creator(self, version):
        trt, _ = fake_trt(version, [_creator(version="2", namespace="")])
        with pytest.raises(PluginLoadError) as info:
            trt_adapter.load_plugins(trt, [], "ModulatedDeformConv2d", "1", "dcnconvert")
        assert info.value.exit_code == 4
        assert "v2 in namespace ''" in str(info.value)

    @pytest.mark.parametrize("version", ["10.16.0", "11.1.0"])
    def test_load_plugins_falls_back_to_load_library(self, version):
        # A library loaded before `import tensorrt` found no registry at load: the adapter hands it
        # to IPluginRegistry.load_library, which registers through its getCreators entry point.
        import ctypes.util

        lib = ctypes.util.find_library("m")
        if lib is None:
            pytest.skip("no libm to stand in for a loadable plugin library")
        trt, registry = fake_trt(version)
        registry.on_load = [_creator()]
        trt_adapter.load_plugins(trt, [Path(lib)], "ModulatedDeformConv2d", "1", "dcnconvert")
        assert registry.loaded == [lib]

    def test_load_plugins_no_fallback_when_registered(self):
        import ctypes.util

        lib = ctypes.util.find_library("m")
        if lib is None:
            pytest.skip("no libm to stand in for a loadable plugin library")
        trt, registry = fake_trt("10.16.0", [_creator()])
        trt_adapter.load_plugins(trt, [Path(lib)], "ModulatedDeformConv2d", "1", "dcnconvert")
        assert registry.loaded == []

    def test_load_plugins_bad_library(self, tmp_path):
        bad = tmp_path / "libbroken.so"
        bad.write_bytes(b"not an ELF file")
        trt, _ = fake_trt("10.16.0", [_creator()])
        with pytest.raises(PluginLoadError, match="does not load"):
            trt_adapter.load_plugins(trt, [bad], "ModulatedDeformConv2d", "1", "dcnconvert")

    def test_builder_flags_refused_on_11(self, tmp_path):
        trt, _ = fake_trt("11.1.0")
        with pytest.raises(UsageError, match="no FP16 builder flag"):
            trt_builder.build_engine_bytes(trt, (None, None, None), precision_flags={"fp16": True})

    def test_progress_monitor(self, caplog):
        class Base:
            def __init__(self):
                pass

        trt = types.SimpleNamespace(__version__="10.16.0", IProgressMonitor=Base)
        monitor = trt_builder.make_progress_monitor(trt)
        assert isinstance(monitor, Base)
        with caplog.at_level("DEBUG", logger="dcnconvert.trt"):
            monitor.phase_start("Building engine", None, 3)
            assert monitor.step_complete("Building engine", 0) is True
            monitor.phase_finish("Building engine")
        assert "Building engine (3 steps)" in caplog.text
        assert trt_builder.make_progress_monitor(types.SimpleNamespace(__version__="10.16.0")) is None


class TestLoadTensorrt:
    def test_not_installed(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "tensorrt", None)  # makes `import tensorrt` raise ImportError
        with pytest.raises(MissingDependencyError) as info:
            trt_adapter.load_tensorrt()
        assert "not installed" in str(info.value) and "pip install 'dcnconvert[trt]'" in info.value.hint
        assert trt_adapter.tensorrt_status()[0] is None

    def test_namespace_package_without_version(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))
        with pytest.raises(MissingDependencyError, match="no __version__"):
            trt_adapter.load_tensorrt()

    @pytest.mark.parametrize("version", ["10.16.0", "11.1.0"])
    def test_real_version(self, monkeypatch, version):
        module = types.ModuleType("tensorrt")
        module.__version__ = version
        monkeypatch.setitem(sys.modules, "tensorrt", module)
        assert trt_adapter.load_tensorrt() is module
        assert trt_adapter.tensorrt_status() == (version, None)

    def test_too_old(self, monkeypatch):
        module = types.ModuleType("tensorrt")
        module.__version__ = "8.6.1"
        monkeypatch.setitem(sys.modules, "tensorrt", module)
        with pytest.raises(MissingDependencyError, match="not supported"):
            trt_adapter.load_tensorrt()
