"""Quantized layers (INT8, FP8 E4M3) on the GPU: the simple kernel and the 8-bit warpgroup tiles.

Every run is compared with two float64 models of tests/support/quant.py and the unquantized
result (tests/support/core_quant.py says why and derives the bounds):

* the Q/DQ graph's math (samples not rounded): every element within ``core_quant.allowed``;
* the core's own math (FP16 interpolation and sample rounding emulated in float64): at least 99% of
  the elements within the FP32 arithmetic's bound, FP8 plus a share of the tensor cores' sums (the
  rest hold samples whose FP32 corner weights round to a neighbouring FP16 value);
* the unquantized float64 layer: relative L2 error below 0.1 (quantization noise; reported).

Inputs are fresh each session (``core_quant.SESSION_SEED``, printed; DCN_TEST_SEED repeats a run).
"""

from __future__ import annotations

import numpy as np
import pytest
from support import core, core_fused, core_quant
from support.core_cases import Case, device_cc, ensure_core_built, record_summary
from support.quant import QMAX, quantize

QUANT_CASES: list[Case] = [
    # 128 channels: the 8-bit tiles; non-square stride, padding and dilation
    Case("q_c128_nonsquare", 2, 128, 13, 17, 64, (3, 3), (2, 1), (1, 2), (1, 2), off_scale=2.0),
    # 2 groups and 2 deformable groups of 128 channels
    Case("q_c256_g2_dg2", 1, 256, 12, 10, 256, (3, 3), padding=(1, 1), group=2, dg=2, off_scale=2.0),
    # more than 128 output channels per group: the 256-row tile
    Case("q_c128_cout320", 1, 128, 20, 24, 320, (3, 3), padding=(1, 1), off_scale=1.5),
    # far offsets, stride 2, no bias
    Case("q_c128_far", 2, 128, 9, 11, 96, (3, 3), (2, 2), (1, 1), bias=False, off_scale=8.0),
    # channels the 8-bit tiles do not take: the simple kernel; 3 groups, 4 deformable groups, 1x3 kernel
    Case("q_c48_g3_dg4", 2, 48, 7, 9, 18, (1, 3), (1, 1), (0, 1), (1, 2), group=3, dg=4, off_scale=2.0),
]
QTYPES = ("int8", "fp8e4m3")
FDTYPES = ("float32", "float16")
PATHS = ((False, False), (True, True))  # (channel_last, prepared)
#: Error of the FP8 tensor-core sums, as a share of the chunk's absolute sum (see check_float).
FP8_CHUNK_SUM = 2.0**-12

_REFS: dict[tuple[str, str, str], tuple[dict, dict]] = {}


@pytest.fixture(scope="module")
def lib():
    return core.load(ensure_core_built())


def inputs_refs(case: Case, qtype: str, fdtype: str) -> tuple[dict, dict]:
    key = (case.name, qtype, fdtype)
    if key not in _REFS:
        inputs = core_quant.make_inputs(case, qtype, fdtype)
        _REFS[key] = (inputs, core_quant.references(case, qtype, inputs))
    return _REFS[key]


def algos(lib, case: Case) -> list[int]:
    out = [core.ALGO_AUTO, core.ALGO_SIMPLE]
    if device_cc() // 10 == 9:
        out += [core.ALGO_FUSED_TILE + t.index for t in core_fused.tile_infos(lib) if t.name.endswith("-q8")]
    return out


def check_float(case: Case, qtype: str, fdtype: str, inputs: dict, refs: dict, out: np.ndarray) -> dict:
    seed = f"(seed {core_quant.SESSION_SEED})"
    bound = core_quant.allowed(case, qtype, fdtype, inputs, refs["qdq"])
    worst = float((np.abs(out - refs["qdq"]) / bound).max())
    assert worst <= 1.0, f"error against the Q/DQ model exceeds its bound by x{worst:.3f} {seed}"
    ref_max = float(np.abs(refs["core_math"]).max())
    tight = core_quant.U_OUT[fdtype] * np.abs(refs["core_math"]) + 1e-5 * ref_max + 2.0**-24
    if qtype == "fp8e4m3":
        # The tensor cores' FP8 sums keep fewer bits than FP32 (dcnParams.h); each 128-channel chunk's
        # sum is added in FP32, so its error is a small part of that chunk's absolute sum.
        tight = tight + FP8_CHUNK_SUM * refs["abs"]
    within = float((np.abs(out - refs["core_math"]) <= tight).mean())
    assert within >= 0.99, f"only {within:.4f} of the outputs match the core's math in float64 {seed}"
    rel_float = float(np.linalg.norm(out - refs["float"]) / np.linalg.norm(refs["float"]))
    assert rel_float < 0.1, f"relative L2 error {rel_float:.3e} against the unquantized layer {seed}"
    return {
        "max_err_over_bound": worst,
        "rel_l2_vs_qdq": float(np.linalg.norm(out - refs["qdq"]) / np.linalg.norm(refs["qdq"])),
        "share_exact_math": within,
        "rel_l2_vs_float": rel_float,
    }


