/*
 * dcnconvert core: the fused kernels' tile table and the host-side choices made from it (support
 * checks, tile order, K splits, workspace layout), shared by dcnFusedChoice.cu (the choices) and
 * dcnFused.cu (the launches). Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_TILES_H
#define DCN_FUSED_TILES_H

#include "dcnParams.h"

#include <stddef.h>
#include <stdint.h>

namespace dcn
{
namespace fused
{

/* Tile configurations: BM x BN (channels x pixels), consumer warps (WARPS_M of them along the
 * channels), producer warps, pipeline stages; nhwc selects the kernel; bk is the K chunk (channels
 * per chunk in the channel-vectorised kernel: 32 or 64, FP16/BF16 only for 64); asyncA: the
 * producers copy the weight tile with cp.async (L2 -> shared memory, no registers) instead of
 * loads and stores; tmaA: the tensor memory accelerator copies it (sm_90+, dcnFusedTma.cuh);
 * wgmma: warpgroup MMAs from shared memory (compute capability 9.x, sm_90a code, dcnFusedWgmma.cuh;
 * warpsM = cw); pregs: see below. */
struct TileShape
{
    int bm, bn, warpsM, cw, pw, stages;
    bool nhwc;
    int bk;
    bool asyncA;
    bool tmaA;
    bool wgmma;
    int pregs; // warpgroup tiles: producer registers per thread (setmaxnreg; consumers get the rest), 0: none
};
constexpr TileShape kTiles[] = {
    {128, 64, 4, 8, 8, 4, true, 32, false},   // 0 (0-11: the weight tile goes through the producers' registers)
    {128, 128, 2, 8, 8, 4, true, 32, false},  // 1
    {64, 128, 2, 8, 8, 4, true, 32, false},   // 2
    {256, 64, 4, 8, 8, 3, true, 32, false},   // 3: all channels of a 256-channel group at once
    {64, 64, 2, 4, 8, 4, true, 32, false},    // 4
    {128, 32, 4, 4, 4, 4, true, 32, false},   // 5: narrow pixel tiles for small batch-1 layers
    {256, 32, 8, 8, 4, 3, true, 32, false},   // 6
    {128, 64, 2, 4, 8, 4, true, 32, false},   // 7: 4 consumer warps
    {128, 64, 4, 8, 8, 4, false, 32, false},  // 8: NCHW kernel (any channel count)
    {64, 64, 2, 4, 8, 4, false, 32, false},   // 9
    {128, 64, 2, 4, 8, 4, true, 64, false},   // 10: 128 x 64, 4 consumer warps, 64-channel chunks
    {128, 32, 4, 4, 4, 4, true, 64, false},   // 11: 128 x 32, 64-channel chunks
    {128, 64, 2, 4, 8, 4, true, 64, true},    // 12: 128 x 64, 64-channel chunks, cp.async weights
    {128, 32, 4, 4, 4, 4, true, 64, true},    // 13: 128 x 32, 64-channel chunks, cp.async weights
    {128, 64, 2, 4, 8, 4, true, 32, true},    // 14: 128 x 64, 32-channel chunks, cp.async weights
    {128, 32, 4, 4, 4, 4, true, 32, true},    // 15: 128 x 32, 32-channel chunks, cp.async weights
    {256, 64, 4, 8, 8, 3, true, 32, true},    // 16: 256 x 64, 32-channel chunks, cp.async weights
    {128, 32, 4, 4, 8, 4, true, 64, true},    // 17: 128 x 32, 64-channel chunks, cp.async weights, 8 producer warps
    {128, 64, 2, 4, 8, 4, true, 64, false, true},  // 18: 128 x 64, 64-channel chunks, TMA weights (sm_90+)
    {128, 32, 4, 4, 8, 4, true, 64, false, true},  // 19: 128 x 32, 64-channel chunks, TMA weights, 8 producer warps
    {256, 64, 4, 8, 8, 3, true, 64, false, true},  // 20: 256 x 64, 64-channel chunks, TMA weights
    {256, 64, 8, 8, 8, 3, true, 64, false, true, true}, // 21: 256 x 64, two consumer warpgroups (wgmma, sm_90a)
    {128, 64, 2, 4, 8, 4, true, 32, false, true},  // 22: 128 x 64, 32-channel chunks, TMA weights (FP32: 128-byte rows)
    {128, 32, 4, 4, 4, 4, true, 32, false, true},  // 23: 128 x 32, 32-channel chunks, TMA weights (FP32)
    {128, 128, 4, 4, 8, 4, true, 64, false, true, true}, // 24: 128 x 128, one consumer warpgroup (sm_90a)
    {128, 128, 4, 4, 16, 4, true, 64, false, true, true, 72}, // 25: 128 x 128, 16 producer warps of 72 registers
    {256, 64, 4, 4, 16, 4, true, 64, false, true, true, 80},  // 26: 256 x 64, one consumer warpgroup, 16 producer warps
    {128, 64, 4, 4, 16, 4, true, 64, false, true, true, 64},  // 27: 128 x 64, the same split of warps and registers
    {128, 64, 4, 4, 16, 4, true, 32, false, true, true, 64},  // 28: 128 x 64 for FP32 (TF32 wgmma, 32-channel chunks)
    {256, 64, 4, 4, 16, 4, true, 32, false, true, true, 80},  // 29: 256 x 64 for FP32, TF32 only (3xTF32 would need 2x smem)
};
constexpr int kTileCount = sizeof(kTiles) / sizeof(kTiles[0]);

struct Device
{
    int id = 0;
    int ccMajor = 0;
    int sms = 0;
    int smemOptin = 0;
    bool tma = false;   // the TMA tiles can run: sm_90 code for this device and a tensor-map encoder
    bool wgmma = false; // the warpgroup-MMA tile can run: compute capability 9.x and sm_90a SASS
};

/* Whether this build holds sm_90 code that a device of compute capability ccMajor runs (its sm_90a
 * SASS on 9.x, its PTX of compute_90 or newer on 9.x and later; plugin_src/Makefile), and whether
 * it holds the sm_90a SASS that the warpgroup MMAs need. */
bool builtSm90For(int ccMajor);
bool builtWgmmaFor(int ccMajor);

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

/* K chunks whose sampling plans tile t's kernel may hold at once: 2 on the NCHW kernel, NTile::PD
 * + 1 or more on the channel-vectorised one (tests/test_core_smem.py checks it against NTile::PD);
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
