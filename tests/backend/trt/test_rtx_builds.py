"""Real engine builds with TensorRT-RTX, the one real TensorRT-family builder that runs without a GPU.

Every sample model goes through ``dcnconvert convert --runtime tensorrt-rtx --compute-capabilities 8.6``
(FP32; FP16 and BF16 through the graph cast on a subset), with embedded and input weights, static
shapes and min/opt/max profiles; the engine's network is checked for its plugin layers and their types.
Bad plugin nodes must fail with exit code 1 naming the node, and a build whose plugin library or parser
aborts must fail with exit code 1, a JSON object and no engine file: the build runs in a child process.
The engines cannot run here (TensorRT-RTX refuses compute capability 9.0 and CPU-only machines alike):
``verify`` must say so with exit code 4.

Needs TensorRT-RTX (``trt_rtx``), TensorRT's headers and nvcc for the plugin library (``trt_headers``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from cli_runner import invoke, one_json
from conftest import REPO
from onnx import helper
from support import samples
from support.nodes import plugin_nodes

from dcnconvert import schema
from dcnconvert.backend.plugin import runtimes
from dcnconvert.backend.trt import isolated, rtx
from dcnconvert.errors import BuildError

pytestmark = [pytest.mark.trt_rtx, pytest.mark.trt_headers, pytest.mark.usefixtures("rtx_cache_dir")]

SAMPLE_DIR = REPO / "sample_models"
SAMPLES = sorted(SAMPLE_DIR.glob("*.onnx"))
#: One model per kind for the FP16/BF16 builds: mmcv DCNv2, standard DeformConv (opset 19), a DCNv1
#: form with symbolic dims, the two-layer block with dynamic batch and size, and torch's dynamo exports
#: (opset 22 with groups and offset groups; a two-layer net whose Convs predict offsets and masks).
LOW_PRECISION_SAMPLES = ("mmcv_MMCVModulatedDeformConv2d", "onnx_DeformConv",
                         "tao_ModulatedDeformConv2d", "dcn_resnet_block", "torch_dynamo_DeformConv2d_opset22",
                         "torch_dynamo_dcn_net")
LAYER_TYPES = {"fp32": "FLOAT", "fp16": "HALF", "bf16": "BF16"}
PLUGIN = (schema.PLUGIN_NAME, schema.PLUGIN_VERSION, schema.PLUGIN_NAMESPACE, False)
ABORT_SOURCE = ("#include <stdlib.h>\n"
                "__attribute__((constructor)) static void dcn_test_abort(void) { abort(); }\n")


def convert(model: Path, out: Path, lib: Path, *args) -> tuple[object, dict]:
    res = invoke("convert", model, "-o", out, "--runtime", "tensorrt-rtx", "--plugin-lib", lib, "--json",
                 *args)
    return res, (one_json(res.stdout) if res.stdout.strip() else {})


def check_built(res, obj: dict, engine: Path, precision: str) -> None:
    assert res.exit_code == 0, (res.exit_code, res.stderr[-3000:])
    assert engine.stat().st_size > 0 and obj["runtime"]["name"] == "tensorrt-rtx"
    # the plan names the plugin's creator, which deserialising it will look up
    plan = engine.read_bytes()
    assert schema.PLUGIN_NAME.encode() in plan and schema.PLUGIN_NAMESPACE.encode() in plan
    rewritten = onnx.load(str(engine.with_suffix(".onnx")))
    layers = obj["network"]["plugin_layers"]
    assert sorted(layer["name"] for layer in layers) == sorted(n.name for n in plugin_nodes(rewritten))
    for layer in layers:
        # x and the output carry the engine's precision; offsets and masks too, after the graph cast
        assert layer["inputs"][0] == LAYER_TYPES[precision]
        assert layer["outputs"] == [LAYER_TYPES[precision]]
    # the parser's warnings for optional fields the nodes lack were dropped, and counted (the parser may
    # warn once for a field that several nodes lack)
    assert "not found in plugin node" not in res.stderr
    lacking: dict[str, int] = {}
    for node in plugin_nodes(rewritten):
        for field in ("allow_tf32", "weight", "weight_shape", "bias", *(f[0] for f in schema.QUANT_FIELDS)):
            if field not in {a.name for a in node.attribute}:
                lacking[field] = lacking.get(field, 0) + 1
    quieted = obj["parser_warnings_quieted"]
    assert set(quieted) == set(lacking)
    assert all(1 <= quieted[f] <= lacking[f] for f in lacking)


@pytest.mark.parametrize("model", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_every_sample_builds_fp32(model, plugin_lib, tmp_path):
    engine = tmp_path / "m.engine"
    res, obj = convert(model, engine, plugin_lib, "--compute-capabilities", "8.6",
                       *samples.shape_args(model))
    check_built(res, obj, engine, "fp32")
    assert obj["compute_capabilities"] == {"targets": ["8.6"], "reason": "given by --compute-capabilities"}


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("name", LOW_PRECISION_SAMPLES)
def test_low_precision_through_the_graph_cast(name, precision, plugin_lib, tmp_path):
    model = SAMPLE_DIR / f"{name}.onnx"
    engine = tmp_path / "m.engine"
    res, obj = convert(model, engine, plugin_lib, "--precision", precision,
                       "--compute-capabilities", "8.6,12.0", *samples.shape_args(model))
    check_built(res, obj, engine, precision)
    assert obj["precision_path"] == "graph-cast" and obj["compute_capabilities"]["targets"] == ["8.6", "12.0"]


@pytest.mark.parametrize("weights, inputs", [("embed", 3), ("input", 4)])
def test_weights_embedded_or_inputs(weights, inputs, plugin_lib, tmp_path):
    """The ResNet block's DCN layers have no bias: x, offset, mask, and the weight when it is an input."""
    model = SAMPLE_DIR / "dcn_resnet_block.onnx"
    engine = tmp_path / "m.engine"
    res, obj = convert(model, engine, plugin_lib, "--weights", weights, "--precision", "fp16",
                       "--compute-capabilities", "8.9", *samples.shape_args(model))
    check_built(res, obj, engine, "fp16")
    layers = obj["network"]["plugin_layers"]
    assert len(layers) == 2 and {len(layer["inputs"]) for layer in layers} == {inputs}
    # every input of the layer is FP16 after the graph cast, the weight input included
    assert {t for layer in layers for t in layer["inputs"]} == {"HALF"}


