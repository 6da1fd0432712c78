/*
 * dcnconvert core: the entry of the channel-vectorised kernel (dcnFusedNhwcKernel, whose block is
 * nhwcBlock in dcnFusedNhwc.cuh), the launch of one fused tile (launchTile) and the dispatch over
 * the tiles of a family (launchFamily), included by the instantiation units dcnFusedSm80.cu,
 * dcnFusedSm90.cu and dcnFusedSm90a.cu. Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_LAUNCH_TILE_CUH
#define DCN_FUSED_LAUNCH_TILE_CUH

#include "dcnFusedLaunch.h"
#include "dcnFusedNhwc.cuh"
#include "dcnFusedUnits.cuh"
#include "dcnInternal.h"

#include <atomic>
#include <type_traits>

namespace dcn
{
namespace fused
{

/* T: x and the weights; TF: offset, mask and bias (T for a float layer; a quantized layer's T is
 * INT8 or FP8 and its output has the type a.outType). */
template <typename T, MathKind MK, class C, typename TF = T>
__global__ void __launch_bounds__(C::THREADS, 1) dcnFusedNhwcKernel(FusedArgs const a, T const* __restrict__ xh,
    TF const* __restrict__ offset, TF const* __restrict__ mask, T const* __restrict__ wp, TF const* __restrict__ bias,
    OutOf<T>* __restrict__ out, float* __restrict__ partial, const __grid_constant__ CUtensorMap tmA)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    nhwcBlock<T, MK, C, TF>(a, xh, offset, mask, wp, bias, out, partial, tmA);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // The TMA tiles run on sm_90+ only, FP8 warp MMAs on compute_89+ (the host never offers them
    // below: builtSm90For, builtFp8MmaFor): no code for them here.
    constexpr bool kFp8 = std::is_same<T, __nv_fp8_e4m3>::value;
    if constexpr (C::TMA_A || (kFp8 && __CUDA_ARCH__ < 890))
        __trap();
    else
        nhwcBlock<T, MK, C, TF>(a, xh, offset, mask, wp, bias, out, partial, tmA);
#endif
}

using dcn::detail::setMsg;

/* The DcnDataType and DcnMath of a kernel's element type and math (builtFor). */
template <typename T>
constexpr int32_t dtypeOf()
{
    return std::is_same<T, float>::value ? kDCN_FLOAT32
        : std::is_same<T, __half>::value ? kDCN_FLOAT16
        : std::is_same<T, int8_t>::value ? kDCN_INT8
        : std::is_same<T, __nv_fp8_e4m3>::value ? kDCN_FP8E4M3
                                         : kDCN_BFLOAT16;
}
constexpr int32_t mathOf(MathKind mk)
{
    return mk == MathKind::kTf32 ? kDCN_MATH_TF32 : kDCN_MATH_ACCURATE;
}

