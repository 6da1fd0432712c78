/*
 * dcnconvert core: the fused kernels' host-side choices: device query, support checks, the tile
 * order, K splits and the workspace size (dcnFusedTiles.h). The cost estimate that picks a tile is
 * in dcnFusedCost.cu, the launches are in dcnFused.cu.
 */
#include "dcnFused.h"
#include "dcnFusedTiles.h"
#include "dcnInternal.h"

#include <cuda_runtime.h>

#include <stdint.h>

using dcn::detail::setMsg;

namespace dcn
{
namespace fused
{
namespace
{

constexpr size_t kAlign = 256;
/* Split-K (channel-vectorised kernel only): at most kDCN_MAX_SPLITS splits of at least
 * kMinSplitChunks chunks each (dcnFusedTiles.h), and only while fewer than kSplitBlocks blocks of
 * 128 x 64 would cover the output (the workspace holds the FP32 partial sums of capSplits()
 * splits). */
constexpr int64_t kSplitBlocks = 512;

/* The 128-row channel tiles of all groups: a unit of the split limits. */
int64_t channelTiles128(DcnParams const& p)
{
    return (p.cout / p.group + 127) / 128 * p.group;
}

} // namespace

namespace
{

/* What this build holds (plugin_src/Makefile's ARCH_DEFS): sm_90a SASS, sm_89 SASS, and PTX of
 * compute_90 / compute_89 or newer. */
#ifdef DCN_BUILT_SM90A
constexpr bool kSassSm90a = true;
#else
constexpr bool kSassSm90a = false;
#endif
#ifdef DCN_BUILT_SM89
constexpr bool kSassSm89 = true;
#else
constexpr bool kSassSm89 = false;
#endif
#ifdef DCN_BUILT_PTX90
constexpr bool kPtx90 = true;
#else
constexpr bool kPtx90 = false;
#endif
#ifdef DCN_BUILT_PTX89
constexpr bool kPtx89 = true;
#else
constexpr bool kPtx89 = false;
#endif

} // namespace

bool builtSm90For(int ccMajor)
{
    return ccMajor == 9 ? (kSassSm90a || kPtx90) : ccMajor > 9 && kPtx90;
}

bool builtWgmmaFor(int ccMajor)
{
    return kSassSm90a && ccMajor == 9;
}

bool builtFp8MmaFor(int ccMajor, int ccMinor)
{
    return ccMajor == 8 ? ccMinor >= 9 && kSassSm89 : ccMajor == 9 ? kSassSm90a || kPtx89 : ccMajor > 9 && kPtx89;
}

DcnStatus queryDevice(Device& d, char* msg, size_t msgLen)
{
    cudaError_t err = cudaGetDevice(&d.id);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&d.ccMajor, cudaDevAttrComputeCapabilityMajor, d.id);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&d.ccMinor, cudaDevAttrComputeCapabilityMinor, d.id);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, d.id);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&d.smemOptin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d.id);
    if (err != cudaSuccess)
    {
        setMsg(msg, msgLen, "fused kernel: querying the current device failed: %s (%s)", cudaGetErrorName(err),
            cudaGetErrorString(err));
        return kDCN_CUDA_ERROR;
    }
    d.fp8Mma = builtFp8MmaFor(d.ccMajor, d.ccMinor);
    return kDCN_SUCCESS;
}

size_t elemBytes(DcnParams const& p)
{
    int32_t const t = kernelType(p);
    return t == kDCN_FLOAT32 ? 4 : quantizedType(t) ? 1 : 2;
}

int planChunks(DcnParams const& p, TileShape const& t)
{
    // A sample-sharing tile's block samples every other chunk: its chunks in flight span twice the K.
    return !t.nhwc ? 2 : (ringDepth(t, elemBytes(p)) + 1) * (t.pairM ? 2 : 1);
}

/* Plan slots: the most deformable groups that planChunks chunks in flight (bk K rows each) can
 * touch when each group spans cPerDg * kh * kw rows (1 when there is one group). */
int planSlots(DcnParams const& p, TileShape const& t)
{
    if (p.deformableGroup == 1)
        return 1;
    int const chunks = planChunks(p, t);
    int64_t const rows = p.c / p.deformableGroup * int64_t(p.kh) * p.kw;
    int64_t const span = (chunks * int64_t(t.bk) - 1 + rows - 1) / rows + 1;
    return static_cast<int>(span < p.deformableGroup ? span : p.deformableGroup);
}