def test_min_opt_max_profiles(plugin_lib, tmp_path):
    """Two profiles (a name given again in --min-shapes starts the next one), two plugin layers."""
    model = SAMPLE_DIR / "dcn_resnet_block.onnx"
    engine = tmp_path / "m.engine"
    res, obj = convert(model, engine, plugin_lib, "--compute-capabilities", "8.6",
                       "--min-shapes", "x:1x16x8x8", "--opt-shapes", "x:2x16x16x16",
                       "--max-shapes", "x:4x16x32x32", "--min-shapes", "x:1x16x32x32",
                       "--opt-shapes", "x:1x16x48x48", "--max-shapes", "x:2x16x64x64")
    check_built(res, obj, engine, "fp32")
    assert [p["x"] for p in obj["profiles"]] == [
        {"min": [1, 16, 8, 8], "opt": [2, 16, 16, 16], "max": [4, 16, 32, 32]},
        {"min": [1, 16, 32, 32], "opt": [1, 16, 48, 48], "max": [2, 16, 64, 64]}]
    assert len(obj["network"]["plugin_layers"]) == 2


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_torch_export_with_a_profile(precision, plugin_lib, tmp_path):
    """torch's dynamo export of a two-layer DCNv2 net, dynamic batch and size, over one profile."""
    model = SAMPLE_DIR / "torch_dynamo_dcn_net.onnx"
    engine = tmp_path / "m.engine"
    res, obj = convert(model, engine, plugin_lib, "--precision", precision, "--compute-capabilities", "8.6",
                       "--min-shapes", "x:1x3x4x4", "--opt-shapes", "x:2x3x12x10",
                       "--max-shapes", "x:8x3x64x64")
    check_built(res, obj, engine, precision)
    assert len(obj["network"]["plugin_layers"]) == 2
    assert obj["profiles"] == [{"x": {"min": [1, 3, 4, 4], "opt": [2, 3, 12, 10], "max": [8, 3, 64, 64]}}]


