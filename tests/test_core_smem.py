"""The host's shared-memory size of each channel-vectorised tile (`smemBytesFor`,
plugin_src/core/dcnFusedChoice.cu: the support check and the cost model) against the size the kernel
asks for at launch (`NTile::smemBytes`, dcnFusedNhwcTile.cuh). Both call `tileSmemBytes`
(dcnFusedTiles.h), but with arguments found on each side: the operand parts (3xTF32), the plan
slots and the template parameters launchTile builds from the table; one that differs would let AUTO
pick a tile that cannot launch, or refuse one that can. The same program checks that the host's
plan slots cover the chunks whose plans the kernel's producers hold at once (`planChunks` against
`NTile::PD`), and that the receive area of split-K in a cluster (`NTile::clusterFits`) holds 2
splits on every tile and stays clear of the staged tile and the stages' end. Compiled as host code
with nvcc: no GPU needed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import find_nvcc

REPO = Path(__file__).resolve().parents[1]
CORE_DIR = REPO / "plugin_src" / "core"

# Every channel-vectorised tile with every element size it takes (the kernel's own static checks
# leave out FP32 with 64-channel chunks and TMA tiles whose weight rows are not 128 bytes; 1-byte
# elements, INT8 standing for FP8 too, go with the 128-channel chunks only), over
# layers with one, two and four deformable groups and 1x1, 3x3, 1x3 and 5x5 kernels. Prints the
# mismatches and their count.
PROGRAM = r"""
#include "dcnFusedNhwcTile.cuh"
#include "dcnFusedTiles.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>
using namespace dcn::fused;
static int checked = 0, failures = 0;
template <typename T, int TILE, bool SPLIT_MATH = false> void check(DcnParams const& p)
{
    constexpr TileShape S = kTiles[TILE];
    if constexpr (S.nhwc && (S.bk == 128) == (sizeof(T) == 1) && !(S.bk > 32 && sizeof(T) == 4)
        && !(S.tmaA && S.bk * sizeof(T) != 128))
    {
        // FP32 warpgroup tiles in 3xTF32 keep both operands in two parts (as launchTile builds them)
        using C = NTile<T, S.bm, S.bn, S.warpsM, S.cw, S.pw, S.stages, S.bk, S.asyncA, S.tmaA, S.wgmma,
            S.pregs, SPLIT_MATH && S.wgmma ? 2 : 1>;
        size_t const kernel = C::smemBytes(p.kh * p.kw, planSlots(p, S));
        size_t const host = smemBytesFor(TILE, p);
        ++checked;
        if (kernel != host)
        {
            ++failures;
            printf("tile %d, %d-byte elements, %d deformable groups, %dx%d kernel: kernel %zu, host %zu\n",
                TILE, static_cast<int>(sizeof(T)), static_cast<int>(p.deformableGroup),
                static_cast<int>(p.kh), static_cast<int>(p.kw), kernel, host);
        }
        // Split-K in a cluster (clusterReduceTile) receives the other blocks' slices over the free
        // stages after the staged tile and its biases: 2 splits (the only count AUTO adds up in
        // clusters) must fit on every tile with 4 stages (async-256x64's 3 stages of 32-channel
        // chunks are too small: it always runs the reduction kernel), and no count may place the
        // receive mbarrier inside the slices or the staged tile.
        for (int s = 2; s <= 8; ++s)
        {
            bool const fits = C::clusterFits(s);
            uint32_t const end
                = C::RECV_OFF + static_cast<uint32_t>((s - 1) * C::recvShare(s)) * C::ROW_BYTES;
            if ((s == 2 && !fits && C::STAGES >= 4) || (fits && end > C::STAGE_BYTES - 8)
                || C::RECV_OFF < static_cast<uint32_t>(C::BM) * (C::ROW_BYTES + 4) || C::RECV_OFF % 16 != 0
                || C::ROW_BYTES % 16 != 0)
            {
                ++failures;
                printf("tile %d, %d-byte elements: cluster receive area of %d splits: "
                       "fits %d, end %u, stages %u\n",
                    TILE, static_cast<int>(sizeof(T)), s, static_cast<int>(fits), end, C::STAGE_BYTES);
            }
        }
        // The producers' register ring holds PD units and reads one chunk's plan ahead: the host's
        // plan slots must cover PD + 1 chunks, or a rebuilt plan could overwrite one still in use.
        if (planChunks(p, S) < C::PD + 1)
        {
            ++failures;
            printf("tile %d, %d-byte elements: the host counts %d chunks of plans, the kernel holds %d\n",
                TILE, static_cast<int>(sizeof(T)), planChunks(p, S), C::PD + 1);
        }
    }
}
template <int TILE> void everyTile(DcnParams p)
{
    p.dtype = kDCN_FLOAT16;
    check<__half, TILE>(p);
    p.dtype = kDCN_BFLOAT16;
    check<__nv_bfloat16, TILE>(p);
    p.dtype = kDCN_FLOAT32;
    p.math = kDCN_MATH_TF32;
    check<float, TILE>(p);
    p.math = kDCN_MATH_ACCURATE;
    check<float, TILE, true>(p);
    p.dtype = kDCN_FLOAT16; // a quantized layer: 8-bit x and weights, FP16 offset and mask
    p.quant = kDCN_QUANT_INT8;
    check<int8_t, TILE>(p);
    p.quant = kDCN_QUANT_NONE;
    if constexpr (TILE + 1 < kTileCount)
        everyTile<TILE + 1>(p);
}
extern "C" int32_t dcnFusedTileCount(void) { return kTileCount; } // dcnForward.cu is not linked here
int main()
{
    DcnParams p{};
    p.n = 1; p.c = 256; p.h = 20; p.w = 20; p.cout = 256; p.group = 1;
    int const kernels[4][2] = {{1, 1}, {3, 3}, {1, 3}, {5, 5}};
    for (int dg : {1, 2, 4})
        for (auto const& k : kernels)
        {
            p.deformableGroup = dg;
            p.kh = k[0];
            p.kw = k[1];
            everyTile<0>(p);
        }
    printf("checked %d, mismatches %d\n", checked, failures);
    return failures != 0;
}
"""


def test_host_shared_memory_matches_the_kernels(tmp_path: Path) -> None:
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH (set NVCC): the core's headers cannot be compiled here")
    src = tmp_path / "smem.cu"
    src.write_text(PROGRAM)
    exe = tmp_path / "smem"
    units = ("dcnFusedChoice.cu", "dcnFusedCost.cu", "dcnFusedLayout.cu", "dcnValidate.cu")
    sources = [str(CORE_DIR / name) for name in units]
    build = subprocess.run(
        [nvcc, "-std=c++17", "-O1", "-I", str(CORE_DIR), str(src), *sources, "-o", str(exe)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert build.returncode == 0, f"nvcc failed:\n{build.stdout}\n{build.stderr}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=False)
    last = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 0 and last.endswith("mismatches 0"), run.stdout
    # Per layer, each channel-vectorised tile in each element type its kernel takes (FP32 twice: TF32
    # and 3xTF32): 58 checks, and 11 of the 8-bit tiles.
    checked = int(last.split(",")[0].split()[1])
    assert checked == 12 * (58 + 11), last
