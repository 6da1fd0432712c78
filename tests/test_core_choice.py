"""The fused kernel's host-side choices in the CUDA core, on a machine without a GPU: which tiles a
build holds and runs where, AUTO's tile and split for given devices (an H200, and builds of other
architectures), and the tile and split-mode codes. The library is built once a session (the
``built_lib`` fixture, tests/conftest.py)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import find_nvcc
from support import core, core_fused
from support.core_fused import H200_DEVICE

from dcnconvert.errors import ValidationError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lib(built_lib: Path) -> ctypes.CDLL:
    return core.load(built_lib)


def test_tile_runs_follows_the_default_build(lib: ctypes.CDLL) -> None:
    """The default build holds sm_90a SASS and compute_90 PTX: the warpgroup tiles run on 9.x only,
    the TMA tiles from 9.0 on, the others from 8.0 on; nothing below 8.0 or outside the table."""
    for t in core_fused.tile_infos(lib):
        want = {"wgmma": {9}, "tma": set(range(9, 13))}.get(t.kernel, set(range(8, 13)))
        assert t.run_majors == want, t
        assert t.runs_on(90) and t.runs_on(t.min_cc) and not t.runs_on(75)
    assert lib.dcnFusedTileRuns(-1, 9) == 0 and lib.dcnFusedTileRuns(core_fused.fused_tile_count(lib), 9) == 0
    assert not core_fused.tile_infos(lib)[0].runs_on(70)


def test_every_built_tile_is_one_auto_picks(lib: ctypes.CDLL) -> None:
    """The family holds no kernel AUTO cannot choose: every (tile, precision) the library builds
    (dcnFusedTileInfo) is AUTO's pick for some of bench/fused_reach.py's random problems on its six
    device profiles; the NCHW tiles, reached through the fallback order, take every type.
    (test_core_gpu_fused.py forces the pairs that are not built.)"""
    sys.path.insert(0, str(REPO / "bench"))
    import fused_reach

    picks, _ = fused_reach.reach(lib, problems=20000, seed=7)
    precisions = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8e4m3")
    assert fused_reach.built_never_picked(lib, picks) == {p: [] for p in precisions}
    assert {k[0] for k in picks["int8"]} >= {"wg-128x64-q8", "wg-256x64-q8", "wg-128x128-q8"}, picks["int8"]
    fp8_wg = {"wg-128x64-q8", "wg-256x64-2wg-q8", "wg-128x128-q8", "wg-256x64-2wg-q8-pair", "wg-128x32-q8"}
    assert {k[0] for k in picks["fp8e4m3"]} >= fp8_wg, picks["fp8e4m3"]
    # the warp-MMA 8-bit tiles: INT8 from 8.0 on, FP8 from 8.9 on (L40), never on 8.0 or 8.6
    assert ("async-128x64-q8", "8.x") in picks["int8"] and ("async-128x32-p8-q8", "8.x") in picks["fp8e4m3"]
    infos = core_fused.tile_infos(lib)
    unbuilt = [(t.name, d) for t in infos for d in ("float32", "float16", "bfloat16") if not t.takes(d)]
    assert ("wg-128x128", "float16") in unbuilt and ("async-128x64", "float32") in unbuilt
    assert all(t.takes(d) for t in infos if t.kernel == "nchw" for d in ("float32", "float16", "bfloat16"))


def test_tile_lists_take_names_and_indices(lib: ctypes.CDLL) -> None:
    # SANITIZE_FUSED_TILES and bench/core_race_one.py read tiles this way.
    infos = core_fused.tile_infos(lib)
    last = infos[-1]
    spec = f"{infos[3].name}, {last.index},{infos[0].name}"
    assert core_fused.tile_indices(spec, lib) == [3, last.index, 0]
    assert core_fused.tile_indices("", lib) == []
    with pytest.raises(KeyError, match="no fused tile named 'wg-1x1'"):
        core_fused.tile_indices("wg-1x1", lib)
    with pytest.raises(ValueError, match="outside"):
        core_fused.tile_indices(str(len(infos)), lib)


def test_split_reduce_takes_its_three_modes_only(lib: ctypes.CDLL) -> None:
    """dcnSetSplitReduce: 0 (clusters where they pay), 1 (reduction kernel), 2 (clusters or
    unsupported); anything else is an invalid argument and leaves the mode as it was."""
    lib.dcnSetSplitReduce.restype = ctypes.c_int
    try:
        for mode in (core.SPLIT_REDUCE_KERNEL, core.SPLIT_REDUCE_CLUSTER, core.SPLIT_REDUCE_AUTO):
            assert lib.dcnSetSplitReduce(ctypes.c_int32(mode)) == core.SUCCESS
        for bad in (-1, 3, 1 << 30):
            assert lib.dcnSetSplitReduce(ctypes.c_int32(bad)) == core.INVALID_ARGUMENT, bad
    finally:
        lib.dcnSetSplitReduce(ctypes.c_int32(core.SPLIT_REDUCE_AUTO))


def test_fused_choice_keeps_huge_weights_off_the_32_bit_offsets(lib: ctypes.CDLL) -> None:
    """The channel-vectorised kernel addresses a group's weights with 32-bit offsets: a group of
    more than 2^31 weights must go to the NCHW kernel (64-bit indexing), one just under may not."""
    nchw = {t.index for t in core_fused.tile_infos(lib) if t.kernel == "nchw"}
    assert len(nchw) == 2
    # 4096 x 65536 x 9 weights: over 2^31 - 1.
    huge = core.make_params((1, 65536, 8, 8), (4096, 65536, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    choice = core_fused.fused_choice(huge, lib=lib)
    assert choice is not None and choice[0] in nchw, choice
    # 2048 x 65536 x 9 weights: under 2^31 - 1.
    below = core.make_params((1, 65536, 8, 8), (2048, 65536, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    choice = core_fused.fused_choice(below, lib=lib)
    assert choice is not None and choice[0] not in nchw, choice


def test_fused_choice_script_prints_tile_names(built_lib: Path) -> None:
    """bench/fused_choice.py (docs/benchmarks.md's table of AUTO's choices): tile names, K splits
    and split tails as the host-only choice gives them for an H200."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "fused_choice.py"), "--lib", str(built_lib)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["layer", "fp32", "tf32", "fp16", "bf16", "int8", "fp8e4m3"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[1:]}
    assert len(rows) == 18
    assert rows["r50-c4"][2] == "wg-256x64-p16/s2"  # 66 blocks x 2 splits: one wave
    assert rows["bev-c4"][2] == "wg-256x64-p16+16/s8"  # 4 waves, then 16 tiles split 8 ways
    assert rows["r50-c3"][3] == "wg-128x128"  # BF16 keeps 8 producer warps
    # quantized layers: the 8-bit tiles, split as FP16 is; 64 channels per group: two kernel points
    # per 128-channel chunk
    # 256 channels on one wave: the two 128-channel tiles of a pixel tile share their samples
    assert rows["r50-c4"][4:] == ["wg-128x64-q8-pair"] * 2
    # two 256-channel tiles: INT8's 256-row pair; FP8's 256-row tiles have two consumer warpgroups
    assert rows["r50-c5"][4:] == ["wg-256x64-q8-pair/s3", "wg-256x64-2wg-q8-pair/s3"]
    assert rows["dbnet-c4"][4:] == ["wg-256x64-q8", "wg-256x64-2wg-q8"]  # two waves of pairs would cost more
    assert rows["bev-c4"][4:] == ["wg-256x64-q8+16/s8", "wg-256x64-2wg-q8+16/s8"]
    # 128 output channels and many pixels: the 128-pixel tile, where FP16 takes wg-128x128-p16
    assert rows["r50-c3"][4:] == ["wg-128x128-q8"] * 2 and rows["r50-c3"][2] == "wg-128x128-p16"
    assert rows["dla-ida2-node"][4:] == ["wg-128x128-q8"] * 2
    # small layers: 32-pixel tiles, INT8 on warp MMAs, FP8 on warpgroup MMAs (its warp MMAs on 9.x
    # are conversions to FP16 MMAs); 256 x 256 at 32 x 32 stays on FP8's 64-pixel tile
    assert rows["dla-ida0-proj"][4:] == ["tma-128x32-p8-q8/s8", "wg-128x32-q8/s8"]
    assert rows["dla-ida1-node"][5] == "wg-128x32-q8" and rows["dla-ida0-node"][5] == "wg-128x64-q8/s4"


