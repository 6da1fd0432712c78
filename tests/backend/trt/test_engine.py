"""Engine building up to the TensorRT call (dcnconvert.backend.trt.engine), with the fake TensorRT
adapter of tests/support/fake_trt.py."""

from __future__ import annotations

import types
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as TP
from support import samples
from support.fake_trt import FakeAdapter

from dcnconvert import schema
from dcnconvert.backend.trt import adapter as trt_adapter
from dcnconvert.backend.trt import engine as build
from dcnconvert.backend.trt.engine import BuildOptions
from dcnconvert.errors import BuildError, MissingDependencyError, UsageError
from dcnconvert.transform import plugin as rewrite


@pytest.fixture
def plugin_file(tmp_path, monkeypatch):
    lib = tmp_path / "libdcnconvert_plugin.so"
    lib.write_bytes(b"\x7fELF fake")
    monkeypatch.setenv("DCNCONVERT_PLUGIN_LIB", str(lib))
    return lib


def _rewritten(form="mmcv.MMCVModulatedDeformConv2d", dynamic=False):
    model, _ = rewrite.rewrite_model(samples.build(form, dynamic=dynamic, seed=4))
    return model


def _weight(model) -> onnx.TensorProto:
    """The DCN weight: embedded in the plugin node (the default rewrite) or the initializer ``weight``."""
    for node in model.graph.node:
        for attr in node.attribute:
            if node.op_type == schema.PLUGIN_NAME and attr.name == schema.ATTR_WEIGHT:
                return attr.t
    return next(i for i in model.graph.initializer if i.name == "weight")


class TestOptions:
    @pytest.mark.parametrize(
        "text, value",
        [
            ("1G", 2**30),
            ("512M", 512 * 2**20),
            ("64KiB", 65536),
            ("1.5g", int(1.5 * 2**30)),
            ("1048576", 2**20),
            ("2 GB", 2 * 2**30),
        ],
    )
    def test_parse_size(self, text, value):
        assert build.parse_size(text) == value

    @pytest.mark.parametrize("text", ["", "G", "1X", "-1G", "0", "1e9"])
    def test_parse_size_errors(self, text):
        with pytest.raises(UsageError):
            build.parse_size(text)

    @pytest.mark.parametrize(
        "precision, requested, version, io, path",
        [
            ("fp32", "auto", "10.16.0", None, "none"),
            ("fp16", "auto", "10.16.0", None, "builder-flag"),
            ("bf16", "auto", "10.16.0", None, "builder-flag"),
            ("fp16", "auto", "10.16.0", "fp16", "graph-cast"),
            ("fp16", "graph-cast", "10.16.0", None, "graph-cast"),
            ("fp16", "auto", "11.1.0", None, "graph-cast"),
            ("bf16", "auto", "11.1.0", None, "graph-cast"),
        ],
    )
    def test_precision_path(self, precision, requested, version, io, path):
        assert build.resolve_precision_path(precision, requested, trt_adapter.api_for(version), io) == path

    def test_builder_flag_refused_on_11(self):
        with pytest.raises(UsageError, match="no FP16 builder flag"):
            build.resolve_precision_path("fp16", "builder-flag", trt_adapter.api_for("11.1.0"))

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"precision": "int8"}, "--precision"),
            ({"io_precision": "fp16"}, "needs --precision fp16 or bf16"),
            ({"precision": "fp16", "io_precision": "bf16"}, "does not match"),
            ({"precision": "fp16", "io_precision": "fp16", "precision_path": "builder-flag"}, "graph-cast"),
            ({"builder_optimization_level": 7}, "0..5"),
            ({"target": "other"}, "--target"),
        ],
    )
    def test_validate(self, kwargs, message):
        with pytest.raises(UsageError, match=message):
            BuildOptions(**kwargs).validate()


class TestPrepare:
    def test_profiles_and_cast(self):
        model = _rewritten(dynamic=True)
        opts = BuildOptions(precision="fp16", shapes=("x:2x4x7x9", "offset:2x18x7x9 mask:2x9x7x9"))
        parsed, profiles, report = build.prepare_model(model, opts, "graph-cast")
        assert profiles[0].shapes["x"][1] == (2, 4, 7, 9)
        assert report.plugin_nodes == 1 and report.precision == "fp16"
        assert _weight(parsed).data_type == TP.FLOAT16 and report.converted_embedded == 2  # weight, bias

    def test_dynamic_without_shapes(self):
        with pytest.raises(UsageError, match="dynamic inputs without shapes: x"):
            build.prepare_model(_rewritten(dynamic=True), BuildOptions(), "none")

    def test_keep_fp32_values(self):
        model = _rewritten()
        with pytest.raises(UsageError, match="neither an op type nor a node name"):
            build.prepare_model(model, BuildOptions(precision="fp16", keep_fp32=("Nope",)), "graph-cast")
        with pytest.raises(UsageError, match="graph-cast precision path only"):
            build.prepare_model(model, BuildOptions(precision="fp16", keep_fp32=("dcn0",)), "builder-flag")
        parsed, _, report = build.prepare_model(
            model, BuildOptions(precision="fp16", keep_fp32=(schema.PLUGIN_NAME,)), "graph-cast"
        )
        assert report.plugin_nodes == 1 and [k["op"] for k in report.kept_fp32] == [schema.PLUGIN_NAME]
        assert _weight(parsed).data_type == TP.FLOAT  # the kept plugin reads its weight in FP32
        assert report.converted_embedded == 0

    def test_cast_warnings(self):
        report = types.SimpleNamespace(
            clamped_values=2,
            clamped_initializers=["w"],
            precision="bf16",
            kept_fp32=[{"node": "c", "op": "Conv", "reason": "ONNX Conv at opset 19 does not accept"}],
        )
        text = " ".join(build.cast_warnings(report))
        assert "clamped" in text and "Conv" in text and "opset" in text
        assert build.cast_warnings(None) == []


