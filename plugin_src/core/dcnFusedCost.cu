/*
 * dcnconvert core: the cost estimate behind AUTO's choice of a channel-vectorised tile, its K
 * splits and its split tail (dcnFusedTiles.h); fitted to H200 timings (docs/fused_kernel_notes.md).
 */
#include "dcnFusedTiles.h"

#include <stdint.h>

namespace dcn
{
namespace fused
{
namespace
{

/* Time of one 32-channel K chunk of a block of `tile` relative to tile 7's, fitted to the H200
 * timings of bench/fused_tiles.py (docs/fused_kernel_notes.md); 0 for tiles the estimate leaves
 * out. The cp.async and TMA tiles are left out where their weight tile has rows past the group's
 * output channels (measured slower there), except those with 16 producer warps (CenterNet 64 -> 64:
 * tile 25 23.6 us against 32.5 for the choice without that exception). */
float chunkWeight(int tile, DcnParams const& p)
{
    bool const fp32 = p.dtype == kDCN_FLOAT32;
    bool const tf32 = fp32 && p.math == kDCN_MATH_TF32; // else FP32 is 3xTF32, bound by its consumers
    bool const bf16 = p.dtype == kDCN_BFLOAT16;
    int64_t const mg = p.cout / p.group;
    if ((kTiles[tile].asyncA || kTiles[tile].tmaA) && kTiles[tile].bm > mg && kTiles[tile].pregs == 0)
        return 0.0f;
    switch (tile)
    {
    case 7: return 1.0f;
    case 5: return tf32 ? 0.72f : fp32 ? (mg > 64 ? 0.45f : 0.6f) : 0.82f; // 3xTF32: cheaper above 64 channels
    case 4: return mg > 64 ? 0.0f : fp32 ? 0.6f : 0.8f;
    case 10: return fp32 ? 0.0f : 0.83f; // 64-channel chunks: FP16/BF16 only
    case 11: return fp32 ? 0.0f : 0.67f;
    case 12: return fp32 ? 0.0f : 0.8f;
    case 13: return fp32 ? 0.0f : 0.61f;
    case 14: return fp32 ? 0.0f : 0.92f;
    case 15: return fp32 ? 0.0f : 0.74f;
    case 16: return fp32 ? 0.0f : 1.3f;
    case 17: return fp32 ? 0.0f : 0.59f; // 8 producer warps: 2-5% faster than tile 13's 4
    // TMA tiles (sm_90+; fp32 is rejected by unsupportedReason): 8-27% faster than the cp.async
    // tiles 12, 17, 16 of the same shapes (FP16 on R50-c4, BEV-c4, R50-c5, DBNet-c4, OCD-l4,
    // DLA 512->256@16x16).
    case 18: return 0.72f;
    case 19: return 0.49f;
    case 20: return 1.1f;
    // Tile 20's shape with warpgroup MMAs: 0-4% faster than tile 20 in FP16, 6-9% in BF16 (BEV-c4,
    // DBNet-c4, OCD-l4); the 128-row TMA tiles 18 and 19 gain nothing from them, so they have none.
    case 21: return 1.05f;
    // The shapes of tiles 7 and 5 with TMA weights (FP32 only): 4-16% faster than those two
    // (R50-c3/c4/c5, BEV-c4, DBNet-c4, OCD-l4).
    case 22: return tf32 ? 0.86f : fp32 ? 0.93f : 0.0f;
    case 23: return tf32 ? 0.86f : fp32 ? 0.43f : 0.0f; // TF32: two blocks per SM (coResident)
    // Warpgroup tiles with one consumer warpgroup (FP16/BF16; fitted on R50-c3/c3-s2/c4/c5, BEV-c4,
    // CenterNet-64, DBNet-c4, DLA 512->256@16x16, OCD-l4). 128 x 128 with 8 producer warps: BF16 only
    // (FP16 has tile 25); with 16 producer warps FP16 only (BF16's FP32 sums spill at 72 registers).
    case 24: return fp32 || !bf16 ? 0.0f : 1.0f;
    case 25: return fp32 || bf16 ? 0.0f : 0.7f;
    // 16 producer warps (setmaxnreg): 13-21% faster than tile 21 (BEV-c4, DBNet-c4, R50-c5).
    case 26: return fp32 ? 0.0f : 0.75f;
    case 27: return fp32 ? 0.0f : bf16 ? 0.55f : 0.65f;
    // Tile 27's layout for FP32 (R50-c4, BEV-c4, DBNet-c4, OCD-l4, R50-c3, each against the better
    // of tiles 22 and 23 at its best split): 3xTF32 on warpgroup MMAs takes 0.51-0.55x their time,
    // TF32 0.89-0.91x.
    case 28: return tf32 ? 0.70f : fp32 ? 0.40f : 0.0f;
    // Tile 26 for FP32, TF32 only (3xTF32 does not fit its shared memory): 0.59-0.76x tile 28's time
    // at the best split of each (R50-c4, BEV-c4, DBNet-c4, OCD-l4); where a group has 128 output
    // channels or fewer its rows are half empty (R50-c3 113 us against 63, CenterNet-64 76 against 47).
    case 29: return tf32 && mg > 128 ? 0.78f : 0.0f;
    default: return 0.0f;
    }
}

/* Blocks of `tile` that share an SM at full speed each (fitted like chunkWeight): tile 23 in TF32
 * (111 registers x 288 threads; a block alone leaves half the SM idle: R50-c5 with 2 K splits,
 * 264 blocks, took 69.8 us against 117.3 us for 132 blocks without a split). */
int coResident(int tile, DcnParams const& p, Device const& d)
{
    bool const two = tile == 23 && p.dtype == kDCN_FLOAT32 && p.math == kDCN_MATH_TF32;
    // and only where two blocks' shared memory fits (the SM has the opt-in limit plus 1 KiB)
    return two && 2 * (smemBytesFor(tile, p) + 1024) <= static_cast<size_t>(d.smemOptin) + 1024 ? 2 : 1;
}

/* Per-block work outside the K walk (sampling plan, pipeline fill and drain, epilogue) and the
 * split-K reduction, in 32-channel chunks of tile 7 (fitted with chunkWeight). The 16-producer
 * tiles cost more per block (measured on the small CenterNet layers: tile 25 with 4 K splits took
 * 24.6 us on DLA 128 -> 128@64x64 against 17.0 for tile 19 unsplit). */
constexpr float kReduceFixed = 2.0f;
float blockFixed(int tile)
{
    return tile == 25 ? 40.0f : tile >= 26 ? 30.0f : 20.0f;
}

/* Whether the partial sums of s K splits over the last xTail pixel tiles of tile t fit the
 * workspace (after the NHWC copy and the permuted weights) and the grid. */
bool tailFits(DcnParams const& p, int t, int64_t xTail, int s, size_t workspaceSize)
{
    if (!kTiles[t].nhwc || workspaceSize < nhwcBytes(p) || int64_t(p.group) * s > 65535)
        return false;
    int64_t const room = int64_t((workspaceSize - nhwcBytes(p)) / sizeof(float));
    return s * xTail * kTiles[t].bn * p.cout <= room;
}

/* The split tail of tile t without a K split (Choice::tailTiles / tailSplits), when its blocks
 * need more than one wave and the last one is partial: the last pixel tiles' blocks, split as many
 * ways as still fit in one wave, K allows and the workspace's partial sums hold. *cost: its
 * estimate, as in bestNhwc. */
Choice splitTail(DcnParams const& p, Device const& d, size_t workspaceSize, int t, float w, float* cost)
{
    Choice c;
    c.tile = t;
    int64_t const perX = (p.cout / p.group + kTiles[t].bm - 1) / kTiles[t].bm * p.group; // blocks per pixel tile
    int64_t const xAll = (p.n * p.ho * p.wo + kTiles[t].bn - 1) / kTiles[t].bn;
    int64_t const slots = int64_t(d.sms) * coResident(t, p, d);
    int64_t const full = xAll * perX / slots; // full waves
    int64_t const rem = xAll * perX - full * slots;
    if (full < 1 || rem == 0)
        return c;
    int64_t const xTail = (rem + perX - 1) / perX;
    int64_t const chunks = chunks32(p);
    int best = 1;
    for (int s = 2; s <= kDCN_MAX_SPLITS; ++s)
    {
        if (xTail * perX * s <= slots && chunks / s >= kMinSplitChunks && tailFits(p, t, xTail, s, workspaceSize))
            best = s;
    }
    if (best > 1)
    {
        c.tailTiles = static_cast<int>(xTail);
        c.tailSplits = best;
        *cost = w * (float(full) * (float(chunks) + blockFixed(t)) + float((chunks + best - 1) / best) + blockFixed(t))
            + kReduceFixed;
    }
    return c;
}

} // namespace

/* The channel-vectorised (tile, splits) with the least estimated time:
 * chunkWeight x waves x (chunks per split + blockFixed) (+ kReduceFixed when K is split); for an
 * unsplit tile also with its split tail (splitTail). */
Choice bestNhwc(DcnParams const& p, Device const& d, size_t workspaceSize)
{
    Choice best;
    float bestCost = 0.0f;
    int64_t const mg = p.cout / p.group;
    int64_t const pixels = p.n * p.ho * p.wo;
    int64_t const chunks = chunks32(p);
    int const cap = capSplits(p);
    for (int t = 0; t < kTileCount; ++t)
    {
        float const w = chunkWeight(t, p);
        if (w <= 0.0f)
            continue;
        int64_t const units = (mg + kTiles[t].bm - 1) / kTiles[t].bm * ((pixels + kTiles[t].bn - 1) / kTiles[t].bn) * p.group;
        for (int s = 1; s <= cap || s == 1; ++s)
        {
            if (unsupportedReason(p, t, s, d, workspaceSize) != nullptr)
                continue;
            int64_t const slots = int64_t(d.sms) * coResident(t, p, d);
            int64_t const waves = (units * s + slots - 1) / slots;
            float const cost
                = w * float(waves) * (float((chunks + s - 1) / s) + blockFixed(t)) + (s > 1 ? kReduceFixed : 0.0f);
            if (best.tile < 0 || cost < bestCost)
            {
                best = Choice{};
                best.tile = t;
                best.splits = s;
                bestCost = cost;
            }
            float tailCost = 0.0f;
            Choice const tail = s == 1 ? splitTail(p, d, workspaceSize, t, w, &tailCost) : Choice{};
            if (tail.tailSplits > 1 && tailCost < bestCost)
            {
                best = tail;
                bestCost = tailCost;
            }
        }
    }
    return best;
}

Choice forcedTail(DcnParams const& p, int tile, int tailSplits, size_t workspaceSize)
{
    Choice c;
    c.tile = tile;
    int64_t const xAll = (p.n * p.ho * p.wo + kTiles[tile].bn - 1) / kTiles[tile].bn;
    int64_t const xTail = (xAll + 1) / 2;
    if (tailSplits >= 2 && tailSplits <= kDCN_MAX_SPLITS && tailFits(p, tile, xTail, tailSplits, workspaceSize))
    {
        c.tailTiles = static_cast<int>(xTail);
        c.tailSplits = tailSplits;
    }
    return c;
}

} // namespace fused
} // namespace dcn
