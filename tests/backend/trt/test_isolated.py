"""Builds in a child process: what the parent makes of each way the child can end (no TensorRT
needed: tests/support/fake_worker.py stands in for the worker), and the worker's warning filter."""

from __future__ import annotations

import logging
import types
from pathlib import Path

import onnx
import pytest
from onnx import helper

from dcnconvert import schema
from dcnconvert.backend.trt import builder, engine, isolated, worker
from dcnconvert.errors import BuildError, ValidationError

TESTS = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_worker(monkeypatch):
    monkeypatch.setattr(isolated, "WORKER_MODULE", "support.fake_worker")
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


def run(mode: str, tmp_path: Path) -> dict:
    engine_file = tmp_path / "engine.plan"
    return isolated.run_worker({"mode": mode, "engine": str(engine_file)}, tmp_path, "tensorrt", "testing")


def test_a_child_that_aborts(fake_worker, tmp_path, caplog):
    with caplog.at_level(logging.INFO), pytest.raises(BuildError) as info:
        run("abort", tmp_path)
    crash = info.value.payload["crash"]
    assert crash == {"stage": "parse", "signal": "SIGABRT", "returncode": -6,
                     "log_tail": ["[W] a warning from the child", "raw text from a native library"]}
    assert "died of signal SIGABRT during stage 'parse'" in str(info.value)
    assert "raw text from a native library" in str(info.value) and info.value.exit_code == 1
    # the child's record was logged here under its own name and level
    (record,) = [r for r in caplog.records if r.getMessage() == "a warning from the child"]
    assert record.name == "dcnconvert.trt" and record.levelno == logging.WARNING


def test_a_child_that_exits_without_a_result(fake_worker, tmp_path):
    with pytest.raises(BuildError, match="exited with code 3 without a result") as info:
        run("exit", tmp_path)
    assert info.value.payload["crash"]["signal"] is None and info.value.payload["crash"]["returncode"] == 3


def test_an_error_keeps_its_class_and_node(fake_worker, tmp_path):
    with pytest.raises(ValidationError, match="bad node") as info:
        run("error", tmp_path)
    assert info.value.node == "dcn3" and info.value.hint == "fix it"


def test_a_result(fake_worker, tmp_path):
    result = run("ok", tmp_path)
    assert result["ok"] and result["network"]["layers"] == 1
    assert (tmp_path / "engine.plan").read_bytes() == b"plan"


def test_rtx_children_get_the_link_and_polygraphy_switch(monkeypatch, tmp_path):
    from dcnconvert.backend.trt import rtx

    monkeypatch.setattr(rtx, "loader_environment", lambda env: dict(env, LD_LIBRARY_PATH="/link:/other"))
    monkeypatch.setenv("POLYGRAPHY_USE_TENSORRT_RTX", "1")
    env = isolated._environment("tensorrt-rtx")
    assert env["LD_LIBRARY_PATH"] == "/link:/other" and env["POLYGRAPHY_USE_TENSORRT_RTX"] == "1"
    env = isolated._environment("tensorrt")
    assert "POLYGRAPHY_USE_TENSORRT_RTX" not in env
    assert env["PYTHONPATH"].split(":")[0] == str(Path(isolated.__file__).resolve().parents[3])


def _record(message: str) -> logging.LogRecord:
    return logging.makeLogRecord({"name": "Polygraphy", "levelno": logging.WARNING, "msg": message})


def test_quiet_fields_drop_at_most_the_budget():
    quiet = worker._QuietFields({"allow_tf32": 2, "bias": 0})
    warn = "[W] onnxOpImporters.cpp:8789: Attribute {} not found in plugin node! Ensure that ..."
    assert [quiet.filter(_record(warn.format("allow_tf32"))) for _ in range(3)] == [False, False, True]
    assert quiet.filter(_record(warn.format("bias"))) is True  # no budget: the warning stays
    assert quiet.filter(_record(warn.format("stride"))) is True
    assert quiet.filter(_record("[W] something else")) is True
    assert quiet.counts == {"allow_tf32": 2}


def _plugin_node(name: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(schema.PLUGIN_NAME, ["x", "o", "m"], [name + "_y"], name=name,
                            domain=schema.PLUGIN_DOMAIN, **attrs)


def test_quiet_field_budget_counts_what_each_node_lacks():
    nodes = [_plugin_node("a", weight=helper.make_tensor("w", 1, [1], [1.0]), weight_shape=[1, 1, 1, 1]),
             _plugin_node("b", allow_tf32=1),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "g", [], []))
    assert engine.quiet_field_budget(model, "dcnconvert") == {
        "allow_tf32": 1, "bias": 2, "weight": 1, "weight_shape": 1,
        "quant_type": 2, "x_scale": 2, "weight_scale": 2, "output_scale": 2}
    assert engine.quiet_field_budget(model, "trt-builtin") == {}


@pytest.mark.parametrize("types_, typed, words", [
    (["FLOAT", "INT32", "FLOAT"], False, "input 1 is INT32"),
    (["HALF", "FLOAT", "HALF"], True, "its inputs are HALF, FLOAT, HALF"),
])
def test_plugin_types_refused_naming_the_node(types_, typed, words):
    network = {"plugin_layers": [{"name": "dcn1", "inputs": types_, "outputs": ["FLOAT"]}]}
    with pytest.raises(BuildError, match=words) as info:
        builder.check_plugin_types(network, ["dcn1"], typed)
    assert info.value.node == "dcn1"


def test_plugin_types_accepted():
    network = {"plugin_layers": [{"name": "dcn1", "inputs": ["HALF", "FLOAT", "HALF"], "outputs": ["HALF"]},
                                 {"name": "other", "inputs": ["INT32"], "outputs": ["INT32"]}]}
    builder.check_plugin_types(network, ["dcn1"], strongly_typed=False)  # TensorRT 10 converts between floats
    builder.check_plugin_types(types.MappingProxyType(network), [], strongly_typed=True)  # not ours


@pytest.mark.parametrize("x", ["INT8", "FP8"])
def test_quantized_x_accepted_with_float_offset_and_mask(x):
    """A quantized node (3 inputs): x INT8 or FP8, offset and mask of one float type."""
    for output in (x, "HALF"):
        network = {"plugin_layers": [{"name": "dcnq", "inputs": [x, "HALF", "HALF"], "outputs": [output]}]}
        builder.check_plugin_types(network, ["dcnq"], strongly_typed=True)
    refused = [([x, "HALF", "FLOAT"], True, "its inputs are"), ([x, x, x], False, f"input 1 is {x}"),
               ([x, "FLOAT", "FLOAT", "FLOAT"], False, f"input 0 is {x}"),
               (["HALF", x, "HALF"], False, "input 1")]
    for inputs, typed, words in refused:
        network = {"plugin_layers": [{"name": "dcnq", "inputs": inputs, "outputs": ["HALF"]}]}
        with pytest.raises(BuildError, match=words):
            builder.check_plugin_types(network, ["dcnq"], typed)
