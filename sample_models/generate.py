#!/usr/bin/env python3
"""Regenerate the bundled sample models bit-for-bit (``make samples``).

One small model per DCN source form (built by :func:`support.samples.build`) plus
``dcn_resnet_block.onnx``, a multi-layer network in the shape mmcv/mmdeploy export a ResNet block
with ``dcn=dict(type='DCNv2')``. Everything is seeded; producer fields are fixed; no timestamps.
The README's table is written from the same list, so it never drifts from the files; its section on
the torch exports (made by ``export_torch.py``, not here) is written from ``torch_exports.json`` by
``torch_section.py``.

Usage: ``python3 sample_models/generate.py [--out DIR]`` (default: this folder).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing
sys.path.insert(0, str(HERE.parent / "tests"))  # the sample builders (tests/support/samples.py)

import onnx
from onnx import TensorProto, helper, numpy_helper
from support import samples
from torch_section import render_torch_section

PRODUCER_NAME = "dcnconvert sample_models/generate.py"
PRODUCER_VERSION = "1"
RESNET_FILE = "dcn_resnet_block.onnx"


def _finish(model: onnx.ModelProto, doc: str) -> onnx.ModelProto:
    """Fix every field that could vary between runs or machines.

    No onnx.checker here: several real exporter forms put unknown ops in the default domain, which
    the checker rejects (that is what they look like in the field); the tests check the rewrites.
    """
    model.producer_name = PRODUCER_NAME
    model.producer_version = PRODUCER_VERSION
    model.domain = ""
    model.model_version = 1
    model.doc_string = doc
    return model


# --------------------------------------------------------------------------------------------------
# The multi-layer network.


class _Builder:
    """Tiny helper that names tensors and collects nodes/initializers of one graph."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def randn(self, name: str, shape: tuple[int, ...], scale: float) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def node(self, op: str, inputs: list[str], output: str, name: str, domain: str = "", **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=name, domain=domain, **attrs))
        return output

    def conv(
        self,
        x: str,
        name: str,
        cin: int,
        cout: int,
        k: tuple[int, int],
        stride=(1, 1),
        pad=(0, 0),
        dil=(1, 1),
        bias_scale: float = 0.1,
        w_scale: float | None = None,
    ) -> str:
        """A Conv with BatchNorm folded into weight and bias (what torch.onnx does in eval mode)."""
        fan_in = cin * k[0] * k[1]
        w = self.randn(f"{name}.weight", (cout, cin, k[0], k[1]), w_scale or (2.0 / fan_in) ** 0.5)
        b = self.randn(f"{name}.bias", (cout,), bias_scale)
        return self.node(
            "Conv",
            [x, w, b],
            f"{name}_out",
            name,
            kernel_shape=list(k),
            strides=list(stride),
            pads=[pad[0], pad[1], pad[0], pad[1]],
            dilations=list(dil),
        )

    def batchnorm(self, x: str, name: str, channels: int) -> str:
        scale = self.const(f"{name}.weight", self.rng.uniform(0.5, 1.5, channels).astype(np.float32))
        bias = self.randn(f"{name}.bias", (channels,), 0.1)
        mean = self.randn(f"{name}.running_mean", (channels,), 0.1)
        var = self.const(f"{name}.running_var", self.rng.uniform(0.5, 2.0, channels).astype(np.float32))
        return self.node("BatchNormalization", [x, scale, bias, mean, var], f"{name}_out", name, epsilon=1e-5)

    def dcn_pack(self, x: str, name: str, cin: int, cout: int, stride, pad, dil, deform_groups: int) -> str:
        """mmcv ``ModulatedDeformConv2dPack`` (``DCNv2``) as torch.onnx exports it at opset 11.

        conv_offset -> Split into 3 chunks (torch.chunk) -> Concat(o1, o2) = offset,
        Sigmoid(third) = mask -> mmcv::MMCVModulatedDeformConv2d (bias=False, as in mmdet ResNets).
        """
        k = 9 * deform_groups
        om = self.conv(
            x, f"{name}.conv_offset", cin, 3 * k, (3, 3), stride, pad, dil, bias_scale=0.5, w_scale=0.15
        )
        self.nodes.append(
            helper.make_node(
                "Split",
                [om],
                [f"{name}_o1", f"{name}_o2", f"{name}_m"],
                name=f"{name}.chunk",
                axis=1,
                split=[k, k, k],
            )
        )
        offset = self.node("Concat", [f"{name}_o1", f"{name}_o2"], f"{name}_offset", f"{name}.cat", axis=1)
        mask = self.node("Sigmoid", [f"{name}_m"], f"{name}_mask", f"{name}.sigmoid")
        weight = self.randn(f"{name}.weight", (cout, cin, 3, 3), (2.0 / (cin * 9)) ** 0.5)
        return self.node(
            "MMCVModulatedDeformConv2d",
            [x, offset, mask, weight],
            f"{name}_out",
            name,
            domain="mmcv",
            stride=list(stride),
            padding=list(pad),
            dilation=list(dil),
            groups=1,
            deform_groups=deform_groups,
        )


