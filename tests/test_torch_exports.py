"""sample_models/torch_dynamo_*: torchvision ``DeformConv2d`` exported by ``torch.onnx.export(dynamo=True)``.

Real exporter output, checked without torch: the nodes the exporter wrote (standard ONNX
``DeformConv``), dcnconvert finding and rewriting every one, and dcnconvert's results against torch's
outputs, which ``sample_models/export_torch.py`` saved beside each model (``<name>.npz``: inputs and
``y`` per case, keys ``<case>.<name>``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from support.evaluate import BACKENDS, is_plugin_node, run_model

from dcnconvert import api, schema
from dcnconvert.cli.main import cli
from dcnconvert.match.finder import find_dcn_nodes
from dcnconvert.transform.plugin import rewrite_model

SAMPLES = Path(__file__).resolve().parents[1] / "sample_models"
MANIFEST = json.loads((SAMPLES / "torch_exports.json").read_text(encoding="utf-8"))
ENTRIES = {m["file"]: m for m in MANIFEST["models"]}
#: |dcnconvert - torch| <= TOLERANCE * max|torch| for every output. Measured with the committed files:
#: 0 (ONNX Runtime's DeformConv on the single layers) to 2.4e-6 * max|torch| (the NumPy plugin
#: reference on the network); a wrong sampling position or mask is off by 1e-2 or more.
TOLERANCE = 1e-4

#: What torch 2.14.1's dynamo exporter wrote: file -> (ONNX opset, DeformConv node -> attributes,
#: dcnconvert's canonical (stride, padding, dilation, group, deformable_group)).
EXPECTED = {
    "torch_dynamo_DeformConv2d.onnx": (19, {
        "node_deform_conv2d": ({"dilations": [1, 1], "group": 1, "offset_group": 1, "pads": [1, 1, 1, 1],
                                "strides": [1, 1]}, ((1, 1), (1, 1), (1, 1), 1, 1)),
    }),
    "torch_dynamo_DeformConv2d_opset22.onnx": (22, {
        "node_deform_conv2d": ({"dilations": [1, 2], "group": 2, "offset_group": 4, "pads": [1, 2, 1, 2],
                                "strides": [2, 1]}, ((2, 1), (1, 2), (1, 2), 2, 4)),
    }),
    "torch_dynamo_dcn_net.onnx": (20, {
        "node_deform_conv2d": ({"dilations": [1, 1], "group": 1, "offset_group": 1, "pads": [1, 1, 1, 1],
                                "strides": [1, 1]}, ((1, 1), (1, 1), (1, 1), 1, 1)),
        "node_deform_conv2d_1": ({"dilations": [1, 1], "group": 1, "offset_group": 2, "pads": [1, 1, 1, 1],
                                  "strides": [2, 2]}, ((2, 2), (1, 1), (1, 1), 1, 2)),
    }),
}
NET = "torch_dynamo_dcn_net.onnx"


def _load(name: str) -> onnx.ModelProto:
    return onnx.load(str(SAMPLES / name))


def _cases(name: str) -> list[tuple[dict[str, np.ndarray], np.ndarray]]:
    """(inputs, torch's y) of every case saved for ``name``."""
    with np.load(SAMPLES / ENTRIES[name]["expected"]) as data:
        arrays = {key: data[key] for key in data.files}
    cases = []
    for index in range(len(ENTRIES[name]["cases"])):
        prefix = f"{index}."
        feeds = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix) and k != f"{index}.y"}
        cases.append((feeds, arrays[f"{index}.y"]))
    assert len(arrays) == sum(len(f) + 1 for f, _ in cases)  # nothing else in the file
    return cases


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (y,) = session.run(["y"], feeds)
    return y


def _assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    scale = float(np.abs(want).max())
    assert scale > 0.1 and got.shape == want.shape and got.dtype == np.float32, what
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= TOLERANCE * scale, f"{what}: max abs error {err:.3g} > {TOLERANCE} * {scale:.3g}"