class TestBuildEngine:
    def test_no_tensorrt_here(self, plugin_file, no_engine_runtime):
        with pytest.raises(MissingDependencyError) as info:
            build.build_engine(_rewritten(), Path("never.engine"), BuildOptions())
        assert info.value.exit_code == 4 and "pip install 'dcnconvert[trt]'" in info.value.hint
        assert "pip install 'dcnconvert[rtx]'" in info.value.hint
        assert not Path("never.engine").exists()

    @pytest.mark.parametrize(
        "version, precision, path, flags, strongly, low",
        [
            ("10.16.0", "fp32", "none", None, False, TP.FLOAT),
            ("10.16.0", "fp16", "builder-flag", {"fp16": True}, False, TP.FLOAT),
            ("10.16.0", "bf16", "builder-flag", {"bf16": True}, False, TP.FLOAT),
            ("11.1.0", "fp16", "graph-cast", None, True, TP.FLOAT16),
            ("11.1.0", "bf16", "graph-cast", None, True, TP.BFLOAT16),
        ],
    )
    def test_precision_paths(self, tmp_path, plugin_file, version, precision, path, flags, strongly, low):
        fake = FakeAdapter(version)
        out = tmp_path / "m.engine"
        cache = tmp_path / "cache.bin"
        opts = BuildOptions(
            precision=precision, workspace=2**30, builder_optimization_level=2, timing_cache=cache
        )
        payload = build.build_engine(_rewritten(), out, opts, trt_adapter=fake)
        assert payload["precision_path"] == path and payload["tensorrt_version"] == version
        call = fake.build_calls[0]
        assert call["precision_flags"] == flags and call["strongly_typed"] is strongly
        assert (
            call["workspace"] == 2**30
            and call["builder_optimization_level"] == 2
            and call["timing_cache"] == cache
        )
        assert _weight(call["model"]).data_type == low
        assert out.read_bytes() == fake.last_bytes
        assert fake.loaded == [([plugin_file.resolve()], schema.PLUGIN_NAME, "1", "dcnconvert", False)]
        assert payload["outputs"]["engine"] == str(out) and payload["plugin_library"] == str(
            plugin_file.resolve()
        )
        assert set(payload["timings"]) >= {"build", "save"}
        assert (payload["cast"] is not None) == (path == "graph-cast")

    def test_trt_builtin_needs_no_library(self, tmp_path, monkeypatch):
        monkeypatch.delenv("DCNCONVERT_PLUGIN_LIB", raising=False)
        fake = FakeAdapter("10.16.0")
        model, _ = rewrite.rewrite_model(samples.build("onnx.DeformConv", seed=1), "trt-builtin")
        payload = build.build_engine(
            model, tmp_path / "b.engine", BuildOptions(target="trt-builtin"), trt_adapter=fake
        )
        assert fake.loaded == [([], schema.PLUGIN_NAME, "2", "", True)]
        assert payload["plugin_library"] is None

    def test_failed_build_leaves_no_file(self, tmp_path, plugin_file):
        out = tmp_path / "m.engine"
        with pytest.raises(BuildError):
            build.build_engine(_rewritten(), out, BuildOptions(), trt_adapter=FakeAdapter(fail_build=True))
        assert list(tmp_path.iterdir()) == [plugin_file]

    def test_profiles_passed(self, tmp_path, plugin_file):
        fake = FakeAdapter("11.1.0")
        opts = BuildOptions(
            min_shapes=("x:1x4x7x9 offset:1x18x7x9 mask:1x9x7x9",),
            max_shapes=("x:4x4x14x18 offset:4x18x14x18 mask:4x9x14x18",),
        )
        payload = build.build_engine(_rewritten(dynamic=True), tmp_path / "d.engine", opts, trt_adapter=fake)
        assert fake.build_calls[0]["profiles"][0]["x"] == ((1, 4, 7, 9), (4, 4, 14, 18), (4, 4, 14, 18))
        assert payload["profiles"][0]["x"]["opt"] == [4, 4, 14, 18]