def test_fused_choice_on_an_h200(lib: ctypes.CDLL) -> None:
    """dcnFusedChoice (host only): what AUTO runs on an H200 (132 SMs, 227 KiB, sm_90)."""
    infos = core_fused.tile_infos(lib)
    name = {t.name: t.index for t in infos}
    # warpgroup MMAs (compute capability 9.x), FP16/BF16 and FP32 (TF32 MMAs); TMA weight tiles (sm_90+)
    wgmma = {t.index for t in infos if t.kernel == "wgmma" and "float32" not in t.dtypes}
    fp32_wgmma = {t.index for t in infos if t.kernel == "wgmma" and "float32" in t.dtypes}
    tma = {t.index for t in infos if t.min_cc >= 90}
    fp16_only = {t.index for t in infos if "float32" not in t.dtypes}  # 64-channel K chunks
    nchw = {t.index for t in infos if t.kernel == "nchw"}
    assert wgmma and fp32_wgmma and tma and fp16_only and len(nchw) == 2
    wg256 = name["wg-256x64-p16"]
    r50c4 = core.make_params((1, 256, 50, 84), (256, 256, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    # 66 blocks of 256 x 64 (16 producer warps), K split in two: one wave of 132 blocks on the H200
    # (measured times: CHANGELOG.md)
    assert core_fused.fused_choice(r50c4, lib=lib) == (wg256, 2)
    a100 = (108, 166912, 8)
    tile, splits = core_fused.fused_choice(r50c4, device=a100, lib=lib)
    assert tile not in tma | nchw, (tile, splits)
    assert core_fused.fused_split_tail(r50c4, lib=lib) == (wg256, 2, 0, 1)  # split K: no split tail
    bev = core.make_params((6, 256, 58, 100), (256, 256, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    assert core_fused.fused_choice(bev, lib=lib) == (wg256, 1)  # 256 x 64, warpgroup MMAs: 9.x only
    # 544 blocks: 4 waves of 132 and 16 blocks, whose 16 pixel tiles run with K split 8 ways (128
    # blocks) as a second launch (BEVFormer-c4 FP16 167.3 -> 152.5 us on the H200).
    assert core_fused.fused_split_tail(bev, lib=lib) == (wg256, 1, 16, 8)
    # 4 full waves: no split tail
    assert core_fused.fused_split_tail(bev, device=(136, 232448, 9), lib=lib) == (wg256, 1, 0, 1)
    tile, splits = core_fused.fused_choice(bev, device=(148, 232448, 10), lib=lib)
    assert tile in tma and tile not in wgmma, (tile, splits)
    r50c3 = core.make_params((1, 128, 100, 168), (128, 128, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    assert core_fused.fused_choice(r50c3, lib=lib) == (name["wg-128x128-p16"], 1)  # 132 blocks
    r50c3.dtype = core.BFLOAT16
    assert core_fused.fused_choice(r50c3, lib=lib) == (name["wg-128x128"], 1)  # -p16 spills BF16's FP32 sums
    dla = core.make_params(
        (1, 512, 16, 16), (256, 512, 3, 3), padding=(1, 1), with_bias=True, dtype=core.FLOAT16
    )
    tile, splits = core_fused.fused_choice(dla, lib=lib)
    assert splits > 1, (tile, splits)  # 8 blocks of 128 x 64 without a split
    r50c4.dtype = core.FLOAT32
    tile, splits = core_fused.fused_choice(r50c4, lib=lib)
    assert tile not in fp16_only | nchw, tile
    # FP32 on warpgroup MMAs (3xTF32; R50-c4 times in CHANGELOG.md and docs/benchmarks.md); in TF32
    # mode the 256 x 64 tile with K split in two
    assert (tile, splits) == (name["wg-128x64-tf32"], 1)
    r50c4.math = core.MATH_TF32
    assert core_fused.fused_choice(r50c4, lib=lib) == (name["wg-256x64-tf32"], 2)
    tile, splits = core_fused.fused_choice(r50c4, device=a100, lib=lib)
    assert tile not in tma | nchw, (tile, splits)
    r50c3.dtype = core.FLOAT32
    r50c3.math = core.MATH_TF32
    assert core_fused.fused_choice(r50c3, lib=lib)[0] == name["wg-128x64-tf32"]  # 256x64 would be half empty
    odd = core.make_params((2, 48, 20, 20), (40, 48, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    tile, splits = core_fused.fused_choice(odd, lib=lib)
    assert tile in nchw and splits == 1, (tile, splits)  # 48 channels: not a multiple of 32
    assert core_fused.fused_choice(dla, device=(80, 65536, 7), lib=lib) is None  # sm_75: the simple kernel
    # Quantized layers (INT8, FP8): the 128-channel-chunk tiles where channels per group
    # and per deformable group divide by 128, or a group holds exactly 64 channels within one
    # deformable group (two kernel points per chunk), else the simple kernel (never an NCHW tile).
    q8 = {t.index for t in infos if t.name.endswith(("-q8", "-q8-pair"))}
    assert len(q8) == 11
    warp_q8 = {name["async-128x64-q8"], name["async-128x32-p8-q8"]}  # mma.sync: 8.x, and sm_120's PTX
    for quant in (1, 2):
        layers = (
            (256, 256, 1, 1, q8),
            (128, 64, 1, 1, q8),
            (64, 64, 1, 1, q8),
            (64, 128, 1, 1, q8),
            (128, 64, 2, 2, q8),  # 64 channels per group and per deformable group
            (256, 128, 2, 2, q8),  # 128 per group and per deformable group
            (256, 128, 1, 4, None),  # 64 per deformable group, 256 per group: a chunk spans two
            (128, 128, 1, 2, None),  # 128 per group across two deformable groups
            (192, 64, 1, 1, None),
            (64, 64, 2, 1, None),  # 32 per group
        )
        for cin, cout, group, dg, want in layers:
            layer = core.make_params(
                (1, cin, 32, 32),
                (cout, cin // group, 3, 3),
                padding=(1, 1),
                group=group,
                deformable_group=dg,
                dtype=core.FLOAT16,
            )
            layer.quant, layer.xScale, layer.outType = quant, 0.05, core.FLOAT16
            choice = core_fused.fused_choice(layer, lib=lib)
            if want is None:
                assert choice is None, (quant, cin, dg, choice)
            else:
                assert choice is not None and choice[0] in want, (quant, cin, choice)
            # 8.x: the warp-MMA 8-bit tiles; FP8 from 8.9 on (A100 8.0: the simple kernel; L40 8.9)
            a100 = core_fused.fused_choice(layer, device=(108, 166912, 8), lib=lib)
            l40 = core_fused.fused_choice(layer, device=(142, 101376, 89), lib=lib)
            if want is None or quant == 2:
                assert a100 is None, (quant, cin, a100)
            else:
                assert a100 is not None and a100[0] in warp_q8, (quant, cin, a100)
            if want is None:
                assert l40 is None, (quant, cin, l40)
            else:
                assert l40 is not None and l40[0] in warp_q8, (quant, cin, l40)
    dla.ho = 99
    with pytest.raises(ValidationError, match="ho"):
        core_fused.fused_choice(dla, lib=lib)


def test_auto_runs_pairs_on_even_channel_tile_counts(lib: ctypes.CDLL) -> None:
    """AUTO runs a sample-sharing tile (BF16, INT8, FP8) only on a group of an even number of
    channel tiles (tests/test_core_gpu_pairs.py checks whole and partial last tiles against the
    unpaired twins on the GPU): each pair on some layer of whole tiles, the 128-row pair also on
    some layer whose last tile is partial, the 256-row pairs never there (slower than the unpaired
    tile at the split AUTO gave them, dcnFusedCost.cu)."""
    infos = core_fused.tile_infos(lib)
    picked = set()
    for quant in (0, 1, 2):
        for cin in (128, 256, 512):
            for cout in (160, 192, 256, 288, 320, 384, 448, 512, 640):
                for hw in ((20, 24), (25, 34), (50, 84)):
                    layer = core.make_params(
                        (1, cin, *hw), (cout, cin, 3, 3), padding=(1, 1),
                        dtype=core.BFLOAT16 if quant == 0 else core.FLOAT16,
                    )
                    if quant:
                        layer.quant, layer.xScale, layer.outType = quant, 0.05, core.FLOAT16
                    choice = core_fused.fused_choice(layer, lib=lib)
                    tile = infos[choice[0]] if choice else None
                    if tile and tile.pair:
                        assert -(-cout // tile.bm) % 2 == 0, (quant, cin, cout, hw, tile.name)
                        picked.add((tile.name, "whole" if cout % tile.bm == 0 else "partial"))
    pairs = ("wg-128x64-q8-pair", "wg-256x64-q8-pair", "wg-256x64-p16-pair", "wg-256x64-2wg-q8-pair")
    whole = {tile for tile, kind in picked if kind == "whole"}
    assert whole == set(pairs), picked
    partial = {tile for tile, kind in picked if kind == "partial"}
    assert partial == {"wg-128x64-q8-pair"}, picked


def _build_variant(tmp_path: Path, archs: str, ptx: str) -> ctypes.CDLL:
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH (set NVCC): the CUDA core cannot be compiled here")
    proc = subprocess.run(
        ["make", "-C", str(REPO / "plugin_src"), f"-j{os.cpu_count() or 1}", "core", f"BUILD_DIR={tmp_path}"]
        + [f"NVCC={nvcc}", f"CUDA_ARCHS={archs}", f"PTX_ARCH={ptx}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"make core failed:\n{proc.stdout}\n{proc.stderr}"
    return core.load(tmp_path / "libdcnconvert_core.so")


@pytest.mark.parametrize(
    ("ptx", "tma_on_h200"), [("compute_90", True), ("compute_80", False)], ids=["ptx90", "ptx80"]
)
def test_fused_choice_follows_the_built_architectures(tmp_path: Path, ptx: str, tma_on_h200: bool) -> None:
    """A core without sm_90 SASS offers an H200 the TMA tiles only through PTX of compute_90 or newer
    (run there by the driver's JIT), and never the warpgroup-MMA tile, which needs sm_90a SASS; a
    core without either would run empty TMA code (plugin_src/Makefile, builtSm90For)."""
    lib = _build_variant(tmp_path, "sm_80", ptx)
    infos = core_fused.tile_infos(lib)
    for t in infos:  # dcnFusedTileRuns: what this build can run on each compute capability major
        if t.kernel == "wgmma":
            assert t.run_majors == frozenset(), t
        elif t.min_cc >= 90:
            assert t.run_majors == (frozenset(range(9, 13)) if tma_on_h200 else frozenset()), t
        else:
            assert t.run_majors == frozenset(range(8, 13)), t
    tma = {t.index for t in infos if t.min_cc >= 90 and "float32" not in t.dtypes}
    wgmma = {t.index for t in infos if t.kernel == "wgmma"}
    r50c4 = core.make_params((1, 256, 50, 84), (256, 256, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    bev = core.make_params((6, 256, 58, 100), (256, 256, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    for device in (H200_DEVICE, (148, 232448, 10)):
        tile, _ = core_fused.fused_choice(r50c4, device=device, lib=lib)
        assert (tile in tma) == tma_on_h200, (device, tile)
        tile, _ = core_fused.fused_choice(bev, device=device, lib=lib)
        assert tile not in wgmma, (device, tile)  # no sm_90a SASS in this build