def build_resnet_block(seed: int = 2024, channels: int = 16) -> onnx.ModelProto:
    """A stem conv plus one bottleneck-free ResNet block whose two 3x3 convs are DCNv2 (mmcv form).

    x[N,C,H,W] -> Conv+Relu (stem) -> DCN1 (stride 1, pad 1, dg 1) -> BN -> Relu
      -> DCN2 (stride 2, padding (1, 2), dilation (1, 2), dg 2) -> BN
      + downsample Conv1x1 stride 2 (BN folded) of the stem output -> Relu -> Conv1x1 head -> y.
    Batch and spatial dims are dynamic; opset 11 (what mmdeploy uses).
    """
    b = _Builder(seed)
    c = channels
    stem = b.node("Relu", [b.conv("x", "stem.conv", c, c, (3, 3), pad=(1, 1))], "stem_relu", "stem.relu")
    d1 = b.dcn_pack(stem, "layer1.conv1", c, c, (1, 1), (1, 1), (1, 1), deform_groups=1)
    r1 = b.node("Relu", [b.batchnorm(d1, "layer1.bn1", c)], "layer1_relu", "layer1.relu")
    d2 = b.dcn_pack(r1, "layer1.conv2", c, c, (2, 2), (1, 2), (1, 2), deform_groups=2)
    bn2 = b.batchnorm(d2, "layer1.bn2", c)
    down = b.conv(stem, "layer1.downsample", c, c, (1, 1), stride=(2, 2))
    add = b.node("Add", [bn2, down], "layer1_add", "layer1.add")
    relu = b.node("Relu", [add], "layer1_out", "layer1.relu_out")
    b.conv(relu, "head", c, 4, (1, 1))
    b.node("Identity", ["head_out"], "y", "output")
    graph = helper.make_graph(
        b.nodes,
        "dcn_resnet_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", c, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "out_height", "out_width"])],
        b.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("mmcv", 1)], ir_version=6
    )
    return _finish(model, "DCN ResNet block (mmcv MMCVModulatedDeformConv2d x2, dynamic batch/H/W)")


# --------------------------------------------------------------------------------------------------
# One model per source form.

