/*
 * dcnconvert core: the fused kernels' tile table and the host-side choices made from it (support
 * checks, tile order, K splits; the prepared-weight layout is in dcnFusedLayout.h), shared by
 * dcnFusedChoice.cu (the choices) and dcnFused.cu (the launches). Internal to plugin_src/core; no
 * TensorRT include.
 */
#ifndef DCN_FUSED_TILES_H
#define DCN_FUSED_TILES_H

#include "dcnFusedLayout.h"
#include "dcnParams.h"

#include <stddef.h>
#include <stdint.h>

namespace dcn
{
namespace fused
{

#if defined(__CUDACC__)
#define DCN_TILE_HD __host__ __device__
#else
#define DCN_TILE_HD
#endif

/* One configuration of the fused kernels.
 *
 * Shape: BM x BN outputs (channels x pixels) per block; cw consumer warps (warpsM of them along
 * the channels); pw producer warps; `stages` pipeline stages; bk: the K chunk, channels per chunk
 * at one kernel point (32, or 64 for FP16/BF16 only).
 * Kernel: nhwc = false is the NCHW kernel (dcnFusedKernel.cuh: any channel count, no workspace);
 * nhwc = true the channel-vectorised one (dcnFusedNhwc.cuh), whose weight tile comes through the
 * producers' registers, or with asyncA by cp.async (L2 -> shared memory), or with tmaA by the
 * tensor memory accelerator (sm_90+, dcnFusedTma.cuh); wgmma: warpgroup MMAs from shared memory
 * (compute capability 9.x, sm_90a code, dcnFusedWgmma.cuh; warpsM = cw); pregs: producer registers
 * per thread of a warpgroup tile (setmaxnreg; the consumers get the rest), 0: no split.
 * Cost (dcnFusedCost.cu): the time of one 32-channel K chunk of a block relative to regs-128x64's,
 * per element type and FP32 math (in 3xTF32 relative to what it measured when that kernel was
 * built; regs-128x32 or regs-64x64 costs less there); 0: AUTO does not choose the tile
 * there, and no kernel is built for it (builtFor); wFp32Wide: the 3xTF32
 * weight where a group has more than 64 output channels (0: wFp32 applies); AUTO considers the tile
 * only for groups of at most maxMg output channels (0: any) and more than minMg; blockFixed: work
 * per block outside the K walk (sampling plan, pipeline fill and drain, epilogue) in such chunks;
 * tf32Blocks: blocks that share an SM at full speed in TF32 (where their shared memory fits).
 * The weights were fitted to H200 timings only (bench/fused_tiles.py, docs/fused_kernel_notes.md;
 * the 8-bit columns to H100 timings of every 8-bit tile and split on the 18 benchmark layers: FP8,
 * which then waited for each slice of its warpgroup MMAs every chunk, cost more per chunk on the
 * tiles of more slices (wg-256x64-q8, wg-128x128-q8: four of 64 x 64; wg-128x64-q8: one of
 * 64 x 128); not refitted since those waits come every four chunks on the 64-pixel tiles;
 * wg-256x64-2wg-q8's FP8 column: 1.00, 0.95 of the 1.05 wg-256x64-q8 had for FP8, from its forced
 * timings against that tile's at each layer's best split on five layers (H100, 2026-12-07:
 * 0.93-0.98; 0.84-0.98 over every split timed); wg-256x64-2wg-q8-pair's 0.50 (with the 256-row
 * pairs' per-block term) from its forced timings against wg-256x64-2wg-q8 at 2-4 splits on R50-c5,
 * DBNet-c5 and OCD-l4 (H100, 2026-12-07: 0.47-0.59 in these terms, median 0.52; 0.50 puts OCD-l4
 * on it, where it was faster than the 128-row pair); wg-128x32-q8's FP8 column (0.55, per block
 * 17) from its forced timings against wg-128x64-q8 at 1-8 splits on the seven CenterNet layers
 * (H100, 2026-12-07: it won DLA-ida0-proj /8 7.69 against 8.74 us, ida1-proj /4, ida1-node and
 * ida2-proj unsplit by 5-11%, lost ida0-node 9.80 /2 against 9.20 /4; the fit puts ida0-node on
 * wg-128x64-q8 and up-proj on it /4, 7.76 against 7.51 us for wg-128x64-q8 /6);
 * the sample-sharing tile's BF16 column and its per-block term to H100 timings, against wg-256x64-p16
 * measured in the same run, commit 6e60c2f):
 * on compute capability 8.x they order the sm_80 tiles as on the H200, which is untuned there. */
struct TileShape
{
    int bm, bn, warpsM, cw, pw, stages;
    bool nhwc;
    int bk;
    bool asyncA;
    bool tmaA;
    bool wgmma;
    int pregs;
    float wFp16, wBf16, wFp32, wTf32, wFp32Wide;
    int maxMg, minMg;
    float blockFixed;
    int tf32Blocks;
    // Sample sharing (warpgroup tiles, sm_90a): the blocks of two neighbouring channel tiles of one
    // pixel tile run as a thread-block cluster along y; each samples every other K chunk into its
    // stage, copies it into the other block's, and issues both blocks' weight tiles of that chunk
    // (NTile::PAIR). The groups need an even number of channel tiles.
    bool pairM = false;
    // Quantized layers (INT8 and FP8 E4M3 x and weights, DcnParams.quant): the chunk-cost columns
    // of INT8 and of FP8 (0: not built for that type). Only tiles of 128-channel chunks (one
    // 128-byte row per pixel and K chunk) take them: warpgroup MMAs on 9.x, warp MMAs (m16n8k32)
    // elsewhere.
    float wQ8 = 0.0f;
    float wFp8 = 0.0f;
};

/* The configurations, named by kernel, weight path and shape (the names of kTileNames):
 * nchw-*: the NCHW kernel, for channel counts the channel-vectorised kernel does not take;
 * regs-*: weights through the producers' registers (sm_80+; the choice where a group has fewer
 * output channels than the tile has rows, which the cp.async and TMA copies handle slower);
 * async-*: cp.async weights (sm_80+, the fast tiles of compute capability 8.x);
 * tma-*: TMA weights (sm_90+); wg-*: warpgroup MMAs (sm_90a).
 * "-k64": 64-channel chunks; "-p8", "-p16": 8 or 16 producer warps; "-fp32"/"-tf32": FP32 only. */
enum TileId : int
{
    kRegs64x64,       // groups of at most 64 output channels
    kRegs128x32,      // narrow pixel tiles: small batch-1 layers fill more SMs
    kRegs128x64,      // the unit of the cost weights
    kNchw128x64,      // channels not divisible by 32
    kNchw64x64,       // the same for groups of at most 64 output channels
    kRegs128x64K64,
    kRegs128x32K64,
    kAsync128x64K64,
    kAsync128x64,
    kAsync128x32,
    kAsync256x64,     // all channels of a 256-channel group at once
    kAsync128x32K64P8,
    kTma128x64K64,
    kTma128x32K64P8,
    kTma256x64K64,
    kWg256x64TwoGroups, // two consumer warpgroups; short K walks, where 16-producer tiles cost more per block
    kTma128x64Fp32,     // FP32: 32-channel chunks are 128-byte weight rows
    kTma128x32Fp32,
    kWg128x128,         // BF16 (its FP32 sums spill with 16 producers of 72 registers)
    kWg128x128P16,      // FP16
    kWg256x64P16,       // groups of more than 128 output channels (its rows would be mostly empty)
    kWg128x64P16,
    kWg128x64Tf32,      // FP32 on TF32 warpgroup MMAs (3xTF32: both parts of each operand)
    kWg256x64Tf32,      // FP32 in TF32 mode only (3xTF32 would need twice the shared memory)
    kWg256x64P16Pair,   // BF16, groups of more than 256 output channels: two channel tiles share their samples
    kWg128x64Q8,        // INT8 and FP8 (quantized layers): 128-channel chunks
    kWg256x64Q8,        // INT8, groups of more than 128 output channels (FP8: kWg256x64Q8TwoGroups)
    kWg128x128Q8,       // the same, 128 pixels wide (where FP16 takes wg-128x128-p16)
    kAsync128x64Q8,     // 8-bit on warp MMAs (sm_80+; FP8 8.9+): 3 stages fit 99 KiB (sm_86, sm_89, sm_120)
    kAsync128x32P8Q8,   // the same 32 pixels wide: small layers and groups of at most 64 output channels
    kTma128x32P8Q8,     // 32 pixels wide, TMA weights (sm_90+), INT8: small layers split many ways
    kWg128x64Q8Pair,    // 8-bit, two 128-channel tiles of a pixel tile share their samples
    kWg256x64Q8Pair,    // INT8, two 256-channel tiles of a pixel tile share their samples
    kWg256x64Q8TwoGroups, // FP8, groups of more than 128 output channels: two consumer warpgroups of
                          // 128 rows: one waits for its fresh sums while the other's MMAs may run
    kWg256x64Q8TwoGroupsPair, // FP8, the same, two 256-channel tiles of a pixel tile share their samples
    kWg128x32Q8,        // FP8, 32 pixels wide: small layers split many ways (FP8 warp MMAs on 9.x are
                        // conversions to FP16 MMAs, so tma-128x32-p8-q8 stays INT8 only)
    kTileCount
};

//            bm   bn  wM  cw  pw  st  nhwc  bk  async  tma    wgmma  pregs  fp16   bf16   fp32   tf32   fp32W  maxMg minMg fixed tf32B pair int8 fp8
constexpr TileShape kTiles[kTileCount] = {
    {64, 64, 2, 4, 8, 4, true, 32, false, false, false, 0, 0.80f, 0.80f, 0.60f, 0.60f, 0.0f, 64, 0, 20.0f, 1},
    {128, 32, 4, 4, 4, 4, true, 32, false, false, false, 0, 0.82f, 0.82f, 0.60f, 0.72f, 0.45f, 0, 0, 20.0f, 1},
    {128, 64, 2, 4, 8, 4, true, 32, false, false, false, 0, 1.00f, 1.00f, 0.0f, 1.00f, 0.0f, 0, 0, 20.0f, 1},
    {128, 64, 4, 8, 8, 4, false, 32, false, false, false, 0, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {64, 64, 2, 4, 8, 4, false, 32, false, false, false, 0, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {128, 64, 2, 4, 8, 4, true, 64, false, false, false, 0, 0.83f, 0.83f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {128, 32, 4, 4, 4, 4, true, 64, false, false, false, 0, 0.67f, 0.67f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {128, 64, 2, 4, 8, 4, true, 64, true, false, false, 0, 0.80f, 0.80f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {128, 64, 2, 4, 8, 4, true, 32, true, false, false, 0, 0.92f, 0.92f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {128, 32, 4, 4, 4, 4, true, 32, true, false, false, 0, 0.74f, 0.74f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {256, 64, 4, 8, 8, 3, true, 32, true, false, false, 0, 1.30f, 1.30f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {128, 32, 4, 4, 8, 4, true, 64, true, false, false, 0, 0.59f, 0.59f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {128, 64, 2, 4, 8, 4, true, 64, false, true, false, 0, 0.72f, 0.72f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {128, 32, 4, 4, 8, 4, true, 64, false, true, false, 0, 0.49f, 0.49f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {256, 64, 4, 8, 8, 3, true, 64, false, true, false, 0, 1.10f, 1.10f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {256, 64, 8, 8, 8, 3, true, 64, false, true, true, 0, 1.05f, 1.05f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {128, 64, 2, 4, 8, 4, true, 32, false, true, false, 0, 0.0f, 0.0f, 0.93f, 0.86f, 0.0f, 0, 0, 20.0f, 1},
    {128, 32, 4, 4, 4, 4, true, 32, false, true, false, 0, 0.0f, 0.0f, 0.43f, 0.86f, 0.0f, 0, 0, 20.0f, 2},
    {128, 128, 4, 4, 8, 4, true, 64, false, true, true, 0, 0.0f, 1.00f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1},
    {128, 128, 4, 4, 16, 4, true, 64, false, true, true, 72, 0.70f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 40.0f, 1},
    {256, 64, 4, 4, 16, 4, true, 64, false, true, true, 80, 0.75f, 0.75f, 0.0f, 0.0f, 0.0f, 0, 128, 20.0f, 1},
    {128, 64, 4, 4, 16, 4, true, 64, false, true, true, 64, 0.59f, 0.55f, 0.0f, 0.0f, 0.0f, 0, 0, 30.0f, 1},
    {128, 64, 4, 4, 16, 4, true, 32, false, true, true, 64, 0.0f, 0.0f, 0.40f, 0.70f, 0.0f, 0, 0, 30.0f, 1},
    {256, 64, 4, 4, 16, 4, true, 32, false, true, true, 80, 0.0f, 0.0f, 0.0f, 0.78f, 0.0f, 0, 128, 30.0f, 1},
    {256, 64, 4, 4, 16, 4, true, 64, false, true, true, 80, 0.0f, 0.48f, 0.0f, 0.0f, 0.0f, 0, 256, 50.0f, 1, true},
    {128, 64, 4, 4, 16, 4, true, 128, false, true, true, 72, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 30.0f, 1, false, 0.59f, 0.59f},
    {256, 64, 4, 4, 16, 4, true, 128, false, true, true, 72, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 128, 20.0f, 1, false, 0.75f, 0.0f},
    {128, 128, 4, 4, 16, 4, true, 128, false, true, true, 72, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 40.0f, 1, false, 0.70f, 0.90f},
    {128, 64, 2, 4, 8, 3, true, 128, true, false, false, 0, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1, false, 0.80f, 0.80f},
    {128, 32, 4, 4, 8, 3, true, 128, true, false, false, 0, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 20.0f, 1, false, 0.60f, 0.80f},
    {128, 32, 4, 4, 8, 4, true, 128, false, true, false, 0, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 8.0f, 1, false, 0.49f, 0.0f},
    {128, 64, 4, 4, 16, 4, true, 128, false, true, true, 80, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 50.0f, 1, true, 0.35f, 0.45f},
    {256, 64, 4, 4, 16, 4, true, 128, false, true, true, 72, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 256, 70.0f, 1, true, 0.40f, 0.0f},
    {256, 64, 8, 8, 8, 4, true, 128, false, true, true, 112, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 128, 20.0f, 1, false, 0.0f, 1.00f},
    {256, 64, 8, 8, 8, 4, true, 128, false, true, true, 112, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 256, 70.0f, 1, true, 0.0f, 0.50f},
    {128, 32, 4, 4, 8, 4, true, 128, false, true, true, 0, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 17.0f, 1, false, 0.0f, 0.55f},
};

/* The chunk-cost column of t for an element type and FP32 math (DcnDataType, DcnMath): wFp16,
 * wBf16, wQ8 (INT8), wFp8 (FP8E4M3), wTf32, and wFp32 in 3xTF32 (wFp32Wide only refines a non-zero wFp32). */
DCN_TILE_HD constexpr bool quantizedType(int32_t dtype)
{
    return dtype == kDCN_INT8 || dtype == kDCN_FP8E4M3;
}
DCN_TILE_HD constexpr float precisionWeight(TileShape const& t, int32_t dtype, int32_t math)
{
    return dtype == kDCN_FLOAT16 ? t.wFp16
        : dtype == kDCN_BFLOAT16 ? t.wBf16
        : dtype == kDCN_INT8     ? t.wQ8
        : dtype == kDCN_FP8E4M3  ? t.wFp8
        : math == kDCN_MATH_TF32 ? t.wTf32
                                 : t.wFp32;
}

/* The element type the kernels move and multiply for p: INT8 or FP8E4M3 for a quantized layer
 * (its x and weights), else p.dtype. */
DCN_TILE_HD constexpr int32_t kernelType(DcnParams const& p)
{
    return p.quant == kDCN_QUANT_INT8 ? kDCN_INT8 : p.quant == kDCN_QUANT_FP8 ? kDCN_FP8E4M3 : p.dtype;
}

/* Whether tile t has a kernel for an element type and FP32 math: one rule for the instantiation
 * units (launchTile), the host's checks (unsupportedReason) and dcnFusedTileInfo. The NCHW tiles
 * (reached through the fallback order) take every type; a channel-vectorised tile only those of
 * its non-zero cost columns, so that no kernel is built that AUTO cannot choose. The columns left
 * at 0 cover what cannot run (FP32 64-channel chunks, FP16/BF16 on 128-byte TMA rows of 32
 * channels, a warpgroup tile whose 3xTF32 stages exceed a block's shared memory; tileColumnsFit
 * below) and what AUTO never picks (bench/fused_reach.py, docs/fused_kernel_notes.md). */
DCN_TILE_HD constexpr bool builtFor(TileShape const& t, int32_t dtype, int32_t math)
{
    return quantizedType(dtype) ? t.nhwc && precisionWeight(t, dtype, math) > 0.0f
                                : !t.nhwc || precisionWeight(t, dtype, math) > 0.0f;
}

/* The names of the configurations (kTiles order), as dcnFusedTileInfo reports them. */
extern char const* const kTileNames[kTileCount];

/* Shared memory of a configuration: one stage's weight tile (A) and sample tile (B) for `elem`-byte
 * elements, the TMA tiles' alignment room and the mbarriers, and the block's whole dynamic shared
 * memory with `parts` copies of each operand (2: FP32 warpgroup tiles in 3xTF32, both TF32 parts)
 * and `slots` sampling plans of kk kernel points (FP32 corner weights and a 64-bit cell offset per
 * pixel), then the stages' mbarriers. The kernels lay out their shared memory with these (NTile, Tile) and the host checks and
 * costs the tiles with them (smemBytesFor): one definition for both. */
DCN_TILE_HD constexpr int rowPad(size_t elem)
{
    // padded rows of 16 bytes more (FP32: 4 elements, 16-bit types 8, 8-bit types 16): conflict-free
    // ldmatrix rows, each starting 16-byte aligned
    return static_cast<int>(16 / elem);
}
DCN_TILE_HD constexpr size_t stageABytes(TileShape const& t, size_t elem)
{
    return size_t(t.bm) * (t.tmaA ? t.bk : t.bk + rowPad(elem)) * elem; // TMA: swizzled rows, no padding
}
DCN_TILE_HD constexpr size_t stageBBytes(TileShape const& t, size_t elem)
{
    return t.nhwc ? size_t(t.bn) * (t.wgmma ? t.bk : t.bk + rowPad(elem)) * elem : size_t(t.bk) * (t.bn + 8) * elem;
}
DCN_TILE_HD constexpr size_t barrierBytes(TileShape const& t)
{
    return (3 * t.stages * sizeof(uint64_t) + 15) / 16 * 16;
}
DCN_TILE_HD constexpr size_t extraBytes(TileShape const& t)
{
    // TMA: the stages' 1024-byte alignment room; every tile: per stage the mbarriers of the weight
    // tile (TMA tiles), of FULL and of EMPTY, padded to 16 bytes (in FP16/BF16 the plan's 16-byte
    // entries follow them).
    return (t.tmaA ? 1024 : 0) + barrierBytes(t);
}
DCN_TILE_HD constexpr size_t tileSmemBytes(TileShape const& t, size_t elem, int parts, int kk, int slots)
{
    return t.stages * parts * (stageABytes(t, elem) + stageBBytes(t, elem))
        + size_t(slots) * kk * t.bn * (4 * sizeof(float) + sizeof(int64_t)) + extraBytes(t);
}

/* The zero cost columns the kernels need (builtFor): the 64-channel-chunk tiles take FP16/BF16
 * only, the 128-channel ones the 8-bit types only, the 32-channel TMA tiles (128-byte weight rows) FP32 only, and a warpgroup tile has no
 * 3xTF32 kernel where both TF32 parts of each operand would need more than 227 KiB of stages;
 * wFp32Wide refines a wFp32 that is set. */
constexpr bool tileColumnsFit()
{
    for (TileShape const& t : kTiles)
    {
        bool const fp32 = builtFor(t, kDCN_FLOAT32, kDCN_MATH_TF32) || builtFor(t, kDCN_FLOAT32, kDCN_MATH_ACCURATE);
        bool const half = builtFor(t, kDCN_FLOAT16, kDCN_MATH_ACCURATE) || builtFor(t, kDCN_BFLOAT16, kDCN_MATH_ACCURATE);
        if (t.nhwc && t.bk > 32 && fp32)
            return false;
        if (t.tmaA && t.bk == 32 && half)
            return false;
        if (t.wFp32Wide > 0.0f && t.wFp32 <= 0.0f)
            return false;
        if (t.wgmma && builtFor(t, kDCN_FLOAT32, kDCN_MATH_ACCURATE)
            && t.stages * 2 * (stageABytes(t, 4) + stageBBytes(t, 4)) > 227 * 1024)
            return false;
        // 8-bit tiles: 128-channel chunks (128-byte rows) on the channel-vectorised kernel, and nothing else.
        if ((t.wQ8 > 0.0f || t.wFp8 > 0.0f) && !(t.nhwc && t.bk == 128))
            return false;
        if (t.bk == 128 && (fp32 || half))
            return false;
    }
    return true;
}
static_assert(tileColumnsFit(), "a tile has a cost column for an element type or math its kernel cannot take");

/* The producer mapping of the channel-vectorised kernel (NTile, dcnFusedNhwcTile.cuh), one
 * definition for the kernel and the host: 16-byte sampling tasks per producer thread and chunk; the
 * units a thread loads and finishes them in (TMA tiles with more than 2 tasks per thread: the
 * corners of a whole chunk would not fit beside the ring's other units; register-split tiles: one
 * task per unit, but both on those of two consumer warpgroups, splitTwoGroups); and the register sets
 * (units in flight) of its ring. Producers of 80 registers
 * (wg-256x64-p16, wg-256x64-tf32) hold 3 sets: corner loads two chunks ahead; the sample-sharing
 * tile 2 (its blocks sample every other chunk, so that is two chunks ahead as well). tma-128x32-k64-p8
 * (one task per thread) keeps 3: with 4 or 5 (no spills) the CenterNet layers it runs took -1.9% to
 * -0.8% in FP16 and +0.6% to +3.6% in BF16 on an H200. The 512-thread 64-channel TMA tiles
 * (wg-256x64-2wg, tma-256x64-k64: 128 registers per thread) hold 2 sets of their 2 tasks: with 3
 * they spilled 92-220 bytes and took 1.15-1.93x as long (FP16 and BF16, H200,
 * commit 0950936). FP8's two-warpgroup tiles (wg-256x64-2wg-q8 and its pair) give their 8 producer
 * warps 112 registers (the consumers' two sets of sums keep 144, no spills) and a ring of 2 units,
 * each unit both tasks of a thread: against 72 registers and a unit per task, 104 and one unit took
 * DBNet-c4 and BEV-c4 2.9% and 4.7% less (H100); 112 took them another 2.6-3.8% and 3.1-3.3% less,
 * and the pair's R50-c5, DBNet-c5 and OCD-l4 1.4-1.9% less than 104 with a unit per task (H200, two
 * runs; the pair spilled 24 bytes with one unit at 104). The host's plan slots cover ringDepth + 1
 * chunks (planChunks: the producers also read one chunk's plan ahead). */
DCN_TILE_HD constexpr int producerTasks(TileShape const& t, size_t elem)
{
    return t.bn * (t.bk / int(16 / elem)) / (t.pw * 32);
}
/* Register-split tiles of two consumer warpgroups (FP8's wg-256x64-2wg-q8 and its pair). */
DCN_TILE_HD constexpr bool splitTwoGroups(TileShape const& t)
{
    return t.pregs > 0 && t.cw == 8;
}
DCN_TILE_HD constexpr int producerUnits(TileShape const& t, size_t elem)
{
    return t.pregs > 0 && !splitTwoGroups(t) ? producerTasks(t, elem) : t.tmaA && producerTasks(t, elem) > 2 ? producerTasks(t, elem) / 2 : 1;
}
DCN_TILE_HD constexpr int ringDepth(TileShape const& t, size_t elem)
{
    return splitTwoGroups(t) ? 2
        : t.pregs >= 80 && !t.pairM ? 3
        : t.pregs > 0 ? 2
        : producerUnits(t, elem) > 1 ? 3
        : elem == 4 ? 2
        : t.bk > 32 ? ((!t.asyncA && !t.tmaA) || t.bn * t.bk > 64 * 64 || (t.cw + t.pw) * 32 >= 512 ? 2 : 3)
        : ((t.cw + t.pw) * 32 <= 384 ? 5 : 3);
}

struct Device
{
    int id = 0;
    int ccMajor = 0;
    int ccMinor = 0;
    int sms = 0;
    int smemOptin = 0;
    bool tma = false;   // the TMA tiles can run: sm_90 code for this device and a tensor-map encoder
    bool wgmma = false; // the warpgroup-MMA tile can run: compute capability 9.x and sm_90a SASS
    bool fp8Mma = false; // FP8 warp MMAs can run: builtFp8MmaFor(ccMajor, ccMinor)
};

/* Whether this build holds sm_90 code that a device of compute capability ccMajor runs (its sm_90a
 * SASS on 9.x, its PTX of compute_90 or newer on 9.x and later; plugin_src/Makefile), and whether
 * it holds the sm_90a SASS that the warpgroup MMAs need. */
bool builtSm90For(int ccMajor);
bool builtWgmmaFor(int ccMajor);
/* Whether the code of the warp-MMA tiles (the sm_80 and sm_90 families) that a device of compute
 * capability ccMajor.ccMinor runs holds FP8 MMAs (compiled for compute_89 or newer): 8.9 with its
 * sm_89 SASS, 9.x with sm_90a SASS or PTX of compute_89 or newer, later ones with that PTX. */
bool builtFp8MmaFor(int ccMajor, int ccMinor);
/* A compute capability as the host-only API takes it: the major alone (8 .. 12: minor 0), or 10 x
 * major + minor (86, 89, 90, 120). */
inline void splitCc(int32_t cc, int& major, int& minor)
{
    major = cc >= 20 ? cc / 10 : cc;
    minor = cc >= 20 ? cc % 10 : 0;
}

/* A tile and its K splits (splits > 1: channel-vectorised tiles only). */
struct Choice
{
    int tile = -1;
    int splits = 1;
    // AUTO with splits == 1 over more than one wave of blocks: the last tailTiles pixel tiles (the
    // partial last wave) run as a separate launch with K split tailSplits ways (1: no such launch).
    int tailTiles = 0;
    int tailSplits = 1;
};

DcnStatus queryDevice(Device& d, char* msg, size_t msgLen);
size_t elemBytes(DcnParams const& p);
size_t alignUp(size_t v);

/* K chunks whose sampling plans tile t's kernel may hold at once: 2 on the NCHW kernel, ringDepth
 * + 1 on the channel-vectorised one (tests/test_core_smem.py checks it against NTile::PD);
 * plan slots of p's sampling plans in that kernel (see the definition), and the kernel's shared
 * memory per block. */
int planChunks(DcnParams const& p, TileShape const& t);
int planSlots(DcnParams const& p, TileShape const& t);
size_t smemBytesFor(int tile, DcnParams const& p);

/* Parts each operand is kept in by `tile` for p: 2 on the FP32 warpgroup tiles in 3xTF32 (big and
 * small TF32 parts, NTile::SPLIT), else 1. */
int operandParts(int tile, DcnParams const& p);

/* Workspace layout of the channel-vectorised kernel: the NHWC copy of x and the permuted weights
 * (nhwcBytes), then room for the FP32 partial sums of the K splits capSplits(p) allows (see
 * partialReserve in dcnFusedChoice.cu). */
bool nhwcApplies(DcnParams const& p, int bk = 32);
/* A quantized layer with exactly 64 channels per group, each group within one deformable group:
 * the 128-channel-chunk tiles take it with two kernel points per chunk (K order kernel point, then
 * channel, as the 64-channel chunks are prepared; FusedArgs::kpPair). */
bool kpPairApplies(DcnParams const& p);
/* Channels per prepared K block of tile t for p: t.bk, or 64 where t takes p with kernel-point pairs. */
int weightBk(TileShape const& t, DcnParams const& p);
int capSplits(DcnParams const& p);
size_t nhwcBytes(DcnParams const& p);

/* Why `tile` with `splits` cannot run p on d, or nullptr when it can. */
char const* unsupportedReason(DcnParams const& p, int tile, int splits, Device const& d, size_t workspaceSize);

/* Split-K: at least kMinSplitChunks chunks per split. chunks32: K of one group in 32-channel
 * chunks (the unit of the split limits and of the cost estimate). */
constexpr int kMinSplitChunks = 9;
inline int64_t chunks32(DcnParams const& p)
{
    return p.c / p.group * p.kh * p.kw / 32;
}

/* The channel-vectorised choice (tile, splits, split tail) with the least estimated time on d
 * (dcnFusedCost.cu); tile -1 when none applies. */
Choice bestNhwc(DcnParams const& p, Device const& d, size_t workspaceSize);

/* Tile `tile` unsplit on the first half of p's pixel tiles and with K split tailSplits ways on the
 * rest (tailSplits < 2 in the result: the tail's partial sums do not fit the workspace). */
Choice forcedTail(DcnParams const& p, int tile, int tailSplits, size_t workspaceSize);

/* The choice for p on d when the caller did not force one: the first supported entry of the
 * preferred order (kDCN_UNSUPPORTED and why in msg when none is). */
DcnStatus choose(DcnParams const& p, Device const& d, size_t workspaceSize, Choice& c, char* msg, size_t msgLen);

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_TILES_H