@pytest.mark.gpu
@pytest.mark.parametrize("fdtype", FDTYPES)
@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("case", QUANT_CASES, ids=[c.name for c in QUANT_CASES])
def test_quantized_float_output(lib, case: Case, qtype: str, fdtype: str) -> None:
    from dcnconvert.errors import UnsupportedNodeError

    inputs, refs = inputs_refs(case, qtype, fdtype)
    ran = []
    for algo in algos(lib, case):
        for channel_last, prepared in PATHS:
            try:
                out = core_quant.run(
                    lib, case, qtype, fdtype, inputs, algo=algo, channel_last=channel_last, prepared=prepared
                )
            except UnsupportedNodeError:
                assert algo >= core.ALGO_FUSED_TILE, "AUTO and the simple kernel take every quantized layer"
                continue
            errs = check_float(case, qtype, fdtype, inputs, refs, out)
            record_summary(
                {
                    "test": "quant",
                    "case": case.name,
                    "qtype": qtype,
                    "fdtype": fdtype,
                    "algo": algo,
                    "channel_last": channel_last,
                    "prepared": prepared,
                    **errs,
                }
            )
            ran.append(algo)
    assert core.ALGO_AUTO in ran and core.ALGO_SIMPLE in ran


@pytest.mark.gpu
@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("case", QUANT_CASES, ids=[c.name for c in QUANT_CASES])
def test_quantized_output(lib, case: Case, qtype: str) -> None:
    """A quantized output: out_q = round(out / output_scale), within the float bound plus one step."""
    inputs, refs = inputs_refs(case, qtype, "float16")
    out_scale = float(np.float32(np.abs(refs["qdq"]).max() / QMAX[qtype]))
    bound = core_quant.allowed(case, qtype, "float32", inputs, refs["qdq"])
    for algo in (core.ALGO_AUTO, core.ALGO_SIMPLE):
        out_q = core_quant.run(lib, case, qtype, "float16", inputs, algo=algo, out_scale=out_scale)
        expect = quantize(refs["qdq"], out_scale, qtype)
        # FP16 rounding of the bias and the FP32 sums move the value before the output rounds.
        step = 1.0 if qtype == "int8" else 2.0**-3 * np.maximum(np.abs(expect), 2.0**-6)
        slack = (bound + 2.0**-11 * np.abs(refs["qdq"])) / out_scale + step
        worst = float((np.abs(out_q - expect) / slack).max())
        assert worst <= 1.0, (
            f"quantized output off by x{worst:.3f} of its bound (seed {core_quant.SESSION_SEED})"
        )


@pytest.mark.gpu
@pytest.mark.parametrize("qtype", QTYPES)
def test_auto_runs_the_8bit_tiles(lib, qtype: str) -> None:
    """On compute capability 9.x AUTO chooses an 8-bit tile for 128-channel layers."""
    if device_cc() // 10 != 9:
        pytest.skip(f"the 8-bit warpgroup tiles run on compute capability 9.x; this GPU is {device_cc()}")
    names = {t.index: t.name for t in core_fused.tile_infos(lib)}
    for case in QUANT_CASES[:4]:
        inputs, _ = inputs_refs(case, qtype, "float16")
        p = core_quant.params(case, qtype, "float16", inputs, algo=core.ALGO_AUTO, out_scale=None)
        tile, splits = core_fused.fused_choice(p, lib=lib)
        assert names[tile].endswith("-q8") and splits == 1, (case.name, names[tile], splits)
