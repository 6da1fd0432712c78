"""The graph cast of a model whose plugin nodes carry their weights (TENSOR attributes weight/bias)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import numpy_helper
from support import evaluate, samples
from support.nodes import plugin_nodes

from dcnconvert.precision import cast as fp16
from dcnconvert.precision import plan as fp16_plan
from dcnconvert.transform import weights
from dcnconvert.transform.plugin import rewrite_model

LOW = {"fp16": TP.FLOAT16, "bf16": TP.BFLOAT16}
TOL = {"fp16": 1e-2, "bf16": 4e-2}


def _plugin(model: onnx.ModelProto) -> onnx.NodeProto:
    (node,) = plugin_nodes(model)
    return node


def _tensor(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    """The initializer ``name``, or the value of the Constant node that makes it."""
    for init in model.graph.initializer:
        if init.name == name:
            return init
    (node,) = [n for n in model.graph.node if n.op_type == "Constant" and list(n.output) == [name]]
    return node.attribute[0].t


def _scaled_error(ref: np.ndarray, got: np.ndarray) -> float:
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    assert np.all(np.isfinite(got)) and np.abs(ref).max() > 0.1
    return float(np.abs(got - ref).max() / max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("form", ["mmcv.MMCVModulatedDeformConv2d", "mmcv.MMCVDeformConv2d",
                                  "paddle2onnx.DeformConv", "tensorrt_pro.Plugin.DCNv2"])
def test_embedded_weights_are_cast_like_initializers(form, precision):
    """The embedded weight and bias become the low type, with the values the input path gives."""
    model = samples.build(form, seed=13)
    embedded, _ = rewrite_model(model)
    inputs, _ = rewrite_model(model, embed_weights=False)
    cast, report = fp16.cast_model(embedded, precision)
    cast_inputs, report_inputs = fp16.cast_model(inputs, precision)
    node = _plugin(cast)
    assert len(node.input) == 3
    types = fp16_plan.infer_types(cast)
    assert {types[name] for name in node.input} == {LOW[precision]}
    tensors = weights.embedded_tensors(node)
    assert {t.data_type for t in tensors.values()} == {LOW[precision]}
    assert report.converted_embedded == len(tensors) == (1 if form == "mmcv.MMCVDeformConv2d" else 2)
    for role, name in zip(("weight", "bias"), list(_plugin(cast_inputs).input)[3:], strict=False):
        want = _tensor(cast_inputs, name)  # bit for bit what the cast of the input path stores
        assert want.data_type == tensors[role].data_type
        assert numpy_helper.to_array(tensors[role]).tobytes() == numpy_helper.to_array(want).tobytes()
    onnx.checker.check_model(cast, full_check=True)
    feeds = samples.input_feeds(model, seed=3)
    ref = evaluate.run_model(embedded, feeds)["y"]
    got = evaluate.run_model(cast, feeds, backend="reference")["y"]
    assert _scaled_error(ref, got) < TOL[precision]
    assert np.array_equal(got, evaluate.run_model(cast_inputs, feeds, backend="reference")["y"])


def test_a_plugin_node_kept_in_fp32_keeps_fp32_weights():
    embedded, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d", seed=2))
    cast, report = fp16.cast_model(embedded, "fp16", keep_fp32_nodes=["dcn0"])
    assert report.converted_embedded == 0
    assert {t.data_type for t in weights.embedded_tensors(_plugin(cast)).values()} == {TP.FLOAT}
    assert weights.embedded_tensors(_plugin(cast))["weight"].SerializeToString() == \
        weights.embedded_tensors(_plugin(embedded))["weight"].SerializeToString()


def test_clamped_embedded_values_are_counted_and_named():
    embedded, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d", seed=2))
    tensor = weights.embedded_tensors(_plugin(embedded))["weight"]
    values = numpy_helper.to_array(tensor).copy()
    values.flat[:3] = [1e5, -2e5, 7e4]
    tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    cast, report = fp16.cast_model(embedded, "fp16")
    assert report.clamped_values == 3 and report.clamped_initializers == ["dcn0.weight"]
    low = numpy_helper.to_array(weights.embedded_tensors(_plugin(cast))["weight"])
    np.testing.assert_array_equal(low.flat[:3], np.array([65504, -65504, 65504], np.float16))


def test_bf16_raises_the_opset_without_losing_the_weights():
    """An opset-11 model is converted to opset 13 for the bfloat16 Cast; the embedded weights are held
    aside during the conversion and come back with their values (then cast)."""
    embedded, _ = rewrite_model(samples.build("mmcv.MMCVModulatedDeformConv2d", c=16, cout=32, seed=4))
    cast, report = fp16.cast_model(embedded, "bf16")
    assert report.opset == [11, 13]
    weight = weights.embedded_tensors(_plugin(cast))["weight"]
    original = numpy_helper.to_array(weights.embedded_tensors(_plugin(embedded))["weight"])
    decoded = fp16.bf16_bits_to_float(np.frombuffer(weight.raw_data, "<u2")).reshape(original.shape)
    np.testing.assert_array_equal(decoded, fp16.bf16_bits_to_float(fp16.float_to_bf16_bits(original)))