size_t smemBytesFor(int tile, DcnParams const& p)
{
    TileShape const& t = kTiles[tile];
    return tileSmemBytes(t, elemBytes(p), operandParts(tile, p), p.kh * p.kw, planSlots(p, t));
}

/* Whether the channel-vectorised kernel applies (device-independent: it sizes the workspace). */
bool nhwcApplies(DcnParams const& p, int bk)
{
    return (p.c / p.group) % bk == 0 && (p.c / p.deformableGroup) % bk == 0;
}

bool kpPairApplies(DcnParams const& p)
{
    return p.quant != kDCN_QUANT_NONE && p.c / p.group == 64 && (p.c / p.deformableGroup) % 64 == 0;
}

int weightBk(TileShape const& t, DcnParams const& p)
{
    return t.bk == 128 && kpPairApplies(p) ? 64 : t.bk;
}

size_t alignUp(size_t v)
{
    return (v + kAlign - 1) / kAlign * kAlign;
}

/* The most K splits p may use (device-independent: it sizes the workspace); 1 = no split. */
int capSplits(DcnParams const& p)
{
    if (!nhwcApplies(p))
        return 1;
    int64_t const chunks = chunks32(p);
    int64_t const blocks = channelTiles128(p) * ((p.n * p.ho * p.wo + 63) / 64);
    int64_t cap = kSplitBlocks / (blocks > 0 ? blocks : 1);
    cap = cap < chunks / kMinSplitChunks ? cap : chunks / kMinSplitChunks;
    cap = cap < kDCN_MAX_SPLITS ? cap : kDCN_MAX_SPLITS;
    return cap > 1 ? static_cast<int>(cap) : 1;
}

int operandParts(int tile, DcnParams const& p)
{
    return kTiles[tile].wgmma && kernelType(p) == kDCN_FLOAT32 && p.math != kDCN_MATH_TF32 ? 2 : 1;
}

