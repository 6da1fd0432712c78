"""The TensorRT adapter: version handling (fake TensorRT 10 and 11 modules) and a check of every TensorRT
name it uses against the TensorRT 10.x Python API published in the ``tensorrt-stubs`` wheel.

The stubs come from ``$DCNCONVERT_TRT_STUBS_DIR`` (a folder holding ``tensorrt/__init__.pyi`` and
``tensorrt_bindings/tensorrt.pyi``, e.g. filled by ``.ci/run``) or are installed here with
``pip install --no-deps --target <tmp> tensorrt-stubs==10.13.0.35.1``. They are read as text, never
imported (installed on ``sys.path`` they would turn ``import tensorrt`` into an empty namespace package).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import ClassVar

import pytest

from dcnconvert.backend.trt import adapter as trt_adapter
from dcnconvert.backend.trt import builder as trt_builder
from dcnconvert.errors import BuildError, MissingDependencyError, PluginLoadError, UsageError

STUBS_VERSION = "10.13.0.35.1"
STUBS_ENV = "DCNCONVERT_TRT_STUBS_DIR"
ADAPTER_SOURCE = Path(trt_adapter.__file__).read_text() + "\n" + Path(trt_builder.__file__).read_text()
#: TRT_API names that Polygraphy uses on our behalf (CreateConfig(fp16/bf16), strongly_typed networks).
THROUGH_POLYGRAPHY = {"BuilderFlag.FP16", "BuilderFlag.BF16", "NetworkDefinitionCreationFlag.STRONGLY_TYPED"}


# ------------------------------------------------------------------------------------------------
# the tensorrt-stubs API, read as text
# ------------------------------------------------------------------------------------------------


class StubApi:
    """Module-level names and class members (with bases) parsed tolerantly from .pyi text."""

    def __init__(self, init_text: str, bindings_text: str):
        self.version = None
        self.top: set[str] = set()
        self.classes: dict[str, tuple[set[str], tuple[str, ...]]] = {}
        self._read_top(init_text)
        self._read_top(bindings_text)
        self._read_classes(bindings_text)

    def _read_top(self, text: str) -> None:
        for line in text.splitlines():
            m = re.match(r"^from \S+ import (\w+)(?: as (\w+))?", line)
            if m:
                self.top.add(m.group(2) or m.group(1))
                continue
            m = re.match(r"^(?:def|class) (\w+)", line) or re.match(r"^(\w+)\s*[:=]", line)
            if m:
                self.top.add(m.group(1))
            m = re.match(r"^__version__\s*:\s*str\s*=\s*'([^']+)'", line)
            if m:
                self.version = m.group(1)

    def _read_classes(self, text: str) -> None:
        stack = []  # (indent, qualified name)
        in_doc = False
        for line in text.splitlines():
            quotes = line.count('"""')
            if in_doc:
                in_doc = quotes % 2 == 0
                continue
            if quotes % 2 == 1:
                in_doc = True
            stripped = line.strip()
            if not stripped or stripped.startswith(("#", '"""', "@")):
                continue
            indent = len(line) - len(line.lstrip())
            while stack and indent <= stack[-1][0]:
                stack.pop()
            m = re.match(r"class (\w+)(?:\((.*)\))?\s*:", stripped)
            if m:
                name = m.group(1) if not stack else f"{stack[-1][1]}.{m.group(1)}"
                bases = tuple(b.strip().split(".")[-1] for b in (m.group(2) or "").split(",") if b.strip())
                self.classes.setdefault(name, (set(), bases))
                if stack and indent == stack[-1][0] + 4:
                    self.classes[stack[-1][1]][0].add(m.group(1))
                stack.append((indent, name))
                continue
            if stack and indent == stack[-1][0] + 4:
                m = re.match(r"def (\w+)\s*\(", stripped) or re.match(r"(\w+)\s*[:=]", stripped)
                if m:
                    self.classes[stack[-1][1]][0].add(m.group(1))

    def has_member(self, cls: str, member: str) -> bool:
        seen = set()
        todo = [cls]
        while todo:
            name = todo.pop()
            if name in seen or name not in self.classes:
                continue
            seen.add(name)
            members, bases = self.classes[name]
            if member in members:
                return True
            todo.extend(bases)
        return False

    def resolve(self, path: str) -> bool:
        """Whether ``A`` / ``A.B`` / ``A.B.C`` exists (classes, nested classes, members, inherited)."""
        parts = path.split(".")
        if parts[0] not in self.top:
            return False
        current = parts[0]
        for part in parts[1:]:
            if current is None or not self.has_member(current, part):
                return False
            nested = f"{current}.{part}"
            current = nested if nested in self.classes else (part if part in self.classes else None)
        return True


