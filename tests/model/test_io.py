"""onnx_io: clear load errors, atomic saves, external data round trips, skeletons."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from bad_inputs import EXPECTED, write_corpus
from onnx import helper, numpy_helper
from support import samples

from dcnconvert.errors import ModelError, OutputError
from dcnconvert.model import io as onnx_io


def _big_model(n_tensors: int = 3, size: int = 4096, seed: int = 0) -> onnx.ModelProto:
    """A chain of Adds with float initializers (each ``size`` floats) and one tiny one."""
    rng = np.random.default_rng(seed)
    inits, nodes, prev = [], [], "x"
    for i in range(n_tensors):
        inits.append(numpy_helper.from_array(rng.standard_normal(size).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Add", [prev, f"w{i}"], [f"t{i}"], name=f"add{i}"))
        prev = f"t{i}"
    inits.append(numpy_helper.from_array(np.array([1.5], np.float32), "small"))
    nodes.append(helper.make_node("Mul", [prev, "small"], ["y"], name="mul"))
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [size])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


class TestLoad:
    @pytest.mark.parametrize("case", ["truncated", "not_onnx", "missing"])
    def test_unreadable_files_give_model_error(self, tmp_path, case):
        path = write_corpus(tmp_path)[case]
        with pytest.raises(ModelError) as info:
            onnx_io.load_model(path)
        cls, words = EXPECTED[case]
        assert type(info.value).__name__ == cls
        assert all(w in str(info.value).lower() for w in words)
        assert info.value.hint

    def test_folder_is_refused(self, tmp_path):
        with pytest.raises(ModelError, match="folder"):
            onnx_io.load_model(tmp_path)

    def test_truncated_at_a_field_boundary(self, tmp_path):
        # Cut right after the graph: protobuf parses, but the opset imports are gone.
        model = samples.build("onnx.DeformConv")
        graph_only = onnx.ModelProto(ir_version=model.ir_version)
        graph_only.graph.CopyFrom(model.graph)
        path = tmp_path / "cut.onnx"
        path.write_bytes(graph_only.SerializeToString())
        with pytest.raises(ModelError, match="truncated"):
            onnx_io.load_model(path)

    def test_missing_external_data_is_model_error(self, tmp_path):
        path = tmp_path / "m.onnx"
        onnx_io.save_model(_big_model(), path, external_data=True)
        (tmp_path / "m.onnx.data").unlink()
        with pytest.raises(ModelError, match="external data"):
            onnx_io.load_model(path)

    def test_broken_graph_is_refused_on_load(self, tmp_path):
        model = _big_model()
        model.graph.node[1].input[0] = "t_gone"
        onnx.save(model, str(tmp_path / "m.onnx"))
        with pytest.raises(ModelError, match="node 'add1' \\(Add\\) reads tensor 't_gone'") as info:
            onnx_io.load_model(tmp_path / "m.onnx")
        assert info.value.node == "add1" and "t_gone" in info.value.hint
        assert onnx_io.load_model(tmp_path / "m.onnx", check=False) == model  # check=False: as onnx.load

    def test_graph_is_checked_before_the_external_data_is_read(self, tmp_path):
        model = _big_model()
        model.graph.output[0].name = "y_gone"
        onnx_io.save_model(model, tmp_path / "m.onnx", external_data=True)
        (tmp_path / "m.onnx.data").unlink()  # never read: the graph is refused first
        with pytest.raises(ModelError, match="graph output 'y_gone' is produced by no node"):
            onnx_io.load_model(tmp_path / "m.onnx")

    def test_warnings_are_logged_once_and_the_model_loads(self, tmp_path, caplog):
        model = _big_model()
        model.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "spare"))
        onnx_io.save_model(model, tmp_path / "m.onnx", external_data=True)
        with caplog.at_level("WARNING", logger="dcnconvert.model.check"):
            loaded = onnx_io.load_model(tmp_path / "m.onnx")
        assert [r.getMessage() for r in caplog.records if "'spare'" in r.getMessage()] == [
            "1 initializer(s) no node reads ('spare'); they are kept, TensorRT ignores them"]
        assert not onnx_io.uses_external_data(loaded)

    def test_name_that_is_not_utf8_is_refused_on_load(self, tmp_path):
        data = bytearray(samples.build("onnx.DeformConv").SerializeToString())
        at = data.index(b"\x0a\x06offset") + 2  # a graph input's or node input's name, in place
        data[at:at + 2] = b"\xc3\x28"
        (tmp_path / "m.onnx").write_bytes(bytes(data))
        with pytest.raises(ModelError, match="is not valid UTF-8: '\\\\xc3\\(fset'") as info:
            onnx_io.load_model(tmp_path / "m.onnx")
        assert "re-export" in info.value.hint

    def test_loading_does_not_touch_the_file(self, tmp_path):
        path = tmp_path / "m.onnx"
        onnx_io.save_model(_big_model(), path, external_data=True)
        before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
        onnx_io.load_model(path)
        after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
        assert before == after


class TestSave:
    def test_round_trip_single_file(self, tmp_path):
        model = samples.build("mmcv.MMCVModulatedDeformConv2d", seed=3)
        written = onnx_io.save_model(model, tmp_path / "m.onnx")
        assert written == [tmp_path / "m.onnx"]
        assert onnx_io.load_model(tmp_path / "m.onnx") == model
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]

    def test_external_data_chosen_by_size_and_round_trips(self, tmp_path):
        model = _big_model()
        size = onnx_io.model_size_bytes(model)
        written = onnx_io.save_model(model, tmp_path / "m.onnx", size_limit=size // 2)
        assert written == [tmp_path / "m.onnx", tmp_path / "m.onnx.data"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]
        assert onnx_io.file_uses_external_data(tmp_path / "m.onnx")
        # The .onnx holds only the small tensor; the data file holds the big ones (aligned).
        assert (tmp_path / "m.onnx").stat().st_size < size // 4
        assert (tmp_path / "m.onnx.data").stat().st_size >= 3 * 4096 * 4
        loaded = onnx_io.load_model(tmp_path / "m.onnx")
        for a, b in zip(model.graph.initializer, loaded.graph.initializer, strict=True):
            np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
        assert not onnx_io.uses_external_data(loaded)
        assert loaded.graph.node == model.graph.node

    def test_external_save_does_not_modify_the_model(self, tmp_path):
        model = _big_model()
        before = model.SerializeToString()
        onnx_io.save_model(model, tmp_path / "m.onnx", external_data=True)
        assert model.SerializeToString() == before

    def test_below_limit_stays_one_file(self, tmp_path):
        model = _big_model()
        onnx_io.save_model(model, tmp_path / "m.onnx", size_limit=onnx_io.model_size_bytes(model) + 1)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]

    def test_non_raw_tensors_go_external_too(self, tmp_path):
        model = _big_model(1)
        values = numpy_helper.to_array(model.graph.initializer[0])
        typed = helper.make_tensor("w0", onnx.TensorProto.FLOAT, values.shape, values.tolist(), raw=False)
        model.graph.initializer[0].CopyFrom(typed)
        onnx_io.save_model(model, tmp_path / "m.onnx", external_data=True)
        loaded = onnx_io.load_model(tmp_path / "m.onnx")
        np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[0]), values)

    def test_missing_folder_is_output_error(self, tmp_path):
        with pytest.raises(OutputError, match="does not exist"):
            onnx_io.save_model(_big_model(), tmp_path / "nope" / "m.onnx")

    def test_unloaded_external_data_is_refused(self, tmp_path):
        onnx_io.save_model(_big_model(), tmp_path / "m.onnx", external_data=True)
        light = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
        with pytest.raises(OutputError, match="external data"):
            onnx_io.save_model(light, tmp_path / "other.onnx")
        assert not (tmp_path / "other.onnx").exists()

    @pytest.mark.parametrize("external", [False, True])
    def test_failure_leaves_nothing(self, tmp_path, monkeypatch, external):
        calls = []

        def failing_replace(src, dst):
            calls.append((src, dst))
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(onnx_io.os, "replace", failing_replace)
        with pytest.raises(OutputError, match="No space left"):
            onnx_io.save_model(_big_model(), tmp_path / "m.onnx", external_data=external)
        assert calls, "the save never reached the rename"
        assert list(tmp_path.iterdir()) == []

    def test_failure_on_the_second_rename_removes_the_data_file(self, tmp_path, monkeypatch):
        real = os.replace

        def second_fails(src, dst):
            if str(dst).endswith(".onnx"):
                raise OSError(13, "Permission denied")
            real(src, dst)

        monkeypatch.setattr(onnx_io.os, "replace", second_fails)
        with pytest.raises(OutputError, match="Permission denied"):
            onnx_io.save_model(_big_model(), tmp_path / "m.onnx", external_data=True)
        assert list(tmp_path.iterdir()) == []

    def test_interrupted_serialisation_leaves_nothing_and_keeps_old_file(self, tmp_path, monkeypatch):
        path = tmp_path / "m.onnx"
        path.write_bytes(b"old content")

        def boom(handle_path, chunks):
            Path(handle_path).write_bytes(b"partial")
            raise KeyboardInterrupt

        monkeypatch.setattr(onnx_io, "_write_file", boom)
        with pytest.raises(KeyboardInterrupt):
            onnx_io.save_model(_big_model(), path)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
        assert path.read_bytes() == b"old content"


class TestSkeleton:
    def test_skeleton_drops_only_large_data(self):
        model = _big_model()
        light = onnx_io.skeleton(model)
        by_name = {t.name: t for t in light.graph.initializer}
        assert [t.name for t in light.graph.initializer] == [t.name for t in model.graph.initializer]
        assert by_name["w0"].data_location == onnx.TensorProto.EXTERNAL and not by_name["w0"].raw_data
        assert list(by_name["w0"].dims) == [4096]
        np.testing.assert_array_equal(numpy_helper.to_array(by_name["small"]), [1.5])
        assert light.graph.node == model.graph.node
        assert light.ByteSize() < model.ByteSize() // 10

    def test_check_skeleton(self):
        onnx_io.check_skeleton(onnx_io.skeleton(_big_model()))
        bad = _big_model()
        bad.graph.node[0].input[0] = "undefined"
        with pytest.raises(onnx.checker.ValidationError):
            onnx_io.check_skeleton(bad)

    def test_tensor_nbytes(self):
        model = _big_model()
        assert onnx_io.tensor_nbytes(model.graph.initializer[0]) == 4096 * 4
        typed = helper.make_tensor("t", onnx.TensorProto.INT64, [3], [1, 2, 3])
        assert onnx_io.tensor_nbytes(typed) == 24


class TestStreamedSave:
    def test_streamed_single_file_parses_to_the_same_model(self, tmp_path, monkeypatch):
        model = samples.build("mmcv.MMCVModulatedDeformConv2d", c=16, cout=32)
        model.graph.initializer.append(numpy_helper.from_array(np.arange(5000, dtype=np.float32), "extra"))
        monkeypatch.setattr(onnx_io, "STREAM_MIN_BYTES", 0)
        onnx_io.save_model(model, tmp_path / "m.onnx", external_data=False)
        loaded = onnx_io.load_model(tmp_path / "m.onnx")
        assert loaded == model
        assert [t.name for t in loaded.graph.initializer] == ["weight", "bias", "extra"]
        onnx.checker.check_model(str(tmp_path / "m.onnx"))

    def test_small_models_are_written_as_onnx_save_does(self, tmp_path):
        model = samples.build("onnx.DeformConv")
        onnx_io.save_model(model, tmp_path / "m.onnx")
        onnx.save(model, str(tmp_path / "ref.onnx"))
        assert (tmp_path / "m.onnx").read_bytes() == (tmp_path / "ref.onnx").read_bytes()

    def test_model_size_estimate(self):
        for model in (_big_model(), samples.build("onnx.DeformConv"), _big_model(2, 100)):
            error = abs(onnx_io.model_size_bytes(model) - model.ByteSize())
            assert error <= 64 * len(model.graph.initializer)

    def test_too_large_for_one_file(self, tmp_path, monkeypatch):
        monkeypatch.setattr(onnx_io, "PROTOBUF_LIMIT", 1000)
        with pytest.raises(OutputError, match="too large for one ONNX file"):
            onnx_io.save_model(_big_model(), tmp_path / "m.onnx", external_data=False)
        assert list(tmp_path.iterdir()) == []


class TestAtomicWrite:
    """write_atomic: the one writer of models, engines and JSON files."""

    def test_atomic_write(self, tmp_path):
        path = tmp_path / "a.engine"
        onnx_io.write_atomic(path, [b"abc"])
        onnx_io.write_atomic(path, [b"defg"])
        assert path.read_bytes() == b"defg"
        assert [p.name for p in tmp_path.iterdir()] == ["a.engine"]

    def test_atomic_write_missing_folder(self, tmp_path):
        with pytest.raises(OutputError, match="does not exist"):
            onnx_io.write_atomic(tmp_path / "no" / "a.engine", [b"x"])
