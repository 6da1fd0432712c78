/*
 * dcnconvert core: host side of the fused tensor-core kernels: the forward of the tile and split
 * count chosen in dcnFusedChoice.cu (launched by the instantiation units, dcnFusedUnits.cuh), the
 * prep pass and split-K reduction every channel-vectorised tile uses, and the one-time preparation
 * of constant weights.
 *
 * Two kernels: the channel-vectorised one (dcnFusedNhwc.cuh; needs channels per group and per
 * deformable group divisible by 32; reads x channel-last and the weights in its K order, both made
 * by the prep pass in the workspace unless x comes channel-last and the weights prepared) and the
 * NCHW one (dcnFusedKernel.cuh; any channel count, no workspace).
 */
#include "dcnFused.h"
#include "dcnFusedTiles.h"
#include "dcnFusedAux.cuh"
#include "dcnFusedLaunch.h"
#include "dcnFusedUnits.cuh"
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

/* f(Elem<T>{}) for the element type T of DcnDataType dtype: byFloat for the float types (FP32 for
 * anything but FP16/BF16), byElement also for the 8-bit types, which the prep pass moves as bytes. */
template <typename T>
struct Elem
{
    using type = T;
};
template <class F>
cudaError_t byFloat(int32_t dtype, F&& f)
{
    switch (dtype)
    {
    case kDCN_FLOAT16: return f(Elem<__half>{});
    case kDCN_BFLOAT16: return f(Elem<__nv_bfloat16>{});
    default: return f(Elem<float>{});
    }
}
template <class F>
cudaError_t byElement(int32_t dtype, F&& f)
{
    switch (dtype)
    {
    case kDCN_FLOAT16: return f(Elem<__half>{});
    case kDCN_BFLOAT16: return f(Elem<__nv_bfloat16>{});
    case kDCN_INT8:
    case kDCN_FP8E4M3: return f(Elem<uint8_t>{});
    default: return f(Elem<float>{});
    }
}

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
    if (p.quant != kDCN_QUANT_NONE)
    {
        // The weight scales follow the quantized values in the OIHW buffer, which also leads the
        // prepared weights.
        a.xScale = p.xScale;
        a.outScale = p.outScale;
        a.outType = p.outType;
        a.wScale = reinterpret_cast<float const*>(static_cast<char const*>(weight) + quantScalesOffset(p));
        a.kpPair = t.nhwc && t.bk == 128 && kpPairApplies(p) ? 1 : 0;
    }
    return a;
}

} // namespace

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
    size_t const elem = elemBytes(p); // 128-byte rows: 128 one-byte, 64 two-byte or 32 four-byte elements
    cuuint64_t const dims[2] = {static_cast<cuuint64_t>(kg), static_cast<cuuint64_t>(p.cout) * parts};
    cuuint64_t const strides[1] = {static_cast<cuuint64_t>(kg) * elem};
    cuuint32_t const box[2] = {static_cast<cuuint32_t>(128 / elem), static_cast<cuuint32_t>(rows)};
    cuuint32_t const elementStrides[2] = {1, 1};
    CUtensorMapDataType const type = elem == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32
        : elem == 2                            ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                               : CU_TENSOR_MAP_DATA_TYPE_UINT8;
    CUresult const r = fn(&map, type, 2, wp,
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


DcnStatus launchPrep(DcnParams const& p, PrepWork const& w, bool pdl, cudaStream_t stream, char const* what,
    char* msg, size_t msgLen)
{
    size_t const elem = elemBytes(p);
    int64_t const hw = p.h * p.w;
    int64_t const xBlocks
        = w.xh != nullptr ? p.n * ((p.c + kPrepTile - 1) / kPrepTile) * ((hw + kPrepTile - 1) / kPrepTile) : 0;
    int64_t const segments = w.wp != nullptr ? p.cout * (p.c / p.group / w.bk) : 0; // (output channel, channel block)
    int32_t const segLen = w.bk * p.kh * p.kw;
    int32_t const segsPerBlock = segLen < kPrepSegment ? kPrepSegment / segLen : 1;
    int64_t const blocks = xBlocks + (segments + segsPerBlock - 1) / segsPerBlock;
    if (blocks == 0)
        return kDCN_SUCCESS;
    if (blocks > INT32_MAX || p.c > INT32_MAX)
    {
        setMsg(msg, msgLen, "fused kernel: the input is too large for the %s's grid", what);
        return kDCN_UNSUPPORTED;
    }
    int32_t const wVec = reinterpret_cast<uintptr_t>(w.w) % 16 == 0 ? 1 : 0;
    // 16-byte x vectors: 8 pixels of a channel row loaded, 8 channels of a pixel stored.
    int32_t const xVec = elem == 2 && hw % 8 == 0 && p.c % 8 == 0 && reinterpret_cast<uintptr_t>(w.x) % 16 == 0
            && reinterpret_cast<uintptr_t>(w.xh) % 16 == 0
        ? 1
        : 0;
    int32_t const bkShift = w.bk == 128 ? 7 : w.bk == 64 ? 6 : 5;
    int64_t const wLo = static_cast<int64_t>(p.cout) * (p.c / p.group) * p.kh * p.kw;
    dim3 const grid(static_cast<unsigned>(blocks));
    cudaError_t err = byElement(kernelType(p), [&](auto e) {
        using T = typename decltype(e)::type;
        return launchEx(pdl, dcnPrepKernel<T>, grid, dim3(256), 0, stream, static_cast<T const*>(w.x),
            static_cast<T const*>(w.w), static_cast<T*>(w.xh), static_cast<T*>(w.wp), p.n, static_cast<int32_t>(p.c),
            hw, xBlocks, segments, segsPerBlock, p.kh * p.kw, bkShift, wVec, xVec, w.wMode, wLo);
    });
    cudaError_t const last = cudaGetLastError();
    if (err == cudaSuccess)
        err = last;
    if (err != cudaSuccess)
    {
        setMsg(msg, msgLen, "launch of the %s (%s) failed: %s (%s)", what, dtypeName(p.dtype), cudaGetErrorName(err),
            cudaGetErrorString(err));
        return kDCN_CUDA_ERROR;
    }
    return kDCN_SUCCESS;
}

DcnStatus launchSplitReduce(DcnParams const& p, FusedArgs const& at, float const* partial, void const* bias,
    void* out, bool pdl, int tile, cudaStream_t stream, char* msg, size_t msgLen)
{
    int64_t const len = at.pixels - at.pixBase;
    dim3 const rgrid(static_cast<unsigned>(((len + 3) / 4 * int64_t(p.cout) + 255) / 256));
    bool const qout = p.quant != kDCN_QUANT_NONE && p.outType != p.dtype; // a quantized output
    cudaError_t const err = byFloat(p.dtype, [&](auto e) {
        using T = typename decltype(e)::type;
        return qout ? launchEx(pdl, dcnSplitReduceKernel<T, true>, rgrid, dim3(256), 0, stream, at, partial,
                          static_cast<T const*>(bias), out)
                    : launchEx(pdl, dcnSplitReduceKernel<T>, rgrid, dim3(256), 0, stream, at, partial,
                          static_cast<T const*>(bias), out);
    });
    return launchError("split-K reduction", p, tile, msg, msgLen, err);
}

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
    Ptrs ptrs{x, offset, mask, weight, bias, out, workspace};
    if (!kTiles[c.tile].nhwc && p.xLayout == kDCN_LAYOUT_NHWC)
    {
        // The NCHW kernel reads x as NCHW: a copy in the workspace (dcnWorkspaceSize keeps room).
        if (workspaceSize < alignUp(size_t(p.n) * p.c * p.h * p.w * elemBytes(p)))
        {
            setMsg(msg, msgLen, "fused kernel: the workspace is smaller than dcnWorkspaceSize()");
            return kDCN_UNSUPPORTED;
        }
        DcnStatus const s = toNchw(p, x, workspace, stream, msg, msgLen);
        if (s != kDCN_SUCCESS)
            return s;
        ptrs.x = workspace;
    }
    switch (familyOf(kTiles[c.tile]))
    {
    case TileFamily::kSm80: return launchSm80Tile(p, c, a, d, ptrs, stream, msg, msgLen);
    case TileFamily::kSm90: return launchSm90Tile(p, c, a, d, ptrs, stream, msg, msgLen);
    case TileFamily::kSm90a: return launchSm90aTile(p, c, a, d, ptrs, stream, msg, msgLen);
    }
    setMsg(msg, msgLen, "fused kernel: tile configuration %d has no instantiation unit", c.tile);
    return kDCN_UNSUPPORTED;
}