@pytest.fixture(scope="session")
def stub_api(tmp_path_factory) -> StubApi:
    folder = os.environ.get(STUBS_ENV)
    if folder:
        root = Path(folder)
    else:
        root = tmp_path_factory.mktemp("trt_stubs")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--disable-pip-version-check",
            "--quiet",
            "--target",
            str(root),
            f"tensorrt-stubs=={STUBS_VERSION}",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=180)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(
                f"could not download tensorrt-stubs {STUBS_VERSION} from PyPI ({exc}); "
                f"set {STUBS_ENV} to an unpacked copy"
            )
        if proc.returncode != 0:
            pytest.skip(
                f"could not download tensorrt-stubs {STUBS_VERSION} from PyPI "
                f"(pip: {proc.stderr.strip()[-300:]}); set {STUBS_ENV} to an unpacked copy"
            )
    init = root / "tensorrt" / "__init__.pyi"
    bindings = root / "tensorrt_bindings" / "tensorrt.pyi"
    if not (init.is_file() and bindings.is_file()):
        pytest.fail(f"{root} does not hold tensorrt/__init__.pyi and tensorrt_bindings/tensorrt.pyi")
    return StubApi(init.read_text(), bindings.read_text())


# ------------------------------------------------------------------------------------------------
# the names the adapter uses, read from its source
# ------------------------------------------------------------------------------------------------


def _chain(node: ast.AST):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return list(reversed(parts))
    return None


def used_names() -> set[str]:
    """Every TensorRT name the adapter's source uses (see the module docstring of trt_adapter)."""
    tree = ast.parse(ADAPTER_SOURCE)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    used: set[str] = set()

    def add(parts):
        root, rest = parts[0], parts[1:]
        if root == "trt" and rest:
            used.add(".".join(rest))
        elif root in trt_adapter.TRT_OBJECTS and rest:
            used.add(".".join([trt_adapter.TRT_OBJECTS[root]] + rest[:1]))

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            parts = _chain(node)
            if parts:
                add(parts)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            parts = _chain(node.args[0])
            if parts:
                add(parts + [node.args[1].value])
        elif isinstance(node, ast.ClassDef) and node.name == "_ProgressMonitor":
            used.update(
                f"IProgressMonitor.{f.name}"
                for f in node.body
                if isinstance(f, ast.FunctionDef) and not f.name.startswith("__")
            )
    for version in ("10.16.0", "11.1.0"):
        api = trt_adapter.api_for(version)
        used.update(f"IPluginRegistry.{m}" for m in api.creator_lookup + api.creator_listing)
    return used


class TestNamesAgainstStubs:
    def test_stubs_are_tensorrt_10(self, stub_api):
        assert stub_api.version and stub_api.version.startswith("10.")
        # the parser finds what it must (guards against a parser that accepts everything or nothing)
        assert stub_api.resolve("BuilderFlag.FP16") and stub_api.resolve("IPluginRegistry.get_creator")
        assert stub_api.resolve("Logger.WARNING") and stub_api.resolve("ILogger.Severity.WARNING")
        assert not stub_api.resolve("BuilderFlag.FP17") and not stub_api.resolve("NoSuchThing")
        assert not stub_api.resolve("IPluginRegistry.getCreator")

    def test_table_lists_every_name_the_source_uses(self):
        used = used_names()
        assert used - set(trt_adapter.TRT_API) == set(), "used but missing from TRT_API"
        assert set(trt_adapter.TRT_API) - used <= THROUGH_POLYGRAPHY, "TRT_API lists names nothing uses"

    def test_every_tensorrt_10_name_exists_in_the_stubs(self, stub_api):
        missing = [
            name
            for name, majors in trt_adapter.TRT_API.items()
            if 10 in majors and not stub_api.resolve(name)
        ]
        assert missing == []

    def test_no_removed_name_on_the_tensorrt_11_path(self):
        on_11 = {name for name, majors in trt_adapter.TRT_API.items() if 11 in majors}
        assert on_11 & trt_adapter.TRT11_REMOVED == set()
        api = trt_adapter.api_for("11.1.0")
        assert {f"IPluginRegistry.{m}" for m in api.creator_lookup + api.creator_listing} <= on_11

    def test_polygraphy_uses_the_names_listed_for_it(self):
        import importlib

        config = importlib.import_module("polygraphy.backend.trt.config")
        loader = importlib.import_module("polygraphy.backend.trt.loader")
        config_src, loader_src = Path(config.__file__).read_text(), Path(loader.__file__).read_text()
        assert '"FP16"' in config_src and '"BF16"' in config_src
        assert "NetworkDefinitionCreationFlag.STRONGLY_TYPED" in loader_src

    def test_tensorrt_is_imported_only_by_the_adapter(self):
        package = Path(trt_adapter.__file__).parents[2]  # dcnconvert/
        adapter = Path(trt_adapter.__file__)
        offenders = []
        for path in package.rglob("*.py"):
            if path == adapter:
                continue
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                if any(n == "tensorrt" or n.startswith("tensorrt.") for n in names):
                    offenders.append(path.name)
        assert offenders == []


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


