"""The engine commands (build, convert, verify, plugin-path): exit codes, the --json contract, files.

Without TensorRT (this machine, CI) they stop with exit code 4 naming the missing piece and the install
command. With the fake adapter of ``support/fake_trt.py`` installed in place of the TensorRT calls,
the whole command flow runs on the CPU (the fake "engine" is the parsed ONNX, run by the NumPy/ONNX
reference).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from support import samples
from support.fake_trt import FakeAdapter

from dcnconvert import schema
from dcnconvert.backend.plugin import library as plugin_lib
from dcnconvert.cli.main import cli
from dcnconvert.model import io as onnx_io

STANDARD_KEYS = {
    "schema_version",
    "command",
    "version",
    "ok",
    "exit_code",
    "inputs",
    "outputs",
    "timings",
    "warnings",
    "errors",
}
#: As on a machine without TensorRT or TensorRT-RTX, whichever this one has.
no_trt = pytest.mark.usefixtures("no_engine_runtime")


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_json(stdout: str) -> dict:
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    obj = json.loads(lines[0])
    assert STANDARD_KEYS <= set(obj) and obj["schema_version"] == 1
    return obj


def error_lines(res) -> list:
    assert "Traceback" not in res.stderr, res.stderr
    return [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]


@pytest.fixture
def static_model(tmp_path) -> Path:
    path = tmp_path / "mmcv.onnx"
    onnx.save(samples.build("mmcv.MMCVModulatedDeformConv2d", seed=3), str(path))
    return path


@pytest.fixture
def dynamic_model(tmp_path) -> Path:
    path = tmp_path / "dyn.onnx"
    onnx.save(samples.build("mmcv.MMCVDeformConv2d", dynamic=True, seed=3), str(path))
    return path


@pytest.fixture
def plugin_env(tmp_path, monkeypatch) -> Path:
    lib = tmp_path / "lib" / plugin_lib.LIB_NAME
    lib.parent.mkdir()
    lib.write_bytes(b"\x7fELF fake")
    monkeypatch.setenv(plugin_lib.ENV_VAR, str(lib))
    return lib


@pytest.fixture
def fake11(monkeypatch, plugin_env):
    return FakeAdapter("11.1.0").install(monkeypatch)


# ------------------------------------------------------------------------------------------------
# without TensorRT
# ------------------------------------------------------------------------------------------------


@no_trt
class TestWithoutTensorrt:
    def test_build_exits_4(self, static_model, tmp_path):
        out = tmp_path / "out" / "m.engine"
        out.parent.mkdir()
        res = invoke("build", static_model, "-o", out, "--json")
        assert res.exit_code == 4
        (line,) = error_lines(res)
        assert "TensorRT" in line and "not installed" in line
        assert "hint: install TensorRT" in res.stderr and "pip install 'dcnconvert[trt]'" in res.stderr
        obj = one_json(res.stdout)
        assert obj["command"] == "build" and obj["ok"] is False and obj["exit_code"] == 4
        assert obj["errors"][0]["type"] == "MissingDependencyError"
        assert list(out.parent.iterdir()) == []

    def test_convert_writes_onnx_then_exits_4(self, static_model, tmp_path):
        out = tmp_path / "m.engine"
        res = invoke("convert", static_model, "-o", out, "--json")
        assert res.exit_code == 4
        (line,) = error_lines(res)
        assert f"written to {tmp_path / 'm.onnx'}" in line and "TensorRT" in line
        obj = one_json(res.stdout)
        assert obj["outputs"] == {"onnx": str(tmp_path / "m.onnx")}
        assert obj["rewrite"]["rewritten"] and not out.exists()
        written = onnx.load(str(tmp_path / "m.onnx"))
        assert [n.op_type for n in written.graph.node if n.domain == schema.PLUGIN_DOMAIN] == [
            schema.PLUGIN_NAME
        ]

    def test_convert_dynamic_model_still_writes_onnx(self, dynamic_model, tmp_path):
        res = invoke("convert", dynamic_model, "-o", tmp_path / "d.engine")
        assert res.exit_code == 4 and (tmp_path / "d.onnx").exists()

    def test_convert_keeps_external_data_layout(self, tmp_path):
        """Like `rewrite`: an input with its weights in a .data file gives OUT.onnx + OUT.onnx.data."""
        src = tmp_path / "src"
        src.mkdir()
        onnx.save_model(samples.build("mmcv.MMCVModulatedDeformConv2d", c=16, cout=16, seed=2),
                        str(src / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                        location="ext.onnx.data", size_threshold=0)
        res = invoke("convert", src / "ext.onnx", "-o", tmp_path / "m.engine", "--json")
        assert res.exit_code == 4
        obj = one_json(res.stdout)
        assert obj["outputs"]["onnx"] == str(tmp_path / "m.onnx")
        assert Path(obj["outputs"]["onnx_data"]).is_file()
        assert onnx_io.file_uses_external_data(tmp_path / "m.onnx")

    def test_verify_exits_4(self, static_model, tmp_path):
        engine = tmp_path / "m.engine"
        engine.write_bytes(b"not really")
        res = invoke("verify", engine, "--model", static_model)
        assert res.exit_code == 4 and len(error_lines(res)) == 1

    def test_subprocess_exit_code(self, static_model, tmp_path):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "dcnconvert",
                "build",
                str(static_model),
                "-o",
                str(tmp_path / "x.engine"),
                "--json",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 4
        assert json.loads(proc.stdout)["exit_code"] == 4


class TestUsage:
    def test_convert_to_onnx_path(self, static_model, tmp_path):
        res = invoke("convert", static_model, "-o", tmp_path / "x.onnx")
        assert res.exit_code == 2 and "names an ONNX file" in error_lines(res)[0]

    @pytest.mark.parametrize(
        "args, message",
        [
            (["--workspace", "lots"], "cannot read the size"),
            (["--precision", "fp32", "--io-precision", "fp16"], "needs --precision fp16"),
        ],
    )
    def test_bad_options(self, static_model, tmp_path, args, message):
        res = invoke("build", static_model, "-o", tmp_path / "x.engine", *args)
        assert res.exit_code == 2 and message in error_lines(res)[0]
        assert not (tmp_path / "x.engine").exists()

    @pytest.mark.parametrize("which", ["engine", "each other"])
    def test_verify_save_path_is_not_the_engine(self, static_model, tmp_path, which):
        engine = tmp_path / "m.engine"
        engine.write_bytes(b"engine bytes")
        other = engine if which == "engine" else tmp_path / "same.json"
        res = invoke("verify", engine, "--model", static_model, "--save-inputs", tmp_path / "same.json",
                     "--save-outputs", other, "--json")
        assert res.exit_code == 2 and "is also" in error_lines(res)[0]
        assert engine.read_bytes() == b"engine bytes" and not (tmp_path / "same.json").exists()
        assert one_json(res.stdout)["errors"][0]["type"] == "UsageError"

    @pytest.mark.parametrize("command", ["build", "convert"])
    def test_timing_cache_folder_is_checked_before_the_build(self, static_model, tmp_path, command):
        res = invoke(command, static_model, "-o", tmp_path / "m.engine",
                     "--timing-cache", tmp_path / "no" / "cache.bin")
        assert res.exit_code == 1 and "does not exist" in error_lines(res)[0]
        engine = tmp_path / "m.engine"
        res = invoke(command, static_model, "-o", engine, "--timing-cache", engine)
        assert res.exit_code == 2 and "also the engine" in error_lines(res)[0]
        assert list(tmp_path.iterdir()) == [static_model]

    def test_convert_engine_beside_its_input_names_another_engine(self, static_model, tmp_path):
        # -o mmcv.engine puts the rewritten model at mmcv.onnx, the input: refused, and the hint
        # names an engine whose rewritten model is a new file.
        before = static_model.read_bytes()
        res = invoke("convert", static_model, "-o", tmp_path / "mmcv.engine")
        assert res.exit_code == 2 and "is the input model" in error_lines(res)[0]
        assert f"-o {tmp_path / 'mmcv_dcn.engine'} (writes {tmp_path / 'mmcv_dcn.onnx'}" in res.stderr
        assert static_model.read_bytes() == before and list(tmp_path.iterdir()) == [static_model]

    def test_convert_save_path_is_not_the_rewritten_model(self, static_model, tmp_path):
        res = invoke("convert", static_model, "-o", tmp_path / "m.engine", "--verify",
                     "--save-inputs", tmp_path / "m.onnx")
        assert res.exit_code == 2 and "the rewritten model" in error_lines(res)[0]
        assert list(tmp_path.iterdir()) == [static_model]

    def test_convert_verify_bf16_io_is_refused_before_the_build(self, fake11, static_model, tmp_path):
        res = invoke("convert", static_model, "-o", tmp_path / "m.engine", "--precision", "bf16",
                     "--io-precision", "bf16", "--verify")
        assert res.exit_code == 2 and "bf16" in error_lines(res)[0]
        assert fake11.build_calls == [] and not (tmp_path / "m.onnx").exists()


class TestPluginPath:
    def test_missing(self, monkeypatch, tmp_path):
        monkeypatch.delenv(plugin_lib.ENV_VAR, raising=False)
        monkeypatch.setenv(plugin_lib.CACHE_ENV_VAR, str(tmp_path / "cache"))
        monkeypatch.setattr(plugin_lib, "_package_dir", lambda: tmp_path)
        res = invoke("plugin-path")
        assert res.exit_code == 4 and res.stdout == ""
        assert "dcnconvert plugin build" in res.stderr

    def test_prints_only_the_path(self, plugin_env):
        res = invoke("plugin-path")
        assert res.exit_code == 0 and res.stdout == f"{plugin_env.resolve()}\n"
        assert "given by $DCNCONVERT_PLUGIN_LIB" in res.stderr
        obj = one_json(invoke("plugin-path", "--json").stdout)
        assert obj["plugin_library"] == str(plugin_env.resolve())
        assert obj["origin"] == "$DCNCONVERT_PLUGIN_LIB"
        assert obj["reason"] == "given by $DCNCONVERT_PLUGIN_LIB"

    def test_chooses_by_the_tensorrt_version(self, monkeypatch, tmp_path):
        monkeypatch.delenv(plugin_lib.ENV_VAR, raising=False)
        monkeypatch.setenv(plugin_lib.CACHE_ENV_VAR, str(tmp_path / "cache"))
        monkeypatch.setattr(plugin_lib, "_package_dir", lambda: tmp_path)
        line = "dcnconvert-plugin-build-info: tensorrt_headers={} cuda_runtime=13000 archs=sm_90a compute_90"
        libs = {}
        for major, headers in ((10, "10.3.0"), (11, "11.1.0")):
            libs[major] = tmp_path / "_lib" / f"trt{major}" / plugin_lib.LIB_NAME
            libs[major].parent.mkdir(parents=True)
            libs[major].write_bytes(b"\x7fELF\0" + line.format(headers).encode() + b"\0")
        for version, major in (("10.16.1.11", 10), ("11.4", 11)):
            obj = one_json(invoke("plugin-path", "--tensorrt-version", version, "--json").stdout)
            assert obj["plugin_library"] == str(libs[major]) and obj["origin"] == "bundled"
            assert obj["library_tensorrt_major"] == major and obj["tensorrt_version"] == version
            assert obj["build_info"]["tensorrt_headers"] == ("10.3.0" if major == 10 else "11.1.0")
        res = invoke("plugin-path", "--tensorrt-version", "12.0")
        assert res.exit_code == 4 and "no plugin library for TensorRT 12" in res.stderr


# ------------------------------------------------------------------------------------------------
# with a fake TensorRT 11 (graph-cast) adapter
# ------------------------------------------------------------------------------------------------


class TestWithFakeTensorrt:
    def test_build_fp16_json(self, fake11, static_model, tmp_path):
        out = tmp_path / "m.engine"
        res = invoke("build", static_model, "-o", out, "--precision", "fp16", "--json")
        assert res.exit_code == 0, res.stderr
        obj = one_json(res.stdout)
        assert obj["ok"] and obj["precision_path"] == "graph-cast" and obj["tensorrt_version"] == "11.1.0"
        assert obj["outputs"]["engine"] == str(out) and out.is_file()
        assert obj["cast"]["plugin_nodes"] == 1 and obj["cast"]["precision"] == "fp16"
        assert {"load", "rewrite", "build", "total"} <= set(obj["timings"])
        assert "Building the FP16 engine" in res.stderr  # progress on stderr

    def test_builder_flag_refused_on_11(self, fake11, static_model, tmp_path):
        res = invoke(
            "build",
            static_model,
            "-o",
            tmp_path / "m.engine",
            "--precision",
            "fp16",
            "--precision-path",
            "builder-flag",
        )
        assert res.exit_code == 2 and "no FP16 builder flag" in error_lines(res)[0]

    def test_dynamic_inputs_need_shapes(self, fake11, dynamic_model, tmp_path):
        res = invoke("build", dynamic_model, "-o", tmp_path / "m.engine")
        assert res.exit_code == 2
        line = error_lines(res)[0]
        assert "x ['N',4,'H','W']" in line and "offset ['N',18,'OH','OW']" in line
        assert not (tmp_path / "m.engine").exists()

    def test_convert_verify_and_files(self, fake11, dynamic_model, tmp_path):
        out = tmp_path / "d.engine"
        res = invoke(
            "convert",
            dynamic_model,
            "-o",
            out,
            "--precision",
            "fp16",
            "--verify",
            "--min-shapes",
            "x:1x4x7x9 offset:1x18x7x9",
            "--opt-shapes",
            "x:2x4x7x9 offset:2x18x7x9",
            "--max-shapes",
            "x:4x4x7x9 offset:4x18x7x9",
            "--save-inputs",
            tmp_path / "in.json",
            "--save-outputs",
            tmp_path / "ref.json",
            "--print-commands",
        )
        assert res.exit_code == 0, res.stderr
        assert "ok" in res.stdout and "--plugins $(dcnconvert plugin-path) --load-inputs" in res.stdout
        for name in ("d.engine", "d.onnx", "in.json", "ref.json"):
            assert (tmp_path / name).is_file()

    def test_convert_verify_mismatch_exits_3(self, monkeypatch, plugin_env, static_model, tmp_path):
        FakeAdapter("11.1.0", noise=0.05).install(monkeypatch)
        res = invoke("convert", static_model, "-o", tmp_path / "m.engine", "--verify", "--json")
        assert res.exit_code == 3
        obj = one_json(res.stdout)
        assert obj["ok"] is False and obj["errors"][0]["type"] == "AccuracyError"
        assert obj["comparison"][0]["passed"] is False and obj["outputs"]["engine"] == str(
            tmp_path / "m.engine"
        )
        assert len(error_lines(res)) == 1

    def test_verify_command(self, fake11, static_model, tmp_path):
        engine = tmp_path / "m.engine"
        assert invoke("build", static_model, "-o", engine, "--precision", "bf16").exit_code == 0
        res = invoke(
            "verify", engine, "--model", static_model, "--precision", "bf16", "--json", "--seed", "4"
        )
        assert res.exit_code == 0, res.stderr
        obj = one_json(res.stdout)
        assert obj["passed"] and obj["tolerances"]["atol"] == 5e-2
        assert obj["commands"][2].startswith(f"polygraphy run {engine} --model-type engine --trt --plugins")
        text = invoke("verify", engine, "--model", static_model, "--precision", "bf16")
        assert text.exit_code == 0 and "max abs" in text.stdout
        # given inputs: recorded in the JSON object's inputs
        saved = tmp_path / "in.json"
        bf16 = ("--precision", "bf16")
        assert invoke("verify", engine, "--model", static_model, *bf16, "--save-inputs", saved).exit_code == 0
        res = invoke("verify", engine, "--model", static_model, *bf16, "--inputs", saved, "--json")
        assert res.exit_code == 0, res.stderr
        assert one_json(res.stdout)["inputs"] == {"engine": str(engine), "model": str(static_model),
                                                  "inputs_file": str(saved)}

    def test_verify_reference_that_onnxruntime_cannot_run(self, fake11, tmp_path):
        """Another custom op in the model: one clean error (exit 1), not an internal-error traceback."""
        model = samples.build("mmcv.MMCVModulatedDeformConv2d", seed=3)
        output = onnx.ValueInfoProto()
        output.CopyFrom(model.graph.output[0])
        model.graph.node.append(onnx.helper.make_node("MyPostProcess", [output.name], ["post"],
                                                      domain="custom.ops", name="post"))
        model.opset_import.append(onnx.helper.make_opsetid("custom.ops", 1))
        output.name = "post"
        del model.graph.output[:]
        model.graph.output.append(output)
        path = tmp_path / "custom.onnx"
        onnx.save(model, str(path))
        engine = tmp_path / "m.engine"
        assert invoke("build", path, "-o", engine).exit_code == 0  # the fake engine: the parsed ONNX
        res = invoke("verify", engine, "--model", path, "--json")
        assert res.exit_code == 1, res.stderr
        (line,) = error_lines(res)
        assert "ONNX Runtime" in line and "MyPostProcess" in line
        obj = one_json(res.stdout)
        assert obj["errors"][0]["type"] == "ModelError" and "onnxruntime >= 1.25" in obj["errors"][0]["hint"]

