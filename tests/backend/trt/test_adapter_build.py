"""The TensorRT adapter's Polygraphy glue, with Polygraphy's loaders recorded instead of run: build
flags, parsing and the engine's inputs."""

from __future__ import annotations

import types
from typing import ClassVar

import pytest

from dcnconvert.backend.trt import adapter as trt_adapter
from dcnconvert.backend.trt import builder as trt_builder
from dcnconvert.errors import BuildError

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