# ------------------------------------------------------------------------------------------------
# the Polygraphy glue, with Polygraphy's loaders recorded instead of run
# ------------------------------------------------------------------------------------------------


class _Recorder:
    """Stands in for EngineBytesFromNetwork: records what it was given; calling it returns bytes."""

    calls: ClassVar[list] = []
    error: ClassVar[Exception | None] = None

    def __init__(self, network, config=None, save_timing_cache=None):
        self.network, self.config, self.save_timing_cache = network, config, save_timing_cache
        _Recorder.calls.append(self)

    def __call__(self):
        if _Recorder.error is not None:
            raise _Recorder.error
        return b"serialized-engine"


@pytest.fixture
def recorder(monkeypatch):
    import polygraphy.backend.trt as poly_trt

    _Recorder.calls, _Recorder.error = [], None
    monkeypatch.setattr(poly_trt, "EngineBytesFromNetwork", _Recorder)
    return _Recorder


class TestBuildGlue:
    def _trt(self, version):
        class Monitor:
            def __init__(self):
                pass

        return types.SimpleNamespace(
            __version__=version,
            IProgressMonitor=Monitor,
            MemoryPoolType=types.SimpleNamespace(WORKSPACE="WORKSPACE"),
        )

    def test_tensorrt_10_builder_flags(self, recorder, tmp_path):
        cache = tmp_path / "cache.bin"
        cache.write_bytes(b"old")
        parsed = ("builder", "network", "parser")
        data = trt_builder.build_engine_bytes(
            self._trt("10.16.0"),
            parsed,
            precision_flags={"fp16": True},
            tf32=True,
            workspace=2**30,
            builder_optimization_level=4,
            timing_cache=cache,
            profiles=[{"x": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}],
        )
        assert data == b"serialized-engine"
        (call,) = recorder.calls
        config = call.config
        assert config.fp16 is True and config.bf16 is False and config.tf32 is True
        assert config.memory_pool_limits == {"WORKSPACE": 2**30} and config.builder_optimization_level == 4
        assert config.timing_cache_path == str(cache) and call.save_timing_cache == str(cache)
        assert config.progress_monitor is not None
        (profile,) = config.profiles
        assert [list(v) for v in profile["x"]] == [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]
        assert call.network == parsed

    def test_no_flags_no_cache_no_monitor(self, recorder, tmp_path):
        trt_builder.build_engine_bytes(self._trt("11.1.0"), (None, None, None),
                                       timing_cache=tmp_path / "new.cache", progress=False)
        (call,) = recorder.calls
        assert call.config.fp16 is False and call.config.bf16 is False
        assert call.config.timing_cache_path is None and call.save_timing_cache == str(tmp_path / "new.cache")
        assert call.config.progress_monitor is None

    def test_polygraphy_error_becomes_build_error(self, recorder, tmp_path):
        from polygraphy.exception import PolygraphyException

        from dcnconvert.errors import BuildError

        recorder.error = PolygraphyException("Could not build: out of memory")
        with pytest.raises(BuildError, match="out of memory") as info:
            trt_builder.build_engine_bytes(self._trt("10.16.0"), (None, None, None))
        assert "-v" in info.value.hint and info.value.exit_code == 1


