"""TF32 from the command line: ``rewrite --allow-tf32`` and ``build/convert --tf32`` write the plugin
attribute ``allow_tf32 = 1`` (target dcnconvert); without them the output is what it always was."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from cli_runner import error_lines, invoke, one_json
from onnx import helper
from support import samples
from support.fake_trt import FakeAdapter

from dcnconvert import schema
from dcnconvert.backend.plugin import library as plugin_lib
from dcnconvert.transform.plugin import rewrite_model


def tf32_values(model: onnx.ModelProto) -> list[int | None]:
    """allow_tf32 of every plugin node (None where the node has no such attribute)."""
    values = []
    for node in model.graph.node:
        if schema.is_plugin_node(node):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            values.append(attrs.get(schema.ATTR_ALLOW_TF32))
    return values


@pytest.fixture
def two_dcn_model(tmp_path: Path) -> Path:
    """Two DCN nodes of different forms in one graph (a modulated one, then a DCNv1 one)."""
    first = samples.build("mmcv.MMCVModulatedDeformConv2d", c=4, cout=4, seed=1)
    second = samples.build("mmcv.MMCVDeformConv2d", c=4, cout=4, seed=2)
    path = tmp_path / "two.onnx"
    graph = first.graph
    rename = {"x": "y", "y": "z", "offset": "offset2", "weight": "weight2", "bias": "bias2"}
    for node in second.graph.node:
        node.input[:] = [rename.get(n, n) for n in node.input]
        node.output[:] = [rename.get(n, n) for n in node.output]
        node.name = "dcn1"
        graph.node.append(node)
    for tensor in second.graph.initializer:
        tensor.name = rename.get(tensor.name, tensor.name)
        graph.initializer.append(tensor)
    for vi in second.graph.input:
        if vi.name == "offset":
            vi.name = "offset2"
            graph.input.append(vi)
    graph.output[0].name = "z"
    first.opset_import.extend(
        o for o in second.opset_import if o.domain not in {x.domain for x in first.opset_import}
    )
    onnx.checker.check_model(first)
    onnx.save(first, str(path))
    return path


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
    def test_default_output_is_unchanged(self, two_dcn_model: Path, tmp_path: Path) -> None:
        """Without --allow-tf32: no attribute; the file is the library's default rewrite, byte for byte."""
        out = tmp_path / "out.onnx"
        res = invoke("rewrite", two_dcn_model, "-o", out, "--json")
        assert res.exit_code == 0, res.stderr
        assert one_json(res.stdout)["rewrite"]["allow_tf32"] is False
        written = onnx.load(str(out))
        assert tf32_values(written) == [None, None]
        expected, _ = rewrite_model(onnx.load(str(two_dcn_model)))
        assert written.SerializeToString() == expected.SerializeToString()

    def test_allow_tf32_on_every_plugin_node(self, two_dcn_model: Path, tmp_path: Path) -> None:
        out = tmp_path / "out.onnx"
        res = invoke("rewrite", two_dcn_model, "-o", out, "--allow-tf32", "--json")
        assert res.exit_code == 0, res.stderr
        obj = one_json(res.stdout)
        assert obj["rewrite"]["allow_tf32"] is True and obj["rewrite"]["rewritten"] == ["dcn0", "dcn1"]
        written = onnx.load(str(out))
        assert tf32_values(written) == [1, 1]
        onnx.checker.check_model(written)
        assert "allow_tf32 = 1" in res.stderr  # the rewrite step's INFO line says so

    def test_trt_builtin_is_a_usage_error(self, static_model: Path, tmp_path: Path) -> None:
        out = tmp_path / "out.onnx"
        res = invoke("rewrite", static_model, "-o", out, "--allow-tf32", "--target", "trt-builtin", "--json")
        assert res.exit_code == 2
        (line,) = error_lines(res)
        assert "--allow-tf32" in line and "--target trt-builtin" in line and "no allow_tf32 field" in line
        assert (
            "hint: use --target dcnconvert (our bundled plugin) for TF32, or drop --allow-tf32" in res.stderr
        )
        obj = one_json(res.stdout)
        assert obj["errors"][0]["type"] == "UsageError" and obj["exit_code"] == 2
        assert not out.exists()

    def test_on_a_rewritten_model(self, static_model: Path, tmp_path: Path) -> None:
        """--allow-tf32 adds it to plugin nodes; a later rewrite without it keeps the file as it is;
        --target trt-builtin drops it with a warning."""
        plain, tf32, again, builtin = (tmp_path / f"{n}.onnx" for n in ("plain", "tf32", "again", "builtin"))
        assert invoke("rewrite", static_model, "-o", plain).exit_code == 0
        res = invoke("rewrite", plain, "-o", tf32, "--allow-tf32", "--json")
        assert res.exit_code == 0 and one_json(res.stdout)["rewrite"]["rewritten"] == ["dcn0"]
        assert tf32_values(onnx.load(str(tf32))) == [1]
        res = invoke("rewrite", tf32, "-o", again, "--json")
        assert res.exit_code == 0 and one_json(res.stdout)["rewrite"]["unchanged"] == ["dcn0"]
        assert again.read_bytes() == tf32.read_bytes()
        res = invoke("rewrite", tf32, "-o", builtin, "--target", "trt-builtin", "--json")
        assert res.exit_code == 0
        assert any("allow_tf32 = 1 dropped" in w for w in one_json(res.stdout)["warnings"])
        assert tf32_values(onnx.load(str(builtin))) == [None]

    def test_inspect_shows_it(self, static_model: Path, tmp_path: Path) -> None:
        tf32 = tmp_path / "tf32.onnx"
        assert invoke("rewrite", static_model, "-o", tf32, "--allow-tf32").exit_code == 0
        res = invoke("inspect", tf32, "--json")
        assert res.exit_code == 0, res.stderr
        (match,) = one_json(res.stdout)["matches"]
        assert match["convertible"] and any("allow_tf32 = 1" in note for note in match["notes"])

    def test_help(self) -> None:
        res = invoke("rewrite", "--help")
        assert res.exit_code == 0 and "--allow-tf32" in res.stdout and "TF32" in res.stdout
        res = invoke("convert", "--help")
        assert res.exit_code == 0 and "allow_tf32=1" in res.stdout


