"""Tests of dcnconvert.transform.standard.to_standard_model on models that already hold standard ONNX
DeformConv nodes: valid ones are kept byte for byte, every other form is converted."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import samples
from support.evaluate import ort_outputs, run_model

from dcnconvert.transform.standard import (
    MIN_IR_VERSION,
    STANDARD_OPSET,
)

F = TensorProto.FLOAT


# --------------------------------------------------------------------------------------------------
# to_standard_model: valid standard DeformConv nodes are kept as they are, everything else converted
# --------------------------------------------------------------------------------------------------


def _deform_node(model: onnx.ModelProto) -> onnx.NodeProto:
    (node,) = [n for n in model.graph.node if n.op_type == "DeformConv"]
    return node


def _drop_mask(model: onnx.ModelProto) -> None:
    """Make a sample ``onnx.DeformConv`` model a DCNv1 one: no mask input (ORT uses ones)."""
    node = _deform_node(model)
    names = list(node.input[:4])
    while names and not names[-1]:
        names.pop()
    del node.input[:]
    node.input.extend(names)
    kept = [vi for vi in model.graph.input if vi.name != "mask"]
    del model.graph.input[:]
    model.graph.input.extend(kept)


def _standard_sample(pads, bias: bool, mask: bool, opset: int = 19, seed: int = 0) -> onnx.ModelProto:
    model = samples.build(
        "onnx.DeformConv", n=2, c=4, h=5, w=6, cout=4, pads=pads, stride=(2, 1), dilation=(1, 2),
        group=2, deformable_group=2, bias=bias, opset=opset, seed=seed,
    )
    if not mask:
        _drop_mask(model)
    return model


def _close_to_numpy_reference(std: onnx.ModelProto, original: onnx.ModelProto, feeds: dict) -> None:
    """ORT on ``std`` == the float64 NumPy reference of the rewritten ``original``."""
    from dcnconvert.transform.plugin import rewrite_model

    rewritten, _ = rewrite_model(original)
    expected = run_model(rewritten, feeds)
    got = ort_outputs(std, feeds)
    assert set(got) == set(expected)
    for name, ref in expected.items():
        scale = float(np.abs(ref).max())
        assert scale > 1e-3, name
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=1e-5 * scale, err_msg=name)


def _is_valid(model: onnx.ModelProto) -> list[bool]:
    from dcnconvert.match.finder import find_dcn_nodes
    from dcnconvert.transform.standard import is_valid_standard_deformconv

    return [is_valid_standard_deformconv(m, model) for m in find_dcn_nodes(model)]


@pytest.mark.parametrize("opset", [19, 22])
@pytest.mark.parametrize("mask", [True, False], ids=["mask", "nomask"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("pads", [None, (0, 1, 2, 1), (2, 0, 0, 1)], ids=["sym", "asym0121", "asym2001"])
def test_valid_standard_deformconv_passes_through_byte_identical(pads, bias, mask, opset):
    from dcnconvert.transform.standard import to_standard_model

    seed = 300 + 10 * opset + 4 * bool(pads) + 2 * bias + mask
    model = _standard_sample(pads, bias, mask, opset=opset, seed=seed)
    before = model.SerializeToString()
    assert _is_valid(model) == [True]
    std = to_standard_model(model)
    assert model.SerializeToString() == before  # input untouched
    assert std is not model
    assert _deform_node(std).SerializeToString() == _deform_node(model).SerializeToString()
    assert std.SerializeToString() == before  # nothing to convert at opset >= 19: the model as it was
    feeds = samples.input_feeds(model, seed + 1)
    assert ("mask" in feeds) == mask
    got, original = ort_outputs(std, feeds), ort_outputs(model, feeds)
    for name, value in original.items():
        assert np.abs(value).max() > 1e-3
        assert got[name].tobytes() == value.tobytes(), name  # bit for bit
    # ... and both agree with our own parse of the node (rewrite + float64 NumPy reference).
    _close_to_numpy_reference(std, model, feeds)


def test_deformconv_without_offset_group_attribute_that_fits_the_channels_is_kept():
    from dcnconvert.transform.standard import to_standard_model

    model = samples.build("onnx.DeformConv", deformable_group=1, seed=8)
    node = _deform_node(model)
    kept = [a for a in node.attribute if a.name != "offset_group"]  # default 1 == offset channels / 18
    del node.attribute[:]
    node.attribute.extend(kept)
    assert _is_valid(model) == [True]
    assert to_standard_model(model).SerializeToString() == model.SerializeToString()


def _mixed_model(pads=(0, 1, 1, 0)) -> onnx.ModelProto:
    """mmcv MMCVModulatedDeformConv2d (dg 2) feeding a standard DeformConv (group 2, dg 2, asymmetric
    pads, non-square stride and dilation), at opset 19."""
    rng = np.random.default_rng(41)
    n, c, h, w, k = 2, 4, 6, 7, 9
    oh = h + pads[0] + pads[2] - (2 * 2 + 1) + 1
    ow = (w + pads[1] + pads[3] - 3) // 2 + 1
    inits = [
        samples.random_initializer(rng, "w1", (4, c, 3, 3)),
        samples.random_initializer(rng, "b1", (4,)),
        samples.random_initializer(rng, "w2", (6, 2, 3, 3)),
        samples.random_initializer(rng, "b2", (6,)),
    ]
    mmcv_node = helper.make_node(
        "MMCVModulatedDeformConv2d", ["x", "off1", "m1", "w1", "b1"], ["y1"], name="mmcv_dcn",
        domain="mmcv", stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, deform_groups=2,
    )
    std_node = helper.make_node(
        "DeformConv", ["y1", "w2", "off2", "b2", "m2"], ["y"], name="std_dcn", strides=[1, 2],
        pads=list(pads), dilations=[2, 1], group=2, offset_group=2, kernel_shape=[3, 3],
    )
    inputs = [
        helper.make_tensor_value_info(name, F, shape)
        for name, shape in (
            ("x", [n, c, h, w]), ("off1", [n, 2 * 2 * k, h, w]), ("m1", [n, 2 * k, h, w]),
            ("off2", [n, 2 * 2 * k, oh, ow]), ("m2", [n, 2 * k, oh, ow]),
        )
    ]
    graph = helper.make_graph(
        [mmcv_node, std_node], "mixed", inputs, [helper.make_tensor_value_info("y", F, [n, 6, oh, ow])], inits
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("mmcv", 1)]
    )
    model.ir_version = MIN_IR_VERSION
    return model


def test_mixed_model_converts_only_the_mmcv_node():
    from dcnconvert.transform.standard import to_standard_model

    model = _mixed_model()
    assert _is_valid(model) == [False, True]
    std = to_standard_model(model)
    onnx.checker.check_model(std, full_check=True)
    assert [(n.op_type, n.name) for n in std.graph.node] == [
        ("DeformConv", "mmcv_dcn"), ("DeformConv", "std_dcn")
    ]
    assert std.graph.node[0].SerializeToString() != model.graph.node[0].SerializeToString()
    assert std.graph.node[1].SerializeToString() == model.graph.node[1].SerializeToString()
    assert {o.domain: o.version for o in std.opset_import} == {"": 19}  # mmcv import dropped
    rng = np.random.default_rng(42)
    feeds = {
        vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
        for vi in model.graph.input
    }
    for name in ("m1", "m2"):
        feeds[name] = np.abs(feeds[name])
    _close_to_numpy_reference(std, model, feeds)


def _variant(case: str) -> onnx.ModelProto:
    """DeformConv models that are not valid standard DeformConv (or not the standard form)."""
    if case in ("onnx.DeformConv.swapped", "paddle2onnx.DeformConv", "nonstandard.DeformConv"):
        pads = (0, 1, 2, 1) if case in samples.PADS_FORMS else None
        return samples.build(case, deformable_group=2, pads=pads, seed=51)
    model = samples.build("onnx.DeformConv", deformable_group=2, seed=52)
    node = _deform_node(model)
    if case == "offset_group-missing":  # not Paddle2ONNX-labelled; offset channels say 2, ORT would use 1
        kept = [a for a in node.attribute if a.name != "offset_group"]
        del node.attribute[:]
        node.attribute.extend(kept)
    elif case == "opset-18":  # DeformConv does not exist below opset 19
        model.opset_import[0].version = 18
    elif case == "strides-as-INT":  # our parser reads it; the operator wants INTS
        for attr in node.attribute:
            if attr.name == "strides":
                attr.CopyFrom(helper.make_attribute("strides", 1))
    else:  # pragma: no cover
        raise AssertionError(case)
    return model


@pytest.mark.parametrize(
    "case",
    ["onnx.DeformConv.swapped", "paddle2onnx.DeformConv", "nonstandard.DeformConv",
     "offset_group-missing", "opset-18", "strides-as-INT"],
)
def test_other_deformconv_variants_are_still_converted(case):
    from dcnconvert.transform.standard import to_standard_model

    model = _variant(case)
    assert _is_valid(model) == [False]
    std = to_standard_model(model)
    onnx.checker.check_model(std, full_check=True)
    assert std.SerializeToString() != model.SerializeToString()
    node = _deform_node(std)
    assert node.SerializeToString() != _deform_node(model).SerializeToString()
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["offset_group"] == 2 and len(node.input) == 5  # canonical: X, W, offset, B, mask
    assert max(o.version for o in std.opset_import if o.domain == "") >= STANDARD_OPSET
    _close_to_numpy_reference(std, model, samples.input_feeds(model, 53))


def test_invalid_standard_deformconv_is_still_refused():
    """A node that is not kept goes through the rewrite's validation, as before."""
    from dcnconvert.errors import ValidationError
    from dcnconvert.transform.standard import to_standard_model

    model = samples.build("onnx.DeformConv", deformable_group=2, seed=54)
    for attr in _deform_node(model).attribute:
        if attr.name == "offset_group":
            attr.i = 4  # 36 offset channels do not fit 4 groups of a 3x3 kernel
    assert _is_valid(model) == [False]
    with pytest.raises(ValidationError, match="offset has 36 channels; expected .* = 72"):
        to_standard_model(model)
