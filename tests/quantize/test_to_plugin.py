"""The Q/DQ models ``quantize`` writes are what ``rewrite`` turns into quantized plugin nodes: every
calibrated layer becomes one, with the scales ``quantize`` chose, and the rewritten model's reference
computes exactly what the Q/DQ model computes in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from support.nodes import node_attrs, plugin_nodes

from dcnconvert import api, schema
from dcnconvert.model.quantized import QUANT_MAX
from dcnconvert.quantize import layers
from dcnconvert.transform import standard
from tests.support import samples


def _run(model, feed):
    sess = ort.InferenceSession(standard.to_standard_model(model).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0]


@pytest.mark.parametrize("quantize_output", [False, True])
@pytest.mark.parametrize("qtype", ["int8", "fp8e4m3"])
@pytest.mark.parametrize("form", ["onnx.DeformConv", "mmcv.MMCVModulatedDeformConv2d"])
def test_quantized_layers_become_quantized_plugin_nodes(form, qtype, quantize_output):
    seed = int(np.random.default_rng().integers(1 << 20))
    model = samples.build(form, seed=seed % 1000, stride=(2, 1), dilation=(1, 2), deformable_group=2)
    feeds = [samples.input_feeds(model, seed + i) for i in range(2)]
    quantized, report = layers.quantize_model(model, qtype, feeds, quantize_output=quantize_output)
    rewritten = api.rewrite(quantized).model
    nodes = plugin_nodes(rewritten)
    assert len(nodes) == 1
    attrs = node_attrs(nodes[0])
    row = report["layers"][0]
    assert attrs[schema.ATTR_QUANT_TYPE].decode() == qtype
    assert attrs["x_scale"] == pytest.approx(row["x_scale"], rel=1e-6)
    w_scale = numpy_helper.to_array(attrs["weight_scale"])
    assert w_scale.min() == pytest.approx(row["weight_scale_min"], rel=1e-6)
    assert w_scale.max() == pytest.approx(row["weight_scale_max"], rel=1e-6)
    if quantize_output:
        assert attrs["output_scale"] == pytest.approx(row["output_scale"], rel=1e-6)
    else:
        assert "output_scale" not in attrs
    w_q = numpy_helper.to_array(attrs["weight"]).astype(np.float64)
    assert np.abs(w_q).max() <= QUANT_MAX[qtype]
    fresh = samples.input_feeds(model, seed + 50)
    np.testing.assert_array_equal(_run(rewritten, fresh), _run(quantized, fresh))