#: form -> (builder overrides, exporter it imitates, notes). Defaults: n=1, c=8, h=w=12, cout=8,
#: 3x3 kernel, stride 1, padding 1, dilation 1, group 1, deformable group 1, bias where the form has
#: one, static shapes.
FORM_SAMPLES: dict[str, tuple[dict, str, str]] = {
    "mmcv.MMCVModulatedDeformConv2d": (
        {"deformable_group": 2},
        "mmcv >= 1.3.8 / 2.x `ModulatedDeformConv2d` (domain `mmcv`)",
        "deform_groups 2",
    ),
    "mmdeploy.MMCVModulatedDeformConv2d": (
        {"group": 2, "deformable_group": 2},
        "mmdeploy symbolic rewriter (domain `mmdeploy`)",
        "groups 2, deform_groups 2",
    ),
    "mmcv-legacy.MMCVModulatedDeformConv2d": (
        {},
        "mmcv 1.2-1.3.7 (default domain)",
        "bias input always present",
    ),
    "mmcv.MMCVDeformConv2d": (
        {"dynamic": True},
        "mmcv `DeformConv2d` (DCNv1, domain `mmcv`)",
        "no mask (rewrite adds a ones mask); `bias`/`im2col_step` attributes; dynamic N/H/W",
    ),
    "mmdeploy.MMCVDeformConv2d": (
        {"stride": (2, 2)},
        "mmdeploy `DeformConv2d` rewriter (DCNv1)",
        "4-value `padding` [pH, pH, pW, pW]; stride 2",
    ),
    "mmcv-legacy.MMCVDeformConv2d": ({}, "mmcv 1.2.x `DeformConv2d` (DCNv1, default domain)", "no mask"),
    "onnx.DeformConv": (
        {"pads": (0, 1, 2, 1), "deformable_group": 2},
        "standard ONNX `DeformConv` (opset 19; torchvision dynamo)",
        "asymmetric pads [0, 1, 2, 1] (rewrite adds a Pad); offset_group 2",
    ),
    "onnx.DeformConv.swapped": (
        {},
        "hand-written `DeformConv` symbolic with mask and bias swapped",
        "input 3 is the 4-D mask, input 4 the bias (detected by rank)",
    ),
    "paddle2onnx.DeformConv": (
        {"deformable_group": 2},
        "Paddle2ONNX >= 1.2.4 `deformable_conv` mapper",
        "bias from a `Constant` node; `offset_group` missing (recovered from the offset channels: 2)",
    ),
    "nonstandard.DeformConv": (
        {},
        "modified torchvision `_register_onnx_ops.py` (`DeformConv` with non-standard attributes)",
        "inputs x, offset, weight, bias; DCNv1",
    ),
    "openvino.DeformableConv2D": (
        {"deformable_group": 2},
        "mmdeploy OpenVINO backend (`org.openvinotoolkit`)",
        "DCNv1; 4-value pads; deformable_groups 2",
    ),
    "tao.ModulatedDeformConv2d": (
        {"dynamic": True},
        "NVIDIA TAO OCDNet export (default domain)",
        "weight also a graph input (keep_initializers_as_inputs); dynamic N/H/W",
    ),
    "dcnconvert.ModulatedDeformConv2d": (
        {"stride": (1, 2), "padding": (2, 1), "dilation": (2, 1)},
        "dcnconvert's own rewritten plugin node",
        "non-square stride/padding/dilation (refused by `--target trt-builtin`)",
    ),
    "centernet.DCNv2": (
        {},
        "CaoWGG/TensorRT-CenterNet `DCNv2` symbolic (CenterNet, FairMOT)",
        "scalar INT attributes; opset 9",
    ),
    "dcnv2_latest.DCNv2_2": (
        {"deformable_group": 2},
        "lucasjinreal/DCNv2_latest `DCNv2_2`",
        "deformable_groups 2; no groups",
    ),
    "bevformer.ModulatedDeformableConv2dTRT": ({"group": 2}, "DerryHub/BEVFormer_tensorrt", "groups 2"),
    "bevformer.ModulatedDeformableConv2dTRT2": ({}, "DerryHub/BEVFormer_tensorrt (v2 op)", ""),
    "tensorrt_pro.Plugin.DCNv2": (
        {},
        "shouxieai tensorRT_Pro `Plugin(name=DCNv2)`",
        "one offset+mask *logits* input (rewrite adds Slice + Sigmoid); empty `info`",
    ),
    "eweill.DCNv2_TRT": (
        {"padding": (2, 2), "dilation": (2, 2)},
        "eweill-nv/dcnv2_trt `DCNv2_TRT`",
        "offset+mask logits input; dilation 2, padding 2",
    ),
    "paddle-legacy.deformable_conv": (
        {},
        "legacy Paddle2ONNX fallback (`custom::deformable_conv`)",
        "inputs Input, Filter, Mask, Offset",
    ),
}

BASE_PARAMS = {"n": 1, "c": 8, "h": 12, "w": 12, "cout": 8}


def file_name(form: str) -> str:
    """``mmcv.MMCVModulatedDeformConv2d`` -> ``mmcv_MMCVModulatedDeformConv2d.onnx``."""
    return form.replace(".", "_").replace("-", "_") + ".onnx"


def build_form_sample(form: str) -> onnx.ModelProto:
    overrides, exporter, _notes = FORM_SAMPLES[form]
    params = {**BASE_PARAMS, **overrides}
    model = samples.build(form, seed=sorted(FORM_SAMPLES).index(form) + 1, **params)
    return _finish(model, f"dcnconvert sample: one DCN node in the {form} form ({exporter})")


