/*
 * dcnconvert core: host side of the fused tensor-core kernels: support checks, tile
 * configurations, the choice of one, the workspace, and the launches.
 *
 * Two kernels: the channel-vectorised one (dcnFusedNhwc.cuh; needs channels per group and per
 * deformable group divisible by 32, and a workspace for the NHWC copy of x and the permuted
 * weights) and the NCHW one (dcnFusedKernel.cuh; any channel count, no workspace).
 */
#include "dcnFused.h"
#include "dcnFusedNhwc.cuh"
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
 * channels), producer warps, pipeline stages; nhwc selects the kernel. */
struct TileShape
{
    int bm, bn, warpsM, cw, pw, stages;
    bool nhwc;
};
constexpr TileShape kTiles[] = {
    {128, 64, 4, 8, 8, 4, true},   // 0
    {128, 128, 2, 8, 8, 4, true},  // 1
    {64, 128, 2, 8, 8, 4, true},   // 2
    {256, 64, 4, 8, 8, 3, true},   // 3: all channels of a 256-channel group at once
    {64, 64, 2, 4, 8, 4, true},    // 4
    {128, 32, 4, 4, 4, 4, true},   // 5: narrow pixel tiles for small batch-1 layers
    {256, 32, 8, 8, 4, 3, true},   // 6
    {128, 64, 2, 4, 8, 4, true},   // 7: 4 consumer warps
    {128, 64, 4, 8, 8, 4, false},  // 8: NCHW kernel (any channel count)
    {64, 64, 2, 4, 8, 4, false},   // 9
};
constexpr int kTileCount = sizeof(kTiles) / sizeof(kTiles[0]);
constexpr int kMaxDevices = 64;
constexpr size_t kAlign = 256;

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

size_t elemBytes(DcnParams const& p)
{
    return p.dtype == kDCN_FLOAT32 ? 4 : 2;
}

/* Plan slots: the most deformable groups that `chunks` chunks in flight (chunks x 32 consecutive K
 * rows) can touch when each group spans cPerDg * kh * kw rows (1 when there is one group). The
 * NCHW kernel has 2 chunks in flight, the channel-vectorised one NTile::PD + 1. */
int planSlots(DcnParams const& p, bool nhwc)
{
    if (p.deformableGroup == 1)
        return 1;
    int const chunks = nhwc ? (p.dtype == kDCN_FLOAT32 ? 3 : 6) : 2;
    int64_t const rows = p.c / p.deformableGroup * int64_t(p.kh) * p.kw;
    int64_t const span = (chunks * 32 - 1 + rows - 1) / rows + 1;
    return static_cast<int>(span < p.deformableGroup ? span : p.deformableGroup);
}

size_t smemBytesFor(int tile, DcnParams const& p)
{
    TileShape const& t = kTiles[tile];
    size_t const elem = elemBytes(p);
    size_t const lda = 32 + (elem == 4 ? 4 : 8);
    size_t const ab = size_t(t.bm) * lda * elem;
    size_t const bb = t.nhwc ? size_t(t.bn) * lda * elem : size_t(32) * (t.bn + 8) * elem;
    return t.stages * (ab + bb) + size_t(planSlots(p, t.nhwc)) * p.kh * p.kw * t.bn * (sizeof(float4) + sizeof(int64_t));
}

/* Whether the channel-vectorised kernel applies (device-independent: it sizes the workspace). */
bool nhwcApplies(DcnParams const& p)
{
    return (p.c / p.group) % 32 == 0 && (p.c / p.deformableGroup) % 32 == 0;
}

size_t alignUp(size_t v)
{
    return (v + kAlign - 1) / kAlign * kAlign;
}

