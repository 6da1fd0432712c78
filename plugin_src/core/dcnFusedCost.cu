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

/* The chunk weight of `tile` for p (the cost columns of kTiles, dcnFusedTiles.h); 0 for tiles the
 * estimate leaves out. Beside the columns, two rules. One: the cp.async and TMA tiles are left out where
 * their weight tile has rows past the group's output channels (measured slower there), except
 * those with a register split (CenterNet 64 -> 64: wg-128x128-p16 23.6 us against 32.5 for the
 * choice without that exception) and the 8-bit ones (H100, INT8, 64 output channels:
 * tma-128x32-p8-q8 9.3 us on DLA-ida2-proj and 8.5 on DLA-up-proj, against 11.4 and 9.0 for
 * AUTO's warpgroup tiles without that exception). A second: the 256-row sample-sharing tiles are
 * left out where the group's last channel tile is partial (H100, engine path, against the unpaired
 * tile AUTO then takes: BF16 128 -> 288 channels at 50 x 84 28.4 us against 22.3, 512 -> 320 at
 * 25 x 34 27.0 against 23.6; INT8 256 -> 320 at 50 x 84 26.8 against 23.3, 512 -> 288 at 25 x 42
 * 21.0 against 19.0); the 128-row pair keeps them (512 -> 448 at 25 x 34: INT8 16.7 us with 2 K
 * splits against 17.9 for the best unpaired tile, FP8 17.5 against 20.3). */
float chunkWeight(int tile, DcnParams const& p)
{
    TileShape const& t = kTiles[tile];
    int64_t const mg = p.cout / p.group;
    if (!t.nhwc || (t.maxMg > 0 && mg > t.maxMg) || mg <= t.minMg)
        return 0.0f;
    if ((t.asyncA || t.tmaA) && t.bm > mg && t.pregs == 0 && !quantizedType(kernelType(p)))
        return 0.0f;
    if (t.pairM && t.bm >= 256 && mg % t.bm != 0)
        return 0.0f;
    bool const accurate = kernelType(p) == kDCN_FLOAT32 && p.math != kDCN_MATH_TF32;
    if (accurate && mg > 64 && t.wFp32Wide > 0.0f) // set only beside a wFp32 (tileColumnsFit)
        return t.wFp32Wide; // 3xTF32, bound by its consumers
    return builtFor(t, kernelType(p), p.math) ? precisionWeight(t, kernelType(p), p.math) : 0.0f;
}

/* Blocks of `tile` that share an SM at full speed each: the tf32Blocks column in TF32 (tma-128x32-fp32:
 * 111 registers x 288 threads, a block alone leaves half the SM idle: R50-c5 with 2 K splits, 264
 * blocks, took 69.8 us against 117.3 us for 132 blocks without a split), where their shared memory
 * fits (the SM has the opt-in limit plus 1 KiB). */
int coResident(int tile, DcnParams const& p, Device const& d)
{
    int const blocks = kernelType(p) == kDCN_FLOAT32 && p.math == kDCN_MATH_TF32 ? kTiles[tile].tf32Blocks : 1;
    if (blocks < 2)
        return 1;
    return blocks * (smemBytesFor(tile, p) + 1024) <= static_cast<size_t>(d.smemOptin) + 1024 ? blocks : 1;
}

/* The split-K reduction, in 32-channel chunks of regs-128x64 (fitted with the weights). */
constexpr float kReduceFixed = 2.0f;
float blockFixed(int tile)
{
    return kTiles[tile].blockFixed;
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
