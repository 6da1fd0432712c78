/*
 * dcnconvert core: output size and validation of DcnParams (TensorRT-free, host code).
 *
 * dcnValidate() checks every field (ranges, divisibility, ho/wo against the computed size, element
 * counts, the launch-geometry limits of the kernels) and names the field and value on failure.
 * dcnForward() (dcnForward.cu) calls it before every launch.
 */
#include "dcnForward.h"
#include "dcnInternal.h"
#include "dcnSimpleKernel.cuh"

#include <stdint.h>

using dcn::detail::setMsg;

namespace
{

/* Largest input/output extent, padding, dilation*(kernel-1), stride: keeps every sampling
 * coordinate an exactly representable FP32 integer part plus offset, and int32 sums in range. */
constexpr int64_t kMaxExtent = int64_t{1} << 24;
/* Largest element count of any one tensor (far above any GPU's memory; guards int64 math). */
constexpr int64_t kMaxElements = int64_t{1} << 60;
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxGridX = 2147483647;

/* a * b, or -1 when either is negative or the product exceeds kMaxElements. */
int64_t mulCapped(int64_t a, int64_t b)
{
    if (a < 0 || b < 0)
    {
        return -1;
    }
    if (a != 0 && b > kMaxElements / a)
    {
        return -1;
    }
    return a * b;
}

int64_t mul4(int64_t a, int64_t b, int64_t c, int64_t d)
{
    return mulCapped(mulCapped(mulCapped(a, b), c), d);
}

DcnStatus checkPositive(char const* name, int64_t v, int64_t maxV, char* msg, size_t msgLen)
{
    if (v < 1 || v > maxV)
    {
        setMsg(msg, msgLen, "DcnParams.%s = %lld is out of range (expected 1..%lld)", name,
            static_cast<long long>(v), static_cast<long long>(maxV));
        return kDCN_INVALID_ARGUMENT;
    }
    return kDCN_SUCCESS;
}

} // namespace

