"""validate: each problem is an error naming the node, the value and the fix."""

from __future__ import annotations

import pytest
from bad_inputs import EXPECTED, corpus_models
from support import samples

from dcnconvert import schema
from dcnconvert.errors import UnsupportedNodeError, UsageError, ValidationError
from dcnconvert.match import validate
from dcnconvert.match.finder import find_dcn_nodes


def _only(model):
    (match,) = find_dcn_nodes(model)
    return match


@pytest.mark.parametrize("case", sorted(corpus_models()))
def test_corpus_cases(case):
    match = _only(corpus_models()[case])
    found = validate.problems(match)
    assert found, case
    cls, words = EXPECTED[case]
    first = found[0]
    assert type(first).__name__ == cls
    assert first.node == "dcn0"
    assert all(w in str(first).lower() for w in words), str(first)
    assert first.hint
    with pytest.raises((ValidationError, UnsupportedNodeError)):
        validate.validate_matches([match])


@pytest.mark.parametrize("form", samples.FORMS)
def test_samples_have_no_problems(form):
    assert validate.problems(_only(samples.build(form))) == []


def _attrs_match(**changes):
    match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d"))
    a = match.attrs
    match.attrs = schema.DcnAttrs(
        changes.get("stride", a.stride), changes.get("padding", a.padding),
        changes.get("dilation", a.dilation),
        changes.get("group", a.group), changes.get("deformable_group", a.deformable_group),
    )
    return match


@pytest.mark.parametrize("changes,words", [
    (dict(stride=(1, 0)), "stride = [1, 0]"),
    (dict(dilation=(0, 1)), "dilation = [0, 1]"),
    (dict(padding=(1, -2)), "padding = [1, -2]"),
    (dict(group=0), "group = 0"),
    (dict(deformable_group=-1), "deformable_group = -1"),
])
def test_attribute_ranges(changes, words):
    (problem,) = validate.problems(_attrs_match(**changes))
    assert isinstance(problem, ValidationError)
    assert words in str(problem) and "'dcn0'" in str(problem)


def test_weight_not_fitting_group():
    match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d", c=4, cout=6))
    match.shapes["weight"] = [6, 3, 3, 3]
    (problem,) = validate.problems(match)
    assert "expected weight.shape[1] = 4" in str(problem)


def test_cout_not_divisible_by_group():
    match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d", c=4, cout=6, group=2))
    match.shapes["weight"] = [5, 2, 3, 3]
    match.shapes["bias"] = [5]
    assert any("5 output channels, not divisible by group = 2" in str(p) for p in validate.problems(match))


def test_bias_shape():
    match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d", cout=6))
    match.shapes["bias"] = [5]
    (problem,) = validate.problems(match)
    assert "bias shape [5]; expected [6]" in str(problem)


def test_offset_spatial_size_must_match_output():
    match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d", h=7, w=9, stride=(2, 2)))
    match.shapes["offset"] = [1, 18, 7, 9]
    problems = validate.problems(match)
    assert any("offset spatial size 7x9 differs from the output size 4x5" in str(p) for p in problems)


def test_mask_spatial_size_checked_against_offset_when_x_unknown():
    match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d"))
    match.shapes["x"] = None
    match.shapes["mask"] = [1, 9, 3, 3]
    (problem,) = validate.problems(match)
    assert "mask spatial size 3x3" in str(problem)


def test_batch_mismatch():
    match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d", n=2))
    match.shapes["mask"] = [3, 9, 7, 9]
    assert "batch sizes differ" in str(validate.problems(match)[0])


def test_empty_output():
    match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d", h=3, w=3, padding=(0, 0)))
    match.attrs = schema.DcnAttrs((1, 1), (0, 0), (3, 3), 1, 1)
    match.shapes["offset"] = match.shapes["mask"] = None
    assert "output would be" in str(validate.problems(match)[0])


def test_symbolic_dims_are_not_checked():
    match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d", dynamic=True, stride=(2, 2)))
    assert validate.problems(match) == []


def test_logits_channels():
    match = _only(samples.build("eweill.DCNv2_TRT"))
    match.shapes["offset_mask"] = [1, 18, 7, 9]
    assert "offset_mask has 18 channels; expected 3 * deformable_group * kh * kw = 3*1*3*3 = 27" in str(
        validate.problems(match)[0])


def test_negative_prepad():
    match = _only(samples.build("onnx.DeformConv"))
    match.prepad = (0, -1, 1, 0)
    assert "negative" in str(validate.problems(match)[0])


class TestTrtBuiltin:
    @pytest.mark.parametrize("param,value", [("stride", (2, 1)), ("padding", (1, 0)), ("dilation", (1, 2))])
    def test_non_square_refused_with_node_name(self, param, value):
        match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d", h=9, w=9, **{param: value}))
        assert validate.problems(match, "dcnconvert") == []
        (problem,) = validate.problems(match, "trt-builtin")
        assert isinstance(problem, UnsupportedNodeError)
        text = str(problem)
        assert f"{param} = {list(value)}" in text and "'dcn0'" in text and "trt-builtin" in text
        assert problem.hint == "use the default target: --target dcnconvert"
        with pytest.raises(UnsupportedNodeError, match="dcn0"):
            validate.validate_matches([match], schema.TARGET_TRT_BUILTIN)

    def test_square_accepted(self):
        match = _only(samples.build("mmcv.MMCVModulatedDeformConv2d", stride=(2, 2), dilation=(2, 2)))
        assert validate.problems(match, "trt-builtin") == []

    def test_asymmetric_pads_are_square_after_the_prepad(self):
        match = _only(samples.build("onnx.DeformConv", pads=(0, 1, 2, 1)))
        assert validate.problems(match, "trt-builtin") == []


def test_not_convertible_is_unsupported():
    match = _only(samples.build("mmdeploy.MMCVDeformConv2d"))
    match.convertible, match.reason = False, "some reason"
    (problem,) = validate.problems(match)
    assert isinstance(problem, UnsupportedNodeError) and "some reason" in str(problem)


def test_first_error_counts_the_others():
    matches = [_only(corpus_models()["zero_stride"]), _only(corpus_models()["negative_padding"])]
    with pytest.raises(ValidationError) as info:
        validate.validate_matches(matches)
    assert "stride = [0, 1]" in str(info.value) and "1 more problem" in str(info.value)


def test_resolve_target():
    assert validate.resolve_target(None) is schema.TARGET_DCNCONVERT
    assert validate.resolve_target("trt-builtin") is schema.TARGET_TRT_BUILTIN
    assert validate.resolve_target(schema.TARGET_TRT_BUILTIN) is schema.TARGET_TRT_BUILTIN
    with pytest.raises(UsageError, match="unknown target 'tensorrt'"):
        validate.resolve_target("tensorrt")
