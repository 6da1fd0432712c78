"""The bundled sample models: reproducible bit-for-bit, small, and every one converts exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from support import samples
from support.evaluate import BACKENDS, is_plugin_node, ort_outputs, run_model

from dcnconvert.transform.plugin import rewrite_model
from dcnconvert.transform.standard import to_standard_model

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_models"
MODEL_FILES = sorted(p.name for p in SAMPLES.glob("*.onnx"))
RESNET = "dcn_resnet_block.onnx"
#: Real exporter output (sample_models/export_torch.py, needs torch): not made by generate.py.
TORCH_MANIFEST = json.loads((SAMPLES / "torch_exports.json").read_text(encoding="utf-8"))
TORCH_FILES = {m["file"] for m in TORCH_MANIFEST["models"]}
TORCH_OWN = {"torch_exports.json", *TORCH_FILES,
             *(m["expected"] for m in TORCH_MANIFEST["models"])}
GENERATED = [n for n in MODEL_FILES if n not in TORCH_FILES]
#: Models whose inputs are not all of the samples.input_feeds kind (dims named batch/height/width).
NETWORKS = {RESNET, "torch_dynamo_dcn_net.onnx"}
TOLERANCE = 1e-5  # times max|ORT output|


def _load(name: str) -> onnx.ModelProto:
    return onnx.load(str(SAMPLES / name))


def test_generator_reproduces_committed_files_bit_for_bit(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SAMPLES / "generate.py"), "--out", str(tmp_path)],
        check=False,
        cwd=tmp_path,  # must not depend on the working directory
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    fresh = sorted(p.name for p in tmp_path.iterdir())
    committed = sorted(
        p.name for p in SAMPLES.iterdir()  # not the scripts, nor what export_torch.py made
        if p.is_file() and p.suffix != ".py" and p.name not in TORCH_OWN and not p.name.startswith(".")
    )
    assert fresh == committed
    for name in fresh:
        assert (tmp_path / name).read_bytes() == (SAMPLES / name).read_bytes(), (
            f"{name} differs; run `make samples`"
        )


def test_one_sample_per_source_form_plus_the_network():
    forms = set()
    for name in GENERATED:
        for entry in _load(name).metadata_props:
            if entry.key == samples.META_FORM:
                forms.add(entry.value)
    assert forms == set(samples.FORMS)
    assert RESNET in MODEL_FILES
    assert len(GENERATED) == len(samples.FORMS) + 1


def test_total_size_under_2_mb():
    total = sum(p.stat().st_size for p in SAMPLES.iterdir() if p.is_file())
    assert total < 2 * 1024 * 1024, total


def test_readme_lists_every_model():
    readme = (SAMPLES / "README.md").read_text(encoding="utf-8")
    for name in MODEL_FILES:
        assert f"| `{name}` |" in readme


def test_fixed_producer_fields():
    for name in GENERATED:
        model = _load(name)
        assert model.producer_name == "dcnconvert sample_models/generate.py", name
        assert model.producer_version == "1", name


def test_torch_exports_are_listed_and_made_by_the_recorded_torch():
    assert TORCH_FILES == {n for n in MODEL_FILES if n.startswith("torch_")}
    assert all((SAMPLES / name).is_file() for name in TORCH_OWN)
    for name in TORCH_FILES:
        model = _load(name)
        assert model.producer_name == "pytorch", name
        assert model.producer_version.split("+")[0] == TORCH_MANIFEST["versions"]["torch"], name


def _feeds(model: onnx.ModelProto, seed: int, dims=None):
    feeds = samples.input_feeds(model, seed, dims=dims)
    for name, value in feeds.items():
        assert np.abs(value).max() > 0, name
    return feeds


def _compare(model, feeds, backend="onnxruntime") -> float:
    rewritten, report = rewrite_model(model)
    onnx.checker.check_model(rewritten)
    assert any(is_plugin_node(n) for n in rewritten.graph.node)
    assert not report.skipped and all(m.convertible for m in report.matches)
    assert len(report.rewritten) + len(report.unchanged) == len(report.matches) >= 1
    standard = to_standard_model(model)
    onnx.checker.check_model(standard)
    got = run_model(rewritten, feeds, backend=backend)
    expected = ort_outputs(standard, feeds)
    worst = 0.0
    for name, ref in expected.items():
        scale = float(np.abs(ref).max())
        assert scale > 1e-3
        assert got[name].shape == ref.shape
        err = float(np.abs(got[name].astype(np.float64) - ref).max())
        assert err <= TOLERANCE * scale, f"{name}: {err:.3g} > {TOLERANCE} * {scale:.3g}"
        worst = max(worst, err / scale)
    return worst


@pytest.mark.parametrize("name", [n for n in MODEL_FILES if n not in NETWORKS])
def test_single_node_sample_rewrites_and_matches_reference(name):
    model = _load(name)
    _compare(model, _feeds(model, 11))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "dims",
    [{"batch": 1, "height": 16, "width": 16}, {"batch": 3, "height": 13, "width": 11}],
    ids=["1x16x16", "3x13x11"],
)
def test_resnet_block_dynamic_shapes(dims, backend):
    model = _load(RESNET)
    feeds = _feeds(model, 12, dims=dims)
    _compare(model, feeds, backend=backend)


def test_resnet_block_structure():
    model = _load(RESNET)
    dcn = [n for n in model.graph.node if n.op_type == "MMCVModulatedDeformConv2d"]
    assert len(dcn) == 2 and all(n.domain == "mmcv" for n in dcn)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in dcn[1].attribute}
    assert attrs["stride"] == [2, 2] and attrs["padding"] == [1, 2] and attrs["dilation"] == [1, 2]
    assert attrs["deform_groups"] == 2
    dims = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "", "height", "width"]
    ops = {n.op_type for n in model.graph.node}
    assert {"Split", "Concat", "Sigmoid", "BatchNormalization", "Add", "Conv"} <= ops
    rewritten, _ = rewrite_model(model)
    assert [n.name for n in rewritten.graph.node if is_plugin_node(n)] == ["layer1.conv1", "layer1.conv2"]


@pytest.mark.parametrize("name", [RESNET, "onnx_DeformConv.onnx", "tensorrt_pro_Plugin_DCNv2.onnx"])
def test_reference_and_rewrite_commands_on_samples(name, tmp_path):
    """Through the CLI: `dcnconvert rewrite` + NumPy reference == `dcnconvert reference` + ORT."""
    from click.testing import CliRunner

    from dcnconvert.cli.main import cli

    runner = CliRunner()
    std_path, rw_path = tmp_path / "std.onnx", tmp_path / "rw.onnx"
    for command, out in (("reference", std_path), ("rewrite", rw_path)):
        result = runner.invoke(cli, [command, str(SAMPLES / name), "-o", str(out)])
        assert result.exit_code == 0, result.output
    model = _load(name)
    dims = {"batch": 2, "height": 10, "width": 9} if name == RESNET else None
    feeds = _feeds(model, 13, dims=dims)
    expected = ort_outputs(onnx.load(str(std_path)), feeds)
    got = run_model(onnx.load(str(rw_path)), feeds)
    for key, ref in expected.items():
        np.testing.assert_allclose(got[key], ref, rtol=0, atol=TOLERANCE * float(np.abs(ref).max()))