def test_static_shapes_of_a_dynamic_model(plugin_lib, tmp_path):
    model = SAMPLE_DIR / "dcn_resnet_block.onnx"
    engine = tmp_path / "m.engine"
    res, obj = convert(model, engine, plugin_lib, "--shapes", "x:2x16x24x20",
                       "--compute-capabilities", "12.0")
    check_built(res, obj, engine, "fp32")
    assert [p["x"] for p in obj["profiles"]] == [{k: [2, 16, 24, 20] for k in ("min", "opt", "max")}]


def test_default_targets_without_a_gpu(plugin_lib, tmp_path):
    engine = tmp_path / "m.engine"
    res, obj = convert(SAMPLE_DIR / "onnx_DeformConv.onnx", engine, plugin_lib)
    check_built(res, obj, engine, "fp32")
    from dcnconvert.backend.trt.runtimes import local_compute_capability

    if local_compute_capability() is None:
        assert obj["compute_capabilities"]["targets"] == []
        assert "no GPU here" in obj["compute_capabilities"]["reason"] and "portable" in res.stderr


def _broken(tmp_path: Path, plugin_lib: Path, change) -> Path:
    """The mmcv sample rewritten, with ``change`` applied to its plugin node."""
    out = tmp_path / "good.onnx"
    res = invoke("rewrite", SAMPLE_DIR / "mmcv_MMCVModulatedDeformConv2d.onnx", "-o", out)
    assert res.exit_code == 0, res.stderr
    model = onnx.load(str(out))
    (node,) = plugin_nodes(model)
    change(node)
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    return bad


def _set_attr(name, value):
    def change(node):
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(kept + [helper.make_attribute(name, value)])
    return change


BAD_NODES = [
    (_set_attr("stride", [0, 1]), "stride"),
    (_set_attr("deformable_group", 5), "deformable_group"),
    (_set_attr("weight_shape", [8, 8, 3]), "weight_shape"),
]
BAD_IDS = ["zero-stride", "groups-not-dividing", "short-weight-shape"]


@pytest.mark.parametrize("change, words", BAD_NODES, ids=BAD_IDS)
def test_bad_plugin_nodes_name_the_node(change, words, plugin_lib, tmp_path):
    """``build`` checks plugin nodes before TensorRT sees them: exit 1 naming the node and the field."""
    bad = _broken(tmp_path, plugin_lib, change)
    engine = tmp_path / "bad.engine"
    res = invoke("build", bad, "-o", engine, "--runtime", "tensorrt-rtx", "--plugin-lib", plugin_lib,
                 "--compute-capabilities", "8.6", "--json")
    assert res.exit_code == 1, res.stderr[-3000:]
    (error,) = one_json(res.stdout)["errors"]
    assert error["node"] == "dcn0" and "dcn0" in error["message"] and words in error["message"]
    assert not engine.exists()


@pytest.mark.parametrize("change, words", BAD_NODES, ids=BAD_IDS)
def test_the_real_parser_names_a_node_the_plugin_rejects(change, words, plugin_lib, tmp_path):
    """Past dcnconvert's own checks (as with ``polygraphy convert``), the plugin's creator rejects the
    node inside TensorRT-RTX's parser: a BuildError naming the node, not a crash."""
    from dcnconvert.backend.trt import adapter

    bad = _broken(tmp_path, plugin_lib, change)
    api = adapter.api_for(rtx.installed_version(), "tensorrt-rtx")
    with pytest.raises(BuildError) as info:
        isolated.build_isolated(api, bad, plugin_libraries=[plugin_lib], plugin=PLUGIN,
                                compute_capabilities=[(8, 6)], progress=False)
    assert info.value.node == "dcn0" and "dcn0" in str(info.value)
    assert "crash" not in (getattr(info.value, "payload", None) or {})


