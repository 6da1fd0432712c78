"""Quantized plugin nodes through TensorRT-RTX's real parser and builder (CPU-only builds).

A hand-made model in the rewritten form, ``x_f -> QuantizeLinear -> plugin(x_q, offset, mask) [->
DequantizeLinear]`` with the node's ``quant_type``, ``x_scale``, quantized ``weight`` (INT8, or E4M3 values
as FLOAT16), ``weight_scale`` and optional ``output_scale``, is built through dcnconvert's build path (a
child process: load the plugin library, parse, check the plugin layers' types, build) for SM89 and
SM120; the parsed network's plugin layer must have x INT8/FP8, offset and mask FLOAT, and the output
FLOAT or the quantized type. Where TensorRT-RTX refuses a combination the test says so with its words.

Needs TensorRT-RTX (``trt_rtx``), TensorRT 11 headers and nvcc for the plugin library (``trt_headers``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dcnconvert import schema
from dcnconvert.backend.trt import isolated, rtx
from dcnconvert.model.quantized import ONNX_TYPE_OF

pytestmark = [pytest.mark.trt_rtx, pytest.mark.trt_headers, pytest.mark.usefixtures("rtx_cache_dir")]

PLUGIN = (schema.PLUGIN_NAME, schema.PLUGIN_VERSION, schema.PLUGIN_NAMESPACE, False)
#: TensorRT's type names of x (and of a quantized output), per quant_type.
TRT_TYPES = {"int8": "INT8", "fp8e4m3": "FP8"}


def quant_model(qtype: str, output_scale: bool, channels: int = 32) -> onnx.ModelProto:
    """x [1, C, 8, 8] FLOAT -> QuantizeLinear -> plugin (3x3, padding 1, 16 output channels, fresh random
    quantized weights) [-> DequantizeLinear]; offset and mask are FLOAT graph inputs."""
    rng = np.random.default_rng()
    cout, k = 16, 3
    w_shape = [cout, channels, k, k]
    if qtype == "int8":
        weight = numpy_helper.from_array(rng.integers(-127, 128, w_shape).astype(np.int8), "weight")
    else:
        codes = rng.integers(0, 256, w_shape).astype(np.uint8)
        codes[(codes & 0x7F) == 0x7F] ^= 1  # no NaN
        weight = numpy_helper.from_array(codes.view(ml_dtypes.float8_e4m3fn).astype(np.float16), "weight")
    zero = helper.make_tensor("x_zero", ONNX_TYPE_OF[qtype], [], [0])
    scale = numpy_helper.from_array(np.array(0.02, np.float32), "x_scale")
    attrs = dict(schema.DcnAttrs(padding=(1, 1)).node_attrs(schema.TARGET_DCNCONVERT))
    attrs.update({schema.ATTR_WEIGHT: weight, schema.ATTR_WEIGHT_SHAPE: w_shape,
                  schema.ATTR_BIAS: numpy_helper.from_array(rng.normal(size=cout).astype(np.float32), "bias"),
                  schema.ATTR_QUANT_TYPE: qtype, schema.ATTR_X_SCALE: 0.02,
                  schema.ATTR_WEIGHT_SCALE: numpy_helper.from_array(
                      rng.uniform(0.001, 0.05, cout).astype(np.float32), "weight_scale")})
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="q_x")]
    plugin_out = "y_q" if output_scale else "y"
    if output_scale:
        attrs[schema.ATTR_OUTPUT_SCALE] = 0.5
    nodes.append(helper.make_node(schema.PLUGIN_NAME, ["x_q", "offset", "mask"], [plugin_out], name="dcnq",
                                  domain=schema.PLUGIN_DOMAIN, **attrs))
    initializers = [scale, zero]
    if output_scale:
        initializers += [numpy_helper.from_array(np.array(0.5, np.float32), "y_scale"),
                         helper.make_tensor("y_zero", ONNX_TYPE_OF[qtype], [], [0])]
        nodes.append(helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero"], ["y"], name="dq_y"))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 8, 8]),
              helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 2 * k * k, 8, 8]),
              helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, k * k, 8, 8])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, 8, 8])]
    graph = helper.make_graph(nodes, "quantized_dcn", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19),
                                                   helper.make_opsetid(schema.PLUGIN_DOMAIN,
                                                                       schema.PLUGIN_DOMAIN_VERSION)])


@pytest.mark.parametrize("cc", [(8, 9), (12, 0)], ids=["sm89", "sm120"])
@pytest.mark.parametrize("output_scale", [False, True], ids=["float-out", "quant-out"])
@pytest.mark.parametrize("qtype", ["int8", "fp8e4m3"])
def test_quantized_node_builds(qtype, output_scale, cc, plugin_lib, tmp_path):
    from dcnconvert.backend.trt import adapter

    path = tmp_path / "q.onnx"
    onnx.save(quant_model(qtype, output_scale), str(path))
    api = adapter.api_for(rtx.installed_version(), "tensorrt-rtx")
    built = isolated.build_isolated(api, path, plugin_libraries=[plugin_lib], plugin=PLUGIN,
                                    plugin_nodes=["dcnq"], compute_capabilities=[cc], progress=False)
    assert len(built["data"]) > 0
    plan = built["data"]
    assert schema.PLUGIN_NAME.encode() in plan and schema.PLUGIN_NAMESPACE.encode() in plan
    (layer,) = built["network"]["plugin_layers"]
    quantized = TRT_TYPES[qtype]
    assert layer["name"] == "dcnq"
    assert layer["inputs"] == [quantized, "FLOAT", "FLOAT"]
    assert layer["outputs"] == [quantized if output_scale else "FLOAT"]