char const* unsupportedReason(DcnParams const& p, int tile, int splits, Device const& d, size_t workspaceSize)
{
    if (d.ccMajor < 8)
        return "needs compute capability 8.0 or newer";
    int64_t const kk = int64_t(p.kh) * p.kw;
    int64_t const kg = p.c / p.group * kk;
    int64_t const mg = p.cout / p.group;
    int64_t const pixels = p.n * p.ho * p.wo;
    if (p.h < 2 || p.w < 2)
        return "needs an input of at least 2 x 2";
    if (p.h * p.w > INT32_MAX || pixels > INT32_MAX - 4096 || kg > INT32_MAX - 64 || p.ho * p.wo > INT32_MAX
        || p.c > INT32_MAX)
        return "a plane, the pixel count or K exceeds 32-bit tile indexing";
    if ((mg + kTiles[tile].bm - 1) / kTiles[tile].bm > 65535 || int64_t(p.group) * splits > 65535)
        return "too many channel tiles, groups or K splits for the grid";
    if (splits > 1 && ((pixels + 3) / 4 * p.cout + 255) / 256 > INT32_MAX)
        return "too many outputs for the split-K reduction's grid";
    if (!kTiles[tile].nhwc && p.quant != kDCN_QUANT_NONE)
        return "quantized (INT8, FP8) layers run on the 128-channel-chunk tiles only";
    if (kTiles[tile].nhwc)
    {
        if (mg * kg > INT32_MAX)
            return "a group's weights exceed the 32-bit offsets of the channel-vectorised kernel";
        // The element type first: a float layer forced onto an 8-bit tile (or the reverse) is refused
        // for that, whatever its channel counts.
        if (quantizedType(kernelType(p)) != quantizedType(kTiles[tile].bk == 128 ? kDCN_INT8 : kDCN_FLOAT32))
            return kTiles[tile].bk == 128 ? "the 128-channel-chunk tiles take quantized (INT8, FP8) layers only"
                                          : "quantized (INT8, FP8) layers run on the 128-channel-chunk tiles only";
        if (!nhwcApplies(p, weightBk(kTiles[tile], p)))
            return kTiles[tile].bk == 32 ? "the channel-vectorised tiles need channels per group and per deformable group divisible by 32"
                : kTiles[tile].bk == 64  ? "the 64-channel-chunk tiles need channels per group and per deformable group divisible by 64"
                                         : "the 128-channel-chunk tiles need channels per group and per deformable group divisible by 128, "
                                           "or 64 channels per group and per deformable group a multiple of 64";
        if (kTiles[tile].bk == 64 && kernelType(p) == kDCN_FLOAT32)
            return "the 64-channel-chunk tiles take FP16/BF16 only";
        if (kTiles[tile].tmaA && kTiles[tile].bk == 32 && kernelType(p) != kDCN_FLOAT32)
            return "the 32-channel TMA tiles copy 128-byte weight rows, which take FP32 only";
        if (operandParts(tile, p) == 2 && !builtFor(kTiles[tile], kernelType(p), p.math))
            return "this FP32 warpgroup tile is not built for 3xTF32 (both TF32 parts of each operand would not fit in "
                   "shared memory); it runs in TF32 mode";
        if (!builtFor(kTiles[tile], kernelType(p), p.math))
            return "AUTO never chooses this tile for this element type and math, so it is not built for it (the "
                   "tiles dcnFusedTileInfo lists for it are)";
        if (kTiles[tile].tmaA && !d.tma)
            return "the TMA tiles need compute capability 9.0 or newer, sm_90 code in this build and a "
                   "driver with cuTensorMapEncodeTiled";
        if (kTiles[tile].wgmma && !d.wgmma)
            return "the warpgroup-MMA tiles need compute capability 9.x and sm_90a code in this build";
        if (!kTiles[tile].wgmma && kernelType(p) == kDCN_FP8E4M3 && !d.fp8Mma)
            return "FP8 warp MMAs need compute capability 8.9 or newer and code for it in this build (sm_89 or "
                   "sm_90 SASS, or PTX of compute_89 or newer)";
        if (kTiles[tile].pairM && (mg + kTiles[tile].bm - 1) / kTiles[tile].bm % 2 != 0)
            return "the sample-sharing tiles run channel tiles in pairs: a group needs an even number of them";
        if (workspaceSize < workspaceBytes(p))
            return "the workspace is smaller than dcnWorkspaceSize()";
        if (splits > capSplits(p))
            return "this many K splits do not fit the workspace (capSplits in dcnFusedChoice.cu)";
    }
    else if (splits > 1)
        return "only the channel-vectorised tiles split K";
    if (operandParts(tile, p) == 2 && smemBytesFor(tile, p) > static_cast<size_t>(d.smemOptin))
        return "this FP32 warpgroup tile does not fit in shared memory in 3xTF32 (both TF32 parts of each operand); "
               "it runs in TF32 mode";
    if (smemBytesFor(tile, p) > static_cast<size_t>(d.smemOptin))
        return "the sampling plans of this kernel size and deformable grouping do not fit in shared memory";
    return nullptr;
}

namespace
{

/* The fallback order of tiles (when the cost estimate finds no channel-vectorised tile): the
 * channel-vectorised tiles, then the NCHW ones (64 x 64 first when a group has at most 64 output
 * channels). */
int fallbackTiles(DcnParams const& p, int (&order)[kTileCount])
{
    int64_t const mg = p.cout / p.group;
    int const all[] = {kTma128x64K64, kAsync128x64K64, kRegs128x64K64, kTma128x64Fp32, kRegs128x64, kTma128x32K64P8,
        kRegs128x32K64, kTma128x32Fp32, kRegs128x32, kRegs64x64, kAsync128x64, kAsync128x32, kAsync256x64,
        kAsync128x32K64P8, kWg256x64TwoGroups, kWg128x128, kWg128x128P16, kWg256x64P16, kWg128x64P16, kWg128x64Tf32,
        kWg256x64Tf32, kWg256x64P16Pair, kTma256x64K64, kWg128x64Q8, kWg256x64Q8, kWg128x128Q8, kTma128x32P8Q8,
        kAsync128x32P8Q8, kAsync128x64Q8, kWg128x64Q8Pair, kWg256x64Q8Pair, kWg256x64Q8TwoGroups,
        kWg256x64Q8TwoGroupsPair, kWg128x32Q8,
        mg <= 64 ? kNchw64x64 : kNchw128x64, mg <= 64 ? kNchw128x64 : kNchw64x64};
    static_assert(sizeof(all) / sizeof(all[0]) == kTileCount, "every tile in the fallback order");
    int n = 0;
    for (int t : all)
        order[n++] = t;
    return n;
}

} // namespace

