"""``dcnconvert quantize``: the command writes a Q/DQ model, prints its layers, and follows the exit-code
and JSON conventions; ``api.quantize`` returns the model in memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import error_lines, invoke, one_json

from dcnconvert import api
from tests.support import samples


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    path = tmp_path / "dcn.onnx"
    onnx.save(samples.build("onnx.DeformConv", seed=3), str(path))
    return path


def test_quantize_writes_qdq_model_and_json(model_path, tmp_path):
    out = tmp_path / "q.onnx"
    res = invoke("quantize", model_path, "-o", out, "--type", "fp8e4m3", "--samples", "2", "--json")
    assert res.exit_code == 0, res.stderr
    obj = one_json(res.stdout)
    assert obj["ok"] and obj["outputs"]["onnx"] == str(out)
    report = obj["quantize"]
    assert report["quant_type"] == "fp8e4m3" and report["calibration_inputs"] == 2
    assert report["layers"][0]["x_scale"] == pytest.approx(report["amax"]["x"] / 448)
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert ops.count("QuantizeLinear") == 2 and ops.count("DequantizeLinear") == 2


def test_quantize_text_output_and_inputs_files(model_path, tmp_path):
    feed = samples.input_feeds(onnx.load(str(model_path)), 7)
    np.savez(tmp_path / "calib.npz", **feed)
    out = tmp_path / "q.onnx"
    res = invoke("quantize", model_path, "-o", out, "--inputs", tmp_path / "calib.npz", "--quantize-output")
    assert res.exit_code == 0, res.stderr
    assert "dcn0: x scale" in res.stdout and "output scale" in res.stdout
    printed = float(res.stdout.split("x scale ")[1].split(",")[0])
    assert printed == pytest.approx(float(np.abs(feed["x"]).max()) / 127, rel=1e-5)


def test_quantize_errors_and_exit_codes(model_path, tmp_path):
    res = invoke("quantize", model_path, "-o", tmp_path / "q.onnx", "--node", "nope")
    assert res.exit_code == 2 and any("no DCN node of that name" in e for e in error_lines(res))
    assert not (tmp_path / "q.onnx").exists()
    res = invoke("quantize", model_path, "-o", model_path)
    assert res.exit_code == 2
    res = invoke("quantize", model_path, "-o", tmp_path / "q.onnx", "--type", "int4")
    assert res.exit_code == 2
    plain = tmp_path / "plain.onnx"
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2])]),
        opset_imports=[onnx.helper.make_opsetid("", 19)]), str(plain))
    res = invoke("quantize", plain, "-o", tmp_path / "q.onnx", "--json")
    assert res.exit_code == 1 and one_json(res.stdout)["errors"][0]["type"] == "NoMatchError"


def test_api_quantize_in_memory(model_path):
    result = api.quantize(model_path, quant_type="int8", samples=1)
    assert result.model is not None and result["ok"]
    ops = {n.op_type for n in result.model.graph.node}
    assert ops == {"QuantizeLinear", "DequantizeLinear", "DeformConv"}
