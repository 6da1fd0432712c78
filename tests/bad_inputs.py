"""The bad-input corpus: files that every command must refuse with one clear message.

``write_corpus(folder)`` writes them and returns ``{case: path}``; :data:`EXPECTED` gives, per case,
the error class and words the message must contain. Used by transform/test_plugin_graph.py,
model/test_io.py and the CLI tests (``from bad_inputs import write_corpus, EXPECTED``; tests/ is on
sys.path under pytest).
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper
from support import samples

#: case -> (error class name, substrings of the message, lower-cased)
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "truncated": ("ModelError", ("truncated",)),
    "not_onnx": ("ModelError", ("not",)),
    "missing": ("ModelError", ("not found",)),
    "dcn_3d": ("UnsupportedNodeError", ("3-d", "dcn0")),
    "offset_channels": ("ValidationError", ("offset has 20 channels", "dcn0")),
    "mask_channels": ("ValidationError", ("mask has 7 channels", "dcn0")),
    "group_not_dividing": ("ValidationError", ("group = 3", "dcn0")),
    "deformable_group_not_dividing": ("ValidationError", ("deformable_group = 3", "dcn0")),
    "zero_stride": ("ValidationError", ("stride = [0, 1]", "dcn0")),
    "negative_padding": ("ValidationError", ("padding = [-1, 1]", "dcn0")),
}


def _set_attr(node: onnx.NodeProto, name: str, value) -> None:
    for i, attr in enumerate(node.attribute):
        if attr.name == name:
            del node.attribute[i]
            break
    node.attribute.append(helper.make_attribute(name, value))


def _set_channels(model: onnx.ModelProto, input_name: str, channels: int) -> None:
    for vi in model.graph.input:
        if vi.name == input_name:
            vi.type.tensor_type.shape.dim[1].dim_value = channels


def _dcn_3d() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 5, 5, 5])
    offset = helper.make_tensor_value_info("offset", onnx.TensorProto.FLOAT, [1, 81, 5, 5, 5])
    mask = helper.make_tensor_value_info("mask", onnx.TensorProto.FLOAT, [1, 27, 5, 5, 5])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 5, 5, 5])
    weight = helper.make_tensor("weight", onnx.TensorProto.FLOAT, [4, 4, 3, 3, 3], [0.5] * 432)
    node = helper.make_node(
        "MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"], ["y"], name="dcn0", domain="mmcv",
        stride=[1, 1, 1], padding=[1, 1, 1], dilation=[1, 1, 1], groups=1, deform_groups=1,
    )
    graph = helper.make_graph([node], "dcn3d", [x, offset, mask], [y], [weight])
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("mmcv", 1)]
    )


def corpus_models() -> dict[str, onnx.ModelProto]:
    """The DCN models of the corpus (the unreadable files are made in :func:`write_corpus`)."""
    form = "mmcv.MMCVModulatedDeformConv2d"
    models: dict[str, onnx.ModelProto] = {"dcn_3d": _dcn_3d()}

    m = samples.build(form)
    _set_channels(m, "offset", 20)
    models["offset_channels"] = m

    m = samples.build(form)
    _set_channels(m, "mask", 7)
    models["mask_channels"] = m

    m = samples.build(form, c=4, cout=6)
    _set_attr(m.graph.node[0], "groups", 3)
    models["group_not_dividing"] = m

    m = samples.build(form, c=4)
    _set_attr(m.graph.node[0], "deform_groups", 3)
    models["deformable_group_not_dividing"] = m

    m = samples.build(form)
    _set_attr(m.graph.node[0], "stride", [0, 1])
    models["zero_stride"] = m

    m = samples.build(form)
    _set_attr(m.graph.node[0], "padding", [-1, 1])
    models["negative_padding"] = m
    return models


def write_corpus(folder: Path) -> dict[str, Path]:
    """Write every case of :data:`EXPECTED` into ``folder``; ``missing`` is a path that does not exist."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    good = samples.build("mmcv.MMCVModulatedDeformConv2d").SerializeToString()
    paths: dict[str, Path] = {}
    paths["truncated"] = folder / "truncated.onnx"
    paths["truncated"].write_bytes(good[: len(good) // 2])
    paths["not_onnx"] = folder / "not_onnx.onnx"
    paths["not_onnx"].write_text("this is a text file, not an ONNX model\n")
    paths["missing"] = folder / "missing.onnx"
    for name, model in corpus_models().items():
        paths[name] = folder / f"{name}.onnx"
        paths[name].write_bytes(model.SerializeToString())
    return paths
