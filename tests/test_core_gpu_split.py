"""Split-K in the channel-vectorised fused kernel (marker gpu; sm_80+).

A forced tile with its K range split s ways (``core_fused.fused_algo(tile, s)``) must match the float64
reference within the fused kernel's bound for every s the workspace allows, give bit-identical
results when run twice (the partial sums are added in a fixed order), and be refused with a reason
where it does not apply. The cases split K inside a deformable group and inside a kernel point's
channel blocks, and have several groups and images.
"""

from __future__ import annotations

import numpy as np
import pytest
from support import core, core_fused
from support.core_cases import (
    DTYPES,
    U_TF32,
    Case,
    check_close,
    device_cc,
    device_has_fused,
    device_has_tma,
    device_has_wgmma,
    ensure_core_built,
    inputs_refs,
    record_summary,
    run_core,
)

from dcnconvert.errors import UnsupportedNodeError

SPLIT_CASES: list[Case] = [
    # 72 chunks, 4 blocks of 128 x 64: up to 8 splits; 2 deformable groups of 36 chunks.
    Case("s_c256_dg2", 2, 256, 9, 11, 72, (3, 3), padding=(1, 1), dg=2, off_scale=2.0),
    # 2 groups of 36 chunks, 4 deformable groups (18 chunks each), non-square attributes.
    Case("s_g2_dg4_nonsq", 1, 256, 10, 13, 160, (3, 3), (1, 2), (1, 1), (2, 1), group=2, dg=4, off_scale=3.0),
    # One deformable group (one plan per block, never rebuilt), 2 groups of 256 channels (36 or 72
    # chunks each, shares that start and end inside a channel block), non-square attributes, one
    # 64-pixel tile.
    Case("s_g2_dg1_nonsq", 1, 512, 10, 13, 160, (3, 3), (1, 2), (1, 1), (2, 1), group=2, off_scale=3.0),
    # Two channel tiles of 256 (the sample-sharing tile runs on this case only), 2 deformable
    # groups of 18 chunks each, two pixel tiles of 64.
    Case("s_pair_c512", 1, 256, 9, 11, 512, (3, 3), padding=(1, 1), dg=2, off_scale=2.0),
]

# What a tile that does not take a case at all says (any split count): the sample-sharing tile
# needs an even number of channel tiles per group.
NOT_THIS_CASE = "channel tiles in pairs"


def split_tiles_for(lib, dtype: str, math: int = core.MATH_ACCURATE) -> list[int]:
    """The tiles that split K and take ``dtype`` (with ``math``) on this device (dcnFusedTileInfo)."""
    cc = device_cc()
    tiles = core_fused.tile_infos(lib)
    return [t.index for t in tiles if t.splits_k and t.takes(dtype, math) and t.runs_on(cc)]


@pytest.fixture(scope="module")
def lib():
    return core.load(ensure_core_built())


@pytest.fixture(scope="module")
def need_fused():
    if not device_has_fused():
        pytest.skip("the fused kernel needs compute capability 8.0+")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", SPLIT_CASES, ids=[c.name for c in SPLIT_CASES])
def test_split_k_matches_reference_and_is_deterministic(lib, need_fused, case: Case, dtype: str) -> None:
    inputs, ref, absref = inputs_refs(case, dtype)
    for tile in split_tiles_for(lib, dtype):
        ran = []
        for splits in range(1, core.MAX_SPLITS + 1):
            algo = core_fused.fused_algo(tile, splits)
            try:
                out = run_core(lib, case, dtype, inputs, algo)
            except UnsupportedNodeError as exc:
                if NOT_THIS_CASE in str(exc):
                    break
                assert "K splits" in str(exc), str(exc)
                continue
            ran.append(splits)
            numbers = check_close(out, ref, dtype, None if dtype == "float32" else absref)
            record_summary(
                {
                    "test": "split_k",
                    "case": case.name,
                    "dtype": dtype,
                    "tile": tile,
                    "splits": splits,
                    **numbers,
                }
            )
            again = run_core(lib, case, dtype, inputs, algo)
            assert np.array_equal(out, again), f"tile {tile}, {splits} splits: two runs differ"
        if not ran:
            continue  # the tile does not take the case
        # The workspace allows a prefix 1..cap of split counts, and these cases have cap >= 4.
        assert ran == list(range(1, len(ran) + 1)), f"tile {tile}: split counts that ran: {ran}"
        assert len(ran) >= 4, f"tile {tile}: only {ran} split counts ran"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", SPLIT_CASES, ids=[c.name for c in SPLIT_CASES])
