"""CLI tests: commands, exit codes, the --json contract, the bad-input corpus, file safety."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from support import samples

from dcnconvert import schema
from dcnconvert.cli.main import cli

REPO = Path(__file__).resolve().parents[2]


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_in(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def one_json(stdout: str) -> dict:
    """The stdout of a --json run: exactly one JSON object on one line."""
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    obj = json.loads(lines[0])
    assert isinstance(obj, dict)
    return obj


def assert_clean_failure(res, code: int) -> str:
    """Exit ``code``, exactly one ``error:`` line on stderr, no traceback; returns that line."""
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, res.stderr
    assert "Traceback" not in res.stderr
    return errors[0]


@pytest.fixture()
def mmcv_model(tmp_path: Path) -> Path:
    path = tmp_path / "mmcv.onnx"
    onnx.save(samples.build("mmcv.MMCVModulatedDeformConv2d", dynamic=True), path)
    return path


def _plain_conv_model() -> onnx.ModelProto:
    w_values = np.random.default_rng(1).standard_normal((2, 3, 3, 3)).astype(np.float32)
    w = numpy_helper.from_array(w_values, "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv0", pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5, 5])],
        initializer=[w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _mmcv_bad(*, c=4, cout=6, k=3, offset_c=None, mask_c=None, stride=(1, 1), padding=(1, 1),
              dilation=(1, 1), groups=1, deform_groups=1, h=7, w=9) -> onnx.ModelProto:
    """A hand-built mmcv MMCVModulatedDeformConv2d model whose attributes/shapes may be wrong."""
    kk = k * k
    offset_c = 2 * deform_groups * kk if offset_c is None else offset_c
    mask_c = deform_groups * kk if mask_c is None else mask_c
    wshape = (cout, max(c // max(groups, 1), 1), k, k)
    w_values = np.random.default_rng(2).standard_normal(wshape).astype(np.float32)
    weight = numpy_helper.from_array(w_values, "weight")
    node = helper.make_node(
        "MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"], ["y"], name="dcn_bad", domain="mmcv",
        stride=list(stride), padding=list(padding), dilation=list(dilation), groups=groups,
        deform_groups=deform_groups,
    )
    graph = helper.make_graph(
        [node], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w]),
         helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, offset_c, h, w]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, mask_c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[weight],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("mmcv", 1)]
    )


def _deformconv_3d() -> onnx.ModelProto:
    k = 3
    weight = numpy_helper.from_array(np.ones((2, 2, k, k, k), np.float32), "W")
    node = helper.make_node("DeformConv", ["X", "W", "offset"], ["Y"], name="dcn3d",
                            kernel_shape=[k, k, k], pads=[1] * 6, strides=[1, 1, 1], dilations=[1, 1, 1])
    graph = helper.make_graph(
        [node], "dcn3d",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2, 4, 4, 4]),
         helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 3 * k ** 3, 4, 4, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _write_bytes(data: bytes):
    def make(path: Path) -> None:
        path.write_bytes(data)
    return make


def _write_model(model_fn):
    def make(path: Path) -> None:
        onnx.save(model_fn(), path)
    return make


def _truncated(path: Path) -> None:
    data = samples.build("onnx.DeformConv").SerializeToString()
    path.write_bytes(data[: len(data) // 2])


#: name -> (writer, a word the error line must contain)
BAD_INPUTS = {
    "truncated": (_truncated, None),
    "not_onnx": (_write_bytes(b"this is not an ONNX model\n" * 20), None),
    "empty_file": (_write_bytes(b""), None),
    "dcn_3d": (_write_model(_deformconv_3d), "dcn3d"),
    "offset_channels": (_write_model(lambda: _mmcv_bad(offset_c=16)), "dcn_bad"),
    "mask_channels": (_write_model(lambda: _mmcv_bad(mask_c=8)), "dcn_bad"),
    "groups_not_dividing": (_write_model(lambda: _mmcv_bad(groups=3)), "dcn_bad"),
    "deform_groups_not_dividing": (_write_model(lambda: _mmcv_bad(deform_groups=3)), "dcn_bad"),
    "zero_stride": (_write_model(lambda: _mmcv_bad(stride=(0, 1))), "dcn_bad"),
    "negative_padding": (_write_model(lambda: _mmcv_bad(padding=(1, -1))), "dcn_bad"),
    "zero_dilation": (_write_model(lambda: _mmcv_bad(dilation=(1, 0))), "dcn_bad"),
}


class TestBasics:
    def test_version_and_help(self):
        from dcnconvert import __version__

        res = invoke("--version")
        assert res.exit_code == 0 and res.stdout.strip() == f"dcnconvert {__version__}"
        res = invoke("--help")
        assert res.exit_code == 0
        for name in ("inspect", "rewrite", "reference", "convert"):
            assert name in res.stdout

    def test_no_arguments_shows_help(self):
        res = invoke()
        assert "Usage: dcnconvert" in res.output and "error:" not in res.output
        assert res.exit_code in (0, 2)  # click 8.1 exits 0, 8.2+ exits 2

    @pytest.mark.parametrize("command", ["inspect", "rewrite", "reference", "convert"])
    def test_common_options_after_the_command(self, command):
        res = invoke(command, "--help")
        assert res.exit_code == 0
        for option in ("-v, --verbose", "-q, --quiet", "--json"):
            assert option in res.stdout

    def test_usage_errors_exit_2(self, mmcv_model, tmp_path):
        res = invoke("rewrite", mmcv_model)  # missing -o
        assert_clean_failure(res, 2)
        res = invoke("rewrite", mmcv_model, "-o", tmp_path / "o.onnx", "--target", "nope", "--json")
        assert_clean_failure(res, 2)
        obj = one_json(res.stdout)
        assert obj["ok"] is False and obj["exit_code"] == 2 and obj["command"] == "rewrite"
        res = invoke("inspect", tmp_path / "missing.onnx")
        assert_clean_failure(res, 2)
        assert not (tmp_path / "o.onnx").exists()


class TestInspect:
    @pytest.mark.parametrize("form", ["mmcv.MMCVModulatedDeformConv2d", "onnx.DeformConv",
                                      "mmcv.MMCVDeformConv2d", "tensorrt_pro.Plugin.DCNv2"])
    def test_table_and_json_agree(self, form, tmp_path):
        path = tmp_path / "m.onnx"
        onnx.save(samples.build(form, stride=(2, 1), padding=(1, 0), dilation=(1, 2)), path)
        text = invoke("inspect", path)
        assert text.exit_code == 0, text.stderr
        assert form in text.stdout and "dcn0" in text.stdout and "2x1" in text.stdout
        res = invoke("inspect", path, "--json")
        obj = one_json(res.stdout)
        assert obj["ok"] and obj["count"] == 1 and obj["convertible"] == 1
        (m,) = obj["matches"]
        assert m["node"] == "dcn0" and m["form"] == form
        assert (m["attrs"]["stride"] == [2, 1] and m["attrs"]["padding"] == [1, 0]
                and m["attrs"]["dilation"] == [1, 2])
        assert m["kernel"] == [3, 3] and m["shapes"]["x"] == [1, 4, 7, 9]
        assert "[I]" in res.stderr  # logs on stderr, not in the JSON stream

    def test_reports_why_not(self, tmp_path):
        path = tmp_path / "bad.onnx"
        onnx.save(_mmcv_bad(stride=(0, 1)), path)
        res = invoke("inspect", path, "--json")
        assert res.exit_code == 0
        (m,) = one_json(res.stdout)["matches"]
        assert m["convertible"] is False and "stride" in m["reason"]
        text = invoke("inspect", path)
        assert "no: " in text.stdout

    def test_no_dcn_is_a_warning(self, tmp_path):
        path = tmp_path / "plain.onnx"
        onnx.save(_plain_conv_model(), path)
        res = invoke("inspect", path, "--json")
        assert res.exit_code == 0
        obj = one_json(res.stdout)
        assert obj["count"] == 0 and obj["warnings"]
        assert "[W]" in res.stderr


class TestRewrite:
    def test_rewrite_writes_plugin_nodes_and_keeps_input(self, mmcv_model, tmp_path):
        out = tmp_path / "out.onnx"
        before = sha(mmcv_model)
        res = invoke("rewrite", mmcv_model, "-o", out, "--json")
        assert res.exit_code == 0, res.stderr
        obj = one_json(res.stdout)
        assert obj["ok"] and obj["outputs"]["onnx"] == str(out) and obj["rewrite"]["rewritten"] == ["dcn0"]
        assert {"load", "rewrite", "save", "total"} <= set(obj["timings"])
        assert sha(mmcv_model) == before
        model = onnx.load(out)
        (node,) = [n for n in model.graph.node if n.op_type == schema.PLUGIN_NAME]
        assert node.domain == schema.PLUGIN_DOMAIN
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        assert attrs[schema.ATTR_PLUGIN_NAMESPACE] == b"dcnconvert"
        onnx.checker.check_model(model)

    def test_target_trt_builtin_refuses_non_square(self, tmp_path):
        path = tmp_path / "ns.onnx"
        onnx.save(samples.build("mmcv.MMCVModulatedDeformConv2d", stride=(2, 1)), path)
        out = tmp_path / "out.onnx"
        res = invoke("rewrite", path, "-o", out, "--target", "trt-builtin")
        line = assert_clean_failure(res, 1)
        assert "dcn0" in line and "dcnconvert" in res.stderr  # names the node, suggests the default target
        assert not out.exists()
        ok = invoke("rewrite", path, "-o", out)
        assert ok.exit_code == 0 and out.exists()

    def test_no_dcn_writes_unchanged_copy(self, tmp_path):
        path = tmp_path / "plain.onnx"
        onnx.save(_plain_conv_model(), path)
        out = tmp_path / "out.onnx"
        res = invoke("rewrite", path, "-o", out, "--json")
        assert res.exit_code == 0
        assert one_json(res.stdout)["warnings"]
        assert "[W]" in res.stderr
        assert onnx.load(out).graph == onnx.load(path).graph

    def test_require_match(self, tmp_path):
        path = tmp_path / "plain.onnx"
        onnx.save(_plain_conv_model(), path)
        out = tmp_path / "out.onnx"
        res = invoke("rewrite", path, "-o", out, "--require-match", "--json")
        assert_clean_failure(res, 1)
        assert one_json(res.stdout)["errors"][0]["type"] == "NoMatchError"
        assert not out.exists()

    def test_output_equal_to_input_is_refused(self, mmcv_model, tmp_path, monkeypatch):
        before = sha(mmcv_model)
        res = invoke("rewrite", mmcv_model, "-o", mmcv_model)
        assert "input" in assert_clean_failure(res, 2)
        monkeypatch.chdir(tmp_path)
        res = invoke("rewrite", "mmcv.onnx", "-o", "./sub/../mmcv.onnx")
        assert_clean_failure(res, 2)
        link = tmp_path / "link.onnx"
        link.symlink_to(mmcv_model)
        res = invoke("reference", mmcv_model, "-o", link)
        assert_clean_failure(res, 2)
        assert sha(mmcv_model) == before

    def test_missing_output_folder(self, mmcv_model, tmp_path):
        res = invoke("rewrite", mmcv_model, "-o", tmp_path / "nope" / "out.onnx")
        assert_clean_failure(res, 1)
        assert not (tmp_path / "nope").exists()

    def test_external_data_in_and_out(self, tmp_path):
        src = tmp_path / "src"
        src.mkdir()
        model = samples.build("mmcv.MMCVModulatedDeformConv2d", c=16, cout=16)
        onnx.save_model(model, src / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                        location="ext.onnx.data", size_threshold=0)
        before = {p.name: sha(p) for p in src.iterdir()}
        out = tmp_path / "out.onnx"
        res = invoke("rewrite", src / "ext.onnx", "-o", out, "--json")
        assert res.exit_code == 0, res.stderr
        obj = one_json(res.stdout)
        assert Path(obj["outputs"]["onnx_data"]).exists()
        assert {p.name: sha(p) for p in src.iterdir()} == before
        raw = onnx.load(out, load_external_data=False)
        (plugin,) = [n for n in raw.graph.node if n.op_type == "ModulatedDeformConv2d"]
        embedded = {a.name: a.t for a in plugin.attribute if a.type == onnx.AttributeProto.TENSOR}
        # the embedded weight (2304 values) is in the data file, the 16 bias values are too small for it
        assert embedded["weight"].data_location == onnx.TensorProto.EXTERNAL
        assert embedded["bias"].data_location == onnx.TensorProto.DEFAULT
        loaded = onnx.load(out)  # loads the external data from next to out.onnx
        (plugin,) = [n for n in loaded.graph.node if n.op_type == "ModulatedDeformConv2d"]
        weights = {a.name: numpy_helper.to_array(a.t) for a in plugin.attribute
                   if a.type == onnx.AttributeProto.TENSOR}
        assert not loaded.graph.initializer  # weight and bias embedded: nothing else reads them
        fresh = samples.build("mmcv.MMCVModulatedDeformConv2d", c=16, cout=16)  # save_model changed `model`
        for t in fresh.graph.initializer:
            assert abs(numpy_helper.to_array(t)).max() > 0
            np.testing.assert_array_equal(weights[t.name], numpy_helper.to_array(t))
        res = invoke("rewrite", src / "ext.onnx", "-o", tmp_path / "inputs.onnx", "--weights", "input")
        assert res.exit_code == 0, res.stderr
        loaded = onnx.load(tmp_path / "inputs.onnx")
        weights = {t.name: numpy_helper.to_array(t) for t in loaded.graph.initializer}
        for t in fresh.graph.initializer:
            np.testing.assert_array_equal(weights[t.name], numpy_helper.to_array(t))


class TestBadInputs:
    @pytest.mark.parametrize("case", sorted(BAD_INPUTS))
    @pytest.mark.parametrize("command", ["rewrite", "reference", "convert"])
    def test_bad_input(self, case, command, tmp_path):
        writer, must_name = BAD_INPUTS[case]
        src = tmp_path / "in"
        src.mkdir()
        path = src / "bad.onnx"
        writer(path)
        before = sha(path)
        out_dir = tmp_path / "out"
        out_dir.mkdir()
        out = out_dir / ("out.engine" if command == "convert" else "out.onnx")
        res = invoke(command, path, "-o", out)
        line = assert_clean_failure(res, 1)
        if must_name:
            assert must_name in line
        assert files_in(out_dir) == set()  # nothing written, not even a temporary file
        assert files_in(src) == {"bad.onnx"} and sha(path) == before

    def test_bad_input_json(self, tmp_path):
        path = tmp_path / "bad.onnx"
        onnx.save(_mmcv_bad(padding=(1, -1)), path)
        res = invoke("rewrite", path, "-o", tmp_path / "o.onnx", "--json")
        assert_clean_failure(res, 1)
        obj = one_json(res.stdout)
        assert obj["ok"] is False and obj["exit_code"] == 1 and obj["outputs"] == {}
        (err,) = obj["errors"]
        assert err["type"] == "ValidationError" and err["hint"]


class TestReference:
    def test_reference_runs_in_onnxruntime_and_matches(self, tmp_path):
        import onnxruntime as ort
        from support import evaluate

        path = tmp_path / "m.onnx"
        model = samples.build("tensorrt_pro.Plugin.DCNv2", stride=(1, 2), dilation=(2, 1))
        onnx.save(model, path)
        rewritten, ref = tmp_path / "rw.onnx", tmp_path / "ref.onnx"
        assert invoke("rewrite", path, "-o", rewritten).exit_code == 0
        res = invoke("reference", rewritten, "-o", ref, "--json")
        assert res.exit_code == 0, res.stderr
        assert one_json(res.stdout)["outputs"]["onnx"] == str(ref)
        feeds = samples.input_feeds(model, seed=7)
        sess = ort.InferenceSession(str(ref), providers=["CPUExecutionProvider"])
        (got,) = sess.run(None, feeds)
        want = evaluate.run_model(onnx.load(rewritten), feeds)
        want = want["y"] if isinstance(want, dict) else want[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class TestConvert:
    def test_without_tensorrt_exits_4(self, mmcv_model, tmp_path, no_engine_runtime):
        out = tmp_path / "out.engine"
        res = invoke("convert", mmcv_model, "-o", out, "--json")
        assert res.exit_code == 4
        obj = one_json(res.stdout)
        assert obj["ok"] is False and obj["errors"][0]["exit_code"] == 4
        assert "TensorRT" in obj["errors"][0]["message"] + (obj["errors"][0]["hint"] or "")
        assert not out.exists()
        assert (tmp_path / "out.onnx").exists() and obj["outputs"]["onnx"] == str(tmp_path / "out.onnx")


class TestSubprocess:
    def test_python_m_dcnconvert(self, mmcv_model, tmp_path):
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.run(
            [sys.executable, "-m", "dcnconvert", "inspect", str(mmcv_model), "--json", "-v"],
            capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert one_json(proc.stdout)["matches"][0]["form"] == "mmcv.MMCVModulatedDeformConv2d"
        assert "[I]" in proc.stderr
        proc = subprocess.run([sys.executable, "-m", "dcnconvert", "rewrite", str(mmcv_model), "-o",
                               str(mmcv_model)], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=120, check=False)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith("error:") and "Traceback" not in proc.stderr
