#!/usr/bin/env python3
"""Export the torch samples: torchvision ``DeformConv2d`` through ``torch.onnx.export(..., dynamo=True)``.

Real exporter output, unlike the synthetic samples of ``generate.py``: three small modules are built
with fixed seeds, exported by torch's dynamo exporter (onnxscript's torchvision translation writes the
standard ONNX ``DeformConv``), and saved as the exporter wrote them, except that the per-node
``pkg.torch.onnx.stack_trace`` metadata is dropped (it holds absolute paths of the exporting
machine). For each model, a ``.npz`` holds fixed inputs and torch's outputs (keys ``<case>.<name>``),
so tests compare dcnconvert against torch without torch installed. ``torch_exports.json`` lists the
files, the versions that made them, the inputs, the dynamic profile and the errors measured here;
README.md's torch section is written from it (by ``generate.py``'s README writer).

Each export is checked before it is written: dcnconvert finds every DCN node (``api.inspect``),
rewrites them all (``api.rewrite``), and three results are compared with torch's: the exported model
in ONNX Runtime, the rewritten model with the plugin nodes computed by ``tests/support/evaluate.py``
(NumPy, float64), and ``api.reference`` of the rewritten model (plugin nodes back to standard
``DeformConv``) in ONNX Runtime. The script prints the max abs errors and fails above ``TOLERANCE``.

The committed files were made with Python 3.11.7, torch 2.14.1 (the +cu130 wheel, run on the CPU),
torchvision 0.29.1, onnxscript 0.7.2, onnx 1.23.2, onnxruntime 1.32.0, numpy 2.4.6; the manifest
records the versions of each run. Other versions may emit a different graph: rerun and review.

Not part of ``make samples`` (which needs no torch and rebuilds the synthetic samples bit for bit).
Usage: ``python3 sample_models/export_torch.py [--out DIR]`` (default: this folder).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing
sys.path.insert(0, str(HERE.parent / "tests"))  # support.evaluate: the NumPy plugin reference
sys.path.insert(0, str(HERE))  # generate.py: the README writer

import generate
import onnx
import onnxruntime as ort
import torch
from support.evaluate import run_model
from torch.export import Dim
from torchvision.ops import DeformConv2d

from dcnconvert import api

MANIFEST = "torch_exports.json"
STRIPPED_METADATA = "pkg.torch.onnx.stack_trace"
#: The largest max abs error (torch vs each dcnconvert path) this script accepts.
TOLERANCE = 1e-4
VERSIONED = ("torch", "torchvision", "onnxscript", "onnx", "onnxruntime", "numpy")


# --------------------------------------------------------------------------------------------------
# The modules.


class SingleDcn(torch.nn.Module):
    """One ``DeformConv2d``; the offsets and the mask are graph inputs."""

    def __init__(self, cin: int, cout: int, **kwargs):
        super().__init__()
        self.dcn = DeformConv2d(cin, cout, 3, **kwargs)

    def forward(self, x, offset, mask):
        return self.dcn(x, offset, mask)


class DcnNet(torch.nn.Module):
    """Stem Conv, then two DCNv2 layers whose offsets and masks a regular Conv predicts.

    Layer 1 splits its offset Conv's output with ``torch.chunk`` (offset halves, then mask logits, as
    mmcv's ``ModulatedDeformConv2dPack`` does) and has no bias (torchvision then passes a zero bias);
    layer 2 slices (offsets, then mask logits), has stride 2 and 2 offset groups.
    """

    def __init__(self, cin: int = 3, c: int = 8):
        super().__init__()
        self.stem = torch.nn.Conv2d(cin, c, 3, padding=1)
        self.offset1 = torch.nn.Conv2d(c, 27, 3, padding=1)
        self.dcn1 = DeformConv2d(c, c, 3, padding=1, bias=False)
        self.offset2 = torch.nn.Conv2d(c, 54, 3, stride=2, padding=1)
        self.dcn2 = DeformConv2d(c, c, 3, stride=2, padding=1)
        with torch.no_grad():  # features of about unit scale, offsets of a pixel or two
            for conv in (self.stem, self.dcn1, self.dcn2):
                torch.nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
            for conv, std in ((self.offset1, 0.25), (self.offset2, 0.6)):
                torch.nn.init.normal_(conv.weight, std=std)

    def forward(self, x):
        f = torch.relu(self.stem(x))
        o1, o2, logits = torch.chunk(self.offset1(f), 3, dim=1)
        f = torch.relu(self.dcn1(f, torch.cat([o1, o2], dim=1), torch.sigmoid(logits)))
        om = self.offset2(f)
        return self.dcn2(f, om[:, :36], torch.sigmoid(om[:, 36:]))


def _single_inputs(gen: torch.Generator, x, offset, mask) -> dict[str, torch.Tensor]:
    return {
        "x": torch.randn(x, generator=gen),
        "offset": torch.randn(offset, generator=gen) * 2.0,  # some samples leave the image
        "mask": torch.rand(mask, generator=gen).clamp(1e-3, 1 - 1e-3),
    }


#: name -> spec. ``cases``: the input shapes of the expected outputs (the first is the export example).
EXPORTS: dict[str, dict] = {
    "torch_dynamo_DeformConv2d": {
        "make": lambda: SingleDcn(8, 8, padding=1),
        "cases": [{"x": (1, 8, 10, 10), "offset": (1, 18, 10, 10), "mask": (1, 9, 10, 10)}],
        "opset": 19,
        "what": "`DeformConv2d(8, 8, 3, padding=1)`: one DCNv2 layer, offsets and mask as inputs; static",
    },
    "torch_dynamo_DeformConv2d_opset22": {
        "make": lambda: SingleDcn(8, 8, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
        "cases": [{"x": (1, 8, 12, 10), "offset": (1, 72, 6, 10), "mask": (1, 36, 6, 10)}],
        "opset": 22,
        "what": (
            "`DeformConv2d(8, 8, 3, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)`, "
            "4 offset groups (from the offset channels); static"
        ),
    },
    "torch_dynamo_dcn_net": {
        "make": DcnNet,
        "cases": [{"x": (2, 3, 12, 10)}, {"x": (1, 3, 9, 7)}],
        "opset": 20,
        "dynamic": {0: ("batch", 1, 8), 2: ("height", 4, 64), 3: ("width", 4, 64)},
        "profile": {"x": {"min": [1, 3, 4, 4], "opt": [2, 3, 12, 10], "max": [8, 3, 64, 64]}},
        "what": (
            "stem Conv + 2 DCNv2 layers, offsets/masks from a Conv (chunk + Sigmoid; slices + Sigmoid); "
            "the first has no bias (exported as a zero initializer), the second stride 2 and 2 offset "
            "groups; dynamic batch/height/width"
        ),
    },
}


# --------------------------------------------------------------------------------------------------
# Export and check.


def _case_inputs(name: str, index: int, shapes: dict) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * (sorted(EXPORTS).index(name) + 1) + index)
    if set(shapes) == {"x"}:
        return {"x": torch.randn(shapes["x"], generator=gen)}
    return _single_inputs(gen, shapes["x"], shapes["offset"], shapes["mask"])


def _strip_paths(model: onnx.ModelProto) -> None:
    """Drop the stack traces (absolute paths of this machine) the exporter puts on every node."""
    for node in model.graph.node:
        kept = [p for p in node.metadata_props if p.key != STRIPPED_METADATA]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)


def export(name: str) -> tuple[onnx.ModelProto, torch.nn.Module]:
    spec = EXPORTS[name]
    torch.manual_seed(sorted(EXPORTS).index(name) + 1)
    module = spec["make"]().eval()
    example = _case_inputs(name, 0, spec["cases"][0])
    dynamic = None
    if "dynamic" in spec:
        dims = {axis: Dim(dim, min=lo, max=hi) for axis, (dim, lo, hi) in spec["dynamic"].items()}
        dynamic = {"x": dims}
    program = torch.onnx.export(
        module,
        tuple(example.values()),
        dynamo=True,
        opset_version=spec["opset"],
        input_names=list(example),
        output_names=["y"],
        dynamic_shapes=dynamic,
        verbose=False,
    )
    model = program.model_proto
    _strip_paths(model)
    return model, module


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def _node_summary(model: onnx.ModelProto, match: dict) -> dict:
    """What the exporter wrote (op, domain, inputs, attributes) and what dcnconvert made of it."""
    node = next(n for n in model.graph.node if n.name == match["node"])
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {
        "node": node.name,
        "op_type": node.op_type,
        "domain": node.domain,
        "inputs": list(node.input),
        "attributes": {k: list(v) if isinstance(v, list) else v for k, v in sorted(attrs.items())},
        "form": match["form"],
        "kernel": match["kernel"],
        "with_bias": match["with_bias"],
        "mask": match["mask"],
    }


def check(name: str, model: onnx.ModelProto, module: torch.nn.Module) -> tuple[dict, dict, list]:
    """Inspect, rewrite and compare with torch. Returns (arrays for the .npz, errors, DCN nodes)."""
    found = api.inspect(model)
    dcn = [n for n in model.graph.node if n.op_type == "DeformConv"]
    if found["count"] != len(dcn) or found["convertible"] != len(dcn) or not dcn:
        raise SystemExit(f"{name}: dcnconvert found {found['count']} DCN node(s), {len(dcn)} DeformConv")
    rewritten = api.rewrite(model).model
    if any(n.op_type == "DeformConv" for n in rewritten.graph.node):
        raise SystemExit(f"{name}: a DeformConv node was left after the rewrite")
    back = api.reference(rewritten).model
    arrays: dict[str, np.ndarray] = {}
    errors = {"onnxruntime": 0.0, "rewrite_numpy": 0.0, "reference_of_rewrite": 0.0}
    for index, shapes in enumerate(EXPORTS[name]["cases"]):
        inputs = _case_inputs(name, index, shapes)
        with torch.no_grad():
            want = module(*inputs.values()).numpy()
        feeds = {k: v.numpy() for k, v in inputs.items()}
        got = {
            "onnxruntime": _ort(model, feeds)["y"],
            "rewrite_numpy": run_model(rewritten, feeds)["y"],
            "reference_of_rewrite": _ort(back, feeds)["y"],
        }
        for path, y in got.items():
            if y.shape != want.shape:
                raise SystemExit(f"{name} case {index}: {path} gave {y.shape}, torch {want.shape}")
            errors[path] = max(errors[path], float(np.abs(y.astype(np.float64) - want).max()))
        arrays.update({f"{index}.{k}": v for k, v in feeds.items()})
        arrays[f"{index}.y"] = want
    nodes = [_node_summary(model, m) for m in found["matches"]]
    return arrays, errors, nodes


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    out.update({package: metadata.version(package) for package in VERSIONED})
    return out


def _describe(model: onnx.ModelProto) -> dict[str, list]:
    return {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in model.graph.input}


def _json(value: object) -> str:
    """Indented JSON with each list of numbers on one line."""
    text = json.dumps(value, indent=1)
    flat = re.compile(r"\[\n\s*([^\[\]{}]*?)\n\s*\]")
    return flat.sub(lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, spec in EXPORTS.items():
        model, module = export(name)
        arrays, errors, nodes = check(name, model, module)
        data = model.SerializeToString()
        for private in {sys.prefix, str(Path.home()), str(HERE)} - {"/"}:
            if private.encode() in data:
                raise SystemExit(f"{name}: the export still holds the local path {private}")
        (args.out / f"{name}.onnx").write_bytes(data)
        np.savez_compressed(args.out / f"{name}.npz", **arrays)
        opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
        entry = {
            "file": f"{name}.onnx",
            "expected": f"{name}.npz",
            "what": spec["what"],
            "opsets": opsets,
            "inputs": _describe(model),
            "cases": [{k: list(v) for k, v in case.items()} for case in spec["cases"]],
            "profile": spec.get("profile"),
            "dcn_nodes": nodes,
            "max_abs_error": {k: float(f"{v:.3g}") for k, v in errors.items()},
        }
        entries.append(entry)
        sizes = f"{len(data)} B onnx, {(args.out / f'{name}.npz').stat().st_size} B npz"
        print(f"{name}: opsets {opsets}, {len(nodes)} DeformConv, {sizes}")
        for path, err in errors.items():
            print(f"  max abs error vs torch, {path}: {err:.3g}")
        worst = max(errors.values())
        if not worst <= TOLERANCE:
            raise SystemExit(f"{name}: max abs error {worst:.3g} > {TOLERANCE}")
    manifest = {
        "made_by": "sample_models/export_torch.py",
        "versions": _versions(),
        "stripped_metadata": STRIPPED_METADATA,
        "models": entries,
    }
    (args.out / MANIFEST).write_text(_json(manifest), encoding="utf-8")
    if args.out.resolve() == HERE:
        generate.write_readme(HERE)
    print(f"wrote {len(entries)} exports and {MANIFEST} to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
