"""Q/DQ models (sample_models/generate_qdq.py, ModelOpt's patterns) -> quantized plugin nodes.

The rewrite's structure and fields, the float fallback of patterns the plugin cannot honour, and the
agreement of three computations on fresh random inputs: the original Q/DQ model in ONNX Runtime, the
reference expansion of the rewritten model in ONNX Runtime, and the float64 model of the quantized
math (tests/support/quant.py) without the sample rounding; with it, within ``sample_rounding_bound``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from support import samples
from support.evaluate import ort_outputs
from support.nodes import node_attrs

from dcnconvert import schema
from dcnconvert.errors import UnsupportedNodeError, UsageError
from dcnconvert.match.finder import find_dcn_nodes
from dcnconvert.model.quantized import quantize_values, to_e4m3
from dcnconvert.transform.plugin import rewrite_model
from dcnconvert.transform.standard import to_standard_model
from tests.support import quant as qmath

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_models"))
import generate_qdq as gen  # noqa: E402

HONOURED = [name for name, case in gen.CASES.items() if case.honoured]
FALLBACK = [name for name, case in gen.CASES.items() if not case.honoured]


def _ort(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    return next(iter(ort_outputs(model, feeds).values()))


def _plugin(model: onnx.ModelProto) -> onnx.NodeProto:
    (node,) = [n for n in model.graph.node if schema.is_plugin_node(n)]
    return node


def _init(model: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))


@pytest.mark.parametrize("name", HONOURED)
def test_honoured_pattern_becomes_a_quantized_plugin_node(name):
    case = gen.CASES[name]
    original = gen.build(name, seed=1)
    out, report = rewrite_model(original)
    node = _plugin(out)
    attrs = node_attrs(node)
    assert report.quantized == [("dcn0", case.qtype)] and not report.warnings
    assert attrs[schema.ATTR_QUANT_TYPE] == case.qtype.encode()
    assert attrs[schema.ATTR_X_SCALE] == pytest.approx(float(_init(original, "x_scale")), rel=1e-7)
    weight, w_scale = attrs[schema.ATTR_WEIGHT], numpy_helper.to_array(attrs[schema.ATTR_WEIGHT_SCALE])
    assert weight.data_type == schema.QUANT_WEIGHT_DTYPES[case.qtype]
    assert attrs[schema.ATTR_WEIGHT_SCALE].data_type == TensorProto.FLOAT
    np.testing.assert_array_equal(w_scale, _init(original, "weight_scale"))
    assert list(node.input)[1:] == [n for n in ("offset", "mask") if n in _inputs_of_dcn(original)] or \
        case.form == "mmcv.MMCVDeformConv2d" or case.all_inputs
    # the weight holds exactly what the original's DQ reads (or its Q computes)
    source = _init(original, "weight")
    if case.weight == "qdq":
        source = quantize_values(source, w_scale.reshape(-1, 1, 1, 1), case.qtype)
    np.testing.assert_array_equal(numpy_helper.to_array(weight).astype(np.float64),
                                  np.asarray(source).astype(np.float64))
    # x arrives quantized from the QuantizeLinear that stays; the DQs of x and weight are gone
    producers = {o: n for n in out.graph.node for o in n.output}
    x_producer = producers[node.input[0]]
    assert x_producer.op_type in ("QuantizeLinear", "Pad")
    dq_inputs = {n.input[0] for n in out.graph.node if n.op_type == "DequantizeLinear"}
    assert "x_QuantizeLinear_Output" not in dq_inputs and "weight" not in dq_inputs
    assert not {"weight", "weight_QuantizeLinear_Output"} & {t.name for t in out.graph.initializer}
    if case.output:
        assert attrs[schema.ATTR_OUTPUT_SCALE] == pytest.approx(float(_init(original, "y_scale")), rel=1e-7)
        readers = [n for n in out.graph.node if node.output[0] in n.input]
        assert [n.op_type for n in readers] == ["DequantizeLinear"] and readers[0].output[0] == "y"
        assert not any(n.op_type == "QuantizeLinear" and n.input[0] == "y_pre" for n in out.graph.node)
    else:
        assert schema.ATTR_OUTPUT_SCALE not in attrs and node.output[0] == "y"
    onnx.checker.check_model(out)
    again, second = rewrite_model(out)
    assert second.unchanged == ["dcn0"] and again.SerializeToString() == out.SerializeToString()


def _inputs_of_dcn(model):
    return {n for node in model.graph.node if "eform" in node.op_type for n in node.input}


@pytest.mark.parametrize("name", FALLBACK)
def test_pattern_that_cannot_be_honoured_stays_a_float_node_with_a_warning(name):
    original = gen.build(name, seed=2)
    out, report = rewrite_model(original)
    node = _plugin(out)
    assert schema.ATTR_QUANT_TYPE not in node_attrs(node) and report.quantized == []
    (warning,) = report.warnings
    assert "node 'dcn0'" in warning and "float node" in warning
    flaw = gen.CASES[name].flaw
    expected = {"zero_point": "nonzero zero point", "uint8": "UINT8", "x_per_channel": "scales",
                "axis1": "axis 1", "mixed": "FLOAT8E4M3FN", "": "no DequantizeLinear"}[flaw]
    assert expected in warning


@pytest.mark.parametrize("option", ["target", "weights"])
def test_trt_builtin_target_and_weights_input_keep_float_nodes(option):
    original = gen.build("int8_deformconv_out", seed=0)
    kw = {"target": "trt-builtin"} if option == "target" else {"embed_weights": False}
    out, report = rewrite_model(original, **kw)
    assert report.quantized == [] and len(report.warnings) == 1
    assert ("--target trt-builtin" if option == "target" else "--weights input") in report.warnings[0]
    quantized, _ = rewrite_model(original)
    error = UnsupportedNodeError if option == "target" else UsageError
    with pytest.raises(error, match="quantized plugin node"):
        rewrite_model(quantized, **kw)


def _numpy_model(original, rewritten, feeds, case, round_samples):
    """The float64 model of the quantized math on ``feeds`` (qmath.dcn_quant)."""
    node = _plugin(rewritten)
    attrs = node_attrs(node)
    (match,) = find_dcn_nodes(original)
    x_scale = float(attrs[schema.ATTR_X_SCALE])
    x_q = qmath.quantize(feeds["x"], x_scale, case.qtype)
    if match.prepad:
        hb, wb, he, we = match.prepad
        x_q = np.pad(x_q, ((0, 0), (0, 0), (hb, he), (wb, we)))
    offset = feeds["offset"].astype(np.float64)
    k = match.attrs.deformable_group * match.kernel[0] * match.kernel[1]
    mask = feeds["mask"].astype(np.float64) if "mask" in feeds else np.ones(
        (offset.shape[0], k) + offset.shape[2:])
    if case.all_inputs:  # the direct form's quantized offset and mask, as the graph dequantizes them
        offset = qmath.quantize(offset, float(_init(original, "offset_scale")), case.qtype) * float(
            _init(original, "offset_scale"))
        mask = qmath.quantize(mask, float(_init(original, "mask_scale")), case.qtype) * float(
            _init(original, "mask_scale"))
    w_q = numpy_helper.to_array(attrs[schema.ATTR_WEIGHT]).astype(np.float64)
    w_scale = numpy_helper.to_array(attrs[schema.ATTR_WEIGHT_SCALE]).astype(np.float64)
    bias = numpy_helper.to_array(attrs[schema.ATTR_BIAS]) if schema.ATTR_BIAS in attrs else None
    out_scale = attrs.get(schema.ATTR_OUTPUT_SCALE)
    a = match.attrs
    y = qmath.dcn_quant(x_q, x_scale, offset, mask, w_q, w_scale, bias, qtype=case.qtype,
                        round_samples=round_samples, stride=a.stride, padding=a.padding, dilation=a.dilation,
                        group=a.group, deformable_group=a.deformable_group)
    bound = qmath.sample_rounding_bound(w_q, w_scale, x_scale, case.qtype,
                                        sample_max=float(np.abs(x_q).max()))
    if out_scale is not None:
        return qmath.quantize(y, out_scale, case.qtype) * out_scale, bound, float(out_scale)
    return y, bound, None


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", HONOURED)
def test_original_rewrite_reference_and_numpy_model_agree(name, seed):
    case = gen.CASES[name]
    original = gen.build(name, seed=10 + seed)
    rewritten, _ = rewrite_model(original)
    reference = to_standard_model(rewritten)
    assert any(n.op_type == "DeformConv" for n in reference.graph.node)
    feeds = samples.input_feeds(original, seed=100 + seed)
    y_original = _ort(to_standard_model(original), feeds).astype(np.float64)
    y_reference = _ort(reference, feeds).astype(np.float64)
    y_numpy, bound, out_scale = _numpy_model(original, rewritten, feeds, case, round_samples=False)
    scale = np.abs(y_numpy).max()
    # FP32 sums in ORT vs float64 here: a quantized output may land on the other side of a rounding tie
    step = out_scale or 0.0
    np.testing.assert_allclose(y_reference, y_original, rtol=0, atol=1e-5 * scale + step)
    np.testing.assert_allclose(y_reference, y_numpy, rtol=0, atol=1e-5 * scale + step)
    if out_scale is not None:  # nearly all elements agree exactly on the output grid
        assert np.mean(np.abs(y_reference - y_numpy) > 1e-5 * scale) < 0.01
    y_rounded, _, _ = _numpy_model(original, rewritten, feeds, case, round_samples=True)
    limit = bound[None, :, None, None] + step + 1e-9 * scale
    assert np.all(np.abs(y_rounded - y_numpy) <= limit)
    assert np.any(y_rounded != y_numpy)  # the rounding is real: the bound is not met trivially


def test_fp8_rounding_matches_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.standard_normal(20000) * np.exp2(rng.uniform(-12, 10, 20000)),
                             [448.0, 464.0, 465.0, -1e4, 0.0, 2.0 ** -10, 3 * 2.0 ** -11]])
    expected = np.clip(values, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    np.testing.assert_array_equal(to_e4m3(values), expected)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_low_precision_cast_keeps_the_quantized_fields_and_makes_floats_low(precision):
    from dcnconvert.precision.cast import LOW_TYPES, cast_model
    from dcnconvert.precision.plan import infer_types

    low = LOW_TYPES[precision]
    for name, out_type in (("fp8_mmcv", low), ("int8_deformconv_out", TensorProto.INT8)):
        rewritten, _ = rewrite_model(gen.build(name, seed=3))
        cast, _ = cast_model(rewritten, precision)
        node = _plugin(cast)
        types = infer_types(cast)
        assert [types[n] for n in node.input[1:]] == [low, low]  # offset and mask
        assert types[node.input[0]] in (TensorProto.INT8, TensorProto.FLOAT8E4M3FN)
        assert types[node.output[0]] == out_type  # float output = the offset's type
        before, after = node_attrs(_plugin(rewritten)), node_attrs(node)
        for field in (schema.ATTR_WEIGHT, schema.ATTR_WEIGHT_SCALE):
            assert after[field].SerializeToString() == before[field].SerializeToString()
        assert after[schema.ATTR_BIAS].data_type == low