@pytest.mark.usefixtures("no_engine_runtime")
class TestConvertWithoutTensorrt:
    @pytest.mark.parametrize(
        ("args", "expected"), [((), [None]), (("--tf32",), [1]), (("--no-tf32",), [None])]
    )
    def test_rewritten_model_written_before_exit_4(
        self, static_model: Path, tmp_path: Path, args: tuple, expected: list
    ) -> None:
        res = invoke("convert", static_model, "-o", tmp_path / "m.engine", *args, "--json")
        assert res.exit_code == 4
        written = onnx.load(str(tmp_path / "m.onnx"))
        assert tf32_values(written) == expected
        assert one_json(res.stdout)["rewrite"]["allow_tf32"] is (expected == [1])


class TestWithFakeTensorrt:
    def test_build_tf32_sets_flag_and_attribute(
        self, fake11: FakeAdapter, static_model: Path, tmp_path: Path
    ) -> None:
        res = invoke("build", static_model, "-o", tmp_path / "m.engine", "--tf32", "--json")
        assert res.exit_code == 0, res.stderr
        (call,) = fake11.build_calls
        assert call["tf32"] is True and tf32_values(call["model"]) == [1]
        assert one_json(res.stdout)["rewrite"]["allow_tf32"] is True

    def test_build_default_has_neither(self, fake11: FakeAdapter, static_model: Path, tmp_path: Path) -> None:
        res = invoke("build", static_model, "-o", tmp_path / "m.engine")
        assert res.exit_code == 0, res.stderr
        (call,) = fake11.build_calls
        assert call["tf32"] is False and tf32_values(call["model"]) == [None]

    def test_trt_builtin_tf32_is_the_builder_flag_alone(
        self, fake11: FakeAdapter, static_model: Path, tmp_path: Path
    ) -> None:
        """TensorRT's built-in plugin has no allow_tf32: --tf32 still sets TensorRT's flag (its own
        layers), the DCN nodes get no attribute, and a warning says how to get TF32 there too."""
        res = invoke(
            "build", static_model, "-o", tmp_path / "m.engine", "--tf32", "--target", "trt-builtin", "--json"
        )
        assert res.exit_code == 0, res.stderr
        (call,) = fake11.build_calls
        assert call["tf32"] is True and tf32_values(call["model"]) == [None]
        warnings = one_json(res.stdout)["warnings"]
        assert any("--tf32 with --target trt-builtin" in w and "--target dcnconvert" in w for w in warnings)

    def test_convert_tf32_verify(self, fake11: FakeAdapter, static_model: Path, tmp_path: Path) -> None:
        """The rewritten model with allow_tf32 is written, built, and verified (the fake engine runs the
        plugin nodes through the NumPy reference, which ignores the attribute)."""
        res = invoke("convert", static_model, "-o", tmp_path / "m.engine", "--tf32", "--verify", "--json")
        assert res.exit_code == 0, res.stderr
        obj = one_json(res.stdout)
        assert obj["passed"] and obj["rewrite"]["allow_tf32"] is True
        assert tf32_values(onnx.load(str(tmp_path / "m.onnx"))) == [1]
        (call,) = fake11.build_calls
        assert call["tf32"] is True and tf32_values(call["model"]) == [1]
