"""The library API (dcnconvert.api): the commands' work from Python, with the results --json prints."""

from __future__ import annotations

import copy
import json

import onnx
import pytest
from click.testing import CliRunner
from conftest import REPO

from dcnconvert import api, errors, schema
from dcnconvert.cli.main import cli
from dcnconvert.report import STANDARD_KEYS

SAMPLE = REPO / "sample_models" / "mmcv_MMCVModulatedDeformConv2d.onnx"
BLOCK = REPO / "sample_models" / "dcn_resnet_block.onnx"  # a network with several DCN layers


def cli_json(*args: str) -> dict:
    res = CliRunner().invoke(cli, [*map(str, args), "--json"])
    return json.loads(res.stdout)


def comparable(obj: dict) -> dict:
    """The parts of a result that do not depend on the run (timings) or on how it was called."""
    out = {k: v for k, v in obj.items() if k not in ("timings", "inputs", "outputs")}
    return json.loads(json.dumps(out))


def test_inspect_from_a_path_and_from_a_model_equals_the_cli():
    from_path = api.inspect(SAMPLE)
    assert list(from_path)[: len(STANDARD_KEYS)] == list(STANDARD_KEYS)
    assert from_path["ok"] and from_path["count"] == 1 and from_path["convertible"] == 1
    assert comparable(from_path) == comparable(cli_json("inspect", SAMPLE))
    proto = onnx.load(str(SAMPLE))
    from_model = api.inspect(proto, target=schema.TARGET_TRT_BUILTIN.name)
    assert from_model["inputs"] == {"model": "<ModelProto>"} and from_model["target"] == "trt-builtin"


def test_rewrite_to_a_file_equals_the_cli(tmp_path):
    ours, theirs = tmp_path / "api.onnx", tmp_path / "cli.onnx"
    result = api.rewrite(SAMPLE, ours)
    assert result["outputs"]["onnx"] == str(ours) and ours.is_file()
    assert comparable(result) == comparable(cli_json("rewrite", SAMPLE, "-o", theirs))
    assert ours.read_bytes() == theirs.read_bytes()
    assert result.model is not None


def test_rewrite_in_memory_leaves_the_given_model_alone():
    proto = onnx.load(str(BLOCK))
    before = copy.deepcopy(proto)
    result = api.rewrite(proto, allow_tf32=True)
    assert proto == before
    plugin_nodes = [n for n in result.model.graph.node if schema.is_plugin_node(n)]
    assert len(plugin_nodes) == len(result["rewrite"]["rewritten"]) >= 1
    assert all(any(a.name == schema.ATTR_ALLOW_TF32 for a in n.attribute) for n in plugin_nodes)
    assert result["outputs"] == {}


def test_reference_runs_in_onnx_runtime_as_the_cli_writes_it(tmp_path):
    result = api.reference(SAMPLE)
    ops = {n.op_type for n in result.model.graph.node}
    assert "DeformConv" in ops and "MMCVModulatedDeformConv2d" not in ops
    path = tmp_path / "ref.onnx"
    written = api.reference(SAMPLE, path)
    assert written["outputs"]["onnx"] == str(path)
    assert onnx.load(str(path)).graph == result.model.graph


def test_errors_are_raised_with_the_exit_code_and_the_partial_result(tmp_path):
    with pytest.raises(errors.UsageError) as info:
        api.rewrite(SAMPLE, SAMPLE)  # never overwrites its input
    assert info.value.exit_code == 2 and info.value.result["ok"] is False
    assert info.value.result["errors"][0]["type"] == "UsageError"
    with pytest.raises(errors.NoMatchError):
        model = onnx.helper.make_model(onnx.helper.make_graph([], "empty", [], []))
        api.rewrite(model, require_match=True)


def test_convert_without_tensorrt_still_writes_the_rewritten_model(tmp_path, monkeypatch):
    from dcnconvert.backend.trt import engine as build_mod

    def no_tensorrt(options, trt_adapter=None):
        raise errors.MissingDependencyError("TensorRT's Python package is not installed", hint="pip install")

    monkeypatch.setattr(build_mod, "check_environment", no_tensorrt)
    engine = tmp_path / "m.engine"
    with pytest.raises(errors.MissingDependencyError) as info:
        api.convert(SAMPLE, engine)
    assert info.value.exit_code == 4 and "the rewritten model was written to" in str(info.value)
    assert (tmp_path / "m.onnx").is_file() and not engine.exists()
    assert info.value.result["outputs"]["onnx"] == str(tmp_path / "m.onnx")
    assert info.value.result["rewrite"]["rewritten"]
    with pytest.raises(errors.MissingDependencyError):
        api.build(SAMPLE, engine)
    assert not engine.exists()


def test_the_package_re_exports_the_api_and_stays_cheap_to_import():
    import subprocess
    import sys

    import dcnconvert

    assert dcnconvert.rewrite is api.rewrite and dcnconvert.Result is api.Result
    code = "import sys, dcnconvert; print('onnx' in sys.modules, dcnconvert.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", dcnconvert.__version__]
