"""The plugin inside the real TensorRT runtimes: the lean 10.x and 11.x wheels from PyPI.

Each check runs ``tests/harness/lean_probe.py`` in a process of its own with one runtime on its
``PYTHONPATH`` (two TensorRT majors cannot share a process, and a crash must show as an exit status).
The plugin is built against the oldest headers found of each major (``plugin_build``, the same build
the harness tests use). Marked ``trt_lean``: skipped, with the reason, without a runtime of that major
($DCNCONVERT_TRT_LEAN_DIRS, see conftest) or without headers of that major.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from conftest import LEAN_INSTALL_HINT, REPO, lean_runtimes, trt_header_dirs
from support.nodes import plugin_nodes

from dcnconvert import schema
from dcnconvert.transform import plugin as rewrite

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness"))
import plugin_build as pb  # noqa: E402

pytestmark = pytest.mark.trt_lean

SAMPLES = sorted((REPO / "sample_models").glob("*.onnx"))
IDENTITY = [schema.PLUGIN_NAME, schema.PLUGIN_VERSION, schema.PLUGIN_NAMESPACE]
SCHEMA_FIELDS = [[name, "INT32"] for name, _n in schema.PLUGIN_FIELDS] + [
    [name, "INT32"] for name, _n, _d in schema.OPTIONAL_PLUGIN_FIELDS] + [
    [name, kind] for name, kind, _n in schema.WEIGHT_FIELDS] + [
    [name, kind] for name, kind, _n in schema.QUANT_FIELDS]


def runtime_or_skip(major: int) -> tuple[Path, str]:
    found = lean_runtimes().get(major)
    if found is None:
        pytest.skip(f"trt_lean: no TensorRT {major} lean runtime; {LEAN_INSTALL_HINT}")
    return found


def library_or_skip(major: int) -> pb.Built:
    headers = pb.oldest_per_major(trt_header_dirs()).get(major)
    if headers is None:
        pytest.skip(f"trt_lean: no TensorRT {major} headers (NvInfer.h) found; set TENSORRT_INCLUDE_DIR")
    if pb.nvcc() is None:
        pytest.skip("trt_lean: nvcc not found (needed to build the plugin)")
    return pb.build(headers)


def probe(runtime: Path, library: Path, tmp_path: Path, route: str = "load_library",
          cases: list[dict] | None = None) -> tuple[subprocess.CompletedProcess, dict | None]:
    spec = {"library": str(library), "route": route, "name": schema.PLUGIN_NAME,
            "version": schema.PLUGIN_VERSION, "namespace": schema.PLUGIN_NAMESPACE, "cases": cases or []}
    return pb.run_lean_probe(runtime, spec, tmp_path / f"spec-{route}.json")


def parser_fields(node: onnx.NodeProto, kind: str) -> list:
    """The fields the ONNX parser passes for a plugin node: the creator's field names that the node
    carries, INT and INTS as integer arrays (``kind`` int32 as TensorRT does; int64 accepted too),
    an embedded FLOAT weight or bias (TENSOR) as its float32 values."""
    declared = {name for name, _t in SCHEMA_FIELDS}
    out = []
    for attr in node.attribute:
        if attr.name not in declared:
            continue
        value = onnx.helper.get_attribute_value(attr)
        if isinstance(value, onnx.TensorProto):
            assert value.data_type == onnx.TensorProto.FLOAT, attr.name  # the sample models are FP32
            out.append([attr.name, "float32", onnx.numpy_helper.to_array(value).ravel().tolist()])
            continue
        out.append([attr.name, kind, list(value) if isinstance(value, (list, tuple)) else [int(value)]])
    return out


def sample_cases() -> list[dict]:
    """One case per plugin node of every sample model after the rewrite, in int32 and in int64."""
    cases = []
    for path in SAMPLES:
        model = onnx.load(str(path))
        if any(schema.is_plugin_node(n) for n in model.graph.node):
            out = model
        else:
            out, _report = rewrite.rewrite_model(model, allow_tf32=path.stem == "dcn_resnet_block")
        nodes = plugin_nodes(out)
        assert nodes, f"{path.name}: no plugin node after the rewrite"
        for i, node in enumerate(nodes):
            for kind in ("int32", "int64"):
                cases.append({"id": f"{path.stem}-{i}-{kind}", "fields": parser_fields(node, kind)})
    return cases


GOOD = [["stride", "int32", [1, 2]], ["padding", "int32", [0, 1]], ["dilation", "int32", [2, 1]],
        ["group", "int32", [1]], ["deformable_group", "int32", [1]]]


def replaced(name: str, kind: str, values: list) -> list:
    return [[n, kind, values] if n == name else [n, t, v] for n, t, v in GOOD]


BAD_CASES = [
    {"id": "bad-stride-0", "fields": replaced("stride", "int32", [0, 1])},
    {"id": "bad-padding-negative", "fields": replaced("padding", "int32", [-1, 0])},
    {"id": "bad-dilation-0", "fields": replaced("dilation", "int32", [1, 0])},
    {"id": "bad-group-0", "fields": replaced("group", "int32", [0])},
    {"id": "bad-stride-3-values", "fields": replaced("stride", "int32", [1, 1, 1])},
    {"id": "bad-stride-float", "fields": replaced("stride", "float32", [1.0, 1.0])},
    {"id": "bad-int64-overflow", "fields": replaced("group", "int64", [2**40])},
    {"id": "bad-allow-tf32-2", "fields": GOOD + [["allow_tf32", "int32", [2]]]},
    {"id": "bad-missing-deformable-group", "fields": GOOD[:4]},
]


@pytest.mark.parametrize("major", [10, 11])
@pytest.mark.parametrize("route", ["load_library", "ctypes"])
def test_registers_one_creator_with_the_schema_identity_and_fields(major, route, tmp_path):
    runtime, version = runtime_or_skip(major)
    built = library_or_skip(major)
    proc, result = probe(runtime, built.lib, tmp_path, route)
    assert result is not None, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert result["tensorrt_version"] == version
    if route == "ctypes":  # the library's constructor registered it, in the dcnconvert namespace
        assert result["after_ctypes"] == [IDENTITY]
    assert result["load_library_handle"] is True
    assert result["registered"] == [IDENTITY]  # exactly one, whichever route registered first
    assert result["creator_found"] is True
    assert result["field_names"] == SCHEMA_FIELDS
    assert proc.stderr == ""


@pytest.mark.parametrize("major", [10, 11])
def test_sample_model_nodes_create_plugins_in_both_phases(major, tmp_path):
    runtime, _version = runtime_or_skip(major)
    built = library_or_skip(major)
    cases = sample_cases()
    proc, result = probe(runtime, built.lib, tmp_path, cases=cases)
    assert result is not None, f"exit {proc.returncode}\n{proc.stderr}"
    assert len(result["cases"]) == len(cases) >= 2 * len(SAMPLES)
    for case_id, phases in result["cases"].items():
        for phase, outcome in phases.items():
            assert outcome["exception"] is None, (case_id, phase, outcome)
            assert outcome["created"], (case_id, phase, proc.stderr)
            assert outcome["identity"] == IDENTITY, (case_id, phase)
    assert "[dcnconvert]" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("major", [10, 11])
def test_bad_fields_are_refused_with_a_message(major, tmp_path):
    runtime, _version = runtime_or_skip(major)
    built = library_or_skip(major)
    good = {"id": "good", "fields": GOOD}
    proc, result = probe(runtime, built.lib, tmp_path, cases=[good, *BAD_CASES])
    assert result is not None, f"exit {proc.returncode}\n{proc.stderr}"
    assert result["cases"]["good"]["build"]["created"], proc.stderr  # so the refusals below can fail
    for case in BAD_CASES:
        for phase, outcome in result["cases"][case["id"]].items():
            assert outcome == {"created": False, "exception": None}, (case["id"], phase, outcome)
        messages = [line for line in proc.stderr.splitlines() if f"layer '{case['id']}'" in line]
        assert len(messages) == 2, (case["id"], proc.stderr)  # one per phase, naming the layer


def quant_case(case_id: str, qtype: str, output_scale: bool = True, **replace: list) -> dict:
    """A quantized node's fields as the ONNX parser passes them: x 2x16 -> 4 channels, 3x3 kernel,
    fresh random quantized weights (INT8 for int8, E4M3 values as FLOAT16 for fp8e4m3), one scale per
    output channel; ``replace`` swaps whole fields (``None`` drops one)."""
    rng = np.random.default_rng()
    shape = [4, 16, 3, 3]
    count = int(np.prod(shape))
    if qtype == "int8":
        weight = ["weight", "int8", rng.integers(-128, 128, count).tolist()]
    else:
        codes = rng.integers(0, 256, count).astype(np.uint8)
        codes[(codes & 0x7F) == 0x7F] ^= 1  # no NaN code
        values = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        weight = ["weight", "float16", values.tolist()]
    fields = [*GOOD, weight, ["weight_shape", "int32", shape],
              ["bias", "float32", rng.normal(size=4).tolist()],
              ["quant_type", "char", qtype], ["x_scale", "float32", [0.02]],
              ["weight_scale", "float32", rng.uniform(0.001, 0.1, 4).tolist()]]
    if output_scale:
        fields.append(["output_scale", "float32", [0.5]])
    out = []
    for name, kind, values in fields:
        if name in replace:
            if replace[name] is not None:
                out.append(replace[name])
        else:
            out.append([name, kind, values])
    return {"id": case_id, "fields": out}


GOOD_QUANT = [quant_case(f"{qtype}-{'q' if o else 'f'}", qtype, o) for qtype in ("int8", "fp8e4m3")
              for o in (True, False)]
BAD_QUANT = [  # (case, a word of the message)
    (quant_case("bad-quant-type", "int8", quant_type=["quant_type", "char", "int4"]), "'int4'"),
    (quant_case("bad-x-scale-0", "int8", x_scale=["x_scale", "float32", [0.0]]), "x_scale"),
    (quant_case("bad-weight-scale-count", "fp8e4m3", weight_scale=["weight_scale", "float32", [0.1, 0.2]]),
     "weight_scale"),
    (quant_case("bad-fp8-weight", "fp8e4m3", weight=["weight", "float16", [1.0625] * 576]), "weight'[0]"),
    (quant_case("bad-no-x-scale", "fp8e4m3", x_scale=None), "x_scale"),
    (quant_case("bad-int8-without-quant-type", "int8", quant_type=None, x_scale=None, weight_scale=None,
                output_scale=None), "quant_type"),
    (quant_case("bad-quant-no-weights", "int8", weight=None, weight_shape=None, bias=None), "weight"),
]


@pytest.mark.parametrize("major", [10, 11])
def test_quantized_fields_create_plugins_and_bad_ones_are_refused(major, tmp_path):
    """int8 and fp8e4m3 nodes, with and without output_scale, in both phases; the refusals name the field."""
    runtime, _version = runtime_or_skip(major)
    built = library_or_skip(major)
    bad = [case for case, _word in BAD_QUANT]
    proc, result = probe(runtime, built.lib, tmp_path, cases=[*GOOD_QUANT, *bad])
    assert result is not None, f"exit {proc.returncode}\n{proc.stderr}"
    for case in GOOD_QUANT:
        for phase, outcome in result["cases"][case["id"]].items():
            assert outcome["created"] and outcome["identity"] == IDENTITY, (case["id"], phase, proc.stderr)
    for case, word in BAD_QUANT:
        for phase, outcome in result["cases"][case["id"]].items():
            assert outcome == {"created": False, "exception": None}, (case["id"], phase, outcome)
        messages = [line for line in proc.stderr.splitlines() if f"layer '{case['id']}'" in line]
        assert len(messages) == 2 and all(word in m for m in messages), (case["id"], proc.stderr)


@pytest.mark.parametrize(("runtime_major", "library_major"), [(10, 11), (11, 10)])
@pytest.mark.parametrize("route", ["load_library", "ctypes"])
def test_a_library_of_the_other_major_refuses_without_crashing(runtime_major, library_major, route, tmp_path):
    runtime, version = runtime_or_skip(runtime_major)
    built = library_or_skip(library_major)
    proc, result = probe(runtime, built.lib, tmp_path, route)
    assert result is not None, f"the process died: exit {proc.returncode}\n{proc.stderr}"
    assert result["registered"] == [] and result["creator_found"] is False
    assert result["load_library_handle"] is False
    if route == "ctypes":
        assert result["after_ctypes"] == []
    errors = [line for line in proc.stderr.splitlines() if line.startswith("[dcnconvert] error:")]
    assert len(errors) == 1, proc.stderr
    assert f"built for TensorRT {library_major}" in errors[0]
    assert f"is major version {runtime_major}" in errors[0] and "dcnconvert plugin-path" in errors[0]
