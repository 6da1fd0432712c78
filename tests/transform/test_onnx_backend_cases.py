"""The four ONNX backend-test DeformConv cases, regenerated from onnx's own case generator.

Each case (a single standard ``DeformConv`` node with hand-placed offsets and expected outputs written
in ``onnx/backend/test/case/node/deformconv.py``) goes
(a) through ``rewrite_model`` and is run with ``evaluate.run_model`` (NumPy reference for the plugin
    node), and
(b) through ``to_standard_model`` and is run with ONNX Runtime;
both must reproduce the expected outputs.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from support.evaluate import BACKENDS, is_plugin_node, ort_outputs, run_model

from dcnconvert import schema
from dcnconvert.transform.plugin import rewrite_model
from dcnconvert.transform.standard import to_standard_model

EXPECTED_NAMES = {
    "test_basic_deform_conv_with_padding",
    "test_basic_deform_conv_without_padding",
    "test_deform_conv_with_mask_bias",
    "test_deform_conv_with_multiple_offset_groups",
}


@functools.cache
def deform_cases():
    """The DeformConv node test cases, by name.

    ``collect_testcases(None)`` runs every generator (~7 s, once).
    """
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # other ops' generators divide by zero on purpose
        cases = [c for c in collect_testcases(None) if "deform" in c.name]
    return {c.name: c for c in cases}


def _feeds_and_expected(case):
    inputs, outputs = case.data_sets[0]
    names = [i.name for i in case.model.graph.input]
    feeds = dict(zip(names, inputs, strict=True))
    expected = dict(zip([o.name for o in case.model.graph.output], outputs, strict=True))
    return feeds, expected


def test_all_four_cases_are_generated():
    assert set(deform_cases()) == EXPECTED_NAMES


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_rewritten_case_matches_expected(name, backend):
    case = deform_cases()[name]
    rewritten, _report = rewrite_model(case.model)
    plugin_nodes = [n for n in rewritten.graph.node if is_plugin_node(n)]
    assert len(plugin_nodes) == 1
    assert not [n for n in rewritten.graph.node if n.op_type == "DeformConv"]
    attrs = {a.name for a in plugin_nodes[0].attribute}
    assert {schema.ATTR_STRIDE, schema.ATTR_PADDING, schema.ATTR_DILATION} <= attrs
    feeds, expected = _feeds_and_expected(case)
    got = run_model(rewritten, feeds, backend=backend)
    for out_name, value in expected.items():
        assert got[out_name].dtype == value.dtype
        np.testing.assert_allclose(got[out_name], value, rtol=1e-6, atol=1e-6, err_msg=out_name)


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_standard_case_runs_in_onnxruntime(name):
    case = deform_cases()[name]
    std = to_standard_model(case.model)
    assert [n.op_type for n in std.graph.node if n.op_type == "DeformConv"] == ["DeformConv"]
    feeds, expected = _feeds_and_expected(case)
    got = ort_outputs(std, feeds)
    for out_name, value in expected.items():
        np.testing.assert_allclose(got[out_name], value, rtol=1e-6, atol=1e-6, err_msg=out_name)
