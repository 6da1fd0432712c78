/*
 * dcnconvert core: host side of the fused tensor-core kernels: the launches (prep, GEMM, split-K
 * reduction) of the tile and split count chosen in dcnFusedChoice.cu.
 *
 * Two kernels: the channel-vectorised one (dcnFusedNhwc.cuh; needs channels per group and per
 * deformable group divisible by 32, and a workspace for the NHWC copy of x and the permuted
 * weights) and the NCHW one (dcnFusedKernel.cuh; any channel count, no workspace).
 */
#include "dcnFused.h"
#include "dcnFusedTiles.h"
#include "dcnFusedAux.cuh"
#include "dcnFusedLaunch.h"
#include "dcnInternal.h"

#include <cuda.h> // CUtensorMap and its enums only: the encoder comes from the runtime's driver entry points
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

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, cuuint64_t const*,
    cuuint64_t const*, cuuint32_t const*, cuuint32_t const*, CUtensorMapInterleave, CUtensorMapSwizzle,
    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's cuTensorMapEncodeTiled through the runtime (the core does not link libcuda), or
 * nullptr when the driver has none. */
EncodeTiledFn encodeTiled()
{
    static EncodeTiledFn const fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        cudaError_t const e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
#else
        cudaError_t const e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &q);
#endif
        if (e != cudaSuccess)
            (void) cudaGetLastError(); // not sticky; leave no error behind for the launch checks
        return e == cudaSuccess && q == cudaDriverEntryPointSuccess ? reinterpret_cast<EncodeTiledFn>(f) : nullptr;
    }();
    return fn;
}

/* The tensor map of the permuted weights wp ([parts * cout][kg] elements, rows of a group
 * consecutive; parts = 2: the big TF32 parts, then the small ones, see dcnPrepKernel) for TMA
 * tiles: boxes of 128 bytes (one K chunk) x `rows` rows, 128-byte swizzle, zeros past the last row. */