/* Why the fused kernels cannot run p with `tile` on d, or nullptr when they can. */
char const* unsupportedReason(DcnParams const& p, int tile, Device const& d, size_t workspaceSize)
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
    if ((mg + kTiles[tile].bm - 1) / kTiles[tile].bm > 65535 || p.group > 65535)
        return "too many channel tiles or groups for the grid";
    if (kTiles[tile].nhwc)
    {
        if (!nhwcApplies(p))
            return "the channel-vectorised tiles need channels per group and per deformable group divisible by 32";
        if (workspaceSize < workspaceBytes(p))
            return "the workspace is smaller than dcnWorkspaceSize()";
    }
    if (smemBytesFor(tile, p) > static_cast<size_t>(d.smemOptin))
        return "the sampling plans of this kernel size and deformable grouping do not fit in shared memory";
    return nullptr;
}

/* The tiles to try for p, best first: a rule fitted to the H200 measurements of
 * bench/fused_tiles.py (docs/benchmarks.md): 64 x 64 when a group has at most 64 output channels;
 * 128 x 32 when 128 x 64 tiles would not fill the GPU; 256 x 64 (FP16/BF16) when 256 output
 * channels and enough pixel tiles; else 128 x 64 with 4 consumer warps; NCHW tiles last. */
int preferredTiles(DcnParams const& p, Device const& d, int (&order)[kTileCount])
{
    int64_t const mg = p.cout / p.group;
    int64_t const pixelTiles64 = (p.n * p.ho * p.wo + 63) / 64;
    int64_t const blocks128 = (mg + 127) / 128 * pixelTiles64 * p.group;
    int first;
    if (mg <= 64)
        first = 4;
    else if (blocks128 < d.sms)
        first = 5;
    else if (p.dtype != kDCN_FLOAT32 && mg >= 256 && pixelTiles64 * p.group * 4 >= int64_t(d.sms) * 3)
        first = 3;
    else
        first = 7;
    int n = 0;
    order[n++] = first;
    int const rest[] = {7, 0, 4, 5, 3, 1, 2, 6, mg <= 64 ? 9 : 8, mg <= 64 ? 8 : 9};
    for (int t : rest)
    {
        bool seen = false;
        for (int i = 0; i < n; ++i)
            seen = seen || order[i] == t;
        if (!seen)
            order[n++] = t;
    }
    return n;
}

template <class K>
DcnStatus raiseSmemLimit(K kernel, Device const& d, std::atomic<uint64_t>& configured, char* msg, size_t msgLen)
{
    uint64_t const bit = uint64_t{1} << (d.id % kMaxDevices);
    if ((configured.load(std::memory_order_acquire) & bit) != 0)
        return kDCN_SUCCESS;
    cudaError_t const err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, d.smemOptin);
    if (err != cudaSuccess)
    {
        setMsg(msg, msgLen, "fused kernel: cudaFuncSetAttribute failed: %s (%s)", cudaGetErrorName(err),
            cudaGetErrorString(err));
        return kDCN_CUDA_ERROR;
    }
    configured.fetch_or(bit, std::memory_order_acq_rel);
    return kDCN_SUCCESS;
}

DcnStatus launchError(char const* what, DcnParams const& p, int tile, char* msg, size_t msgLen)
{
    cudaError_t const err = cudaGetLastError();
    if (err == cudaSuccess)
        return kDCN_SUCCESS;
    setMsg(msg, msgLen, "launch of the %s (%s, tile %d: %d x %d) failed: %s (%s)", what, dtypeName(p.dtype), tile,
        kTiles[tile].bm, kTiles[tile].bn, cudaGetErrorName(err), cudaGetErrorString(err));
    return kDCN_CUDA_ERROR;
}

struct Ptrs
{
    void const *x, *offset, *mask, *weight, *bias;
    void* out;
    void* workspace;
};

