"""Weights embedded in plugin nodes (TENSOR attributes) in skeletons, sizes, external-data and streamed
saves, the deferred external-data load, and the opset conversion that holds them aside."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from support import samples
from support.nodes import plugin_nodes

from dcnconvert.errors import ModelError
from dcnconvert.model import io as onnx_io
from dcnconvert.model import tensors
from dcnconvert.model.opsets import raise_default_opset
from dcnconvert.transform.plugin import rewrite_model


def _embedded(c: int = 16, cout: int = 32, **params) -> onnx.ModelProto:
    out, report = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d", c=c, cout=cout, **params))
    assert report.embedded == ["dcn0"] and not out.graph.initializer
    return out


def _tensor_attrs(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    (plugin,) = plugin_nodes(model)
    return {a.name: a.t for a in plugin.attribute if a.type == onnx.AttributeProto.TENSOR}


def test_skeleton_strips_large_embedded_weights():
    model = _embedded()  # weight 32*16*3*3 floats = 18432 bytes, bias 128 bytes
    light = onnx_io.skeleton(model)
    attrs = _tensor_attrs(light)
    assert onnx_io.is_skeleton_tensor(attrs["weight"]) and not attrs["weight"].raw_data
    assert list(attrs["weight"].dims) == [32, 16, 3, 3]
    assert attrs["weight"].data_type == onnx.TensorProto.FLOAT
    assert attrs["bias"].SerializeToString() == _tensor_attrs(model)["bias"].SerializeToString()  # small
    assert light.ByteSize() < model.ByteSize() // 10
    assert not onnx_io.is_skeleton_tensor(_tensor_attrs(model)["weight"])  # the model is not modified
    zero = onnx_io.skeleton(model, 0)
    assert all(onnx_io.is_skeleton_tensor(t) for t in _tensor_attrs(zero).values())
    onnx_io.check_skeleton(zero)
    onnx_io.check_skeleton(model)


def test_skeleton_keeps_other_nodes_tensor_attributes():
    """Only plugin nodes' tensors are routed (a large Constant keeps its data: inference may read it)."""
    model = samples.build("paddle2onnx.DeformConv", cout=2048)
    light = onnx_io.skeleton(model)
    assert light.graph.node[0].SerializeToString() == model.graph.node[0].SerializeToString()


def test_model_size_counts_embedded_weights():
    for model in (_embedded(), _embedded(c=4, cout=6), samples.build("onnx.DeformConv")):
        assert abs(onnx_io.model_size_bytes(model) - model.ByteSize()) <= 64 * 3
    assert [t.name for t in tensors.routed_tensors(_embedded())] == ["weight", "bias"]


def test_external_data_save_puts_embedded_weights_in_the_data_file(tmp_path):
    model = _embedded()
    before = model.SerializeToString()
    written = onnx_io.save_model(model, tmp_path / "m.onnx", size_limit=1000)  # over the limit: external
    assert written == [tmp_path / "m.onnx", tmp_path / "m.onnx.data"]
    assert model.SerializeToString() == before
    raw = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    attrs = _tensor_attrs(raw)
    assert attrs["weight"].data_location == onnx.TensorProto.EXTERNAL
    assert {e.key: e.value for e in attrs["weight"].external_data}["location"] == "m.onnx.data"
    assert attrs["bias"].data_location == onnx.TensorProto.DEFAULT and len(attrs["bias"].raw_data) == 128
    assert (tmp_path / "m.onnx.data").stat().st_size >= 32 * 16 * 9 * 4
    assert (tmp_path / "m.onnx").stat().st_size < 4000
    back = onnx_io.load_model(tmp_path / "m.onnx")
    assert back == model  # byte-identical once loaded
    weight = numpy_helper.to_array(_tensor_attrs(back)["weight"])
    assert np.abs(weight).max() > 0
    np.testing.assert_array_equal(weight, numpy_helper.to_array(_tensor_attrs(model)["weight"]))
    onnx.checker.check_model(str(tmp_path / "m.onnx"))
    plain = _tensor_attrs(onnx.load(str(tmp_path / "m.onnx")))  # onnx reads attribute tensors' data too
    np.testing.assert_array_equal(numpy_helper.to_array(plain["weight"]), weight)


def test_streamed_single_file_carries_embedded_weights(tmp_path, monkeypatch):
    model = _embedded()
    monkeypatch.setattr(onnx_io, "STREAM_MIN_BYTES", 0)
    onnx_io.save_model(model, tmp_path / "m.onnx", external_data=False)
    assert onnx.load(str(tmp_path / "m.onnx")) == model
    onnx.checker.check_model(str(tmp_path / "m.onnx"))


def test_deferred_external_data_load(tmp_path):
    """A model loaded without its external data is rewritten on references; the data is read afterwards
    into the plugin node (the initializer that held it is gone by then)."""
    source = samples.build("mmcv.MMCVModulatedDeformConv2d", c=16, cout=32, seed=3)
    onnx_io.save_model(source, tmp_path / "in.onnx", external_data=True)
    model = onnx_io.load_model(tmp_path / "in.onnx", external_data=False)
    weight = next(t for t in model.graph.initializer if t.name == "weight")
    assert weight.data_location == onnx.TensorProto.EXTERNAL and not weight.raw_data
    out, report = rewrite_model(model, inplace=True)
    assert report.embedded == ["dcn0"]
    assert _tensor_attrs(out)["weight"].data_location == onnx.TensorProto.EXTERNAL
    onnx_io.load_external_data(out, tmp_path / "in.onnx")
    expected, _ = rewrite_model(source)
    assert out == expected
    with pytest.raises(ModelError, match="cannot load the external data"):
        broken = onnx_io.load_model(tmp_path / "in.onnx", external_data=False)
        onnx_io.load_external_data(broken, tmp_path / "elsewhere" / "in.onnx")


def test_opset_conversion_holds_embedded_weights_aside_and_restores_them():
    model = _embedded()  # default-domain opset 11
    converted = raise_default_opset(model, 13, "a test")
    assert {o.domain: o.version for o in converted.opset_import}[""] == 13
    for name, tensor in _tensor_attrs(converted).items():
        assert tensor.SerializeToString() == _tensor_attrs(model)[name].SerializeToString()


def test_model_check_of_an_embedded_model():
    """No warning for a rewritten model with embedded weights (the checker's second opinion runs on a
    copy whose plugin-node weights carry no data); a real problem is still found."""
    from dcnconvert.model import check

    model = _embedded()
    assert check.check_model(model) == [] and check.checker_opinion(model) is None
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    bad.graph.node[0].domain = "nowhere"  # a domain no opset_import lists
    assert "nowhere" in " ".join(check.check_model(bad, warn=False))
