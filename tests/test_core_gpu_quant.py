"""Quantized layers (INT8, FP8 E4M3) on the GPU: the simple kernel and the 8-bit tiles (warpgroup and
warp MMAs).

Every run is compared with two float64 models of tests/support/quant.py and the unquantized
result (tests/support/core_quant.py says why and derives the bounds):

* the Q/DQ graph's math (samples not rounded): every element within ``core_quant.allowed``
  (the checks are ``core_quant.check_float_output`` and ``check_quantized_output``);
* the core's own math (INT8's fixed-point or FP16 interpolation and the sample rounding emulated in
  float64): at least 99% of
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
from support.quant import QMAX

QUANT_CASES: list[Case] = [
    # 128 channels: the 8-bit tiles; non-square stride, padding and dilation
    Case("q_c128_nonsquare", 2, 128, 13, 17, 64, (3, 3), (2, 1), (1, 2), (1, 2), off_scale=2.0),
    # 2 groups and 2 deformable groups of 128 channels
    Case("q_c256_g2_dg2", 1, 256, 12, 10, 256, (3, 3), padding=(1, 1), group=2, dg=2, off_scale=2.0),
    # more than 128 output channels per group: the 256-row tile
    Case("q_c128_cout320", 1, 128, 20, 24, 320, (3, 3), padding=(1, 1), off_scale=1.5),
    # far offsets, stride 2, no bias; masks in [-1, 1]: INT8 samples in FP16 where a weight is negative
    Case("q_c128_far", 2, 128, 9, 11, 96, (3, 3), (2, 2), (1, 1), bias=False, off_scale=8.0, mask_lo=-1.0),
    # 64 channels per group and per deformable group: the 8-bit tiles with two kernel points per
    # chunk (kernel 3x3: the last chunk's second half empty; 2x2 in 2 groups; 5x5 for 3 K splits)
    Case("q_c64_pairs", 2, 64, 13, 11, 96, (3, 3), (2, 1), (1, 2), (2, 1), off_scale=2.0),
    Case("q_c128_g2_pairs", 1, 128, 10, 12, 160, (2, 2), padding=(1, 0), group=2, dg=2, off_scale=2.0),
    Case("q_c64_k5", 1, 64, 12, 14, 72, (5, 5), padding=(2, 2), off_scale=1.5),
    # two images of 112 pixels (a multiple of 16): the 16-byte output items of FP16 and 8-bit outputs
    # (storeQuantAligned), pixel tiles that span both images
    Case("q_c128_b2_items", 2, 128, 8, 14, 128, (3, 3), padding=(1, 1), off_scale=2.0),
    # 256 and 512 output channels in one group: the sample-sharing tiles (the two channel tiles of a
    # pixel tile as one cluster, each block sampling every other chunk); 9 chunks, an odd count
    Case("q_c128_cout256_pair", 1, 128, 11, 9, 256, (3, 3), (1, 2), (1, 1), (2, 1), off_scale=2.5),
    Case("q_c128_cout512_pair", 1, 128, 8, 10, 512, (3, 3), padding=(1, 1), off_scale=2.0),
    # channels the 8-bit tiles do not take: the simple kernel; 3 groups, 4 deformable groups, 1x3 kernel
    Case("q_c48_g3_dg4", 2, 48, 7, 9, 18, (1, 3), (1, 1), (0, 1), (1, 2), group=3, dg=4, off_scale=2.0),
]
QTYPES = ("int8", "fp8e4m3")
FDTYPES = ("float32", "float16")
PATHS = ((False, False), (True, True))  # (channel_last, prepared)

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


def q8_tiles(lib, qtype: str) -> list[int]:
    """The 8-bit tiles built for ``qtype`` (tma-128x32-p8-q8 takes INT8 only)."""
    return [t.index for t in core_fused.quant_tiles(qtype, lib)]


def algos(lib, qtype: str) -> list[int]:
    out = [core.ALGO_AUTO, core.ALGO_SIMPLE]
    if device_cc() // 10 == 9:
        out += [core.ALGO_FUSED_TILE + t for t in q8_tiles(lib, qtype)]
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("fdtype", FDTYPES)
@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("case", QUANT_CASES, ids=[c.name for c in QUANT_CASES])
def test_quantized_float_output(lib, case: Case, qtype: str, fdtype: str) -> None:
    from dcnconvert.errors import UnsupportedNodeError

    inputs, refs = inputs_refs(case, qtype, fdtype)
    ran = []
    for algo in algos(lib, qtype):
        for channel_last, prepared in PATHS:
            try:
                out = core_quant.run(
                    lib, case, qtype, fdtype, inputs, algo=algo, channel_last=channel_last, prepared=prepared
                )
            except UnsupportedNodeError:
                assert algo >= core.ALGO_FUSED_TILE, "AUTO and the simple kernel take every quantized layer"
                continue
            errs = core_quant.check_float_output(
                qtype, fdtype, inputs, refs, out, f"(seed {core_quant.SESSION_SEED})"
            )
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
    for algo in (core.ALGO_AUTO, core.ALGO_SIMPLE):
        out_q = core_quant.run(lib, case, qtype, "float16", inputs, algo=algo, out_scale=out_scale)
        core_quant.check_quantized_output(
            qtype, inputs, refs, out_scale, out_q, f"(seed {core_quant.SESSION_SEED})"
        )


@pytest.mark.gpu
@pytest.mark.parametrize("qtype", QTYPES)
def test_auto_runs_the_8bit_tiles(lib, qtype: str) -> None:
    """On compute capability 9.x AUTO chooses an 8-bit tile for the layers of 128 channels per group
    and per deformable group, and for those of 64 channels in one deformable group."""
    if device_cc() // 10 != 9:
        pytest.skip(f"the choices here are those of compute capability 9.x; this GPU is {device_cc()}.")
    names = {t.index: t.name for t in core_fused.tile_infos(lib)}
    for case in QUANT_CASES[:-1]:
        inputs, _ = inputs_refs(case, qtype, "float16")
        p = core_quant.params(case, qtype, "float16", inputs, algo=core.ALGO_AUTO, out_scale=None)
        tile, splits = core_fused.fused_choice(p, lib=lib)
        assert names[tile].endswith(("-q8", "-q8-pair")), (case.name, names[tile], splits)


@pytest.mark.gpu
@pytest.mark.parametrize("out_q", [False, True], ids=["float_out", "quant_out"])
@pytest.mark.parametrize(
    "reduce", [core.SPLIT_REDUCE_KERNEL, core.SPLIT_REDUCE_CLUSTER], ids=["kernel", "cluster"]
)
@pytest.mark.parametrize("qtype", QTYPES)
def test_split_k(lib, qtype: str, reduce: int, out_q: bool) -> None:
    """K split 2 and 3 ways on each 8-bit tile, added up by the reduction kernel or in clusters: the
    partial sums carry the weight scales, the reduction the bias and the output type. The
    sample-sharing tiles take the cases with an even number of channel tiles, and add their split
    sums with the reduction kernel only: forced into clusters, they refuse."""
    from dcnconvert.errors import UnsupportedNodeError

    if device_cc() // 10 != 9:
        pytest.skip(f"every 8-bit tile (the warpgroup ones: 9.x) is forced here; this GPU is {device_cc()}")
    tiles = q8_tiles(lib, qtype)
    infos = {t.index: t for t in core_fused.tile_infos(lib)}
    seed = f"(seed {core_quant.SESSION_SEED})"
    ran: set[int] = set()
    for case in (QUANT_CASES[0], QUANT_CASES[2], QUANT_CASES[6], QUANT_CASES[9]):
        inputs, refs = inputs_refs(case, qtype, "float16")
        out_scale = float(np.float32(np.abs(refs["qdq"]).max() / QMAX[qtype])) if out_q else None
        core.set_split_reduce(reduce, lib)
        try:
            for tile in tiles:
                pair = infos[tile].pair
                for splits in (2, 3):
                    algo = core.ALGO_FUSED_TILE + tile + core.ALGO_SPLIT_STEP * (splits - 1)
                    where = f"{case.name} tile {infos[tile].name} splits {splits} {seed}"
                    try:
                        out = core_quant.run(lib, case, qtype, "float16", inputs, algo=algo,
                                             out_scale=out_scale)
                    except UnsupportedNodeError as exc:
                        refusals = ["channel tiles in pairs"]
                        if reduce == core.SPLIT_REDUCE_CLUSTER:
                            refusals.append("in thread-block clusters")
                        assert pair and any(r in str(exc) for r in refusals), f"{where}: {exc}"
                        continue
                    ran.add(tile)
                    if out_q:
                        core_quant.check_quantized_output(qtype, inputs, refs, out_scale, out, where)
                    else:
                        core_quant.check_float_output(qtype, "float16", inputs, refs, out, where)
        finally:
            core.set_split_reduce(core.SPLIT_REDUCE_AUTO, lib)
    single = {t for t in tiles if not infos[t].pair}
    expect = single if reduce == core.SPLIT_REDUCE_CLUSTER else set(tiles)
    assert ran == expect, f"tiles that took no case: {sorted(infos[t].name for t in expect - ran)}"