template <typename T, MathKind MK, int TILE>
DcnStatus launchTile(DcnParams const& p, FusedArgs const& a, Device const& d, Ptrs const& q, cudaStream_t stream,
    char* msg, size_t msgLen)
{
    constexpr TileShape S = kTiles[TILE];
    dim3 const grid(static_cast<unsigned>((a.pixels + S.bn - 1) / S.bn), static_cast<unsigned>((a.mg + S.bm - 1) / S.bm),
        static_cast<unsigned>(p.group));
    static std::atomic<uint64_t> configured{0}; // one bit per device: shared-memory limit raised
    if constexpr (S.nhwc)
    {
        using C = NTile<T, S.bm, S.bn, S.warpsM, S.cw, S.pw, S.stages>;
        T* const xh = static_cast<T*>(q.workspace);
        T* const wp = reinterpret_cast<T*>(static_cast<char*>(q.workspace) + alignUp(size_t(p.n) * p.c * p.h * p.w * sizeof(T)));
        int64_t const hw = p.h * p.w;
        int64_t const xBlocks = p.n * ((p.c + 31) / 32) * ((hw + 31) / 32);
        int64_t const wCount = p.cout * (p.c / p.group) * p.kh * p.kw;
        int64_t const blocks = xBlocks + (wCount + 255) / 256;
        if (blocks > INT32_MAX)
        {
            setMsg(msg, msgLen, "fused kernel: the input is too large for the prep kernel's grid");
            return kDCN_UNSUPPORTED;
        }
        dcnPrepKernel<T><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(static_cast<T const*>(q.x),
            static_cast<T const*>(q.weight), xh, wp, p.n, static_cast<int32_t>(p.c), hw, xBlocks, wCount,
            static_cast<int32_t>(p.c / p.group), p.kh * p.kw);
        DcnStatus s = launchError("prep kernel", p, TILE, msg, msgLen);
        if (s != kDCN_SUCCESS)
            return s;
        auto const kernel = dcnFusedNhwcKernel<T, MK, C>;
        s = raiseSmemLimit(kernel, d, configured, msg, msgLen);
        if (s != kDCN_SUCCESS)
            return s;
#ifdef DCN_FUSED_PREP_ONLY // experiments: time the prep kernel alone
        return kDCN_SUCCESS;
#endif
        kernel<<<grid, C::THREADS, C::smemBytes(a.kk, a.planSlots), stream>>>(a, xh, static_cast<T const*>(q.offset),
            static_cast<T const*>(q.mask), wp, static_cast<T const*>(q.bias), static_cast<T*>(q.out));
        return launchError("fused kernel", p, TILE, msg, msgLen);
    }
    else
    {
        using C = Tile<T, S.bm, S.bn, S.warpsM, S.cw, S.pw, S.stages, 1>;
        auto const kernel = dcnFusedForwardKernel<T, MK, C>;
        DcnStatus const s = raiseSmemLimit(kernel, d, configured, msg, msgLen);
        if (s != kDCN_SUCCESS)
            return s;
        kernel<<<grid, C::THREADS, C::smemBytes(a.kk, a.planSlots), stream>>>(a, static_cast<T const*>(q.x),
            static_cast<T const*>(q.offset), static_cast<T const*>(q.mask), static_cast<T const*>(q.weight),
            static_cast<T const*>(q.bias), static_cast<T*>(q.out));
        return launchError("fused kernel", p, TILE, msg, msgLen);
    }
}

template <typename T, MathKind MK>
DcnStatus launchMath(DcnParams const& p, int tile, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    switch (tile)
    {
    case 0: return launchTile<T, MK, 0>(p, a, d, q, stream, msg, msgLen);
    case 1: return launchTile<T, MK, 1>(p, a, d, q, stream, msg, msgLen);
    case 2: return launchTile<T, MK, 2>(p, a, d, q, stream, msg, msgLen);
    case 3: return launchTile<T, MK, 3>(p, a, d, q, stream, msg, msgLen);
    case 4: return launchTile<T, MK, 4>(p, a, d, q, stream, msg, msgLen);
    case 5: return launchTile<T, MK, 5>(p, a, d, q, stream, msg, msgLen);
    case 6: return launchTile<T, MK, 6>(p, a, d, q, stream, msg, msgLen);
    case 7: return launchTile<T, MK, 7>(p, a, d, q, stream, msg, msgLen);
    case 8: return launchTile<T, MK, 8>(p, a, d, q, stream, msg, msgLen);
    case 9: return launchTile<T, MK, 9>(p, a, d, q, stream, msg, msgLen);
    default: break;
    }
    setMsg(msg, msgLen, "fused kernel: tile configuration %d does not exist (0..%d)", tile, kTileCount - 1);
    return kDCN_UNSUPPORTED;
}
static_assert(kTileCount == 10, "launchMath lists every tile");