extern "C" {

DCN_CORE_EXPORT int64_t dcnOutputSize(int64_t in, int32_t kernel, int32_t stride, int32_t pad, int32_t dilation)
{
    if (in < 1 || kernel < 1 || stride < 1 || pad < 0 || dilation < 1)
    {
        return -1;
    }
    int64_t const span = static_cast<int64_t>(dilation) * (kernel - 1) + 1;
    int64_t const padded = in + 2 * static_cast<int64_t>(pad);
    if (padded < span)
    {
        return -1;
    }
    return (padded - span) / stride + 1;
}

DCN_CORE_EXPORT DcnStatus dcnValidate(DcnParams const* p, char* msg, size_t msgLen)
{
    if (p == nullptr)
    {
        setMsg(msg, msgLen, "DcnParams pointer is NULL");
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->n < 0 || p->n > kMaxElements)
    {
        setMsg(msg, msgLen, "DcnParams.n = %lld is out of range (expected 0..2^60)", static_cast<long long>(p->n));
        return kDCN_INVALID_ARGUMENT;
    }
    DcnStatus s;
    if ((s = checkPositive("c", p->c, kMaxElements, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("h", p->h, kMaxExtent, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("w", p->w, kMaxExtent, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("cout", p->cout, kMaxElements, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("kh", p->kh, kMaxExtent, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("kw", p->kw, kMaxExtent, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("strideH", p->strideH, kMaxExtent, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("strideW", p->strideW, kMaxExtent, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("dilationH", p->dilationH, kMaxExtent, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("dilationW", p->dilationW, kMaxExtent, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("group", p->group, kMaxGridY, msg, msgLen)) != kDCN_SUCCESS
        || (s = checkPositive("deformableGroup", p->deformableGroup, kMaxElements, msg, msgLen)) != kDCN_SUCCESS)
    {
        return s;
    }
    if (p->padH < 0 || p->padH > kMaxExtent)
    {
        setMsg(msg, msgLen, "DcnParams.padH = %d is out of range (expected 0..%lld)", p->padH,
            static_cast<long long>(kMaxExtent));
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->padW < 0 || p->padW > kMaxExtent)
    {
        setMsg(msg, msgLen, "DcnParams.padW = %d is out of range (expected 0..%lld)", p->padW,
            static_cast<long long>(kMaxExtent));
        return kDCN_INVALID_ARGUMENT;
    }
    int64_t const spanH = static_cast<int64_t>(p->dilationH) * (p->kh - 1);
    int64_t const spanW = static_cast<int64_t>(p->dilationW) * (p->kw - 1);
    if (spanH > kMaxExtent)
    {
        setMsg(msg, msgLen, "DcnParams.dilationH * (kh - 1) = %d * %d exceeds %lld", p->dilationH, p->kh - 1,
            static_cast<long long>(kMaxExtent));
        return kDCN_INVALID_ARGUMENT;
    }
    if (spanW > kMaxExtent)
    {
        setMsg(msg, msgLen, "DcnParams.dilationW * (kw - 1) = %d * %d exceeds %lld", p->dilationW, p->kw - 1,
            static_cast<long long>(kMaxExtent));
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->c % p->group != 0)
    {
        setMsg(msg, msgLen, "DcnParams.c = %lld is not divisible by group = %d", static_cast<long long>(p->c),
            p->group);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->cout % p->group != 0)
    {
        setMsg(msg, msgLen, "DcnParams.cout = %lld is not divisible by group = %d",
            static_cast<long long>(p->cout), p->group);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->c % p->deformableGroup != 0)
    {
        setMsg(msg, msgLen, "DcnParams.c = %lld is not divisible by deformableGroup = %d",
            static_cast<long long>(p->c), p->deformableGroup);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->withBias != 0 && p->withBias != 1)
    {
        setMsg(msg, msgLen, "DcnParams.withBias = %d is invalid (expected 0 or 1)", p->withBias);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->dtype != kDCN_FLOAT32 && p->dtype != kDCN_FLOAT16 && p->dtype != kDCN_BFLOAT16)
    {
        setMsg(msg, msgLen, "DcnParams.dtype = %d is invalid (expected 0 FLOAT32, 1 FLOAT16 or 2 BFLOAT16)",
            p->dtype);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->quant != kDCN_QUANT_NONE)
    {
        if (p->quant != kDCN_QUANT_INT8 && p->quant != kDCN_QUANT_FP8)
        {
            setMsg(msg, msgLen, "DcnParams.quant = %d is invalid (expected 0 NONE, 1 INT8 or 2 FP8)", p->quant);
            return kDCN_INVALID_ARGUMENT;
        }
        if (p->dtype == kDCN_BFLOAT16)
        {
            setMsg(msg, msgLen, "DcnParams.dtype = 2 BFLOAT16: a quantized layer takes FP32 or FP16 offset, mask and bias");
            return kDCN_INVALID_ARGUMENT;
        }
        int32_t const qtype = p->quant == kDCN_QUANT_INT8 ? kDCN_INT8 : kDCN_FP8E4M3;
        if (p->outType != p->dtype && p->outType != qtype)
        {
            setMsg(msg, msgLen,
                "DcnParams.outType = %d is invalid for this quantized layer (expected %d, the offset's type, or %d, "
                "its quantized type)",
                p->outType, p->dtype, qtype);
            return kDCN_INVALID_ARGUMENT;
        }
        if (!(p->xScale > 0.0f && p->xScale <= 3.4e38f))
        {
            setMsg(msg, msgLen, "DcnParams.xScale = %g is invalid (expected a finite scale > 0)", double(p->xScale));
            return kDCN_INVALID_ARGUMENT;
        }
        if (p->outType == qtype && !(p->outScale > 0.0f && p->outScale <= 3.4e38f))
        {
            setMsg(msg, msgLen, "DcnParams.outScale = %g is invalid for a quantized output (expected a finite scale > 0)",
                double(p->outScale));
            return kDCN_INVALID_ARGUMENT;
        }
    }
    int32_t const code = p->algo >= kDCN_ALGO_FUSED_TILE ? p->algo - kDCN_ALGO_FUSED_TILE : -1;
    int32_t const tail = code >= 0 ? code / kDCN_ALGO_TAIL_STEP : 0;
    int32_t const split = code >= 0 ? code % kDCN_ALGO_TAIL_STEP / kDCN_ALGO_SPLIT_STEP : 0;
    int32_t const tileIdx = code >= 0 ? code % kDCN_ALGO_SPLIT_STEP : -1;
    bool const tileAlgo = tileIdx >= 0 && tileIdx < dcnFusedTileCount() && split < kDCN_MAX_SPLITS
        && tail < kDCN_MAX_SPLITS && (tail == 0 || split == 0);
    if (p->algo != kDCN_ALGO_AUTO && p->algo != kDCN_ALGO_SIMPLE && p->algo != kDCN_ALGO_FUSED && !tileAlgo)
    {
        setMsg(msg, msgLen,
            "DcnParams.algo = %d is invalid (expected 0 AUTO, 1 SIMPLE, 2 FUSED, or %d + tile (0..%d) + %d * (splits - 1) "
            "with 1 <= splits <= %d, or %d + tile + %d * (tail splits - 1) with 2 <= tail splits <= %d)",
            p->algo, kDCN_ALGO_FUSED_TILE, dcnFusedTileCount() - 1, kDCN_ALGO_SPLIT_STEP, kDCN_MAX_SPLITS,
            kDCN_ALGO_FUSED_TILE, kDCN_ALGO_TAIL_STEP, kDCN_MAX_SPLITS);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->math != kDCN_MATH_ACCURATE && p->math != kDCN_MATH_TF32)
    {
        setMsg(msg, msgLen, "DcnParams.math = %d is invalid (expected 0 ACCURATE or 1 TF32)", p->math);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->xLayout != kDCN_LAYOUT_NCHW && p->xLayout != kDCN_LAYOUT_NHWC)
    {
        setMsg(msg, msgLen, "DcnParams.xLayout = %d is invalid (expected 0 NCHW or 1 NHWC)", p->xLayout);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->weightLayout != kDCN_WEIGHT_OIHW && p->weightLayout != kDCN_WEIGHT_PREPARED)
    {
        setMsg(msg, msgLen, "DcnParams.weightLayout = %d is invalid (expected 0 OIHW or 1 PREPARED)", p->weightLayout);
        return kDCN_INVALID_ARGUMENT;
    }
    int64_t const hoExpected = dcnOutputSize(p->h, p->kh, p->strideH, p->padH, p->dilationH);
    int64_t const woExpected = dcnOutputSize(p->w, p->kw, p->strideW, p->padW, p->dilationW);
    if (hoExpected < 1)
    {
        setMsg(msg, msgLen,
            "DcnParams.h = %lld with padH = %d is smaller than the dilated kernel height %lld: no output rows",
            static_cast<long long>(p->h), p->padH, static_cast<long long>(spanH + 1));
        return kDCN_INVALID_ARGUMENT;
    }
    if (woExpected < 1)
    {
        setMsg(msg, msgLen,
            "DcnParams.w = %lld with padW = %d is smaller than the dilated kernel width %lld: no output columns",
            static_cast<long long>(p->w), p->padW, static_cast<long long>(spanW + 1));
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->ho != hoExpected)
    {
        setMsg(msg, msgLen, "DcnParams.ho = %lld does not match the computed output height %lld",
            static_cast<long long>(p->ho), static_cast<long long>(hoExpected));
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->wo != woExpected)
    {
        setMsg(msg, msgLen, "DcnParams.wo = %lld does not match the computed output width %lld",
            static_cast<long long>(p->wo), static_cast<long long>(woExpected));
        return kDCN_INVALID_ARGUMENT;
    }
    int64_t const kk = static_cast<int64_t>(p->kh) * p->kw;
    int64_t const offsetChannels = mulCapped(mulCapped(2, p->deformableGroup), kk);
    if (offsetChannels < 0 || offsetChannels > INT32_MAX)
    {
        setMsg(msg, msgLen, "DcnParams: 2 * deformableGroup * kh * kw = 2 * %d * %lld exceeds 2^31 - 1",
            p->deformableGroup, static_cast<long long>(kk));
        return kDCN_INVALID_ARGUMENT;
    }
    // Element counts of every tensor must be representable (int64, far from overflow).
    struct
    {
        char const* name;
        int64_t count;
    } const sizes[] = {
        {"x (n*c*h*w)", mul4(p->n, p->c, p->h, p->w)},
        {"offset (n*2*deformableGroup*kh*kw*ho*wo)", mul4(p->n, offsetChannels, p->ho, p->wo)},
        {"out (n*cout*ho*wo)", mul4(p->n, p->cout, p->ho, p->wo)},
        {"weight (cout*c/group*kh*kw)", mul4(p->cout, p->c / p->group, kk, 1)},
    };
    for (auto const& t : sizes)
    {
        if (t.count < 0)
        {
            setMsg(msg, msgLen, "DcnParams: element count of %s exceeds 2^60", t.name);
            return kDCN_INVALID_ARGUMENT;
        }
    }
    // Launch-geometry limits of the simple kernel.
    int64_t const mTiles = (p->cout / p->group + dcn::simple::kBMMax - 1) / dcn::simple::kBMMax;
    if (mTiles > kMaxGridY)
    {
        setMsg(msg, msgLen, "DcnParams: cout / group = %lld output channels per group is more than supported (%lld)",
            static_cast<long long>(p->cout / p->group), static_cast<long long>(kMaxGridY * dcn::simple::kBMMax));
        return kDCN_UNSUPPORTED;
    }
    int64_t const pTiles = (p->n * p->ho * p->wo + dcn::simple::kBN - 1) / dcn::simple::kBN;
    if (pTiles > kMaxGridX)
    {
        setMsg(msg, msgLen, "DcnParams: n * ho * wo = %lld output pixels is more than supported (%lld)",
            static_cast<long long>(p->n * p->ho * p->wo), static_cast<long long>(kMaxGridX * dcn::simple::kBN));
        return kDCN_UNSUPPORTED;
    }
    setMsg(msg, msgLen, "");
    return kDCN_SUCCESS;
}

} // extern "C"
