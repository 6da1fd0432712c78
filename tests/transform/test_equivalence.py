"""Issue 2 acceptance: rewritten model (NumPy reference) == original model (ORT through ``reference``).

For every source form in ``samples.FORMS`` and a grid of parameters (group 1/2, deformable group
1/2/4, kernel 3x3 and 1x3, square and non-square stride/padding/dilation, bias/no bias, batch 1/3,
ordinary and far out-of-image offsets, static and dynamic dims):

* ``rewrite_model(model)`` run with ``evaluate.run_model`` (float64 NumPy for the plugin node; ORT,
  and in one test also onnx.reference, for the Slice/Sigmoid/ConstantOfShape/Pad the rewrite adds), and
* ``to_standard_model(model)`` run with ONNX Runtime (CPUExecutionProvider),

must agree to ``1e-5 * max|ORT output|`` (absolute error, relative to the output's scale; rtol 0),
on fresh random inputs seeded per case (never zeros).

The full grid has 288 combinations per form; each form runs a deterministic, seeded subset of the
combinations it supports (``CASES_PER_FORM``), and a test checks that every value of every axis
the form supports is covered. ``onnx.DeformConv`` (the form every other one is compared against in
the field) runs a larger share.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
import pytest
from support import samples
from support.evaluate import BACKENDS, is_plugin_node, ort_outputs, run_model

from dcnconvert.transform.plugin import rewrite_model
from dcnconvert.transform.standard import to_standard_model

TOLERANCE = 1e-5  # times max|expected|
CASES_PER_FORM = 16
CASES_ONNX_DEFORMCONV = 64


class Geometry(NamedTuple):
    name: str
    stride: tuple
    padding: tuple
    dilation: tuple


SQUARE = Geometry("sq", (1, 1), (1, 1), (1, 1))
NON_SQUARE = Geometry("nsq", (2, 1), (1, 2), (1, 2))
# A second non-square geometry so that each of stride/padding/dilation is non-square on both axes.
NON_SQUARE_T = Geometry("nsqT", (1, 2), (2, 0), (2, 1))

AXES = {
    "group": (1, 2),
    "deformable_group": (1, 2, 4),
    "kernel": ((3, 3), (1, 3)),
    "geometry": (SQUARE, NON_SQUARE, NON_SQUARE_T),
    "bias": (True, False),
    "n": (1, 3),
    "far": (False, True),
}
FULL_GRID: list[dict] = [dict(zip(AXES, values, strict=True)) for values in itertools.product(*AXES.values())]


def _build_kwargs(case: dict, dynamic: bool) -> dict:
    g = case["geometry"]
    return {
        "n": case["n"],
        "c": 8,
        "h": 5,
        "w": 6,
        "cout": 4,
        "kernel": case["kernel"],
        "stride": g.stride,
        "padding": g.padding,
        "dilation": g.dilation,
        "group": case["group"],
        "deformable_group": case["deformable_group"],
        "bias": case["bias"],
        "dynamic": dynamic,
    }


def _select(form: str, count: int) -> list[dict]:
    """``count`` supported grid cases for ``form`` (deterministic).

    Cases are drawn in a seeded random order; first every case that brings an axis value not yet
    covered is taken (so each supported value of each axis appears), then the rest in draw order.
    """
    supported = [c for c in FULL_GRID if samples.supports(form, seed=0, **_build_kwargs(c, False))]
    order = np.random.default_rng(samples.FORMS.index(form)).permutation(len(supported))
    covered: set = set()
    chosen: list[int] = []
    for idx in order:
        keys = {(axis, repr(value)) for axis, value in supported[idx].items()}
        if not keys <= covered:
            covered |= keys
            chosen.append(int(idx))
    for idx in order:
        if len(chosen) >= count:
            break
        if int(idx) not in chosen:
            chosen.append(int(idx))
    return [supported[i] for i in sorted(chosen)]


def _case_id(form: str, index: int, case: dict) -> str:
    return (
        f"{form}-{index}-g{case['group']}-dg{case['deformable_group']}-k{case['kernel'][0]}x{case['kernel'][1]}-"
        f"{case['geometry'].name}-{'b' if case['bias'] else 'nob'}-n{case['n']}-"
        f"{'far' if case['far'] else 'near'}"
    )


PARAMS = []
for _form in samples.FORMS:
    _count = CASES_ONNX_DEFORMCONV if _form == "onnx.DeformConv" else CASES_PER_FORM
    for _i, _case in enumerate(_select(_form, _count)):
        PARAMS.append(pytest.param(_form, _i, _case, id=_case_id(_form, _i, _case)))


def _push_offsets_out(feeds: dict[str, np.ndarray], factor: float) -> None:
    """Scale the offsets so that many samples land outside the image (and across -1 and H/W)."""
    if "offset" in feeds:
        feeds["offset"] = (feeds["offset"] * factor).astype(feeds["offset"].dtype)
    if "offset_mask" in feeds:
        om = feeds["offset_mask"]
        two_thirds = om.shape[1] * 2 // 3
        om[:, :two_thirds] *= factor


def check_equivalent(model, seed: int, far: bool = False, backend: str = "onnxruntime") -> float:
    """Run both paths on fresh random inputs; assert agreement; return the max error / scale."""
    rewritten, _report = rewrite_model(model)
    assert any(is_plugin_node(n) for n in rewritten.graph.node)
    standard = to_standard_model(model)
    assert "DeformConv" in {n.op_type for n in standard.graph.node}
    feeds = samples.input_feeds(model, seed)
    if far:
        _push_offsets_out(feeds, 4.0)
    for name, value in feeds.items():
        assert np.abs(value).max() > 0, name
    got = run_model(rewritten, feeds, backend=backend)
    expected = ort_outputs(standard, feeds)
    worst = 0.0
    for name, ref in expected.items():
        scale = float(np.abs(ref).max())
        assert scale > 1e-3, f"{name}: degenerate output"
        assert got[name].shape == ref.shape and got[name].dtype == ref.dtype
        err = float(np.abs(got[name].astype(np.float64) - ref).max())
        assert err <= TOLERANCE * scale, f"{name}: max abs error {err:.3g} > {TOLERANCE} * {scale:.3g}"
        worst = max(worst, err / scale)
    return worst


@pytest.mark.parametrize("form, index, case", PARAMS)
def test_rewrite_matches_standard_in_ort(form, index, case):
    seed = 1000 * samples.FORMS.index(form) + index
    dynamic = index % 2 == 1
    model = samples.build(form, seed=seed, **_build_kwargs(case, dynamic))
    check_equivalent(model, seed + 1, far=case["far"])


def test_every_form_is_exercised_on_every_axis_value_it_supports():
    by_form: dict[str, list[dict]] = {}
    for param in PARAMS:
        form, _index, case = param.values
        by_form.setdefault(form, []).append(case)
    assert set(by_form) == set(samples.FORMS)
    for form in samples.FORMS:
        supported = [c for c in FULL_GRID if samples.supports(form, seed=0, **_build_kwargs(c, False))]
        for axis in AXES:
            possible = {repr(c[axis]) for c in supported}
            chosen = {repr(c[axis]) for c in by_form[form]}
            assert chosen == possible, f"{form}: axis {axis} covers {chosen}, supported {possible}"


def test_grid_reaches_the_acceptance_values():
    """The union over forms covers every value the issue names."""
    cases = [p.values[2] for p in PARAMS]
    assert {c["group"] for c in cases} == {1, 2}
    assert {c["deformable_group"] for c in cases} == {1, 2, 4}
    assert {c["kernel"] for c in cases} == {(3, 3), (1, 3)}
    assert {c["geometry"].name for c in cases} == {"sq", "nsq", "nsqT"}
    assert {c["bias"] for c in cases} == {True, False}
    assert {c["n"] for c in cases} == {1, 3}
    assert {c["far"] for c in cases} == {True, False}


ASYMMETRIC_PADS = [(0, 1, 2, 1), (2, 0, 0, 1), (1, 1, 0, 0)]


@pytest.mark.parametrize("form", samples.PADS_FORMS)
@pytest.mark.parametrize("pads", ASYMMETRIC_PADS, ids=lambda p: "pads" + "".join(map(str, p)))
def test_asymmetric_pads(form, pads):
    seed = 77 + sum(pads) + samples.PADS_FORMS.index(form)
    model = samples.build(
        form,
        n=2,
        c=4,
        h=5,
        w=6,
        cout=4,
        pads=pads,
        stride=(2, 1),
        dilation=(1, 2),
        deformable_group=2,
        seed=seed,
    )
    rewritten, _ = rewrite_model(model)
    assert "Pad" in {n.op_type for n in rewritten.graph.node}
    check_equivalent(model, seed, far=True)


@pytest.mark.parametrize("opset", [19, 22])
def test_onnx_deformconv_opsets(opset):
    model = samples.build("onnx.DeformConv", opset=opset, group=2, deformable_group=2, seed=opset, n=3)
    check_equivalent(model, opset)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", samples.FORMS)
def test_forms_at_their_defaults_with_larger_dims(form, backend):
    """Each form with its builder's defaults and a less tiny input (dynamic dims, batch 2), with
    the rewritten graph's ordinary nodes run by ORT and, independently, by onnx.reference."""
    model = samples.build(form, n=2, c=8, h=12, w=10, cout=8, seed=5, dynamic=True)
    check_equivalent(model, 6, backend=backend)