FusedArgs makeArgs(DcnParams const& p, void const* weight, bool nhwc)
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
    a.c = static_cast<int32_t>(p.c);
    a.strideH = p.strideH;
    a.strideW = p.strideW;
    a.padH = p.padH;
    a.padW = p.padW;
    a.dilationH = p.dilationH;
    a.dilationW = p.dilationW;
    a.deformableGroups = p.deformableGroup;
    a.planSlots = planSlots(p, nhwc);
    a.withBias = p.withBias;
    a.aVec = nhwc || ((a.kg * elemBytes(p)) % 16 == 0 && reinterpret_cast<uintptr_t>(weight) % 16 == 0);
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

size_t workspaceBytes(DcnParams const& p)
{
    if (!nhwcApplies(p))
        return 0;
    size_t const elem = elemBytes(p);
    return alignUp(size_t(p.n) * p.c * p.h * p.w * elem) + alignUp(size_t(p.cout) * (p.c / p.group) * p.kh * p.kw * elem);
}

DcnStatus forward(DcnParams const& p, int32_t tile, void const* x, void const* offset, void const* mask,
    void const* weight, void const* bias, void* out, void* workspace, size_t workspaceSize, cudaStream_t stream,
    char* msg, size_t msgLen)
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
    if (workspace == nullptr)
        workspaceSize = 0;
    if (tile < 0)
    {
        int order[kTileCount];
        int const count = preferredTiles(p, d, order);
        char const* why = nullptr;
        for (int i = 0; i < count && tile < 0; ++i)
        {
            char const* const reason = unsupportedReason(p, order[i], d, workspaceSize);
            if (reason == nullptr)
                tile = order[i];
            else if (why == nullptr)
                why = reason;
        }
        if (tile < 0)
        {
            setMsg(msg, msgLen, "fused kernel: %s", why);
            return kDCN_UNSUPPORTED;
        }
    }
    else if (char const* why = unsupportedReason(p, tile, d, workspaceSize))
    {
        setMsg(msg, msgLen, "fused kernel (tile %d): %s", tile, why);
        return kDCN_UNSUPPORTED;
    }
    FusedArgs const a = makeArgs(p, weight, kTiles[tile].nhwc);
    Ptrs const ptrs{x, offset, mask, weight, bias, out, workspace};
    switch (p.dtype)
    {
    case kDCN_FLOAT16: return launchMath<__half, MathKind::kNative>(p, tile, a, d, ptrs, stream, msg, msgLen);
    case kDCN_BFLOAT16: return launchMath<__nv_bfloat16, MathKind::kNative>(p, tile, a, d, ptrs, stream, msg, msgLen);
    case kDCN_FLOAT32:
        if (p.math == kDCN_MATH_TF32)
            return launchMath<float, MathKind::kTf32>(p, tile, a, d, ptrs, stream, msg, msgLen);
        return launchMath<float, MathKind::k3xTf32>(p, tile, a, d, ptrs, stream, msg, msgLen);
    default: break;
    }
    setMsg(msg, msgLen, "fused kernel: no implementation for dtype %d", p.dtype);
    return kDCN_UNSUPPORTED;
}

} // namespace fused
} // namespace dcn