DcnStatus toNchw(DcnParams const& p, void const* x, void* dst, cudaStream_t stream, char* msg, size_t msgLen)
{
    // The prep pass's NCHW -> NHWC transpose with the roles of channels and pixels swapped: an image
    // [h * w][c] read as h * w "channels" of c "pixels" is written as [c][h * w].
    DcnParams q = p;
    q.c = p.h * p.w;
    q.h = p.c;
    q.w = 1;
    PrepWork w;
    w.x = x;
    w.xh = dst;
    return launchPrep(q, w, false, stream, "channel-last to NCHW copy of x", msg, msgLen);
}

size_t preparedWeightsBytes(DcnParams const& p)
{
    return preparedBytes(p);
}

DcnStatus prepareWeights(DcnParams const& p, void const* weight, void* prepared, size_t size, cudaStream_t stream,
    char* msg, size_t msgLen)
{
    size_t const need = preparedBytes(p);
    if (size < need)
    {
        setMsg(msg, msgLen, "dcnPrepareWeights: the buffer holds %zu bytes, dcnPreparedWeightsSize() = %zu", size, need);
        return kDCN_INVALID_ARGUMENT;
    }
    // A quantized layer's OIHW buffer holds its weight scales too.
    size_t const raw = p.quant != kDCN_QUANT_NONE ? quantWeightBytes(p)
                                                  : size_t(p.cout) * (p.c / p.group) * p.kh * p.kw * elemBytes(p);
    cudaError_t const e = cudaMemcpyAsync(prepared, weight, raw, cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess)
    {
        setMsg(msg, msgLen, "dcnPrepareWeights: copying the weights failed: %s (%s)", cudaGetErrorName(e),
            cudaGetErrorString(e));
        return kDCN_CUDA_ERROR;
    }
    // Each K order, as a tile of that kind reads it (one representative shape per part).
    struct
    {
        int part;
        int bk;
        bool wgmma;
    } const parts[] = {{kPartK32, 32, false}, {kPartK64, 64, false}, {kPartWg32, 32, true}, {kPartK128, 128, true}};
    for (auto const& part : parts)
    {
        size_t const offset = preparedOffset(p, part.part);
        if (offset == SIZE_MAX)
            continue;
        TileShape t{};
        t.nhwc = true;
        t.bk = part.bk;
        t.wgmma = part.wgmma;
        t.tmaA = part.wgmma;
        PrepWork w;
        w.w = weight;
        w.wp = static_cast<char*>(prepared) + offset;
        w.bk = part.bk;
        w.wMode = weightModeOf(t, p);
        DcnStatus const s = launchPrep(p, w, false, stream, "weight preparation", msg, msgLen);
        if (s != kDCN_SUCCESS)
            return s;
    }
    return kDCN_SUCCESS;
}

} // namespace fused
} // namespace dcn
