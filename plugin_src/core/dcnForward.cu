/*
 * dcnconvert core: workspace and forward dispatch (TensorRT-free). Validation is in dcnValidate.cu.
 *
 * kDCN_ALGO_AUTO runs the fused tensor-core kernel (dcnFused.cu) when it supports the problem and
 * the device, else the simple SIMT kernel; kDCN_ALGO_SIMPLE always runs the simple kernel
 * (dcnSimpleKernel.cuh, the reference path of the tests); kDCN_ALGO_FUSED and
 * kDCN_ALGO_FUSED_TILE + i run only the fused kernel and report kDCN_UNSUPPORTED otherwise.
 */
#include "dcnForward.h"
#include "dcnFused.h"
#include "dcnFusedTiles.h"
#include "dcnInternal.h"
#include "dcnSimpleKernel.cuh"

#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>

using dcn::detail::dtypeName;
using dcn::detail::setMsg;

namespace
{

dcn::simple::KernelArgs makeArgs(DcnParams const& p)
{
    dcn::simple::KernelArgs a{};
    a.n = p.n;
    a.c = p.c;
    a.h = p.h;
    a.w = p.w;
    a.cout = p.cout;
    a.ho = p.ho;
    a.wo = p.wo;
    a.hw = p.h * p.w;
    a.howo = p.ho * p.wo;
    a.pixels = p.n * a.howo;
    a.cg = p.c / p.group;
    a.mg = p.cout / p.group;
    a.kk = p.kh * p.kw; // int32: dcnValidate bounds 2 * deformableGroup * kh * kw by 2^31 - 1
    a.kg = a.cg * a.kk;
    a.cPerDg = p.c / p.deformableGroup;
    a.offsetN = static_cast<int64_t>(p.deformableGroup) * 2 * a.kk * a.howo;
    a.maskN = static_cast<int64_t>(p.deformableGroup) * a.kk * a.howo;
    a.kh = p.kh;
    a.kw = p.kw;
    a.strideH = p.strideH;
    a.strideW = p.strideW;
    a.padH = p.padH;
    a.padW = p.padW;
    a.dilationH = p.dilationH;
    a.dilationW = p.dilationW;
    a.withBias = p.withBias;
    return a;
}

template <typename T, int BM, typename TF>
DcnStatus launchSimpleTile(DcnParams const& p, dcn::simple::KernelArgs const& a, void const* x, void const* offset,
    void const* mask, void const* weight, void const* bias, void* out, cudaStream_t stream, char* msg, size_t msgLen)
{
    using namespace dcn::simple;
    dim3 const grid(static_cast<unsigned>((a.pixels + kBN - 1) / kBN), static_cast<unsigned>((a.mg + BM - 1) / BM),
        static_cast<unsigned>(p.group));
    dcnSimpleForwardKernel<T, BM, TF><<<grid, kThreads, 0, stream>>>(a, static_cast<T const*>(x),
        static_cast<TF const*>(offset), static_cast<TF const*>(mask), static_cast<T const*>(weight),
        static_cast<TF const*>(bias), out);
    cudaError_t const err = cudaGetLastError();
    if (err != cudaSuccess)
    {
        setMsg(msg, msgLen, "launch of dcnSimpleForwardKernel<%s, %d> (grid %u x %u x %u) failed: %s (%s)",
            dtypeName(p.dtype), BM, grid.x, grid.y, grid.z, cudaGetErrorName(err), cudaGetErrorString(err));
        return kDCN_CUDA_ERROR;
    }
    return kDCN_SUCCESS;
}

/* The simple kernel with a 32-channel tile for groups of at most 32 output channels, else 64.
 * T: x and the weights; TF: offset, mask and bias (T for a float layer). A quantized layer's weight
 * scales follow its values in the weight buffer (dcnQuantScalesOffset; the prepared weights start
 * with that buffer). */
template <typename T, typename TF = T>
DcnStatus launchSimple(DcnParams const& p, void const* x, void const* offset, void const* mask,
    void const* weight, void const* bias, void* out, cudaStream_t stream, char* msg, size_t msgLen)
{
    dcn::simple::KernelArgs a = makeArgs(p);
    if (p.quant != kDCN_QUANT_NONE)
    {
        a.xScale = p.xScale;
        a.outScale = p.outScale;
        a.outType = p.outType;
        a.wScale = reinterpret_cast<float const*>(static_cast<char const*>(weight) + dcnQuantScalesOffset(&p));
    }
    if (a.mg <= 32)
    {
        return launchSimpleTile<T, 32, TF>(p, a, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    }
    return launchSimpleTile<T, 64, TF>(p, a, x, offset, mask, weight, bias, out, stream, msg, msgLen);
}

/* launchSimple of a quantized layer: 8-bit T, FP32 or FP16 offset, mask and bias (dcnValidate). */
template <typename T>
DcnStatus launchSimpleQuantized(DcnParams const& p, void const* x, void const* offset, void const* mask,
    void const* weight, void const* bias, void* out, cudaStream_t stream, char* msg, size_t msgLen)
{
    if (p.dtype == kDCN_FLOAT16)
        return launchSimple<T, __half>(p, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    return launchSimple<T, float>(p, x, offset, mask, weight, bias, out, stream, msg, msgLen);
}

template <typename D, typename S>
__global__ void dcnConvertKernel(S const* __restrict__ src, D* __restrict__ dst, int64_t count)
{
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        dst[i] = dcn::simple::fromFloat<D>(dcn::simple::toFloat<S>(src[i]));
}

template <typename D>
cudaError_t convertTo(void const* src, int32_t srcType, D* dst, int64_t count, cudaStream_t stream)
{
    int64_t const blocks64 = (count + 255) / 256;
    unsigned const blocks = static_cast<unsigned>(blocks64 < 65535 ? (blocks64 > 0 ? blocks64 : 1) : 65535);
    switch (srcType)
    {
    case kDCN_FLOAT32: dcnConvertKernel<D, float><<<blocks, 256, 0, stream>>>(static_cast<float const*>(src), dst, count); break;
    case kDCN_FLOAT16: dcnConvertKernel<D, __half><<<blocks, 256, 0, stream>>>(static_cast<__half const*>(src), dst, count); break;
    default:
        dcnConvertKernel<D, __nv_bfloat16><<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16 const*>(src), dst, count);
        break;
    }
    return cudaGetLastError();
}

} // namespace

extern "C" {

DCN_CORE_EXPORT DcnStatus dcnConvertElements(void const* src, int32_t srcType, void* dst, int32_t dstType, int64_t count,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    bool const types = srcType >= kDCN_FLOAT32 && srcType <= kDCN_BFLOAT16 && dstType >= kDCN_FLOAT32
        && dstType <= kDCN_BFLOAT16;
    if (!types || count < 0 || (count > 0 && (src == nullptr || dst == nullptr)))
    {
        setMsg(msg, msgLen, "dcnConvertElements: types %d -> %d, count %lld, pointers %p -> %p are invalid", srcType,
            dstType, static_cast<long long>(count), src, dst);
        return kDCN_INVALID_ARGUMENT;
    }
    if (count == 0)
        return kDCN_SUCCESS;
    cudaError_t const err = dstType == kDCN_FLOAT32 ? convertTo(src, srcType, static_cast<float*>(dst), count, stream)
        : dstType == kDCN_FLOAT16 ? convertTo(src, srcType, static_cast<__half*>(dst), count, stream)
                                  : convertTo(src, srcType, static_cast<__nv_bfloat16*>(dst), count, stream);
    if (err != cudaSuccess)
    {
        setMsg(msg, msgLen, "dcnConvertElements: launch failed: %s (%s)", cudaGetErrorName(err), cudaGetErrorString(err));
        return kDCN_CUDA_ERROR;
    }
    return kDCN_SUCCESS;
}

DCN_CORE_EXPORT int32_t dcnFusedTileCount(void)
{
    return dcn::fused::tileCount();
}

DCN_CORE_EXPORT DcnStatus dcnFusedTileInfo(int32_t tile, DcnTileInfo* info)
{
    using namespace dcn::fused;
    if (info == nullptr || tile < 0 || tile >= kTileCount)
    {
        return kDCN_INVALID_ARGUMENT;
    }
    TileShape const& t = kTiles[tile];
    DcnTileInfo r{};
    snprintf(r.name, sizeof(r.name), "%s", kTileNames[tile]);
    r.bm = t.bm;
    r.bn = t.bn;
    r.bk = t.bk;
    r.kernel = !t.nhwc ? kDCN_TILE_NCHW
        : t.wgmma      ? kDCN_TILE_WGMMA
        : t.tmaA       ? kDCN_TILE_TMA
        : t.asyncA     ? kDCN_TILE_ASYNC
                       : kDCN_TILE_REGS;
    r.consumerWarps = t.cw;
    r.producerWarps = t.pw;
    r.stages = t.stages;
    // The element types and FP32 math modes it is built for (builtFor, dcnFusedTiles.h).
    bool const tf32 = builtFor(t, kDCN_FLOAT32, kDCN_MATH_TF32);
    bool const accurate = builtFor(t, kDCN_FLOAT32, kDCN_MATH_ACCURATE);
    r.dtypes = (builtFor(t, kDCN_INT8, kDCN_MATH_ACCURATE) ? 1 << kDCN_INT8 : 0)
        | (builtFor(t, kDCN_FP8E4M3, kDCN_MATH_ACCURATE) ? 1 << kDCN_FP8E4M3 : 0)
        | (tf32 || accurate ? 1 << kDCN_FLOAT32 : 0)
        | (builtFor(t, kDCN_FLOAT16, kDCN_MATH_ACCURATE) ? 1 << kDCN_FLOAT16 : 0)
        | (builtFor(t, kDCN_BFLOAT16, kDCN_MATH_ACCURATE) ? 1 << kDCN_BFLOAT16 : 0);
    r.fp32Math = (tf32 ? 1 << kDCN_MATH_TF32 : 0) | (accurate ? 1 << kDCN_MATH_ACCURATE : 0);
    r.minComputeCapability = t.tmaA ? 90 : 80;
    r.splitsK = t.nhwc ? 1 : 0;
    *info = r;
    return kDCN_SUCCESS;
}

DCN_CORE_EXPORT int32_t dcnFusedTileRuns(int32_t tile, int32_t ccMajor)
{
    using namespace dcn::fused;
    if (tile < 0 || tile >= kTileCount || ccMajor < 8)
        return 0;
    TileShape const& t = kTiles[tile];
    if (t.wgmma)
        return builtWgmmaFor(ccMajor) ? 1 : 0;
    if (t.tmaA)
        return builtSm90For(ccMajor) ? 1 : 0;
    return 1;
}

DCN_CORE_EXPORT DcnStatus dcnFusedSplitTail(DcnParams const* p, int32_t sms, int32_t smemOptin, int32_t cc,
    int32_t* tile, int32_t* splits, int32_t* tailTiles, int32_t* tailSplits, char* msg, size_t msgLen)
{
    DcnStatus const s = dcnValidate(p, msg, msgLen);
    if (s != kDCN_SUCCESS)
        return s;
    if (tile == nullptr || splits == nullptr || tailTiles == nullptr || tailSplits == nullptr || sms < 1
        || smemOptin < 0)
    {
        setMsg(msg, msgLen,
            "dcnFusedChoice: the out pointers must be non-NULL, sms >= 1 and smemOptin >= 0 (got %d, %d)", sms,
            smemOptin);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->n == 0)
    {
        setMsg(msg, msgLen, "dcnFusedChoice: an empty batch runs no kernel");
        return kDCN_UNSUPPORTED;
    }
    return dcn::fused::chooseFor(
        *p, sms, smemOptin, cc, dcnWorkspaceSize(p), *tile, *splits, *tailTiles, *tailSplits, msg, msgLen);
}

DCN_CORE_EXPORT DcnStatus dcnFusedChoice(DcnParams const* p, int32_t sms, int32_t smemOptin, int32_t cc,
    int32_t* tile, int32_t* splits, char* msg, size_t msgLen)
{
    int32_t tailTiles = 0;
    int32_t tailSplits = 1;
    return dcnFusedSplitTail(p, sms, smemOptin, cc, tile, splits, &tailTiles, &tailSplits, msg, msgLen);
}

DCN_CORE_EXPORT size_t dcnQuantScalesOffset(DcnParams const* p)
{
    if (p == nullptr || p->quant == kDCN_QUANT_NONE || dcnValidate(p, nullptr, 0) != kDCN_SUCCESS)
        return 0;
    return dcn::fused::quantScalesOffset(*p);
}

DCN_CORE_EXPORT size_t dcnQuantWeightBytes(DcnParams const* p)
{
    if (p == nullptr || p->quant == kDCN_QUANT_NONE || dcnValidate(p, nullptr, 0) != kDCN_SUCCESS)
        return 0;
    return dcn::fused::quantWeightBytes(*p);
}

DCN_CORE_EXPORT size_t dcnWorkspaceSize(DcnParams const* p)
{
    // The simple kernel needs none; the channel-vectorised fused kernel keeps an NHWC copy of x and
    // the weights in its K order there (0 for invalid parameters: dcnForward reports those). With
    // channel-last x, the kernels that read NCHW get an NCHW copy of x there.
    if (p == nullptr || dcnValidate(p, nullptr, 0) != kDCN_SUCCESS)
    {
        return 0;
    }
    size_t const fused = p->algo == kDCN_ALGO_SIMPLE ? 0 : dcn::fused::workspaceBytes(*p);
    size_t const nchw = p->xLayout == kDCN_LAYOUT_NHWC
        ? dcn::fused::alignUp(size_t(p->n) * p->c * p->h * p->w * dcn::fused::elemBytes(*p))
        : 0;
    return fused > nchw ? fused : nchw;
}

DCN_CORE_EXPORT DcnStatus dcnSetSplitReduce(int32_t mode)
{
    if (mode < 0 || mode > 2)
    {
        return kDCN_INVALID_ARGUMENT;
    }
    dcn::fused::setSplitReduceMode(mode);
    return kDCN_SUCCESS;
}

DCN_CORE_EXPORT size_t dcnPreparedWeightsSize(DcnParams const* p)
{
    if (p == nullptr || dcnValidate(p, nullptr, 0) != kDCN_SUCCESS)
    {
        return 0;
    }
    return dcn::fused::preparedWeightsBytes(*p);
}

DCN_CORE_EXPORT DcnStatus dcnPrepareWeights(DcnParams const* p, void const* weight, void* prepared, size_t size,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    DcnStatus const s = dcnValidate(p, msg, msgLen);
    if (s != kDCN_SUCCESS)
    {
        return s;
    }
    if (weight == nullptr || prepared == nullptr)
    {
        setMsg(msg, msgLen, "dcnPrepareWeights: device pointer '%s' is NULL", weight == nullptr ? "weight" : "prepared");
        return kDCN_INVALID_ARGUMENT;
    }
    return dcn::fused::prepareWeights(*p, weight, prepared, size, stream, msg, msgLen);
}

DCN_CORE_EXPORT DcnStatus dcnForward(DcnParams const* p, void const* x, void const* offset, void const* mask,
    void const* weight, void const* bias, void* out, void* workspace, size_t workspaceSize, cudaStream_t stream,
    char* msg, size_t msgLen)
{
    DcnStatus const s = dcnValidate(p, msg, msgLen);
    if (s != kDCN_SUCCESS)
    {
        return s;
    }
    size_t const need = dcnWorkspaceSize(p);
    if (workspaceSize < need)
    {
        setMsg(msg, msgLen, "workspaceSize = %zu is smaller than dcnWorkspaceSize() = %zu", workspaceSize, need);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->n == 0)
    {
        return kDCN_SUCCESS; // empty batch: nothing to write
    }
    struct
    {
        char const* name;
        void const* ptr;
    } const ptrs[] = {{"x", x}, {"offset", offset}, {"mask", mask}, {"weight", weight}, {"out", out}};
    for (auto const& t : ptrs)
    {
        if (t.ptr == nullptr)
        {
            setMsg(msg, msgLen, "dcnForward: device pointer '%s' is NULL", t.name);
            return kDCN_INVALID_ARGUMENT;
        }
    }
    if (p->withBias == 1 && bias == nullptr)
    {
        setMsg(msg, msgLen, "dcnForward: DcnParams.withBias = 1 but the bias pointer is NULL");
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->algo != kDCN_ALGO_SIMPLE)
    {
        int32_t const code = p->algo >= kDCN_ALGO_FUSED_TILE ? p->algo - kDCN_ALGO_FUSED_TILE : -1;
        int32_t const tile = code >= 0 ? code % kDCN_ALGO_SPLIT_STEP : -1;
        int32_t const splits = code >= 0 ? code % kDCN_ALGO_TAIL_STEP / kDCN_ALGO_SPLIT_STEP + 1 : 0;
        int32_t const tail = code >= 0 ? code / kDCN_ALGO_TAIL_STEP + 1 : 1;
        DcnStatus const f = dcn::fused::forward(*p, tile, splits, tail, x, offset, mask, weight, bias, out, workspace,
            workspaceSize, stream, msg, msgLen);
        if (f != kDCN_UNSUPPORTED || p->algo != kDCN_ALGO_AUTO)
        {
            return f;
        }
        setMsg(msg, msgLen, ""); // AUTO: fall back to the simple kernel
    }
    if (p->xLayout == kDCN_LAYOUT_NHWC)
    {
        DcnStatus const t = dcn::fused::toNchw(*p, x, workspace, stream, msg, msgLen);
        if (t != kDCN_SUCCESS)
        {
            return t;
        }
        x = workspace; // the simple kernel reads NCHW
    }
    if (p->quant == kDCN_QUANT_INT8)
        return launchSimpleQuantized<int8_t>(*p, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    if (p->quant == kDCN_QUANT_FP8)
        return launchSimpleQuantized<__nv_fp8_e4m3>(*p, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    switch (p->dtype)
    {
    case kDCN_FLOAT32: return launchSimple<float>(*p, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case kDCN_FLOAT16: return launchSimple<__half>(*p, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    case kDCN_BFLOAT16:
        return launchSimple<__nv_bfloat16>(*p, x, offset, mask, weight, bias, out, stream, msg, msgLen);
    default: break;
    }
    setMsg(msg, msgLen, "dcnForward: no implementation for dtype %d", p->dtype);
    return kDCN_UNSUPPORTED;
}

} // extern "C"
