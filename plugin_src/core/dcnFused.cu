/*
 * dcnconvert core: host side of the fused tensor-core kernel (dcnFusedKernel.cuh): support checks,
 * tile configurations, the cost model that picks one, and the launch.
 */
#include "dcnFused.h"
#include "dcnFusedKernel.cuh"
#include "dcnInternal.h"

#include <cuda_runtime.h>

#include <atomic>
#include <stdint.h>

using dcn::detail::dtypeName;
using dcn::detail::setMsg;

namespace dcn
{
namespace fused
{
namespace
{

/* Tile configurations: BM x BN (channels x pixels), consumer warps (WARPS_M of them along the
 * channels), producer warps, pipeline stages, blocks per SM asked of the register allocator. */
struct TileShape
{
    int bm, bn, warpsM, cw, pw, stages, minb;
};
constexpr TileShape kTiles[] = {
    {128, 64, 4, 8, 8, 4, 1},  // 0
    {128, 64, 2, 4, 8, 4, 1},  // 1: 4 consumer warps
    {128, 64, 4, 8, 16, 4, 1}, // 2: 16 producer warps
    {256, 64, 4, 8, 8, 3, 1},  // 3: all channels of a 256-channel group at once
    {64, 64, 2, 4, 8, 4, 1},   // 4
    {64, 64, 2, 4, 16, 4, 1},  // 5
    {256, 32, 8, 8, 8, 3, 1},  // 6: narrow pixel tiles for batch-1 layers
    {128, 32, 4, 4, 8, 4, 1},  // 7
};
constexpr int kTileCount = sizeof(kTiles) / sizeof(kTiles[0]);
constexpr int kMaxDevices = 64;

struct Device
{
    int id = 0;
    int ccMajor = 0;
    int sms = 0;
    int smemOptin = 0;
};

DcnStatus queryDevice(Device& d, char* msg, size_t msgLen)
{
    cudaError_t err = cudaGetDevice(&d.id);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&d.ccMajor, cudaDevAttrComputeCapabilityMajor, d.id);
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
    return kDCN_SUCCESS;
}

template <typename T, int TILE>
using TileOf = Tile<T, kTiles[TILE].bm, kTiles[TILE].bn, kTiles[TILE].warpsM, kTiles[TILE].cw, kTiles[TILE].pw,
    kTiles[TILE].stages, kTiles[TILE].minb>;

/* Shared memory of `tile` for dtype: pipeline stages and sampling plans. */
size_t smemBytesFor(int tile, int32_t dtype, int kk, int slots)
{
    TileShape const& t = kTiles[tile];
    size_t const elem = dtype == kDCN_FLOAT32 ? 4 : 2;
    size_t const lda = 32 + (elem == 4 ? 4 : 8);
    size_t const ab = size_t(t.bm) * lda * elem;
    size_t const bb = size_t(32) * (t.bn + 8) * elem;
    return t.stages * (ab + bb) + size_t(slots) * kk * t.bn * (sizeof(float4) + sizeof(int64_t));
}

/* Plan slots: the most deformable groups that two chunks (64 consecutive K rows) can touch when
 * each group spans cPerDg * kh * kw rows (1 when there is one group). */
int planSlots(DcnParams const& p)
{
    if (p.deformableGroup == 1)
        return 1;
    int64_t const rows = p.c / p.deformableGroup * int64_t(p.kh) * p.kw;
    int64_t const span = (63 + rows - 1) / rows + 1;
    return static_cast<int>(span < p.deformableGroup ? span : p.deformableGroup);
}

/* Why the fused kernel cannot run p with `tile` on d, or nullptr when it can. */
char const* unsupportedReason(DcnParams const& p, int tile, Device const& d)
{
    if (d.ccMajor < 8)
        return "needs compute capability 8.0 or newer";
    int64_t const kk = int64_t(p.kh) * p.kw;
    int64_t const kg = p.c / p.group * kk;
    int64_t const mg = p.cout / p.group;
    int64_t const pixels = p.n * p.ho * p.wo;
    if (p.h < 2 || p.w < 2)
        return "needs an input of at least 2 x 2";
    if (p.h * p.w > INT32_MAX || pixels > INT32_MAX - 4096 || kg > INT32_MAX - 64 || p.ho * p.wo > INT32_MAX)
        return "a plane, the pixel count or K exceeds 32-bit tile indexing";
    if ((mg + kTiles[tile].bm - 1) / kTiles[tile].bm > 65535 || p.group > 65535)
        return "too many channel tiles or groups for the grid";
    if (smemBytesFor(tile, p.dtype, static_cast<int>(kk), planSlots(p)) * kTiles[tile].minb
        > static_cast<size_t>(d.smemOptin))
        return "the sampling plans of this kernel size and deformable grouping do not fit in shared memory";
    return nullptr;
}

/* Modelled time of one tile choice (arbitrary units): waves of blocks x the block's time, where a
 * block overlaps sampling (per K x pixel element) with the MMAs (per K x pixel x channel). */
double modelCost(DcnParams const& p, int tile, Device const& d)
{
    TileShape const& t = kTiles[tile];
    double const kg = double(p.c / p.group) * p.kh * p.kw;
    int64_t const mg = p.cout / p.group;
    int64_t const pixels = p.n * p.ho * p.wo;
    int64_t const blocks = ((mg + t.bm - 1) / t.bm) * ((pixels + t.bn - 1) / t.bn) * p.group;
    double const waves = double((blocks + d.sms - 1) / d.sms);
    double const macCost = p.dtype == kDCN_FLOAT32 ? (p.math == kDCN_MATH_TF32 ? 2.0 : 6.0) : 1.0;
    double const sampleCost = 90.0;  // per sample, in units of one FP16 MAC of one block
    double const perBlock = t.bn * kg * (sampleCost > macCost * t.bm ? sampleCost : macCost * t.bm);
    double const fixed = 2.0 * 32 * t.bn * (sampleCost + macCost * t.bm); // pipeline fill and drain
    return waves * (perBlock + fixed);
}

template <typename T, MathKind MK, int TILE>
DcnStatus launchTile(DcnParams const& p, FusedArgs const& a, Device const& d, void const* x, void const* offset,
    void const* mask, void const* weight, void const* bias, void* out, cudaStream_t stream, char* msg, size_t msgLen)
{
    using C = TileOf<T, TILE>;
    auto const kernel = dcnFusedForwardKernel<T, MK, C>;
    static std::atomic<uint64_t> configured{0}; // one bit per device: shared-memory limit raised
    uint64_t const bit = uint64_t{1} << (d.id % kMaxDevices);
    if ((configured.load(std::memory_order_acquire) & bit) == 0)
    {
        cudaError_t const err
            = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, d.smemOptin);
        if (err != cudaSuccess)
        {
            setMsg(msg, msgLen, "fused kernel: cudaFuncSetAttribute failed: %s (%s)", cudaGetErrorName(err),
                cudaGetErrorString(err));
            return kDCN_CUDA_ERROR;
        }
        configured.fetch_or(bit, std::memory_order_acq_rel);
    }
    size_t const smem = C::smemBytes(a.kk, a.planSlots);
    dim3 const grid(static_cast<unsigned>((a.pixels + C::BN - 1) / C::BN),
        static_cast<unsigned>((a.mg + C::BM - 1) / C::BM), static_cast<unsigned>(p.group));
    kernel<<<grid, C::THREADS, smem, stream>>>(a, static_cast<T const*>(x), static_cast<T const*>(offset),
        static_cast<T const*>(mask), static_cast<T const*>(weight), static_cast<T const*>(bias),
        static_cast<T*>(out));
    cudaError_t const err = cudaGetLastError();
    if (err != cudaSuccess)
    {
        setMsg(msg, msgLen, "launch of the fused kernel (%s, tile %d: %d x %d, grid %u x %u x %u, %zu B shared) failed: %s (%s)",
            dtypeName(p.dtype), TILE, C::BM, C::BN, grid.x, grid.y, grid.z, smem, cudaGetErrorName(err),
            cudaGetErrorString(err));
        return kDCN_CUDA_ERROR;
    }
    return kDCN_SUCCESS;
}

template <typename T, MathKind MK>
DcnStatus launchMath(DcnParams const& p, int tile, FusedArgs const& a, Device const& d, void const* x,
    void const* offset, void const* mask, void const* weight, void const* bias, void* out, cudaStream_t stream,
    char* msg, size_t msgLen)
{
    switch (tile)
    {
    case 0: return launchTile<T, MK, 0>(p, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case 1: return launchTile<T, MK, 1>(p, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case 2: return launchTile<T, MK, 2>(p, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case 3: return launchTile<T, MK, 3>(p, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case 4: return launchTile<T, MK, 4>(p, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case 5: return launchTile<T, MK, 5>(p, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case 6: return launchTile<T, MK, 6>(p, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case 7: return launchTile<T, MK, 7>(p, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    default: break;
    }
    setMsg(msg, msgLen, "fused kernel: tile configuration %d does not exist (0..%d)", tile, kTileCount - 1);
    return kDCN_UNSUPPORTED;
}
static_assert(kTileCount == 8, "launchMath lists every tile");

FusedArgs makeArgs(DcnParams const& p, void const* weight)
{
    FusedArgs a{};
    int64_t const kk = int64_t(p.kh) * p.kw;
    a.hw = p.h * p.w;
    a.xImg = p.c * a.hw;
    a.offsetN = int64_t(p.deformableGroup) * 2 * kk * p.ho * p.wo;
    a.maskN = int64_t(p.deformableGroup) * kk * p.ho * p.wo;
    a.outImg = p.cout * p.ho * p.wo;
    a.h = static_cast<int32_t>(p.h);
    a.w = static_cast<int32_t>(p.w);
    a.howo = static_cast<int32_t>(p.ho * p.wo);
    a.wo = static_cast<int32_t>(p.wo);
    a.pixels = static_cast<int32_t>(p.n * p.ho * p.wo);
    a.cg = static_cast<int32_t>(p.c / p.group);
    a.mg = static_cast<int32_t>(p.cout / p.group);
    a.kk = static_cast<int32_t>(kk);
    a.kg = a.cg * a.kk;
    a.kw = p.kw;
    a.cout = static_cast<int32_t>(p.cout);
    a.strideH = p.strideH;
    a.strideW = p.strideW;
    a.padH = p.padH;
    a.padW = p.padW;
    a.dilationH = p.dilationH;
    a.dilationW = p.dilationW;
    a.planSlots = planSlots(p);
    a.withBias = p.withBias;
    size_t const elem = p.dtype == kDCN_FLOAT32 ? 4 : 2;
    a.aVec = (a.kg * elem) % 16 == 0 && reinterpret_cast<uintptr_t>(weight) % 16 == 0;
    a.deformableGroups = p.deformableGroup;
    a.divCPerDg.init(static_cast<uint32_t>(p.c / p.deformableGroup));
    a.divHoWo.init(static_cast<uint32_t>(p.ho * p.wo));
    a.divWo.init(static_cast<uint32_t>(p.wo));
    return a;
}

} // namespace

int32_t tileCount()
{
    return kTileCount;
}

DcnStatus forward(DcnParams const& p, int32_t tile, void const* x, void const* offset, void const* mask,
    void const* weight, void const* bias, void* out, cudaStream_t stream, char* msg, size_t msgLen)
{
    Device d;
    DcnStatus const q = queryDevice(d, msg, msgLen);
    if (q != kDCN_SUCCESS)
        return q;
    if (tile >= kTileCount)
    {
        setMsg(msg, msgLen, "fused kernel: tile configuration %d does not exist (0..%d)", tile, kTileCount - 1);
        return kDCN_UNSUPPORTED;
    }
    if (tile < 0)
    {
        double best = 0.0;
        for (int t = 0; t < kTileCount; ++t)
        {
            if (unsupportedReason(p, t, d) != nullptr)
                continue;
            double const cost = modelCost(p, t, d);
            if (tile < 0 || cost < best)
            {
                tile = t;
                best = cost;
            }
        }
        if (tile < 0)
        {
            setMsg(msg, msgLen, "fused kernel: %s", unsupportedReason(p, 0, d));
            return kDCN_UNSUPPORTED;
        }
    }
    else if (char const* why = unsupportedReason(p, tile, d))
    {
        setMsg(msg, msgLen, "fused kernel (tile %d): %s", tile, why);
        return kDCN_UNSUPPORTED;
    }
    FusedArgs const a = makeArgs(p, weight);
    switch (p.dtype)
    {
    case kDCN_FLOAT16:
        return launchMath<__half, MathKind::kNative>(p, tile, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case kDCN_BFLOAT16:
        return launchMath<__nv_bfloat16, MathKind::kNative>(
            p, tile, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case kDCN_FLOAT32:
        if (p.math == kDCN_MATH_TF32)
            return launchMath<float, MathKind::kTf32>(p, tile, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
        return launchMath<float, MathKind::k3xTf32>(p, tile, a, d, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    default: break;
    }
    setMsg(msg, msgLen, "fused kernel: no implementation for dtype %d", p.dtype);
    return kDCN_UNSUPPORTED;
}

} // namespace fused
} // namespace dcn