class _Parser:
    """A fake OnnxParser: fails with the given errors, or succeeds."""

    def __init__(self, errors):
        self.errors = errors

    def parse_from_file(self, path):
        self.path = path
        return not self.errors

    @property
    def num_errors(self):
        return len(self.errors)

    def get_error(self, index):
        name, op, desc = self.errors[index]
        return types.SimpleNamespace(node_name=lambda: name, node_operator=lambda: op, desc=lambda: desc)


class TestParse:
    @pytest.fixture
    def networks(self, monkeypatch):
        import polygraphy.backend.trt as poly_trt

        made = []

        class CreateNetwork:
            def __init__(self, strongly_typed=False):
                made.append(strongly_typed)

            def __call__(self):
                return "builder", "network"

        monkeypatch.setattr(poly_trt, "CreateNetwork", CreateNetwork)
        monkeypatch.setattr(trt_builder, "_trt_logger", lambda: "logger")
        return made

    def _trt(self, version, errors=()):
        parser = _Parser(list(errors))
        return types.SimpleNamespace(__version__=version, OnnxParser=lambda net, logger: parser), parser

    @pytest.mark.parametrize("version, expect_flag", [("10.16.0", True), ("11.1.0", False)])
    def test_graph_cast_strongly_typed(self, networks, tmp_path, version, expect_flag):
        trt, parser = self._trt(version)
        assert trt_builder.parse_onnx(trt, tmp_path / "m.onnx", strongly_typed=True) == \
            ("builder", "network", parser)
        # TensorRT 11 networks are always strongly typed: the deprecated flag is not asked for there
        assert networks == [expect_flag] and parser.path == str(tmp_path / "m.onnx")

    def test_parser_errors_name_the_node(self, networks, tmp_path):
        trt, _ = self._trt("10.16.0", [("dcn7", "ModulatedDeformConv2d", "Plugin not found")])
        expected = "node 'dcn7' \\(ModulatedDeformConv2d\\): Plugin not found"
        with pytest.raises(BuildError, match=expected) as info:
            trt_builder.parse_onnx(trt, tmp_path / "m.onnx")
        assert info.value.node == "dcn7" and info.value.exit_code == 1 and "plugin-path" in info.value.hint


class TestEngineInputs:
    def test_reads_io_and_profile(self, monkeypatch, tmp_path):
        from polygraphy.datatype import DataType

        class Engine:
            num_io_tensors = 4
            num_optimization_profiles = 1
            names: ClassVar[list] = ["x", "s", "h", "y"]
            modes: ClassVar[dict] = {"x": "IN", "s": "IN", "h": "IN", "y": "OUT"}
            dtypes: ClassVar[dict] = {
                "x": DataType.FLOAT32,
                "s": DataType.INT64,
                "h": DataType.FLOAT16,
                "y": DataType.FLOAT32,
            }
            shapes: ClassVar[dict] = {"x": [-1, 3, -1, -1], "s": [2], "h": [1, 2], "y": [-1, 5]}

            def get_tensor_name(self, i):
                return self.names[i]

            def get_tensor_mode(self, name):
                return self.modes[name]

            def get_tensor_dtype(self, name):
                return self.dtypes[name]

            def get_tensor_shape(self, name):
                return self.shapes[name]

            def get_tensor_profile_shape(self, name, index):
                assert index == 0
                return [[1, 3, 8, 8], [2, 3, 16, 16], [4, 3, 32, 32]]

        monkeypatch.setattr(trt_adapter, "_engine_loader", lambda path, libs: lambda: Engine())
        trt = types.SimpleNamespace(__version__="11.1.0", TensorIOMode=types.SimpleNamespace(INPUT="IN"))
        got = trt_adapter.engine_inputs(trt, tmp_path / "m.engine")
        assert got == [
            {
                "name": "x",
                "dtype": "float32",
                "shape": [-1, 3, -1, -1],
                "profile0": [[1, 3, 8, 8], [2, 3, 16, 16], [4, 3, 32, 32]],
            },
            {"name": "s", "dtype": "int64", "shape": [2], "profile0": None},
            {"name": "h", "dtype": "float16", "shape": [1, 2], "profile0": None},
        ]
        Engine.dtypes["h"] = DataType.BFLOAT16
        assert trt_adapter.engine_inputs(trt, tmp_path / "m.engine")[2]["dtype"] == "bfloat16"