def test_a_plugin_input_of_a_wrong_type(plugin_lib, tmp_path):
    """An INT32 offset: refused after parsing, naming the node (the builder's own error names none)."""
    from dcnconvert.backend.trt import adapter

    def int_offset(model):
        (node,) = plugin_nodes(model)
        offset = node.input[1]
        for value in model.graph.input:
            if value.name == offset:
                value.type.tensor_type.elem_type = onnx.TensorProto.INT32

    good = tmp_path / "good.onnx"
    assert invoke("rewrite", SAMPLE_DIR / "mmcv_MMCVModulatedDeformConv2d.onnx", "-o", good).exit_code == 0
    model = onnx.load(str(good))
    int_offset(model)
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    api = adapter.api_for(rtx.installed_version(), "tensorrt-rtx")
    with pytest.raises(BuildError) as info:
        isolated.build_isolated(api, bad, plugin_libraries=[plugin_lib], plugin=PLUGIN, plugin_nodes=["dcn0"],
                                compute_capabilities=[(8, 6)], progress=False)
    assert info.value.node == "dcn0" and "input 1 is INT32" in str(info.value)
    assert "crash" not in (getattr(info.value, "payload", None) or {}), str(info.value)


def test_a_plugin_library_that_aborts(tmp_path):
    """The library aborts when it is loaded: exit 1, a JSON object naming the stage and the signal."""
    source = tmp_path / "abort.c"
    source.write_text(ABORT_SOURCE)
    lib = tmp_path / "libabort.so"
    cc = subprocess.run(["cc", "-shared", "-fPIC", str(source), "-o", str(lib)], capture_output=True,
                        text=True, check=False)
    if cc.returncode != 0:
        pytest.skip(f"trt_rtx: no C compiler to make the aborting library ({cc.stderr.strip()[:200]})")
    engine = tmp_path / "out" / "m.engine"
    engine.parent.mkdir()
    res = invoke("build", SAMPLE_DIR / "onnx_DeformConv.onnx", "-o", engine, "--runtime", "tensorrt-rtx",
                 "--plugin-lib", lib, "--compute-capabilities", "8.6", "--json")
    assert res.exit_code == 1
    obj = one_json(res.stdout)
    assert obj["ok"] is False and obj["crash"]["signal"] == "SIGABRT"
    assert obj["crash"]["stage"] == "load plugins"
    assert "SIGABRT" in obj["errors"][0]["message"] and "load plugins" in obj["errors"][0]["message"]
    assert list(engine.parent.iterdir()) == []


def test_the_unlinked_parser_aborts_in_the_child(plugin_lib, tmp_path, monkeypatch):
    """TensorRT-RTX's parser without the libtensorrt_rtx.so link really aborts where the plugin library has
    no forwarding object beside it (copied alone): in the child, which the parent reports as a BuildError
    with the stage and the signal. With the forwarding object beside it, the same child builds."""
    from dcnconvert.backend.trt import adapter

    good = tmp_path / "good.onnx"
    assert invoke("rewrite", SAMPLE_DIR / "mmcv_MMCVModulatedDeformConv2d.onnx", "-o", good).exit_code == 0
    linked = isolated._environment("tensorrt-rtx")
    link = str(rtx.link_dir())
    kept = [p for p in linked["LD_LIBRARY_PATH"].split(":") if p != link]
    unlinked = dict(linked, LD_LIBRARY_PATH=":".join(kept))
    monkeypatch.setattr(isolated, "_environment", lambda runtime: unlinked)
    api = adapter.api_for(rtx.installed_version(), "tensorrt-rtx")
    alone = tmp_path / "alone" / plugin_lib.name
    alone.parent.mkdir()
    shutil.copy2(plugin_lib, alone)
    with pytest.raises(BuildError) as info:
        isolated.build_isolated(
            api, good, plugin_libraries=[alone],
            plugin=PLUGIN, compute_capabilities=[(8, 6)], progress=False)
    crash = info.value.payload["crash"]
    assert crash["signal"] == "SIGABRT" and crash["stage"] == "parse" and crash["returncode"] < 0
    assert "during stage 'parse'" in str(info.value)
    assert (plugin_lib.parent / runtimes.RTX_FORWARD_NAME).is_file()
    built = isolated.build_isolated(api, good, plugin_libraries=[plugin_lib], plugin=PLUGIN,
                                    compute_capabilities=[(8, 6)], progress=False)
    assert len(built["data"]) > 0


