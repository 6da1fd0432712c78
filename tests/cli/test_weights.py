"""``--weights embed|input`` on every command that rewrites (rewrite, build, convert): embedded by
default for --target dcnconvert, node inputs with ``input`` (today's output), a usage error with
trt-builtin; inspect shows embedded weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import error_lines, invoke, one_json
from onnx import numpy_helper
from support import samples
from support.fake_trt import FakeAdapter

from dcnconvert import api, schema
from dcnconvert.backend.plugin import library as plugin_lib
from dcnconvert.backend.trt.engine import BuildOptions
from dcnconvert.errors import UsageError
from dcnconvert.transform.plugin import rewrite_model


def plugin_inputs(model: onnx.ModelProto) -> list[list[str]]:
    return [list(n.input) for n in model.graph.node if schema.is_plugin_node(n)]


def embedded_names(model: onnx.ModelProto) -> list[list[str]]:
    return [[a.name for a in n.attribute if a.name in ("weight", "weight_shape", "bias")]
            for n in model.graph.node if schema.is_plugin_node(n)]


@pytest.fixture
def static_model(tmp_path: Path) -> Path:
    path = tmp_path / "mmcv.onnx"
    onnx.save(samples.build("mmcv.MMCVModulatedDeformConv2d", seed=3), str(path))
    return path


@pytest.fixture
def fake11(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeAdapter:
    lib = tmp_path / "lib" / plugin_lib.LIB_NAME
    lib.parent.mkdir()
    lib.write_bytes(b"\x7fELF fake")
    monkeypatch.setenv(plugin_lib.ENV_VAR, str(lib))
    return FakeAdapter("11.1.0").install(monkeypatch)


class TestRewrite:
    def test_default_embeds(self, static_model: Path, tmp_path: Path) -> None:
        out = tmp_path / "out.onnx"
        res = invoke("rewrite", static_model, "-o", out, "--json")
        assert res.exit_code == 0, res.stderr
        obj = one_json(res.stdout)["rewrite"]
        assert obj["weights"] == "embed" and obj["embedded"] == ["dcn0"] and obj["weights_as_inputs"] == []
        written = onnx.load(str(out))
        assert plugin_inputs(written) == [["x", "offset", "mask"]]
        assert embedded_names(written) == [["weight", "weight_shape", "bias"]]
        assert "(weights embedded)" in res.stderr and "1 with embedded weights" in res.stderr
        expected, _ = rewrite_model(onnx.load(str(static_model)))
        assert written.SerializeToString() == expected.SerializeToString()

    def test_weights_input_is_the_input_form(self, static_model: Path, tmp_path: Path) -> None:
        out = tmp_path / "out.onnx"
        res = invoke("rewrite", static_model, "-o", out, "--weights", "input", "--json")
        assert res.exit_code == 0, res.stderr
        obj = one_json(res.stdout)["rewrite"]
        assert obj["weights"] == "input" and obj["embedded"] == []
        written = onnx.load(str(out))
        assert plugin_inputs(written) == [["x", "offset", "mask", "weight", "bias"]]
        assert embedded_names(written) == [[]]
        expected, _ = rewrite_model(onnx.load(str(static_model)), embed_weights=False)
        assert written.SerializeToString() == expected.SerializeToString()
        again = tmp_path / "again.onnx"  # and back: embed the inputs of the rewritten model
        res = invoke("rewrite", out, "-o", again, "--weights", "embed", "--json")
        assert res.exit_code == 0 and one_json(res.stdout)["rewrite"]["rewritten"] == ["dcn0"]
        direct, _ = rewrite_model(onnx.load(str(static_model)))
        assert onnx.load(str(again)).SerializeToString() == direct.SerializeToString()

    def test_trt_builtin_embed_is_a_usage_error(self, static_model: Path, tmp_path: Path) -> None:
        out = tmp_path / "out.onnx"
        res = invoke("rewrite", static_model, "-o", out, "--target", "trt-builtin", "--weights", "embed",
                     "--json")
        assert res.exit_code == 2
        (line,) = error_lines(res)
        assert "--weights embed" in line and "--target trt-builtin" in line
        assert "takes them as inputs only" in line
        hint = "hint: use --target dcnconvert (our bundled plugin) to embed them, or --weights input"
        assert hint in res.stderr
        assert one_json(res.stdout)["errors"][0]["type"] == "UsageError" and not out.exists()
        res = invoke("rewrite", static_model, "-o", out, "--target", "trt-builtin")  # its default: inputs
        assert res.exit_code == 0 and plugin_inputs(onnx.load(str(out))) == [["x", "offset", "mask", "weight",
                                                                               "bias"]]

    def test_bad_value_is_clicks_usage_error(self, static_model: Path, tmp_path: Path) -> None:
        res = invoke("rewrite", static_model, "-o", tmp_path / "o.onnx", "--weights", "inline")
        assert res.exit_code == 2 and "'inline' is not one of 'embed', 'input'" in res.stderr

    def test_inspect_marks_embedded_weights(self, static_model: Path, tmp_path: Path) -> None:
        out = tmp_path / "out.onnx"
        assert invoke("rewrite", static_model, "-o", out).exit_code == 0
        res = invoke("inspect", out)
        assert res.exit_code == 0, res.stderr
        row = res.stdout.splitlines()[2]
        assert "[6,4,3,3] embedded" in row and row.split()[-2:] == ["embedded", "yes"]
        (match,) = one_json(invoke("inspect", out, "--json").stdout)["matches"]
        assert match["embedded"] == ["weight", "bias"] and match["shapes"]["weight"] == [6, 4, 3, 3]

    def test_reference_of_an_embedded_model(self, static_model: Path, tmp_path: Path) -> None:
        out, std = tmp_path / "out.onnx", tmp_path / "std.onnx"
        assert invoke("rewrite", static_model, "-o", out).exit_code == 0
        res = invoke("reference", out, "-o", std)
        assert res.exit_code == 0, res.stderr
        model = onnx.load(str(std))
        (node,) = [n for n in model.graph.node if n.op_type == "DeformConv"]
        weight = {t.name: t for t in model.graph.initializer}[node.input[1]]
        original = {t.name: t for t in onnx.load(str(static_model)).graph.initializer}["weight"]
        np.testing.assert_array_equal(numpy_helper.to_array(weight), numpy_helper.to_array(original))

    def test_help(self) -> None:
        for command in ("rewrite", "build", "convert"):
            res = invoke(command, "--help")
            assert res.exit_code == 0 and "--weights [embed|input]" in res.stdout, command


class TestApi:
    def test_library_weights_argument(self, static_model: Path) -> None:
        result = api.rewrite(static_model, weights="input")
        assert plugin_inputs(result.model) == [["x", "offset", "mask", "weight", "bias"]]
        assert result["rewrite"]["weights"] == "input"
        assert plugin_inputs(api.rewrite(static_model).model) == [["x", "offset", "mask"]]
        with pytest.raises(UsageError, match="--weights embed puts the weight") as info:
            api.rewrite(static_model, target="trt-builtin", weights="embed")
        assert info.value.exit_code == 2

    def test_build_options(self) -> None:
        assert BuildOptions().embed_weights is True
        assert BuildOptions(weights="input").embed_weights is False
        assert BuildOptions(target="trt-builtin").embed_weights is False
        with pytest.raises(UsageError, match="--target trt-builtin"):
            BuildOptions(target="trt-builtin", weights="embed").validate()
        with pytest.raises(UsageError, match="'weird' is not one of embed, input"):
            BuildOptions(weights="weird").validate()


@pytest.mark.usefixtures("no_engine_runtime")
class TestConvertWithoutTensorrt:
    @pytest.mark.parametrize(("args", "inputs"),
                             [((), 3), (("--weights", "input"), 5), (("--weights", "embed"), 3)])
    def test_rewritten_model_written_before_exit_4(self, static_model: Path, tmp_path: Path, args: tuple,
                                                   inputs: int) -> None:
        res = invoke("convert", static_model, "-o", tmp_path / "m.engine", *args, "--json")
        assert res.exit_code == 4
        assert [len(i) for i in plugin_inputs(onnx.load(str(tmp_path / "m.onnx")))] == [inputs]

    @pytest.mark.parametrize("command", ["build", "convert"])
    def test_trt_builtin_embed_is_refused_before_anything(self, static_model: Path, tmp_path: Path,
                                                          command: str) -> None:
        res = invoke(command, static_model, "-o", tmp_path / "m.engine", "--target", "trt-builtin",
                     "--weights", "embed")
        assert res.exit_code == 2 and "--weights embed" in error_lines(res)[0]
        assert not (tmp_path / "m.onnx").exists() and not (tmp_path / "m.engine").exists()


class TestWithFakeTensorrt:
    @pytest.mark.parametrize(("args", "inputs"), [((), 3), (("--weights", "input"), 5)])
    def test_build_passes_the_option(self, fake11: FakeAdapter, static_model: Path, tmp_path: Path,
                                     args: tuple, inputs: int) -> None:
        res = invoke("build", static_model, "-o", tmp_path / "m.engine", "--precision", "fp16", *args,
                     "--json")
        assert res.exit_code == 0, res.stderr
        (call,) = fake11.build_calls
        assert [len(i) for i in plugin_inputs(call["model"])] == [inputs]
        obj = one_json(res.stdout)
        assert obj["cast"]["converted_embedded"] == (2 if inputs == 3 else 0)

    @pytest.mark.parametrize("weights", ["embed", "input"])
    def test_convert_verify(self, fake11: FakeAdapter, static_model: Path, tmp_path: Path,
                            weights: str) -> None:
        """Built, and verified against ONNX Runtime (the fake engine runs the plugin nodes in NumPy)."""
        res = invoke("convert", static_model, "-o", tmp_path / "m.engine", "--weights", weights, "--verify",
                     "--json")
        assert res.exit_code == 0, res.stderr
        obj = one_json(res.stdout)
        assert obj["passed"] and obj["rewrite"]["weights"] == weights
        assert obj["comparison"][0]["max_abs"] < 1e-4 and obj["comparison"][0]["elements"] > 0
