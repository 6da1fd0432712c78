"""Real engines: FP32 and FP16 (and BF16 where the GPU has it) for every sample model, verified against
ONNX Runtime, and the printed ``polygraphy run`` command re-run as a subprocess.

Needs TensorRT (>= 10.3, the ``tensorrt`` Python package), an NVIDIA GPU (CuPy for the check) and the
plugin library. On such a machine one command runs them::

    make plugin TENSORRT_INCLUDE_DIR=/path/to/TensorRT/include && \
        python -m pytest -q -m tensorrt tests/backend/trt/test_engines.py

Everything here is marked ``tensorrt`` and skipped with a reason elsewhere (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from support import samples

from dcnconvert.backend.trt import adapter as trt_adapter
from dcnconvert.backend.trt import versions as trt_versions
from dcnconvert.cli.main import cli

pytestmark = pytest.mark.tensorrt

REPO = Path(__file__).resolve().parents[3]
SAMPLE_DIR = REPO / "sample_models"


def _sample_models():
    """sample_models/*.onnx, or one model per form from support.samples while those are absent."""
    files = sorted(SAMPLE_DIR.glob("*.onnx"))
    if files:
        return [pytest.param(path, id=path.stem) for path in files]
    return [pytest.param(form, id=form) for form in samples.FORMS]


def _materialise(sample, tmp_path: Path) -> Path:
    if isinstance(sample, Path):
        return sample
    path = tmp_path / f"{sample}.onnx"
    onnx.save(samples.build(sample, seed=1), str(path))
    return path


@pytest.fixture(scope="session")
def plugin_path() -> str:
    res = CliRunner().invoke(cli, ["plugin-path"])
    if res.exit_code != 0:
        pytest.fail(f"the plugin library is missing: {res.stderr.strip()} -- run `make plugin` first")
    return res.stdout.strip()


def _expected_path(precision: str, requested: str) -> str:
    """The precision_path the build must report: TensorRT 10 has builder flags, 11 only the graph cast."""
    import tensorrt as trt

    if precision == "fp32":
        return "none"
    if requested == "graph-cast" or not trt_adapter.api_for(trt.__version__).precision_flags:
        return "graph-cast"
    return "builder-flag"


def _convert(model: Path, out: Path, *args) -> dict:
    res = CliRunner().invoke(
        cli, ["convert", str(model), "-o", str(out), "--verify", "--json", *map(str, args)]
    )
    obj = json.loads(res.stdout.splitlines()[-1]) if res.stdout.strip() else {}
    assert res.exit_code == 0, (res.exit_code, res.stderr[-4000:], obj.get("comparison"))
    return obj


@pytest.mark.parametrize("precision, path", [("fp32", "auto"), ("fp16", "auto"), ("fp16", "graph-cast")])
@pytest.mark.parametrize("sample", _sample_models())
def test_engine_matches_onnxruntime(sample, precision, path, tmp_path, plugin_path):
    """fp16 'auto' is the builder flag on TensorRT 10 and the graph cast on 11; an explicit graph
    cast runs on both (on 10 as a strongly typed network)."""
    model = _materialise(sample, tmp_path)
    engine = tmp_path / "model.engine"
    obj = _convert(
        model,
        engine,
        "--precision",
        precision,
        "--precision-path",
        path,
        *samples.shape_args(model),
        "--save-inputs",
        tmp_path / "in.json",
        "--save-outputs",
        tmp_path / "ref.json",
    )
    assert obj["passed"] and obj["precision"] == precision and engine.stat().st_size > 0
    assert obj["precision_path"] == _expected_path(precision, path)
    # the printed polygraphy command re-checks the engine against the saved reference outputs
    command = obj["commands"][2]
    assert "--load-outputs" in command
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, check=False, env=env, timeout=600
    )
    assert proc.returncode == 0, (command, proc.stdout[-3000:], proc.stderr[-3000:])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("weights", ["embed", "input"])
def test_weights_embedded_or_inputs(weights, precision, tmp_path, plugin_path):
    """The plugin takes its weights as fields (embedded, the default) or as inputs: both engines match."""
    model = SAMPLE_DIR / "dcn_resnet_block.onnx"
    obj = _convert(model, tmp_path / "m.engine", "--weights", weights, "--precision", precision,
                   *samples.shape_args(model))
    assert obj["passed"] and obj["rewrite"]["weights"] == weights
    written = onnx.load(str(tmp_path / "m.onnx"))
    plugins = [n for n in written.graph.node if n.op_type == "ModulatedDeformConv2d"]
    assert len(plugins) == 2
    assert {len(n.input) for n in plugins} == ({3} if weights == "embed" else {5})


def test_verify_command_on_a_built_engine(tmp_path, plugin_path):
    model = tmp_path / "m.onnx"
    onnx.save(
        samples.build("mmcv.MMCVModulatedDeformConv2d", stride=(2, 1), padding=(1, 2), seed=3), str(model)
    )
    engine = tmp_path / "m.engine"
    runner = CliRunner()
    assert runner.invoke(cli, ["build", str(model), "-o", str(engine)]).exit_code == 0
    res = runner.invoke(cli, ["verify", str(engine), "--model", str(model), "--print-commands"])
    assert res.exit_code == 0, res.stderr[-3000:]
    assert "polygraphy run" in res.stdout and "trtexec --loadEngine=" in res.stdout


def test_bf16_if_supported(tmp_path, plugin_path):
    import cupy

    if int(cupy.cuda.Device().compute_capability) < 80:
        pytest.skip("BF16 needs compute capability >= 8.0")
    model = tmp_path / "m.onnx"
    onnx.save(samples.build("onnx.DeformConv", opset=22, seed=2), str(model))
    obj = _convert(model, tmp_path / "m.engine", "--precision", "bf16")
    assert obj["passed"] and obj["tolerances"]["atol"] == 5e-2


def test_trt_builtin_target(tmp_path):
    import tensorrt as trt

    if trt_versions.version_tuple(trt.__version__)[:2] < (10, 11):
        pytest.skip("TensorRT's ModulatedDeformConv2d v2 needs TensorRT >= 10.11")
    model = tmp_path / "m.onnx"
    onnx.save(samples.build("onnx.DeformConv", seed=4), str(model))
    obj = _convert(model, tmp_path / "m.engine", "--target", "trt-builtin")
    assert obj["passed"] and obj["plugin_library"] is None


def test_polygraphy_command_fails_on_wrong_reference(tmp_path, plugin_path):
    """The printed command really compares: against another model's outputs it fails."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(samples.build("centernet.DCNv2", seed=1), str(a))
    onnx.save(samples.build("centernet.DCNv2", seed=2), str(b))
    obj = _convert(
        a,
        tmp_path / "a.engine",
        "--save-inputs",
        tmp_path / "in.json",
        "--save-outputs",
        tmp_path / "ra.json",
    )
    _convert(
        b, tmp_path / "b.engine", "--inputs", tmp_path / "in.json", "--save-outputs", tmp_path / "rb.json"
    )
    command = obj["commands"][2].replace(
        shlex.quote(str(tmp_path / "ra.json")), shlex.quote(str(tmp_path / "rb.json"))
    )
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, check=False, env=env, timeout=600
    )
    assert proc.returncode != 0