DcnStatus weightMap(CUtensorMap& map, void* wp, DcnParams const& p, int64_t kg, int rows, int parts, char* msg,
    size_t msgLen)
{
    EncodeTiledFn const fn = encodeTiled();
    if (fn == nullptr)
    {
        setMsg(msg, msgLen, "fused kernel: the driver has no cuTensorMapEncodeTiled, which the TMA tiles need");
        return kDCN_UNSUPPORTED;
    }
    if (reinterpret_cast<uintptr_t>(wp) % 16 != 0)
    {
        setMsg(msg, msgLen, "fused kernel: the TMA tiles need a workspace aligned to 16 bytes");
        return kDCN_UNSUPPORTED;
    }
    size_t const elem = elemBytes(p); // 128-byte rows: 64 two-byte or 32 four-byte elements
    cuuint64_t const dims[2] = {static_cast<cuuint64_t>(kg), static_cast<cuuint64_t>(p.cout) * parts};
    cuuint64_t const strides[1] = {static_cast<cuuint64_t>(kg) * elem};
    cuuint32_t const box[2] = {static_cast<cuuint32_t>(128 / elem), static_cast<cuuint32_t>(rows)};
    cuuint32_t const elementStrides[2] = {1, 1};
    CUresult const r = fn(&map, elem == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32 : CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, wp,
        dims, strides, box, elementStrides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
    {
        setMsg(msg, msgLen, "fused kernel: cuTensorMapEncodeTiled failed for the weights (%lld x %lld, CUresult %d)",
            static_cast<long long>(p.cout), static_cast<long long>(kg), static_cast<int>(r));
        return kDCN_CUDA_ERROR;
    }
    return kDCN_SUCCESS;
}

struct Ptrs
{
    void const *x, *offset, *mask, *weight, *bias;
    void* out;
    void* workspace;
};

template <typename T, MathKind MK, int TILE>
DcnStatus launchTile(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    constexpr TileShape S = kTiles[TILE];
    dim3 const grid(static_cast<unsigned>((a.pixels + S.bn - 1) / S.bn), static_cast<unsigned>((a.mg + S.bm - 1) / S.bm),
        static_cast<unsigned>(p.group * a.splits));
    static std::atomic<uint64_t> configured{0}; // one bit per device: shared-memory limit raised
    if constexpr (S.nhwc && S.bk > 32 && sizeof(T) == 4)
    {
        setMsg(msg, msgLen, "fused kernel: tile %d has 64-channel chunks, which take FP16/BF16 only", TILE);
        return kDCN_UNSUPPORTED;
    }
    else if constexpr (S.tmaA && S.bk * sizeof(T) != 128)
    {
        setMsg(msg, msgLen, "fused kernel: tile %d copies 128-byte weight rows by TMA, which take FP32 only", TILE);
        return kDCN_UNSUPPORTED;
    }
    // A warpgroup tile whose 3xTF32 stages (both TF32 parts of each operand) exceed the largest
    // shared memory of a 9.x block: no kernel is instantiated (it could never launch, and it spills);
    // unsupportedReason refuses it on the host first.
    else if constexpr (S.nhwc && S.wgmma && MK == MathKind::k3xTf32
        && S.stages * 2 * size_t(S.bm + S.bn) * S.bk * sizeof(T) > 227 * 1024)
    {
        setMsg(msg, msgLen, "fused kernel: tile %d does not fit in shared memory in 3xTF32 (both TF32 parts of "
            "each operand); it runs FP32 in TF32 mode only", TILE);
        return kDCN_UNSUPPORTED;
    }
    else if constexpr (S.nhwc)
    {
        // FP32 warpgroup tiles: 3xTF32 keeps every operand as two TF32 parts (NTile::SPLIT).
        constexpr int SPLIT = S.wgmma && MK == MathKind::k3xTf32 ? 2 : 1;
        using C
            = NTile<T, S.bm, S.bn, S.warpsM, S.cw, S.pw, S.stages, S.bk, S.asyncA, S.tmaA, S.wgmma, S.pregs, SPLIT>;
        T* const xh = static_cast<T*>(q.workspace);
        T* const wp = reinterpret_cast<T*>(static_cast<char*>(q.workspace) + alignUp(size_t(p.n) * p.c * p.h * p.w * sizeof(T)));
        float* const partial = reinterpret_cast<float*>(static_cast<char*>(q.workspace) + nhwcBytes(p));
        int64_t const hw = p.h * p.w;
        int64_t const xBlocks = p.n * ((p.c + kPrepTile - 1) / kPrepTile) * ((hw + kPrepTile - 1) / kPrepTile);
        int64_t const segments = p.cout * (p.c / p.group / S.bk); // (output channel, channel block) pairs
        int32_t const segLen = S.bk * p.kh * p.kw;
        int32_t const segsPerBlock = segLen < kPrepSegment ? kPrepSegment / segLen : 1;
        int64_t const blocks = xBlocks + (segments + segsPerBlock - 1) / segsPerBlock;
        if (blocks > INT32_MAX)
        {
            setMsg(msg, msgLen, "fused kernel: the input is too large for the prep kernel's grid");
            return kDCN_UNSUPPORTED;
        }
        auto const kernel = dcnFusedNhwcKernel<T, MK, C>;
        // Before anything is launched, so that a failure leaves no work queued.
        DcnStatus s = configureKernel(kernel, d, configured, TILE, C::PREGS > 0 ? C::LAUNCH_REGS : 0, msg, msgLen);
        if (s != kDCN_SUCCESS)
            return s;
        CUtensorMap tmA{}; // TMA tiles: encoded before anything is launched, too
        if constexpr (S.tmaA)
        {
            DcnStatus const m = weightMap(tmA, wp, p, a.kg, S.bm, SPLIT, msg, msgLen);
            if (m != kDCN_SUCCESS)
                return m;
        }
        bool const pdl = builtSm90For(d.ccMajor);
        // The prep kernel too is a programmatic dependent of whatever the stream ran before: it may be
        // scheduled while that kernel's last blocks finish, and waits for it before touching memory
        // (H200: 1-4.5% less time per call on most layers, R50-c3 FP16 3% more).
        cudaError_t const pe = launchEx(pdl, dcnPrepKernel<T>, dim3(static_cast<unsigned>(blocks)), dim3(256), 0,
            stream, static_cast<T const*>(q.x), static_cast<T const*>(q.weight), xh, wp, p.n,
            static_cast<int32_t>(p.c), hw, xBlocks, segments, segsPerBlock, p.kh * p.kw, S.bk == 64 ? 6 : 5,
            reinterpret_cast<uintptr_t>(q.weight) % 16 == 0 ? 1 : 0,
            sizeof(T) == 2 && hw % 8 == 0 && reinterpret_cast<uintptr_t>(q.x) % 16 == 0
                    && reinterpret_cast<uintptr_t>(xh) % 16 == 0
                ? 1
                : 0,
            !(S.wgmma && sizeof(T) == 4) ? kWeightCopy : SPLIT == 2 ? kWeightSplit : kWeightTf32,
            static_cast<int64_t>(p.cout) * a.kg);
        s = launchError("prep kernel", p, TILE, msg, msgLen, pe);
        if (s != kDCN_SUCCESS)
            return s;
        size_t const smem = C::smemBytes(a.kk, a.planSlots);
        // A split tail (c.tailSplits > 1, a.splits == 1): the first pixel tiles unsplit, then the
        // last c.tailTiles with K split, whose partial sums the reduction adds up.
        FusedArgs at = a;
        dim3 tgrid = grid;
        if (c.tailSplits > 1)
        {
            dim3 const head(grid.x - static_cast<unsigned>(c.tailTiles), grid.y, grid.z);
            if (head.x > 0)
            {
                cudaError_t const e = launchEx(pdl, kernel, head, dim3(C::THREADS), smem, stream, a, xh, q.offset,
                    q.mask, wp, q.bias, q.out, partial, tmA);
                s = launchError("fused kernel", p, TILE, msg, msgLen, e);
                if (s != kDCN_SUCCESS)
                    return s;
            }
            at.splits = c.tailSplits;
            at.tileBase = static_cast<int32_t>(head.x);
            at.pixBase = static_cast<int32_t>(head.x * S.bn);
            tgrid = dim3(static_cast<unsigned>(c.tailTiles), grid.y, static_cast<unsigned>(p.group * c.tailSplits));
        }
        cudaError_t err = launchEx(pdl, kernel, tgrid, dim3(C::THREADS), smem, stream, at, xh, q.offset, q.mask, wp,
            q.bias, q.out, partial, tmA);
        s = launchError("fused kernel", p, TILE, msg, msgLen, err);
        if (s != kDCN_SUCCESS || at.splits == 1)
            return s;
        int64_t const len = a.pixels - at.pixBase;
        dim3 const rgrid(static_cast<unsigned>(((len + 3) / 4 * int64_t(p.cout) + 255) / 256));
        err = launchEx(pdl, dcnSplitReduceKernel<T>, rgrid, dim3(256), 0, stream, at, partial, q.bias, q.out);
        return launchError("split-K reduction", p, TILE, msg, msgLen, err);
    }
    else
    {
        using C = Tile<T, S.bm, S.bn, S.warpsM, S.cw, S.pw, S.stages, 1>;
        (void)c; // no K split, no split tail
        auto const kernel = dcnFusedForwardKernel<T, MK, C>;
        DcnStatus const s = configureKernel(kernel, d, configured, TILE, 0, msg, msgLen);
        if (s != kDCN_SUCCESS)
            return s;
        kernel<<<grid, C::THREADS, C::smemBytes(a.kk, a.planSlots), stream>>>(a, static_cast<T const*>(q.x),
            static_cast<T const*>(q.offset), static_cast<T const*>(q.mask), static_cast<T const*>(q.weight),
            static_cast<T const*>(q.bias), static_cast<T*>(q.out));
        return launchError("fused kernel", p, TILE, msg, msgLen);
    }
}

template <typename T, MathKind MK>
DcnStatus launchMath(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    switch (c.tile)
    {
    case 0: return launchTile<T, MK, 0>(p, c, a, d, q, stream, msg, msgLen);
    case 1: return launchTile<T, MK, 1>(p, c, a, d, q, stream, msg, msgLen);
    case 2: return launchTile<T, MK, 2>(p, c, a, d, q, stream, msg, msgLen);
    case 3: return launchTile<T, MK, 3>(p, c, a, d, q, stream, msg, msgLen);
    case 4: return launchTile<T, MK, 4>(p, c, a, d, q, stream, msg, msgLen);
    case 5: return launchTile<T, MK, 5>(p, c, a, d, q, stream, msg, msgLen);
    case 6: return launchTile<T, MK, 6>(p, c, a, d, q, stream, msg, msgLen);
    case 7: return launchTile<T, MK, 7>(p, c, a, d, q, stream, msg, msgLen);
    case 8: return launchTile<T, MK, 8>(p, c, a, d, q, stream, msg, msgLen);
    case 9: return launchTile<T, MK, 9>(p, c, a, d, q, stream, msg, msgLen);
    case 10: return launchTile<T, MK, 10>(p, c, a, d, q, stream, msg, msgLen);
    case 11: return launchTile<T, MK, 11>(p, c, a, d, q, stream, msg, msgLen);
    case 12: return launchTile<T, MK, 12>(p, c, a, d, q, stream, msg, msgLen);
    case 13: return launchTile<T, MK, 13>(p, c, a, d, q, stream, msg, msgLen);
    case 14: return launchTile<T, MK, 14>(p, c, a, d, q, stream, msg, msgLen);
    case 15: return launchTile<T, MK, 15>(p, c, a, d, q, stream, msg, msgLen);
    case 16: return launchTile<T, MK, 16>(p, c, a, d, q, stream, msg, msgLen);
    case 17: return launchTile<T, MK, 17>(p, c, a, d, q, stream, msg, msgLen);
    case 18: return launchTile<T, MK, 18>(p, c, a, d, q, stream, msg, msgLen);
    case 19: return launchTile<T, MK, 19>(p, c, a, d, q, stream, msg, msgLen);
    case 20: return launchTile<T, MK, 20>(p, c, a, d, q, stream, msg, msgLen);
    case 21: return launchTile<T, MK, 21>(p, c, a, d, q, stream, msg, msgLen);
    case 22: return launchTile<T, MK, 22>(p, c, a, d, q, stream, msg, msgLen);
    case 23: return launchTile<T, MK, 23>(p, c, a, d, q, stream, msg, msgLen);
    case 24: return launchTile<T, MK, 24>(p, c, a, d, q, stream, msg, msgLen);
    case 25: return launchTile<T, MK, 25>(p, c, a, d, q, stream, msg, msgLen);
    case 26: return launchTile<T, MK, 26>(p, c, a, d, q, stream, msg, msgLen);
    case 27: return launchTile<T, MK, 27>(p, c, a, d, q, stream, msg, msgLen);
    case 28: return launchTile<T, MK, 28>(p, c, a, d, q, stream, msg, msgLen);
    case 29: return launchTile<T, MK, 29>(p, c, a, d, q, stream, msg, msgLen);
    default: break;
    }
    setMsg(msg, msgLen, "fused kernel: tile configuration %d does not exist (0..%d)", c.tile, kTileCount - 1);
    return kDCN_UNSUPPORTED;
}
static_assert(kTileCount == 30, "launchMath lists every tile");

FusedArgs makeArgs(DcnParams const& p, void const* weight, TileShape const& t, int splits)
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
    a.planSlots = planSlots(p, t);
    a.splits = splits;
    a.withBias = p.withBias;
    a.aVec = t.nhwc || ((a.kg * elemBytes(p)) % 16 == 0 && reinterpret_cast<uintptr_t>(weight) % 16 == 0);
    a.divCPerDg.init(static_cast<uint32_t>(p.c / p.deformableGroup));
    a.divHoWo.init(static_cast<uint32_t>(p.ho * p.wo));
    a.divWo.init(static_cast<uint32_t>(p.wo));
    return a;
}

} // namespace