def _describe_inputs(model: onnx.ModelProto) -> str:
    inits = {i.name for i in model.graph.initializer}
    parts = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = [d.dim_param or str(d.dim_value) for d in vi.type.tensor_type.shape.dim]
        parts.append(f"`{vi.name}` [{', '.join(dims)}]")
    return ", ".join(parts)


def build_all() -> dict[str, tuple[onnx.ModelProto, str, str, str]]:
    """file name -> (model, source form, exporter, notes), in README order."""
    missing = set(samples.FORMS) - set(FORM_SAMPLES)
    if missing:
        raise SystemExit(f"generate.py has no sample parameters for forms {sorted(missing)}")
    out: dict[str, tuple[onnx.ModelProto, str, str, str]] = {}
    for form in samples.FORMS:
        _overrides, exporter, notes = FORM_SAMPLES[form]
        out[file_name(form)] = (build_form_sample(form), form, exporter, notes)
    out[RESNET_FILE] = (
        build_resnet_block(),
        "mmcv.MMCVModulatedDeformConv2d (x2)",
        "mmdet ResNet with `dcn=dict(type='DCNv2')` exported through mmcv (opset 11)",
        (
            "multi-layer: stem Conv, 2 DCNv2 layers (offset Conv -> Split/Concat/Sigmoid as "
            "`ModulatedDeformConv2dPack` exports), BatchNorm, residual Add, downsample; second DCN stride 2, "
            "padding (1, 2), dilation (1, 2), deform_groups 2; dynamic batch/height/width"
        ),
    )
    return out


README_HEAD = """# Sample models

Small ONNX models with deformable convolutions in every exporter form dcnconvert recognises, plus a
multi-layer network. They are generated by `generate.py` (`make samples`), bit-for-bit
reproducible (fixed seeds, fixed producer fields, no timestamps); a test regenerates them into a
temporary folder and compares bytes. Do not edit them or this file by hand: change `generate.py`
and run `make samples`. The `torch_dynamo_*` files at the end are real exporter output, made by
`export_torch.py` (see the last section).

Weights are random (seeded). The single-node models take the offsets and masks as graph inputs;
`input_feeds(model, seed)` of `tests/support/samples.py` makes suitable random inputs (offsets ~ N(0, 2), so
some samples fall outside the image). Their sizes are n=1, c=8, 12x12, 8 output channels, 3x3 kernel,
stride/padding/dilation 1 unless the notes say otherwise; "dynamic" models name their dims
`N`, `H`, `W` (x) and `N`, `OH`, `OW` (offset, mask).

Try: `dcnconvert inspect sample_models/dcn_resnet_block.onnx`, then
`dcnconvert rewrite sample_models/dcn_resnet_block.onnx -o /tmp/rewritten.onnx` and
`dcnconvert reference sample_models/dcn_resnet_block.onnx -o /tmp/reference.onnx` (runs in ONNX Runtime).

| file | source form | exporter it imitates | inputs | notes |
|---|---|---|---|---|
"""


def render_readme(models: dict[str, tuple[onnx.ModelProto, str, str, str]]) -> str:
    rows = []
    for name, (model, form, exporter, notes) in models.items():
        rows.append(f"| `{name}` | `{form}` | {exporter} | {_describe_inputs(model)} | {notes} |")
    return README_HEAD + "\n".join(rows) + "\n" + render_torch_section(HERE)


def write_readme(out_dir: Path, models: dict[str, tuple[onnx.ModelProto, str, str, str]] | None = None
                 ) -> Path:
    """Write README.md into ``out_dir`` (the torch section from this folder's manifest)."""
    readme = out_dir / "README.md"
    readme.write_text(render_readme(models or build_all()), encoding="utf-8")
    return readme


def write_all(out_dir: Path) -> list[Path]:
    """Write every sample and README.md into ``out_dir``; return the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    models = build_all()
    written = []
    for name, (model, *_rest) in models.items():
        path = out_dir / name
        path.write_bytes(model.SerializeToString())
        written.append(path)
    written.append(write_readme(out_dir, models))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    written = write_all(args.out)
    total = sum(p.stat().st_size for p in written if p.suffix == ".onnx")
    print(f"wrote {len(written)} files to {args.out} ({total / 1024:.1f} KiB of models)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
