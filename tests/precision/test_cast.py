"""Graph-cast FP16/BF16 conversion (dcnconvert.precision.cast), the precision path for TensorRT 11."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from support import evaluate, samples

from dcnconvert import schema
from dcnconvert.backend.trt import profiles as shapes
from dcnconvert.errors import UnsupportedNodeError, UsageError
from dcnconvert.precision import cast as fp16
from dcnconvert.precision import plan as fp16_plan
from dcnconvert.transform import plugin as rewrite

LOW = {"fp16": TP.FLOAT16, "bf16": TP.BFLOAT16}
#: max |low - fp32| / max(1, max |fp32|) allowed per precision (FP16 tolerance of the acceptance criteria).
TOL = {"fp16": 1e-2, "bf16": 4e-2}


def _plugin_input_types(model: onnx.ModelProto) -> list:
    """Per plugin node: the element types of its inputs, then of its embedded weight and bias."""
    types = fp16_plan.infer_types(model)
    return [
        [types.get(name) for name in node.input if name]
        + [a.t.data_type for a in node.attribute if a.name in (schema.ATTR_WEIGHT, schema.ATTR_BIAS)]
        for node in model.graph.node
        if node.op_type == schema.PLUGIN_NAME and node.domain == schema.PLUGIN_DOMAIN
    ]


def _check_structure(model: onnx.ModelProto, precision: str) -> None:
    onnx.checker.check_model(model, full_check=True)
    outputs = [o for n in model.graph.node for o in n.output if o]
    assert len(outputs) == len(set(outputs)), "graph is not in single static assignment form"
    plugin_types = _plugin_input_types(model)
    assert plugin_types, "no plugin node"
    for types in plugin_types:
        assert len(types) in (4, 5)  # x, offset, mask and weight[, bias], as inputs or embedded
        assert set(types) == {LOW[precision]}, types


def _max_scaled_error(ref: dict, got: dict) -> float:
    worst = 0.0
    for name, value in ref.items():
        r = np.asarray(value, dtype=np.float64)
        g = np.asarray(got[name], dtype=np.float64)
        assert g.shape == r.shape
        assert np.all(np.isfinite(g))
        worst = max(worst, float(np.abs(g - r).max() / max(1.0, np.abs(r).max())))
    return worst


# ------------------------------------------------------------------------------------------------
# value conversion
# ------------------------------------------------------------------------------------------------


class TestValues:
    def test_bf16_round_to_nearest_even_matches_ml_dtypes(self):
        ml_dtypes = pytest.importorskip("ml_dtypes")
        rng = np.random.default_rng(3)
        values = np.concatenate(
            [
                rng.standard_normal(20000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 20000),
                np.array(
                    [0.0, -0.0, 1.0, 1.00390625, 1.01171875, np.inf, -np.inf, 1e-40, -1e-42], np.float32
                ),
                # exact ties between two bfloat16 values: round to the even one
                (np.arange(1, 200, dtype=np.uint32) << 16 | 0x8000).view(np.float32),
            ]
        ).astype(np.float32)
        ours = fp16.float_to_bf16_bits(values)
        theirs = values.astype(ml_dtypes.bfloat16).view(np.uint16)
        np.testing.assert_array_equal(ours, theirs)

    def test_bf16_nan_and_overflow(self):
        values = np.array([np.nan, -np.nan, 3.4e38, -3.4e38, 1.0], np.float32)
        back = fp16.bf16_bits_to_float(fp16.float_to_bf16_bits(values))
        assert np.isnan(back[:2]).all()
        # rounding is IEEE: past the largest bfloat16 is infinity (as the GPU and ml_dtypes round)
        assert back[2] == np.inf and back[3] == -np.inf and back[4] == 1.0
        # constants of a cast graph are clamped instead, and counted
        bits, n = fp16.to_bf16_clamped(values)
        kept = fp16.bf16_bits_to_float(bits)
        assert n == 2 and np.isnan(kept[:2]).all() and kept[4] == 1.0
        assert np.isfinite(kept[2:]).all() and kept[2] > 3.3e38 and kept[3] < -3.3e38

    def test_bf16_decode_exact(self):
        bits = np.arange(0, 0x7F80, 7, dtype=np.uint16)
        np.testing.assert_array_equal(fp16.float_to_bf16_bits(fp16.bf16_bits_to_float(bits)), bits)

    def test_fp16_clamps_and_counts(self):
        arr, n = fp16.to_fp16_clamped(np.array([1.0, 7e4, -1e6, np.inf, 65504.0], np.float32))
        assert n == 2
        np.testing.assert_array_equal(arr, np.array([1.0, 65504.0, -65504.0, np.inf, 65504.0], np.float16))


# ------------------------------------------------------------------------------------------------
# every source form
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("form", samples.FORMS)
def test_every_form(form, precision):
    dynamic = samples.supports(form, dynamic=True)
    original = samples.build(form, dynamic=dynamic, seed=11)
    rewritten, _ = rewrite.rewrite_model(original)
    cast, report = fp16.cast_model(rewritten, precision)
    _check_structure(cast, precision)
    assert report.plugin_nodes == 1
    # graph inputs/outputs keep FP32 (an initializer listed as an input, as TAO exports, is a weight)
    weights = {i.name for i in cast.graph.initializer}
    io = [vi for vi in list(cast.graph.input) + list(cast.graph.output) if vi.name not in weights]
    assert {vi.type.tensor_type.elem_type for vi in io} == {TP.FLOAT}
    feeds = samples.input_feeds(original, seed=5, dims={"N": 2} if dynamic else None)
    ref = evaluate.run_model(rewritten, feeds)
    got = evaluate.run_model(cast, feeds, backend="reference")  # computes in the graph's types
    assert _max_scaled_error(ref, got) < TOL[precision]


@pytest.mark.parametrize(
    "form", ["mmcv.MMCVModulatedDeformConv2d", "mmcv.MMCVDeformConv2d", "tensorrt_pro.Plugin.DCNv2"]
)
def test_low_io_precision(form):
    rewritten, _ = rewrite.rewrite_model(samples.build(form, seed=2))
    cast, report = fp16.cast_model(rewritten, "fp16", io_precision="fp16")
    _check_structure(cast, "fp16")
    assert {vi.type.tensor_type.elem_type for vi in list(cast.graph.input) + list(cast.graph.output)} == {
        TP.FLOAT16
    }
    assert report.io_precision == "fp16"
    feeds = samples.input_feeds(rewritten, seed=1)
    got = evaluate.run_model(cast, {k: v.astype(np.float16) for k, v in feeds.items()}, backend="reference")
    assert _max_scaled_error(evaluate.run_model(rewritten, feeds), got) < TOL["fp16"]


# ------------------------------------------------------------------------------------------------
# a network with the hard cases
# ------------------------------------------------------------------------------------------------


def _network(opset: int = 19, seed: int = 0) -> onnx.ModelProto:
    """x feeds three nodes; shape arithmetic; Resize scales; a reduction; a constant shared by FP32 and
    low consumers; a graph output that is also consumed inside; DCNv1-style mask of ones."""
    rng = np.random.default_rng(seed)
    c, o, dg = 4, 6, 2
    inits = [
        numpy_helper.from_array(rng.standard_normal((2 * dg * 9, c, 3, 3)).astype(np.float32) * 0.1, "w_off"),
        numpy_helper.from_array(rng.standard_normal((dg * 9, c, 3, 3)).astype(np.float32) * 0.1, "w_mask"),
        numpy_helper.from_array(rng.standard_normal((o, c, 3, 3)).astype(np.float32) * 0.3, "w"),
        numpy_helper.from_array(rng.standard_normal(o).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        numpy_helper.from_array(np.array(1 / 3, np.float32), "third"),
    ]
    inits += [
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([dg * 9], np.int64), "mask_ch"),
        numpy_helper.from_array(np.array([1], np.int64), "one_axis"),
        numpy_helper.from_array(rng.standard_normal((o, o, 3, 3)).astype(np.float32) * 0.3, "w2"),
    ]
    node = helper.make_node
    plugin_attrs = schema.DcnAttrs(padding=(1, 1), deformable_group=dg).node_attrs(schema.TARGET_DCNCONVERT)
    one = numpy_helper.from_array(np.ones(1, np.float32))
    nodes = [
        node("Conv", ["x", "w_off"], ["offset"], pads=[1, 1, 1, 1], name="conv_off"),
        node("Conv", ["x", "w_mask"], ["mask_logits"], pads=[1, 1, 1, 1], name="conv_mask"),
        node("Sigmoid", ["mask_logits"], ["mask"], name="sigmoid"),
        node(
            schema.PLUGIN_NAME,
            ["x", "offset", "mask", "w", "b"],
            ["y"],
            domain=schema.PLUGIN_DOMAIN,
            name="dcn",
            **plugin_attrs,
        ),
        node("Relu", ["y"], ["r"], name="relu"),
        node("Resize", ["r", "", "scales"], ["up"], mode="nearest", name="resize"),
        node("ReduceMean", ["up"], ["mean"], keepdims=1, name="reduce"),
        node("Shape", ["x"], ["xs"], name="shape"),
        node("Cast", ["xs"], ["xs_f"], to=TP.FLOAT, name="cast_f"),
        node("Mul", ["xs_f", "third"], ["xs_t"], name="shape_mul"),
        node("Cast", ["xs_t"], ["xs_i"], to=TP.INT64, name="cast_i"),
        node("Mul", ["r", "third"], ["r3"], name="act_mul"),
        node("Identity", ["r3"], ["r3_out"], name="identity"),
        # a second DCN without mask input: a mask of ones shaped from the offset (as the rewrite makes it)
        node("Slice", ["offset", "zero", "mask_ch", "one_axis"], ["off_half"], name="slice"),
        node("Shape", ["off_half"], ["half_shape"], name="half_shape"),
        node("ConstantOfShape", ["half_shape"], ["ones_mask"], value=one, name="ones"),
        node(
            schema.PLUGIN_NAME,
            ["r", "offset", "ones_mask", "w2"],
            ["y2"],
            domain=schema.PLUGIN_DOMAIN,
            name="dcn2",
            **plugin_attrs,
        ),
    ]
    f = TP.FLOAT
    graph = helper.make_graph(
        nodes,
        "net",
        [helper.make_tensor_value_info("x", f, ["N", c, "H", "W"])],
        [
            helper.make_tensor_value_info("up", f, ["N", o, "H2", "W2"]),
            helper.make_tensor_value_info("mean", f, [1, 1, 1, 1]),
            helper.make_tensor_value_info("xs_i", TP.INT64, [4]),
            helper.make_tensor_value_info("r3_out", f, ["N", o, "H", "W"]),
            helper.make_tensor_value_info("y2", f, ["N", o, "H", "W"]),
        ],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(schema.PLUGIN_DOMAIN, 1)]
    )
    onnx.checker.check_model(model, full_check=True)
    return model


class TestNetwork:
    @pytest.mark.parametrize("precision, opset", [("fp16", 19), ("bf16", 22)])
    @pytest.mark.parametrize("io", [None, "low"])
    def test_structure_and_numbers(self, precision, opset, io):
        model = _network(opset)
        before = model.SerializeToString()
        io_precision = precision if io == "low" else None
        cast, report = fp16.cast_model(model, precision, io_precision=io_precision)
        assert model.SerializeToString() == before, "the input model was modified"
        _check_structure(cast, precision)
        kept = {k["node"]: k["reason"] for k in report.kept_fp32}
        assert set(kept) == {"reduce", "cast_f", "shape_mul", "cast_i"}
        assert kept["shape_mul"] == "shape arithmetic"
        # one Cast per (tensor, type): x feeds three low nodes through a single Cast
        casts = [n for n in cast.graph.node if n.op_type == "Cast" and n.name.endswith("__cast")]
        keys = [(n.input[0], n.attribute[0].i) for n in casts]
        assert len(keys) == len(set(keys))
        x_casts = [n for n in cast.graph.node if n.op_type == "Cast" and n.input[0] == "x"]
        assert len(x_casts) == (0 if io == "low" else 1)
        # the shared constant stays FP32 (exact for the shape path), the activation path reads a Cast
        third = next(i for i in cast.graph.initializer if i.name == "third")
        assert third.data_type == TP.FLOAT
        # Resize keeps FP32 scales
        resize = next(n for n in cast.graph.node if n.op_type == "Resize")
        assert resize.input[2] == "scales"
        out_types = {o.name: o.type.tensor_type.elem_type for o in cast.graph.output}
        low_io = LOW[precision] if io == "low" else TP.FLOAT
        assert out_types == {"up": low_io, "mean": low_io, "xs_i": TP.INT64, "r3_out": low_io, "y2": low_io}

        x = np.random.default_rng(7).uniform(-1, 1, (2, 4, 6, 5)).astype(np.float32)
        ref = evaluate.run_model(model, {"x": x})
        feed = x if io is None else (x.astype(np.float16) if precision == "fp16" else None)
        if feed is None:  # NumPy has no bfloat16 input; feed through ml_dtypes
            ml_dtypes = pytest.importorskip("ml_dtypes")
            feed = x.astype(ml_dtypes.bfloat16)
        got = evaluate.run_model(cast, {"x": feed}, backend="reference")
        np.testing.assert_array_equal(got["xs_i"], ref["xs_i"])
        ref.pop("xs_i"), got.pop("xs_i")
        assert _max_scaled_error(ref, got) < TOL[precision]

    def test_bf16_at_opset_19_keeps_conv_in_fp32(self):
        cast, report = fp16.cast_model(_network(19), "bf16")
        _check_structure(cast, "bf16")
        reasons = {k["node"]: k["reason"] for k in report.kept_fp32}
        assert "does not accept tensor(bfloat16)" in reasons["conv_off"]
        assert "opset 19" in reasons["conv_off"]

    def test_keep_named_nodes_and_ops(self):
        cast, report = fp16.cast_model(
            _network(), "fp16", keep_fp32_nodes=["relu"], keep_fp32_ops=fp16.KEEP_FP32_OPS | {"Sigmoid"}
        )
        _check_structure(cast, "fp16")
        kept = {k["node"] for k in report.kept_fp32}
        assert {"relu", "sigmoid"} <= kept
        types = fp16_plan.infer_types(cast)
        relu = next(n for n in cast.graph.node if n.name == "relu")
        assert types[relu.output[0]] == TP.FLOAT

    def test_keep_a_plugin_node_in_fp32(self):
        """--keep-fp32 on a plugin node: its five inputs (and output) FP32, the other plugin node low."""
        model = _network()
        cast, report = fp16.cast_model(model, "fp16", keep_fp32_nodes=["dcn"])
        onnx.checker.check_model(cast, full_check=True)
        types = fp16_plan.infer_types(cast)
        plugins = {n.name: n for n in cast.graph.node if n.op_type == schema.PLUGIN_NAME}
        assert {types[i] for i in plugins["dcn"].input} == {TP.FLOAT} and types["y"] == TP.FLOAT
        assert {types[i] for i in plugins["dcn2"].input} == {TP.FLOAT16}
        assert "dcn" in {k["node"] for k in report.kept_fp32}
        x = np.random.default_rng(5).uniform(-1, 1, (2, 4, 6, 5)).astype(np.float32)
        ref = evaluate.run_model(model, {"x": x})
        got = evaluate.run_model(cast, {"x": x}, backend="reference")
        ref.pop("xs_i"), got.pop("xs_i")
        assert _max_scaled_error(ref, got) < TOL["fp16"]

    def test_clamps_large_weights(self):
        model = _network()
        w = next(i for i in model.graph.initializer if i.name == "b")
        values = numpy_helper.to_array(w).copy()
        values[0] = 1e6
        w.CopyFrom(numpy_helper.from_array(values, "b"))
        cast, report = fp16.cast_model(model, "fp16")
        assert report.clamped_values == 1 and report.clamped_initializers == ["b"]
        b = numpy_helper.to_array(next(i for i in cast.graph.initializer if i.name == "b"))
        assert b.dtype == np.float16 and b[0] == np.float16(65504)


class TestErrors:
    def test_unknown_precision(self):
        with pytest.raises(UsageError):
            fp16.cast_model(_network(), "fp8")
        with pytest.raises(UsageError):
            fp16.cast_model(_network(), "fp16", io_precision="int8")

    def test_subgraph_is_refused(self):
        model = _network()
        then = helper.make_graph(
            [helper.make_node("Identity", ["r"], ["t"])],
            "then",
            [],
            [helper.make_tensor_value_info("t", TP.FLOAT, None)],
        )
        model.graph.node.append(
            helper.make_node("If", ["cond"], ["branch"], then_branch=then, else_branch=then, name="if")
        )
        model.graph.input.append(helper.make_tensor_value_info("cond", TP.BOOL, []))
        with pytest.raises(UnsupportedNodeError, match="subgraph"):
            fp16.cast_model(model, "fp16")


SAMPLE_FILES = sorted((Path(__file__).resolve().parents[2] / "sample_models").glob("*.onnx"))


def _feeds_for(model: onnx.ModelProto, seed: int) -> dict:
    """Inputs for a sample model: the samples' own generator where it knows the dims, else N(0, 1)."""
    if samples.sample_dims(model):
        return samples.input_feeds(model, seed=seed)
    sizes = {"batch": 2, "height": 12, "width": 10}
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in shapes.model_inputs(model):
        dims = [d if isinstance(d, int) else sizes.get(d, 2) for d in info.dims]
        feeds[info.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


@pytest.mark.skipif(not SAMPLE_FILES, reason="sample_models/*.onnx not generated (make samples)")
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("path", SAMPLE_FILES, ids=[p.stem for p in SAMPLE_FILES])
def test_every_sample_model(path, precision):
    original = onnx.load(str(path))
    rewritten, _ = rewrite.rewrite_model(original)
    cast, report = fp16.cast_model(rewritten, precision)
    _check_structure(cast, precision)
    assert report.plugin_nodes >= 1
    feeds = _feeds_for(original, seed=9)
    ref = evaluate.run_model(rewritten, feeds)
    got = evaluate.run_model(cast, feeds, backend="reference")
    assert _max_scaled_error(ref, got) < TOL[precision]