DcnStatus forward(DcnParams const& p, int32_t tile, int32_t splits, int32_t tailSplits, void const* x,
    void const* offset, void const* mask, void const* weight, void const* bias, void* out, void* workspace, size_t workspaceSize,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    Device d;
    DcnStatus const q = queryDevice(d, msg, msgLen);
    if (q != kDCN_SUCCESS)
        return q;
    d.tma = builtSm90For(d.ccMajor) && encodeTiled() != nullptr;
    d.wgmma = d.tma && builtWgmmaFor(d.ccMajor);
    if (tile >= kTileCount)
    {
        setMsg(msg, msgLen, "fused kernel: tile configuration %d does not exist (0..%d)", tile, kTileCount - 1);
        return kDCN_UNSUPPORTED;
    }
    if (workspace == nullptr)
        workspaceSize = 0;
    Choice c;
    if (tile < 0)
    {
        DcnStatus const s = choose(p, d, workspaceSize, c, msg, msgLen);
        if (s != kDCN_SUCCESS)
            return s;
    }
    else
    {
        c.tile = tile;
        c.splits = splits < 1 ? 1 : splits;
        if (char const* why = unsupportedReason(p, c.tile, c.splits, d, workspaceSize))
        {
            setMsg(msg, msgLen, "fused kernel (tile %d, %d K splits): %s", c.tile, c.splits, why);
            return kDCN_UNSUPPORTED;
        }
        if (tailSplits > 1)
        {
            c = forcedTail(p, c.tile, tailSplits, workspaceSize);
            if (c.tailSplits < 2)
            {
                char const* const why = kTiles[tile].nhwc ? "the tail's K splits do not fit the workspace"
                                                          : "only the channel-vectorised tiles split K";
                setMsg(msg, msgLen, "fused kernel (tile %d, split tail of %d K splits): %s", tile, tailSplits, why);
                return kDCN_UNSUPPORTED;
            }
        }
    }
    FusedArgs const a = makeArgs(p, weight, kTiles[c.tile], c.splits);
    Ptrs const ptrs{x, offset, mask, weight, bias, out, workspace};
    switch (p.dtype)
    {
    case kDCN_FLOAT16: return launchMath<__half, MathKind::kNative>(p, c, a, d, ptrs, stream, msg, msgLen);
    case kDCN_BFLOAT16: return launchMath<__nv_bfloat16, MathKind::kNative>(p, c, a, d, ptrs, stream, msg, msgLen);
    case kDCN_FLOAT32:
        if (p.math == kDCN_MATH_TF32)
            return launchMath<float, MathKind::kTf32>(p, c, a, d, ptrs, stream, msg, msgLen);
        return launchMath<float, MathKind::k3xTf32>(p, c, a, d, ptrs, stream, msg, msgLen);
    default: break;
    }
    setMsg(msg, msgLen, "fused kernel: no implementation for dtype %d", p.dtype);
    return kDCN_UNSUPPORTED;
}

} // namespace fused
} // namespace dcn
