"""Verification up to and around the TensorRT run (dcnconvert.verification.runner): inputs, the ONNX Runtime
reference, Polygraphy JSON files, the comparison, and the whole flow with a fake engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from polygraphy.comparator.struct import RunResults
from polygraphy.json import from_json
from support import evaluate, samples
from support.fake_trt import FakeAdapter

from dcnconvert.backend.trt import profiles as shapes
from dcnconvert.backend.trt.engine import BuildOptions, build_engine
from dcnconvert.backend.trt.profiles import InputInfo
from dcnconvert.errors import AccuracyError, ModelError, UsageError
from dcnconvert.transform import plugin as rewrite
from dcnconvert.verification import runner as verify

FORMS_FOR_ORT = [
    "mmcv.MMCVModulatedDeformConv2d",
    "mmdeploy.MMCVDeformConv2d",
    "onnx.DeformConv",
    "paddle2onnx.DeformConv",
    "tao.ModulatedDeformConv2d",
    "centernet.DCNv2",
    "tensorrt_pro.Plugin.DCNv2",
]


def _results(outputs: dict, name: str) -> RunResults:
    results = RunResults()
    results.add([outputs], runner_name=name)
    return results


class TestInputs:
    def test_seeded_random_inputs(self):
        infos = [
            InputInfo("x", (2, 3, 4, 5)),
            InputInfo("i", (3,), TP.INT64),
            InputInfo("h", (2, 2), TP.FLOAT16),
            InputInfo("b", (4,), TP.BOOL),
        ]
        shape_map = shapes.concrete_shapes(infos)
        a = verify.make_inputs(infos, shape_map, seed=1)
        b = verify.make_inputs(infos, shape_map, seed=1)
        c = verify.make_inputs(infos, shape_map, seed=2)
        assert all(np.array_equal(a[k], b[k]) for k in a)
        assert not np.array_equal(a["x"], c["x"])
        assert a["x"].dtype == np.float32 and a["h"].dtype == np.float16 and a["i"].dtype == np.int64
        assert a["b"].dtype == bool
        assert np.all(np.abs(a["x"]) <= 1) and np.count_nonzero(a["x"]) == a["x"].size

    def test_unsupported_input_type(self):
        with pytest.raises(ModelError, match="no random data") as info:
            verify.make_inputs([InputInfo("q", (2,), TP.BFLOAT16)], {"q": (2,)})
        assert "--inputs" in info.value.hint

    @pytest.mark.parametrize("suffix", [".json", ".npz"])
    def test_round_trip(self, tmp_path, suffix):
        feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5, "k": np.array([1, 2], np.int64)}
        path = tmp_path / f"in{suffix}"
        if suffix == ".json":
            verify.save_inputs(path, feeds)
            assert isinstance(from_json(path.read_text()), list)  # Polygraphy's --load-inputs format
        else:
            np.savez(path, **feeds)
        back = verify.load_inputs(path)
        assert set(back) == set(feeds) and all(np.array_equal(back[k], feeds[k]) for k in feeds)

    def test_unreadable_inputs(self, tmp_path):
        path = tmp_path / "in.json"
        path.write_text("{not json")
        with pytest.raises(ModelError, match="cannot read inputs"):
            verify.load_inputs(path)

    def test_check_feeds(self):
        infos = [InputInfo("x", ("N", 3))]
        verify.check_feeds(infos, {"x": np.zeros((5, 3), np.float32)})
        with pytest.raises(UsageError, match="missing \\['x'\\], unknown \\['y'\\]"):
            verify.check_feeds(infos, {"y": np.zeros(3)})
        with pytest.raises(UsageError, match="has shape \\[5, 4\\]"):
            verify.check_feeds(infos, {"x": np.zeros((5, 4), np.float32)})

    def test_cast_feeds(self):
        feeds = {"x": np.ones((2,), np.float32)}
        assert verify.cast_feeds(feeds, [{"name": "x", "dtype": "float16"}])["x"].dtype == np.float16
        # "bfloat16" is what trt_adapter.engine_inputs reports; it must be refused by name, also where
        # ml_dtypes (imported here) makes np.dtype("bfloat16") valid
        pytest.importorskip("ml_dtypes")
        assert np.dtype("bfloat16").name == "bfloat16"
        with pytest.raises(UsageError, match="NumPy cannot feed") as info:
            verify.cast_feeds(feeds, [{"name": "x", "dtype": "bfloat16"}])
        assert "--io-precision fp32" in info.value.hint


@pytest.mark.parametrize("form", FORMS_FOR_ORT)
def test_reference_run_matches_numpy_reference(form, tmp_path):
    """ORT on the standard model (what verify compares against) equals the float64 NumPy reference."""
    original = samples.build(form, dynamic=True, seed=8)
    infos = shapes.model_inputs(original)
    dims = samples.sample_dims(original)
    concrete = {i.name: tuple(dims.get(d, d) if isinstance(d, str) else d for d in i.dims) for i in infos}
    feeds = verify.make_inputs(infos, concrete, seed=3)
    ref = verify.run_reference(verify.reference_model(original), [feeds])
    assert list(ref.keys()) == [verify.REFERENCE_RUNNER]
    rewritten, _ = rewrite.rewrite_model(original)
    expected = evaluate.run_model(rewritten, feeds)
    got = ref[verify.REFERENCE_RUNNER][0]
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)
    path = tmp_path / "ref.json"
    verify.save_run_results(path, ref)
    loaded = from_json(path.read_text())
    assert list(loaded.keys()) == [verify.REFERENCE_RUNNER]
    assert np.array_equal(loaded[verify.REFERENCE_RUNNER][0]["y"], got["y"])


class TestCompare:
    def _ref(self):
        rng = np.random.default_rng(0)
        return {
            "y": rng.uniform(-2, 2, (2, 3, 4)).astype(np.float32),
            "z": rng.uniform(1, 2, (5,)).astype(np.float32),
        }

    def test_pass_and_stats(self):
        ref = self._ref()
        got = {k: (v + 5e-5).astype(np.float32) for k, v in ref.items()}
        passed, rows = verify.compare(_results(got, "tensorrt"), _results(ref, "ref"), 1e-4, 1e-3)
        assert passed and [r["output"] for r in rows] == ["y", "z"]
        assert rows[0]["max_abs"] == pytest.approx(5e-5, rel=0.05) and rows[0]["mismatches"] == 0
        assert "max abs" in verify.format_rows(rows, 1e-4, 1e-3)

    def test_element_fails_only_if_both_exceeded(self):
        ref = self._ref()
        got = {k: v.copy() for k, v in ref.items()}
        got["z"][2] += 0.5  # abs 0.5 > atol and rel >= 0.25 > rtol
        passed, rows = verify.compare(_results(got, "tensorrt"), _results(ref, "ref"), 1e-4, 1e-3)
        assert not passed and rows[1]["mismatches"] == 1 and rows[0]["passed"]
        passed, _ = verify.compare(_results(got, "tensorrt"), _results(ref, "ref"), 1.0, 1e-3)
        assert passed  # within atol

    def test_fp16_outputs_compare_with_fp32_reference(self):
        ref = self._ref()
        got = {k: v.astype(np.float16) for k, v in ref.items()}
        assert verify.compare(_results(got, "tensorrt"), _results(ref, "ref"), *verify.tolerances("fp16"))[0]
        assert not verify.compare(_results(got, "tensorrt"), _results(ref, "ref"), 1e-6, 1e-6)[0]

    def test_shape_mismatch(self):
        ref = self._ref()
        got = {"y": ref["y"][:1], "z": ref["z"]}
        passed, rows = verify.compare(_results(got, "tensorrt"), _results(ref, "ref"), 1e-4, 1e-3)
        assert not passed and "shape" in rows[0]["error"]

    def test_tolerances(self):
        assert verify.tolerances("fp32") == (1e-4, 1e-3)
        assert verify.tolerances("fp16", atol=0.5) == (0.5, 1e-2)
        with pytest.raises(UsageError):
            verify.tolerances("fp8")
        with pytest.raises(UsageError):
            verify.tolerances("fp32", rtol=-1)


def test_commands():
    cmds = verify.polygraphy_commands(
        Path("out.engine"),
        Path("m.onnx"),
        plugin="$(dcnconvert plugin-path)",
        inputs_file="in.json",
        ref_file="ref.json",
        atol=0.01,
        rtol=0.02,
        engine_shapes={"x": (1, 3, 8, 8)},
    )
    assert cmds[0] == "dcnconvert reference m.onnx -o m.reference.onnx"
    assert cmds[1] == "polygraphy run m.reference.onnx --onnxrt --load-inputs in.json --save-outputs ref.json"
    assert cmds[2].startswith(
        "polygraphy run out.engine --model-type engine --trt --plugins $(dcnconvert plugin-path) "
        "--load-inputs in.json --load-outputs ref.json --atol 0.01 --rtol 0.02"
    )
    assert (
        cmds[3]
        == "trtexec --loadEngine=out.engine --staticPlugins=$(dcnconvert plugin-path) --shapes=x:1x3x8x8"
    )
    none = verify.polygraphy_commands(
        Path("a b.engine"),
        Path("m.onnx"),
        plugin=None,
        inputs_file="i.json",
        ref_file="r.json",
        atol=1,
        rtol=1,
    )
    assert "--plugins" not in none[2] and "'a b.engine'" in none[2]


class TestVerifyFlow:
    """build + verify end to end with the fake adapter (its engine runs the parsed ONNX on the CPU)."""

    def _engine(self, tmp_path, precision, version="11.1.0", dynamic=False, **kwargs):
        original = samples.build("mmcv.MMCVModulatedDeformConv2d", dynamic=dynamic, seed=6)
        rewritten, _ = rewrite.rewrite_model(original)
        fake = FakeAdapter(version, **kwargs)
        lib = tmp_path / "lib.so"
        lib.write_bytes(b"x")
        opts = BuildOptions(
            precision=precision,
            plugin_lib=lib,
            shapes=("x:2x4x7x9 offset:2x18x7x9 mask:2x9x7x9",) if dynamic else (),
        )
        engine = tmp_path / "m.engine"
        build_engine(rewritten, engine, opts, trt_adapter=fake)
        model_path = tmp_path / "m.onnx"
        onnx.save(original, str(model_path))
        return original, model_path, engine, fake, lib

    @pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
    def test_passes(self, tmp_path, precision):
        original, path, engine, fake, lib = self._engine(tmp_path, precision)
        opts = verify.VerifyOptions(
            precision=precision,
            plugin_lib=lib,
            save_inputs=tmp_path / "in.json",
            save_outputs=tmp_path / "ref.json",
            print_commands=True,
        )
        payload = verify.verify_engine(engine, original, path, opts, trt_adapter=fake)
        assert payload["passed"] and payload["comparison"][0]["output"] == "y"
        if precision != "fp32":
            assert payload["comparison"][0]["max_abs"] > 0  # really computed in low precision
        assert set(payload["outputs"]) == {"inputs", "reference_outputs"}
        assert f"--plugins {lib}" in payload["commands"][2]
        assert list(from_json((tmp_path / "ref.json").read_text()).keys()) == [verify.REFERENCE_RUNNER]

    def test_dynamic_engine_uses_profile_shapes(self, tmp_path):
        original, path, engine, fake, lib = self._engine(tmp_path, "fp32", dynamic=True)
        payload = verify.verify_engine(
            engine, original, path, verify.VerifyOptions(plugin_lib=lib), trt_adapter=fake
        )
        assert payload["comparison"][0]["shape"] == [2, 6, 7, 9]

    def test_mismatch_raises_with_payload(self, tmp_path):
        original, path, engine, fake, lib = self._engine(tmp_path, "fp32", noise=1e-2)
        with pytest.raises(AccuracyError) as info:
            verify.verify_engine(
                engine, original, path, verify.VerifyOptions(plugin_lib=lib), trt_adapter=fake
            )
        assert info.value.exit_code == 3
        assert info.value.payload["passed"] is False and info.value.payload["comparison"][0]["mismatches"] > 0

    def test_missing_engine(self, tmp_path):
        with pytest.raises(UsageError, match="does not exist"):
            verify.verify_engine(
                tmp_path / "none.engine",
                None,
                tmp_path / "m.onnx",
                verify.VerifyOptions(),
                trt_adapter=FakeAdapter(),
            )


class TestPrepareReference:
    """Everything before TensorRT, on its own: given inputs, saved files, shapes for dynamic models."""

    def test_given_inputs_and_saved_files(self, tmp_path):
        model = samples.build("centernet.DCNv2", seed=5)
        feeds = samples.input_feeds(model, seed=2)
        np.savez(tmp_path / "in.npz", **feeds)
        opts = verify.VerifyOptions(
            inputs=tmp_path / "in.npz", save_inputs=tmp_path / "in.json", save_outputs=tmp_path / "ref.json"
        )
        got_feeds, ref, written = verify.prepare_reference(model, opts)
        assert all(np.array_equal(got_feeds[k], feeds[k]) for k in feeds)
        assert written == {
            "inputs": str(tmp_path / "in.json"),
            "reference_outputs": str(tmp_path / "ref.json"),
        }
        rewritten, _ = rewrite.rewrite_model(model)
        np.testing.assert_allclose(
            ref[verify.REFERENCE_RUNNER][0]["y"],
            evaluate.run_model(rewritten, feeds)["y"],
            rtol=1e-5,
            atol=1e-5,
        )
        assert set(verify.load_inputs(tmp_path / "in.json")) == set(feeds)

    def test_dynamic_model_needs_shapes(self):
        model = samples.build("mmcv.MMCVDeformConv2d", dynamic=True, seed=5)
        with pytest.raises(UsageError, match="dynamic inputs without shapes"):
            verify.prepare_reference(model, verify.VerifyOptions())
        opts = verify.VerifyOptions(shapes=("x:3x4x7x9 offset:3x18x7x9",), seed=1)
        feeds, ref, _ = verify.prepare_reference(model, opts)
        assert feeds["x"].shape == (3, 4, 7, 9) and ref[verify.REFERENCE_RUNNER][0]["y"].shape[0] == 3

    def test_reference_that_onnxruntime_cannot_run(self):
        model = samples.build("centernet.DCNv2", seed=5)
        out = model.graph.output[0].name
        model.graph.node.append(onnx.helper.make_node("Unknown", [out], ["z"], domain="custom", name="u"))
        model.opset_import.append(onnx.helper.make_opsetid("custom", 1))
        model.graph.output[0].name = "z"
        with pytest.raises(ModelError, match="ONNX Runtime .* cannot run the reference model") as info:
            verify.prepare_reference(model, verify.VerifyOptions())
        assert "custom:Unknown" in str(info.value) and info.value.exit_code == 1

    def test_inputs_that_do_not_fit(self, tmp_path):
        model = samples.build("centernet.DCNv2", seed=5)
        np.savez(tmp_path / "in.npz", x=np.zeros((1, 4, 7, 9), np.float32))
        with pytest.raises(UsageError, match="missing"):
            verify.prepare_reference(model, verify.VerifyOptions(inputs=tmp_path / "in.npz"))