def test_split_tail_matches_reference_and_is_deterministic(lib, need_fused, case: Case, dtype: str) -> None:
    """The split tail AUTO runs for a partial last wave (``core_fused.fused_algo(tile, 1, t)``: the first
    half of the pixel tiles unsplit, the rest with K split t ways, then the reduction of that part):
    within the bound of the reference, bit-identical when run twice. s_c256_dg2 has both parts on
    every tile; s_g2_dg4_nonsq has a single pixel tile on the 64-pixel tiles, all of it the tail."""
    inputs, ref, absref = inputs_refs(case, dtype)
    ran = 0
    for tile in split_tiles_for(lib, dtype):
        for tail in (2, 3, core.MAX_SPLITS):
            algo = core_fused.fused_algo(tile, 1, tail)
            try:
                out = run_core(lib, case, dtype, inputs, algo)
            except UnsupportedNodeError as exc:
                assert "do not fit the workspace" in str(exc) or NOT_THIS_CASE in str(exc), str(exc)
                continue
            ran += 1
            check_close(out, ref, dtype, None if dtype == "float32" else absref)
            again = run_core(lib, case, dtype, inputs, algo)
            assert np.array_equal(out, again), f"tile {tile}, tail of {tail} splits: two runs differ"
    assert ran >= 10, f"only {ran} (tile, tail) combinations ran"


@pytest.mark.gpu
@pytest.mark.parametrize("case", SPLIT_CASES, ids=[c.name for c in SPLIT_CASES])
def test_tf32_split_k_on_the_fp32_warpgroup_tiles(lib, need_fused, case: Case) -> None:
    """The FP32 warpgroup tiles in TF32 mode (the only mode wg-256x64-tf32 runs) with K split 1, 2, 3 and
    4 ways and with a split tail: within the TF32 bound, bit-identical when run twice."""
    if not (device_has_tma() and device_has_wgmma()):
        pytest.skip("the FP32 warpgroup tiles need compute capability 9.x and sm_90a code")
    inputs, ref, absref = inputs_refs(case, "float32")
    fp32_wg = [t.index for t in core_fused.tile_infos(lib) if t.kernel == "wgmma" and "float32" in t.dtypes]
    assert fp32_wg, "the library has no FP32 warpgroup tile"
    for tile in fp32_wg:
        algos = [core_fused.fused_algo(tile, s) for s in (1, 2, 3, 4)] + [core_fused.fused_algo(tile, 1, 2)]
        for algo in algos:
            try:
                out = run_core(lib, case, "float32", inputs, algo, math=core.MATH_TF32)
            except UnsupportedNodeError as exc:  # a split tail's partial sums may not fit
                tail = algo == core_fused.fused_algo(tile, 1, 2)
                assert tail and "do not fit the workspace" in str(exc), str(exc)
                continue
            numbers = check_close(out, ref, "float32", absref, u_operand=2 * U_TF32 + U_TF32**2)
            record_summary({"test": "split_k_tf32", "case": case.name, "tile": tile, "algo": algo, **numbers})
            again = run_core(lib, case, "float32", inputs, algo, math=core.MATH_TF32)
            assert np.array_equal(out, again), f"tile {tile}, algo {algo}: two runs differ"


@pytest.mark.gpu
def test_auto_on_a_split_case_matches_reference(lib, need_fused) -> None:
    case = SPLIT_CASES[0]
    for dtype in DTYPES:
        inputs, ref, absref = inputs_refs(case, dtype)
        out = run_core(lib, case, dtype, inputs, core.ALGO_AUTO)
        check_close(out, ref, dtype, None if dtype == "float32" else absref)


@pytest.mark.gpu
def test_nchw_tiles_do_not_split(lib, need_fused) -> None:
    case = SPLIT_CASES[0]
    inputs, _, _ = inputs_refs(case, "float16")
    nchw = core_fused.tile_index("nchw-128x64", lib)
    with pytest.raises(UnsupportedNodeError, match="only the channel-vectorised tiles split K"):
        run_core(lib, case, "float16", inputs, core_fused.fused_algo(nchw, 2))
    with pytest.raises(UnsupportedNodeError, match="only the channel-vectorised tiles split K"):
        run_core(lib, case, "float16", inputs, core_fused.fused_algo(nchw, 1, 2))


