"""Calibration (dcnconvert.quantize.calibrate): amax of inner tensors, feeds from files or random."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from dcnconvert.errors import ModelError, UsageError
from dcnconvert.quantize import calibrate
from tests.support import samples


def _relu_scale_model():
    """y = DeformConv(relu(x) * 3): an inner tensor whose amax the test knows."""
    model = samples.build("onnx.DeformConv", seed=1)
    dcn = model.graph.node[-1]
    dcn.input[0] = "x3"
    model.graph.initializer.append(helper.make_tensor("three", TensorProto.FLOAT, [], [3.0]))
    model.graph.node.insert(0, helper.make_node("Relu", ["x"], ["xr"], name="relu"))
    model.graph.node.insert(1, helper.make_node("Mul", ["xr", "three"], ["x3"], name="mul"))
    return model


def test_amax_of_inner_tensors_over_all_feeds():
    model = _relu_scale_model()
    rng = np.random.default_rng()
    feeds = [samples.input_feeds(model, int(s)) for s in rng.integers(1 << 20, size=3)]
    amax = calibrate.collect_amax(model, feeds, ["x3", "y"])
    assert amax["x3"] == pytest.approx(3 * max(float(np.maximum(f["x"], 0).max()) for f in feeds), rel=1e-6)
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert amax["y"] == pytest.approx(max(float(np.abs(sess.run(None, f)[0]).max()) for f in feeds), rel=1e-6)


def test_unknown_tensor_and_non_finite_values():
    model = samples.build("onnx.DeformConv", seed=1)
    feed = samples.input_feeds(model, 0)
    with pytest.raises(ModelError, match="not in the model"):
        calibrate.collect_amax(model, [feed], ["nope"])
    feed["x"][0, 0, 0, 0] = np.nan
    with pytest.raises(ModelError, match="NaN or Inf"):
        calibrate.collect_amax(model, [feed], ["x"])


def test_random_feeds_need_shapes_for_dynamic_inputs():
    model = samples.build("onnx.DeformConv", seed=1, dynamic=True, c=4)
    with pytest.raises(UsageError):
        calibrate.calibration_feeds(model, samples=2)
    feeds = calibrate.calibration_feeds(model, samples=2, seed=5,
                                        shapes=["x:2x4x7x9", "offset:2x18x7x9", "mask:2x9x7x9"])
    assert len(feeds) == 2 and feeds[0]["x"].shape == (2, 4, 7, 9)
    assert not np.array_equal(feeds[0]["x"], feeds[1]["x"])
    with pytest.raises(UsageError, match="at least one"):
        calibrate.calibration_feeds(model, samples=0)


def test_files_one_feed_each_or_modelopt_stacked(tmp_path):
    model = samples.build("onnx.DeformConv", seed=1)  # x [1,4,7,9], offset [1,18,7,9], mask [1,9,7,9]
    feeds = [samples.input_feeds(model, s) for s in range(3)]
    np.savez(tmp_path / "one.npz", **feeds[0])
    np.savez(tmp_path / "stacked.npz", **{k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]})
    got = calibrate.calibration_feeds(model, [tmp_path / "one.npz", tmp_path / "stacked.npz"])
    assert len(got) == 4
    for g, f in zip(got, [feeds[0]] + feeds, strict=True):
        assert all(np.array_equal(g[k], f[k]) for k in f)
    np.savez(tmp_path / "bad.npz", x=feeds[0]["x"])
    with pytest.raises(UsageError, match="bad.npz"):
        calibrate.calibration_feeds(model, [tmp_path / "bad.npz"])


def test_split_stacked_leaves_dynamic_batches_alone():
    from dcnconvert.backend.trt.profiles import InputInfo

    infos = [InputInfo("x", ("N", 4, 7, 9))]
    feed = {"x": np.zeros((6, 4, 7, 9), np.float32)}
    assert calibrate.split_stacked(infos, feed) == [feed]
    fixed = [InputInfo("x", (2, 4, 7, 9))]
    parts = calibrate.split_stacked(fixed, feed)
    assert [p["x"].shape for p in parts] == [(2, 4, 7, 9)] * 3