DcnStatus choose(DcnParams const& p, Device const& d, size_t workspaceSize, Choice& c, char* msg, size_t msgLen)
{
    if (nhwcApplies(p))
    {
        Choice const best = bestNhwc(p, d, workspaceSize);
        if (best.tile >= 0)
        {
            c = best;
            return kDCN_SUCCESS;
        }
    }
    int order[kTileCount];
    int const count = fallbackTiles(p, order);
    char const* why = nullptr;
    for (int i = 0; i < count; ++i)
    {
        char const* const reason = unsupportedReason(p, order[i], 1, d, workspaceSize);
        if (reason == nullptr)
        {
            c.tile = order[i];
            c.splits = 1;
            return kDCN_SUCCESS;
        }
        if (why == nullptr)
            why = reason;
    }
    setMsg(msg, msgLen, "fused kernel: %s", why);
    return kDCN_UNSUPPORTED;
}

DcnStatus chooseFor(DcnParams const& p, int32_t sms, int32_t smemOptin, int32_t cc, size_t workspaceSize,
    int32_t& tile, int32_t& splits, int32_t& tailTiles, int32_t& tailSplits, char* msg, size_t msgLen)
{
    Device d;
    d.sms = sms;
    d.smemOptin = smemOptin;
    splitCc(cc, d.ccMajor, d.ccMinor);
    d.tma = builtSm90For(d.ccMajor); // as forward() would find it with a driver that has the encoder
    d.wgmma = builtWgmmaFor(d.ccMajor);
    d.fp8Mma = builtFp8MmaFor(d.ccMajor, d.ccMinor);
    Choice c;
    DcnStatus const s = choose(p, d, workspaceSize, c, msg, msgLen);
    if (s == kDCN_SUCCESS)
    {
        tile = c.tile;
        splits = c.splits;
        tailTiles = c.tailTiles;
        tailSplits = c.tailSplits;
    }
    return s;
}

int32_t tileCount()
{
    return kTileCount;
}

char const* const kTileNames[kTileCount] = {"regs-64x64", "regs-128x32", "regs-128x64", "nchw-128x64", "nchw-64x64",
    "regs-128x64-k64", "regs-128x32-k64", "async-128x64-k64", "async-128x64", "async-128x32", "async-256x64",
    "async-128x32-k64-p8", "tma-128x64-k64", "tma-128x32-k64-p8", "tma-256x64-k64", "wg-256x64-2wg", "tma-128x64-fp32",
    "tma-128x32-fp32", "wg-128x128", "wg-128x128-p16", "wg-256x64-p16", "wg-128x64-p16", "wg-128x64-tf32",
    "wg-256x64-tf32", "wg-256x64-p16-pair", "wg-128x64-q8", "wg-256x64-q8", "wg-128x128-q8", "async-128x64-q8",
    "async-128x32-p8-q8", "tma-128x32-p8-q8", "wg-128x64-q8-pair", "wg-256x64-q8-pair", "wg-256x64-2wg-q8",
    "wg-256x64-2wg-q8-pair", "wg-128x32-q8"};

/* Bytes kept for split-K partial sums: splits x pixels of any split count that capSplits allows at
 * p's size or at any smaller batch or plane is at most min(kDCN_MAX_SPLITS x pixels, 64 x
 * floor(kSplitBlocks / (channel tiles x groups))), because capSplits keeps splits x blocks <=
 * kSplitBlocks. Reserving that bound makes the workspace grow with the dimensions, so a workspace
 * sized for a profile's largest shape fits every smaller one (capSplits alone would not: a large
 * shape may not split while a smaller one does). */
static size_t partialReserve(DcnParams const& p)
{
    if (chunks32(p) / kMinSplitChunks < 2)
        return 0;
    int64_t const bound = 64 * (kSplitBlocks / channelTiles128(p));
    int64_t const pixels = kDCN_MAX_SPLITS * p.n * p.ho * p.wo;
    int64_t const count = pixels < bound ? pixels : bound;
    return count > 0 ? alignUp(size_t(count) * p.cout * sizeof(float)) : 0;
}

size_t workspaceBytes(DcnParams const& p)
{
    if (!nhwcApplies(p))
        return 0;
    return nhwcBytes(p) + partialReserve(p);
}

} // namespace fused
} // namespace dcn