def test_fused_algo_codes() -> None:
    assert core_fused.fused_algo(3) == core.ALGO_FUSED_TILE + 3
    assert core_fused.fused_algo(7, 2) == core.ALGO_FUSED_TILE + 7 + core.ALGO_SPLIT_STEP
    assert core_fused.fused_algo(26, 1, 4) == core.ALGO_FUSED_TILE + 26 + 3 * core.ALGO_TAIL_STEP
    for bad in ((-1, 1), (0, 0), (0, core.MAX_SPLITS + 1), (0, 1, 0), (0, 1, core.MAX_SPLITS + 1), (0, 2, 2)):
        with pytest.raises(ValueError):
            core_fused.fused_algo(*bad)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_unaligned_weights_take_the_scalar_prep_path_with_the_same_bits(lib, need_fused, dtype: str) -> None:
    """The prep pass permutes 16-byte-aligned weights with vector accesses, others element by
    element: a weight tensor 1 element past an aligned address must give the same output bits."""
    import cupy
    from support.core_cases import params_for, to_device

    case = SPLIT_CASES[0]
    inputs, ref, absref = inputs_refs(case, dtype)
    p = params_for(case, dtype, core_fused.fused_algo(core_fused.tile_index("regs-128x32", lib)))
    dev = {k: (None if v is None else to_device(v, dtype)) for k, v in inputs.items()}
    w = dev["weight"]
    shifted = cupy.empty(w.size + 1, dtype=w.dtype)[1:].reshape(w.shape)  # 2 or 4 bytes off alignment
    shifted[...] = w
    assert shifted.data.ptr % 16 != 0
    outs = []
    for weight in (w, shifted):
        out = cupy.empty((p.n, p.cout, p.ho, p.wo), dtype=w.dtype)
        core.forward(p, dev["x"], dev["offset"], dev["mask"], weight, dev["bias"], out, lib=lib)
        outs.append(out.get())
    cupy.cuda.runtime.deviceSynchronize()
    assert np.array_equal(outs[0], outs[1])
    from support.core_cases import from_device

    check_close(from_device(cupy.asarray(outs[0]), dtype), ref, dtype, None if dtype == "float32" else absref)


def _with_split_reduce(lib, mode: int, run):
    core.set_split_reduce(mode, lib)
    try:
        return run()
    finally:
        core.set_split_reduce(core.SPLIT_REDUCE_AUTO, lib)


@pytest.mark.gpu
@pytest.mark.parametrize("engine", [False, True], ids=["nchw", "engine"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", SPLIT_CASES, ids=[c.name for c in SPLIT_CASES])
def test_cluster_reduction_gives_the_reduction_kernels_bits(
    lib, need_fused, case: Case, dtype: str, engine: bool
) -> None:
    """On sm_90+ the K splits of a tile add up inside a thread-block cluster: each block copies its
    sums of the other blocks' rows into their shared memory and adds up its own rows in split order,
    like the reduction kernel. Forced clusters (dcnSetSplitReduce 2) give the reduction kernel's (1)
    bits on every splitting tile at 2, 3 and MAX_SPLITS splits and with a split tail, as does AUTO (0),
    with x NCHW and as an engine feeds it (channel-last x, prepared weights)."""
    if not device_has_tma():
        pytest.skip("thread-block clusters need compute capability 9.0+")
    inputs, _, _ = inputs_refs(case, dtype)
    algos = [core.ALGO_AUTO]
    for tile in split_tiles_for(lib, dtype):
        algos += [core_fused.fused_algo(tile, s) for s in (2, 3, core.MAX_SPLITS)]
        algos.append(core_fused.fused_algo(tile, 1, 2))
    compared = 0
    for algo in algos:
        def run(algo=algo):
            return run_core(lib, case, dtype, inputs, algo, channel_last=engine, prepared=engine)

        try:
            ref = _with_split_reduce(lib, core.SPLIT_REDUCE_KERNEL, run)
        except UnsupportedNodeError as exc:
            reasons = ("K splits", "do not fit the workspace", NOT_THIS_CASE)
            assert any(r in str(exc) for r in reasons), str(exc)
            continue
        auto = _with_split_reduce(lib, core.SPLIT_REDUCE_AUTO, run)
        assert np.array_equal(auto, ref), f"algo {algo}: AUTO's reduction and the reduction kernel differ"
        if algo == core.ALGO_AUTO:
            continue
        try:
            out = _with_split_reduce(lib, core.SPLIT_REDUCE_CLUSTER, run)
        except UnsupportedNodeError as exc:
            assert "thread-block clusters" in str(exc), str(exc)
            continue
        assert np.array_equal(out, ref), f"algo {algo}: cluster and kernel reductions differ"
        compared += 1
    assert compared >= 4, f"only {compared} cluster launches compared"
