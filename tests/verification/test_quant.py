"""verify with quantized DCN layers: the Q/DQ reference, the rounding-aware default atol, the report.

The fake engine computes what the quantized kernels compute (tests/support/quant.py with the sample
rounding); the reference is the Q/DQ model in ONNX Runtime, which does not round the samples.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from polygraphy.comparator.struct import RunResults
from support.fake_trt import FakeAdapter
from support.nodes import node_attrs, plugin_nodes

from dcnconvert import schema
from dcnconvert.backend.trt.engine import BuildOptions, build_engine
from dcnconvert.errors import AccuracyError
from dcnconvert.match.finder import find_dcn_nodes
from dcnconvert.transform import plugin as rewrite
from dcnconvert.verification import quant as vquant
from dcnconvert.verification import runner as verify
from tests.support import quant as qmath

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_models"))
import generate_qdq as gen  # noqa: E402


class QuantizedFakeAdapter(FakeAdapter):
    """A fake engine that runs the single quantized DCN of the model with the kernels' sample rounding."""

    def __init__(self, original: onnx.ModelProto, *args, **kwargs):
        super().__init__(*args, **kwargs)
        (self.match,) = find_dcn_nodes(original)

    def run_engine(self, trt, engine_path, feeds, libraries=(), runner_name="tensorrt"):
        model = onnx.load(str(engine_path))
        (node,) = plugin_nodes(model)
        attrs = node_attrs(node)
        qtype = attrs[schema.ATTR_QUANT_TYPE].decode()
        a = self.match.attrs
        outs = []
        for feed in feeds:
            x_q = qmath.quantize(feed["x"], attrs[schema.ATTR_X_SCALE], qtype)
            y = qmath.dcn_quant(x_q, attrs[schema.ATTR_X_SCALE], feed["offset"], feed["mask"],
                                numpy_helper.to_array(attrs[schema.ATTR_WEIGHT]).astype(np.float64),
                                numpy_helper.to_array(attrs[schema.ATTR_WEIGHT_SCALE]),
                                numpy_helper.to_array(attrs[schema.ATTR_BIAS]), qtype=qtype,
                                round_samples=True,
                                stride=a.stride, padding=a.padding, dilation=a.dilation, group=a.group,
                                deformable_group=a.deformable_group)
            if schema.ATTR_OUTPUT_SCALE in attrs:
                scale = attrs[schema.ATTR_OUTPUT_SCALE]
                y = qmath.quantize(y, scale, qtype) * scale
            outs.append({"y": y.astype(np.float32)})
        results = RunResults()
        results.add(outs, runner_name=runner_name)
        return results


def _engine(tmp_path, name):
    original = gen.build(name, seed=4)
    rewritten, _ = rewrite.rewrite_model(original)
    fake = QuantizedFakeAdapter(original, "11.1.0")
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"x")
    engine = tmp_path / "m.engine"
    build_engine(rewritten, engine, BuildOptions(plugin_lib=lib), trt_adapter=fake)
    path = tmp_path / "m.onnx"
    onnx.save(original, str(path))
    return original, rewritten, path, engine, fake, lib


@pytest.mark.parametrize("name", ["int8_mmcv_out", "fp8_mmcv", "int8_mmcv_direct"])
def test_quantized_engine_passes_with_the_default_tolerances_and_is_reported(tmp_path, name):
    original, rewritten, path, engine, fake, lib = _engine(tmp_path, name)
    payload = verify.verify_engine(engine, original, path, verify.VerifyOptions(plugin_lib=lib),
                                   trt_adapter=fake)
    (layer,) = payload["quantized"]
    assert layer["node"] == "dcn0" and layer["quant_type"] == gen.CASES[name].qtype
    assert payload["tolerances"]["atol"] == pytest.approx(layer["rounding_bound"])
    assert payload["passed"] and payload["comparison"][0]["max_abs"] > 0  # the rounding is there
    assert payload["comparison"][0]["max_abs"] <= layer["rounding_bound"]
    # the rewritten model reports the same layers as the original it came from
    assert [q.to_dict() for q in vquant.quantized_layers(rewritten)] == payload["quantized"]
    # a tolerance given is kept: FP32's tight one does not allow for the rounding
    with pytest.raises(AccuracyError):
        tight = verify.VerifyOptions(plugin_lib=lib, atol=1e-6, rtol=1e-6)
        verify.verify_engine(engine, original, path, tight, trt_adapter=fake)


def test_bound_follows_the_scales():
    rewritten, _ = rewrite.rewrite_model(gen.build("int8_deformconv", seed=0))
    (layer,) = vquant.quantized_layers(rewritten)
    (node,) = plugin_nodes(rewritten)
    attrs = node_attrs(node)
    w_q = numpy_helper.to_array(attrs[schema.ATTR_WEIGHT]).astype(np.float64)
    w_scale = numpy_helper.to_array(attrs[schema.ATTR_WEIGHT_SCALE])
    expected = qmath.sample_rounding_bound(w_q, w_scale, attrs[schema.ATTR_X_SCALE], "int8", sample_max=128)
    assert layer.bound == pytest.approx(expected.max()) and layer.output_scale is None
    assert vquant.quantized_layers(gen.build("int8_zero_point")) == []  # stays a float node
    assert vquant.atol_floor([]) == 0.0