/* T: x and the weights; TF: offset, mask and bias (a quantized layer's, see dcnFusedNhwcKernel). */
template <typename T, MathKind MK, int TILE, typename TF = T>
DcnStatus launchTile(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    constexpr TileShape S = kTiles[TILE];
    dim3 const grid(static_cast<unsigned>((a.pixels + S.bn - 1) / S.bn), static_cast<unsigned>((a.mg + S.bm - 1) / S.bm),
        static_cast<unsigned>(p.group * a.splits));
    static std::atomic<uint64_t> configured{0}; // one bit per device: shared-memory limit raised
    // What builtFor excludes has no kernel (unsupportedReason refuses it on the host first).
    if constexpr (!builtFor(S, dtypeOf<T>(), mathOf(MK)))
    {
        setMsg(msg, msgLen, "fused kernel: tile %s is not built for this element type and math", kTileNames[TILE]);
        return kDCN_UNSUPPORTED;
    }
    else if constexpr (S.nhwc)
    {
        // FP32 warpgroup tiles: 3xTF32 keeps every operand as two TF32 parts (NTile::SPLIT).
        constexpr int SPLIT = S.wgmma && MK == MathKind::k3xTf32 ? 2 : 1;
        using C
            = NTile<T, S.bm, S.bn, S.warpsM, S.cw, S.pw, S.stages, S.bk, S.asyncA, S.tmaA, S.wgmma, S.pregs, SPLIT, S.pairM>;
        // x: channel-last as given, or copied so into the workspace; the weights: prepared once
        // (dcnPrepareWeights), or permuted into the workspace by this call's prep pass.
        bool const nhwcX = p.xLayout == kDCN_LAYOUT_NHWC;
        bool const prepared = p.weightLayout == kDCN_WEIGHT_PREPARED;
        char* const ws = static_cast<char*>(q.workspace);
        T* const xhWork = reinterpret_cast<T*>(ws);
        T* const wpWork = reinterpret_cast<T*>(ws + alignUp(size_t(p.n) * p.c * p.h * p.w * sizeof(T)));
        T const* const xh = nhwcX ? static_cast<T const*>(q.x) : xhWork;
        T const* const wp = prepared
            ? reinterpret_cast<T const*>(static_cast<char const*>(q.weight) + preparedOffset(p, weightPartOf(S, p)))
            : wpWork;
        float* const partial = reinterpret_cast<float*>(ws + nhwcBytes(p));
        // The kernel reads x and the weights in 16-byte vectors (cp.async, TMA): buffers the caller
        // passes as they are must be aligned; AUTO then runs the simple kernel instead.
        if ((nhwcX && reinterpret_cast<uintptr_t>(q.x) % 16 != 0)
            || (prepared && reinterpret_cast<uintptr_t>(q.weight) % 16 != 0))
        {
            setMsg(msg, msgLen, "fused kernel: channel-last x and prepared weights must be 16-byte aligned");
            return kDCN_UNSUPPORTED;
        }
        auto const kernel = dcnFusedNhwcKernel<T, MK, C, TF>;
        // Before anything is launched, so that a failure leaves no work queued.
        DcnStatus s = configureKernel(kernel, d, configured, TILE, C::PREGS > 0 ? C::LAUNCH_REGS : 0, msg, msgLen);
        if (s != kDCN_SUCCESS)
            return s;
        CUtensorMap tmA{}; // TMA tiles: encoded before anything is launched, too
        if constexpr (S.tmaA)
        {
            DcnStatus const m = weightMap(tmA, const_cast<T*>(wp), p, a.kg, S.bm, SPLIT, msg, msgLen);
            if (m != kDCN_SUCCESS)
                return m;
        }
        bool const pdl = builtSm90For(d.ccMajor);
        PrepWork work;
        if (!nhwcX)
        {
            work.x = q.x;
            work.xh = xhWork;
        }
        if (!prepared)
        {
            work.w = q.weight;
            work.wp = wpWork;
            work.bk = weightBk(S, p);
            work.wMode = weightModeOf(S, p);
        }
        // The prep kernel too is a programmatic dependent of whatever the stream ran before: it may be
        // scheduled while that kernel's last blocks finish, and waits for it before touching memory
        // (H200: 1-4.5% less time per call on most layers).
        s = launchPrep(p, work, pdl, stream, "prep kernel", msg, msgLen);
        if (s != kDCN_SUCCESS)
            return s;
        FusedArgs at = a;
        at.waitFirst = nhwcX && prepared ? 1 : 0;
        size_t const smem = C::smemBytes(a.kk, a.planSlots);
        // Sample-sharing tiles run every launch as clusters of two channel tiles (grid.y is even:
        // unsupportedReason); the others as single blocks, or as clusters of K splits below.
        auto const launchFused = [&](dim3 gr, FusedArgs const& args) {
            if constexpr (C::PAIR)
                return launchClusterEx(pdl, kernel, gr, dim3(C::THREADS), smem, stream, dim3(1, 2, 1), args, xh,
                    q.offset, q.mask, wp, q.bias, q.out, partial, tmA);
            else
                return launchEx(pdl, kernel, gr, dim3(C::THREADS), smem, stream, args, xh, q.offset, q.mask, wp,
                    q.bias, q.out, partial, tmA);
        };
        // A split tail (c.tailSplits > 1, a.splits == 1): the first pixel tiles unsplit, then the
        // last c.tailTiles with K split, whose partial sums the reduction adds up.
        dim3 tgrid = grid;
        if (c.tailSplits > 1)
        {
            dim3 const head(grid.x - static_cast<unsigned>(c.tailTiles), grid.y, grid.z);
            if (head.x > 0)
            {
                cudaError_t const e = launchFused(head, at);
                s = launchError("fused kernel", p, TILE, msg, msgLen, e);
                if (s != kDCN_SUCCESS)
                    return s;
            }
            at.splits = c.tailSplits;
            at.tileBase = static_cast<int32_t>(head.x);
            at.pixBase = static_cast<int32_t>(head.x * S.bn);
            tgrid = dim3(static_cast<unsigned>(c.tailTiles), grid.y, static_cast<unsigned>(p.group * c.tailSplits));
        }
        // K splits: added up inside thread-block clusters (no partial sums in global memory, no
        // reduction kernel) where the tile's free stages hold the receive area and clusters pay
        // (clustersPay), or always in the forced mode (tests); else by the reduction kernel.
        int32_t const mode = splitReduceMode();
        unsigned const cz = static_cast<unsigned>(at.splits);
        bool const cluster = !C::PAIR && at.splits > 1 && mode != kSplitReduceKernel && d.ccMajor >= 9
            && builtSm90For(d.ccMajor) && C::clusterFits(at.splits)
            && clustersPay(reinterpret_cast<void const*>(kernel), d, tgrid, C::THREADS, smem, cz,
                mode == kSplitReduceCluster);
        if (at.splits > 1 && mode == kSplitReduceCluster && !cluster)
        {
            setMsg(msg, msgLen, "fused kernel: tile %s cannot add up %d K splits in thread-block clusters here",
                kTileNames[TILE], at.splits);
            return kDCN_UNSUPPORTED;
        }
        if (cluster)
        {
            FusedArgs ac = at;
            ac.clusterReduce = 1;
            cudaError_t const ce = launchClusterEx(pdl, kernel, tgrid, dim3(C::THREADS), smem, stream, dim3(1, 1, cz),
                ac, xh, q.offset, q.mask, wp, q.bias, q.out, partial, tmA);
            return launchError("fused kernel", p, TILE, msg, msgLen, ce);
        }
        cudaError_t const err = launchFused(tgrid, at);
        s = launchError("fused kernel", p, TILE, msg, msgLen, err);
        if (s != kDCN_SUCCESS || at.splits == 1)
            return s;
        return launchSplitReduce(p, at, partial, q.bias, q.out, pdl, TILE, stream, msg, msgLen);
    }
    else if constexpr (!dcn::simple::kQuantized<T>)
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

/* launchTile of c.tile when that tile belongs to family F (the others are not instantiated here). */
template <TileFamily F, typename T, MathKind MK, typename TF = T, int TILE = 0>
DcnStatus launchInFamily(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    if constexpr (TILE == kTileCount)
    {
        setMsg(msg, msgLen, "fused kernel: tile configuration %d is not in this instantiation unit", c.tile);
        return kDCN_UNSUPPORTED;
    }
    else
    {
        if constexpr (familyOf(kTiles[TILE]) == F)
        {
            if (c.tile == TILE)
                return launchTile<T, MK, TILE, TF>(p, c, a, d, q, stream, msg, msgLen);
        }
        return launchInFamily<F, T, MK, TF, TILE + 1>(p, c, a, d, q, stream, msg, msgLen);
    }
}

/* launchInFamily for p's element type and math. */
/* launchInFamily of a quantized layer: 8-bit T, FP32 or FP16 offset, mask and bias. */
template <TileFamily F, typename T>
DcnStatus launchQuantized(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    if (p.dtype == kDCN_FLOAT16)
        return launchInFamily<F, T, MathKind::kNative, __half>(p, c, a, d, q, stream, msg, msgLen);
    return launchInFamily<F, T, MathKind::kNative, float>(p, c, a, d, q, stream, msg, msgLen);
}

template <TileFamily F>
DcnStatus launchFamily(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    // Every family has 8-bit tiles (the 128-channel-chunk ones); launchTile builds no other tile for them.
    if (p.quant == kDCN_QUANT_INT8)
        return launchQuantized<F, int8_t>(p, c, a, d, q, stream, msg, msgLen);
    if (p.quant == kDCN_QUANT_FP8)
        return launchQuantized<F, __nv_fp8_e4m3>(p, c, a, d, q, stream, msg, msgLen);
    switch (p.dtype)
    {
    case kDCN_FLOAT16: return launchInFamily<F, __half, MathKind::kNative>(p, c, a, d, q, stream, msg, msgLen);
    case kDCN_BFLOAT16: return launchInFamily<F, __nv_bfloat16, MathKind::kNative>(p, c, a, d, q, stream, msg, msgLen);
    case kDCN_FLOAT32:
        if (p.math == kDCN_MATH_TF32)
            return launchInFamily<F, float, MathKind::kTf32>(p, c, a, d, q, stream, msg, msgLen);
        return launchInFamily<F, float, MathKind::k3xTf32>(p, c, a, d, q, stream, msg, msgLen);
    default: break;
    }
    setMsg(msg, msgLen, "fused kernel: no implementation for dtype %d", p.dtype);
    return kDCN_UNSUPPORTED;
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_LAUNCH_TILE_CUH