def test_verify_says_the_engine_cannot_run_here(plugin_lib, tmp_path):
    from dcnconvert.backend.trt.runtimes import RTX_TARGETS, local_compute_capability

    if local_compute_capability() in RTX_TARGETS:
        pytest.skip("this machine's GPU runs TensorRT-RTX engines")
    engine = tmp_path / "m.engine"
    model = SAMPLE_DIR / "onnx_DeformConv.onnx"
    res, _ = convert(model, engine, plugin_lib, "--compute-capabilities", "8.6")
    assert res.exit_code == 0, res.stderr[-2000:]
    res = invoke("verify", engine, "--model", model, "--runtime", "tensorrt-rtx", "--plugin-lib", plugin_lib,
                 "--json")
    assert res.exit_code == 4
    error = one_json(res.stdout)["errors"][0]
    assert error["type"] == "MissingDependencyError" and "cannot run" in error["message"]


def test_the_link_is_made_in_the_cache(rtx_cache_dir):
    folder = rtx.link_dir()
    assert folder.is_relative_to(rtx_cache_dir)
    link = folder / "libtensorrt_rtx.so"
    assert link.is_symlink() and link.resolve() == rtx.core_library().resolve()
    # nothing was written beside TensorRT-RTX's own libraries
    assert not (rtx.core_library().parent / "libtensorrt_rtx.so").exists()


def test_json_is_one_object_on_stdout(plugin_lib, tmp_path):
    """The child's output never reaches stdout: a subprocess run prints exactly one JSON line there."""
    engine = tmp_path / "m.engine"
    proc = subprocess.run([sys.executable, "-m", "dcnconvert", "build",
                           str(SAMPLE_DIR / "onnx_DeformConv.onnx"), "-o", str(engine),
                           "--runtime", "tensorrt-rtx", "--plugin-lib", str(plugin_lib),
                           "--compute-capabilities", "8.6", "--json", "-v"],
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = proc.stdout.splitlines()
    assert json.loads(line)["engine"]["bytes"] == engine.stat().st_size
    assert "TensorRT build:" in proc.stderr  # the child's progress lines came through the parent's log


@pytest.mark.parametrize("model, args", [
    ("mmcv_MMCVModulatedDeformConv2d", ()),
    ("mmcv_MMCVModulatedDeformConv2d", ("--precision", "fp16")),
    ("dcn_resnet_block", ("--min-shapes", "x:1x16x16x16", "--opt-shapes", "x:2x16x32x32",
                          "--max-shapes", "x:4x16x64x64")),
], ids=["fp32", "fp16", "dynamic"])
def test_the_commands_a_user_runs(model, args, plugin_lib, tmp_path):
    """``dcnconvert convert MODEL -o out.engine --runtime tensorrt-rtx --compute-capabilities 8.6`` as a
    user runs it, in a process of its own, with the library where dcnconvert looks for one it is given."""
    env = {k: v for k, v in os.environ.items() if k != "POLYGRAPHY_USE_TENSORRT_RTX"}
    env["DCNCONVERT_PLUGIN_LIB"] = str(plugin_lib)
    proc = subprocess.run([sys.executable, "-m", "dcnconvert", "convert", str(SAMPLE_DIR / f"{model}.onnx"),
                           "-o", "out.engine", "--runtime", "tensorrt-rtx", "--compute-capabilities", "8.6",
                           *args], cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "out.engine").stat().st_size > 0 and (tmp_path / "out.onnx").is_file()
    assert "not found in plugin node" not in proc.stderr and "error:" not in proc.stderr