def test_manifest_lists_every_export_with_its_expected_outputs():
    assert set(ENTRIES) == set(EXPECTED) == {p.name for p in SAMPLES.glob("torch_*.onnx")}
    assert set(MANIFEST["versions"]) >= {"torch", "torchvision", "onnxscript", "onnx", "onnxruntime"}
    assert sum((SAMPLES / e["expected"]).stat().st_size for e in ENTRIES.values()) < 100 * 1024
    for name, entry in ENTRIES.items():
        cases = _cases(name)
        for (feeds, y), shapes in zip(cases, entry["cases"], strict=True):
            assert {k: list(v.shape) for k, v in feeds.items()} == shapes
            assert np.isfinite(y).all()
        scale = min(float(np.abs(y).max()) for _, y in cases)
        assert max(entry["max_abs_error"].values()) <= TOLERANCE * scale


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exporter_wrote_standard_deform_conv(name):
    """Default-domain DeformConv (X, W, offset, B, mask); weight and bias initializers; no kernel_shape."""
    model = _load(name)
    opset, nodes = EXPECTED[name]
    assert [(o.domain, o.version) for o in model.opset_import] == [("", opset)]
    dcn = [n for n in model.graph.node if n.op_type == "DeformConv"]
    assert [n.name for n in dcn] == list(nodes)
    initializers = {t.name for t in model.graph.initializer}
    for node in dcn:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert node.domain == "" and attrs == nodes[node.name][0]
        assert len(node.input) == 5 and node.input[1] in initializers and node.input[3] in initializers
        assert node.input[2] not in initializers and node.input[4] not in initializers
    assert not any(p.key == "pkg.torch.onnx.stack_trace" for n in model.graph.node for p in n.metadata_props)
    onnx.checker.check_model(model, full_check=True)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dcnconvert_finds_and_rewrites_every_node(name):
    model = _load(name)
    _opset, nodes = EXPECTED[name]
    matches = find_dcn_nodes(model)
    assert [m.node_name for m in matches] == list(nodes)
    for m in matches:
        stride, padding, dilation, group, dg = nodes[m.node_name][1]
        assert m.form == "onnx.DeformConv" and m.convertible and m.reason is None
        assert m.kernel == (3, 3) and m.with_bias and m.mask_kind == "tensor" and m.prepad is None
        assert (m.attrs.stride, m.attrs.padding, m.attrs.dilation) == (stride, padding, dilation)
        assert (m.attrs.group, m.attrs.deformable_group) == (group, dg)
    rewritten, report = rewrite_model(model)
    onnx.checker.check_model(rewritten)
    assert report.rewritten == list(nodes) and not report.skipped and report.embedded == list(nodes)
    assert not any(n.op_type == "DeformConv" for n in rewritten.graph.node)
    plugins = {n.name: n for n in rewritten.graph.node if is_plugin_node(n)}
    assert list(plugins) == list(nodes)
    for node_name, node in plugins.items():
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        stride, padding, dilation, group, dg = nodes[node_name][1]
        assert attrs[schema.ATTR_STRIDE] == list(stride) and attrs[schema.ATTR_PADDING] == list(padding)
        assert attrs[schema.ATTR_DILATION] == list(dilation) and attrs[schema.ATTR_GROUP] == group
        assert attrs[schema.ATTR_DEFORMABLE_GROUP] == dg


CASES = [(name, i) for name in sorted(EXPECTED) for i in range(len(ENTRIES[name]["cases"]))]


@pytest.mark.parametrize("name,case", CASES, ids=[f"{n[:-5]}-{i}" for n, i in CASES])
def test_dcnconvert_matches_torch(name, case):
    """The reference (ORT), the rewrite (NumPy plugin, both backends) and the reference of the rewrite
    (plugin nodes back to DeformConv, ORT) all give torch's output."""
    model = _load(name)
    feeds, want = _cases(name)[case]
    reference = api.reference(model).model
    _assert_close(_ort(reference, feeds), want, "reference in ONNX Runtime")
    rewritten = api.rewrite(model).model
    for backend in BACKENDS:
        _assert_close(run_model(rewritten, feeds, backend=backend)["y"], want, f"rewrite, {backend}")
    back = api.reference(rewritten).model
    assert sum(n.op_type == "DeformConv" for n in back.graph.node) == len(EXPECTED[name][1])
    _assert_close(_ort(back, feeds), want, "reference of the rewrite")


def test_network_is_dynamic_and_its_profile_covers_the_cases():
    model = _load(NET)
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert [i.name for i in model.graph.input] == ["x"] and dims == ["batch", 3, "height", "width"]
    out = [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert out[:2] == ["batch", 8] and all(isinstance(d, str) for d in out[2:])
    profile = ENTRIES[NET]["profile"]["x"]
    low, opt, high = (np.array(profile[k]) for k in ("min", "opt", "max"))
    assert (low <= opt).all() and (opt <= high).all() and list(opt) == ENTRIES[NET]["cases"][0]["x"]
    shapes = [feeds["x"].shape for feeds, _ in _cases(NET)]
    assert len(set(shapes)) == 2 and all((low <= s).all() and (s <= high).all() for s in shapes)
    for feeds, want in _cases(NET):
        n, _c, h, w = feeds["x"].shape
        assert want.shape == (n, 8, (h - 1) // 2 + 1, (w - 1) // 2 + 1)


def test_commands_on_the_exports(tmp_path):
    """inspect --json, rewrite and reference through the CLI, on every export."""
    runner = CliRunner()
    for name, (_opset, nodes) in sorted(EXPECTED.items()):
        res = runner.invoke(cli, ["inspect", str(SAMPLES / name), "--json"])
        assert res.exit_code == 0, res.stderr
        found = json.loads(res.stdout)
        assert found["count"] == found["convertible"] == len(nodes) and found["warnings"] == []
        assert {m["form"] for m in found["matches"]} == {"onnx.DeformConv"}
        for command in ("rewrite", "reference"):
            out = tmp_path / f"{command}_{name}"
            res = runner.invoke(cli, [command, str(SAMPLES / name), "-o", str(out)])
            assert res.exit_code == 0, res.stderr
            assert onnx.load(str(out)).graph.output[0].name == "y"
