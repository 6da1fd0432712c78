/*
 * dcnconvert TensorRT glue: supported types, shape checks and the output-size expression.
 * See dcnPluginTensors.h.
 */
#include "dcnPluginTensors.h"

#include "checkMacros.h"

#include "../core/dcnForward.h"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::IDimensionExpr;
using nvinfer1::IExprBuilder;

namespace dcnconvert
{
namespace trt
{
namespace
{

std::string pairText(int32_t const* v)
{
    std::ostringstream os;
    os << "[" << v[0] << ", " << v[1] << "]";
    return os.str();
}

bool known(int64_t v) noexcept
{
    return v >= 0;
}

IDimensionExpr const* constantExpr(IExprBuilder& b, int64_t value)
{
    IDimensionExpr const* e = b.constant(value);
    DCN_VALIDATE(e != nullptr, "IExprBuilder::constant(" << value << ") returned null");
    return e;
}

IDimensionExpr const* operationExpr(
    IExprBuilder& b, nvinfer1::DimensionOperation op, IDimensionExpr const& first, IDimensionExpr const& second)
{
    IDimensionExpr const* e = b.operation(op, first, second);
    DCN_VALIDATE(e != nullptr, "IExprBuilder::operation(" << static_cast<int32_t>(op) << ") returned null");
    return e;
}

} // namespace

int32_t toDcnDataType(DataType type) noexcept
{
    if (type == DataType::kFLOAT)
    {
        return kDCN_FLOAT32;
    }
    if (type == DataType::kHALF)
    {
        return kDCN_FLOAT16;
    }
    if (type == DataType::kBF16)
    {
        return kDCN_BFLOAT16;
    }
    return -1;
}

std::pair<int64_t, int64_t> checkShapes(ShapeView const& s, DcnAttributes const& a, bool complete)
{
    DCN_VALIDATE(s.nbInputs == kMIN_INPUTS || s.nbInputs == kMAX_INPUTS,
        "expected 4 inputs (x, offset, mask, weight) or 5 (with bias), got " << s.nbInputs);
    for (int32_t i = 0; i < s.nbInputs; ++i)
    {
        int32_t const expectedRank = i == kIN_BIAS ? 1 : 4;
        DCN_VALIDATE(s.rank[i] == expectedRank,
            "input " << i << " ('" << kINPUT_NAMES[i] << "') must have rank " << expectedRank << ", got rank "
                     << s.rank[i]);
        for (int32_t k = 0; k < expectedRank; ++k)
        {
            int64_t const v = s.get(i, k);
            DCN_VALIDATE(!complete || known(v),
                "input '" << kINPUT_NAMES[i] << "' has an unknown dimension " << k << " (" << v << ") at run time");
            DCN_VALIDATE(v == kUNKNOWN_DIM || v >= 0,
                "input '" << kINPUT_NAMES[i] << "' has an invalid dimension " << k << " = " << v);
        }
    }
    int64_t const n = s.get(kIN_X, 0);
    int64_t const c = s.get(kIN_X, 1);
    int64_t const h = s.get(kIN_X, 2);
    int64_t const w = s.get(kIN_X, 3);
    int64_t const cout = s.get(kIN_WEIGHT, 0);
    int64_t const cPerGroup = s.get(kIN_WEIGHT, 1);
    int64_t const kh = s.get(kIN_WEIGHT, 2);
    int64_t const kw = s.get(kIN_WEIGHT, 3);
    int64_t const g = a.group;
    int64_t const dg = a.deformableGroup;

    // Kernel sizes are narrowed to int32 below (and by the core): reject what does not fit first.
    DCN_VALIDATE(!known(kh) || (kh >= 1 && kh <= INT32_MAX),
        "weight kernel height (weight dim 2) must be in [1, 2^31 - 1], got " << kh);
    DCN_VALIDATE(!known(kw) || (kw >= 1 && kw <= INT32_MAX),
        "weight kernel width (weight dim 3) must be in [1, 2^31 - 1], got " << kw);
    DCN_VALIDATE(!known(c) || c % g == 0, "x has " << c << " channels, not divisible by group = " << g);
    DCN_VALIDATE(!known(c) || c % dg == 0, "x has " << c << " channels, not divisible by deformable_group = " << dg);
    DCN_VALIDATE(!known(cout) || cout % g == 0,
        "weight has " << cout << " output channels (dim 0), not divisible by group = " << g);
    DCN_VALIDATE(!known(c) || !known(cPerGroup) || c / g == cPerGroup,
        "weight dim 1 (" << cPerGroup << ") times group (" << g << ") must equal the channels of x (" << c << ")");
    for (int32_t i : {kIN_OFFSET, kIN_MASK})
    {
        int64_t const ni = s.get(i, 0);
        DCN_VALIDATE(!known(n) || !known(ni) || n == ni,
            "input '" << kINPUT_NAMES[i] << "' has batch " << ni << " but x has batch " << n);
    }
    if (known(kh) && known(kw))
    {
        // kh * kw < 2^62 here; the offset channel count 2 * dg * kh * kw must fit in int32 (the core's limit).
        DCN_VALIDATE(kh * kw <= INT32_MAX / (2 * dg),
            "the kernel " << kh << "x" << kw << " with deformable_group = " << dg
                          << " needs 2*deformable_group*kh*kw offset channels, more than 2^31 - 1");
        int64_t const taps = dg * kh * kw;
        int64_t const oc = s.get(kIN_OFFSET, 1);
        int64_t const mc = s.get(kIN_MASK, 1);
        DCN_VALIDATE(!known(oc) || oc == 2 * taps,
            "offset has " << oc << " channels but 2*deformable_group*kh*kw = 2*" << dg << "*" << kh << "*" << kw
                          << " = " << 2 * taps << " are needed");
        DCN_VALIDATE(!known(mc) || mc == taps,
            "mask has " << mc << " channels but deformable_group*kh*kw = " << dg << "*" << kh << "*" << kw << " = "
                        << taps << " are needed");
    }
    if (s.nbInputs == kMAX_INPUTS)
    {
        int64_t const b = s.get(kIN_BIAS, 0);
        DCN_VALIDATE(!known(b) || !known(cout) || b == cout,
            "bias has " << b << " elements but weight has " << cout << " output channels");
    }

    int64_t ho = kUNKNOWN_DIM;
    int64_t wo = kUNKNOWN_DIM;
    if (known(h) && known(kh))
    {
        ho = dcnOutputSize(h, static_cast<int32_t>(kh), a.stride[0], a.padding[0], a.dilation[0]);
        DCN_VALIDATE(ho >= 1,
            "the kernel does not fit: input height " << h << ", kernel height " << kh << ", stride "
                                                     << pairText(a.stride) << ", padding " << pairText(a.padding)
                                                     << ", dilation " << pairText(a.dilation)
                                                     << " give an output height < 1");
    }
    if (known(w) && known(kw))
    {
        wo = dcnOutputSize(w, static_cast<int32_t>(kw), a.stride[1], a.padding[1], a.dilation[1]);
        DCN_VALIDATE(wo >= 1,
            "the kernel does not fit: input width " << w << ", kernel width " << kw << ", stride "
                                                    << pairText(a.stride) << ", padding " << pairText(a.padding)
                                                    << ", dilation " << pairText(a.dilation)
                                                    << " give an output width < 1");
    }
    for (int32_t i : {kIN_OFFSET, kIN_MASK})
    {
        int64_t const hi = s.get(i, 2);
        int64_t const wi = s.get(i, 3);
        DCN_VALIDATE(!known(ho) || !known(hi) || hi == ho,
            "input '" << kINPUT_NAMES[i] << "' has height " << hi << " but the output height computed from x ("
                      << h << "), the kernel (" << kh << "), stride " << pairText(a.stride) << ", padding "
                      << pairText(a.padding) << " and dilation " << pairText(a.dilation) << " is " << ho);
        DCN_VALIDATE(!known(wo) || !known(wi) || wi == wo,
            "input '" << kINPUT_NAMES[i] << "' has width " << wi << " but the output width computed from x (" << w
                      << "), the kernel (" << kw << "), stride " << pairText(a.stride) << ", padding "
                      << pairText(a.padding) << " and dilation " << pairText(a.dilation) << " is " << wo);
    }
    int64_t const oh = s.get(kIN_OFFSET, 2);
    int64_t const mh = s.get(kIN_MASK, 2);
    int64_t const ow = s.get(kIN_OFFSET, 3);
    int64_t const mw = s.get(kIN_MASK, 3);
    DCN_VALIDATE((!known(oh) || !known(mh) || oh == mh) && (!known(ow) || !known(mw) || ow == mw),
        "offset spatial size " << oh << "x" << ow << " differs from mask spatial size " << mh << "x" << mw);
    return {ho, wo};
}

void checkIoCounts(void const* in, int32_t nbInputs, void const* out, int32_t nbOutputs)
{
    DCN_VALIDATE(in != nullptr && out != nullptr, "null tensor descriptions");
    DCN_VALIDATE(nbOutputs == 1, "expected 1 output, got " << nbOutputs);
    DCN_VALIDATE(nbInputs >= kEMBEDDED_INPUTS && nbInputs <= kMAX_INPUTS,
        "expected 3 inputs (x, offset, mask; weights carried by the node), 4 (and weight) or 5 (and bias), got "
            << nbInputs);
}

TensorTypes typesOf(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const& out) noexcept
{
    return TensorTypes{in[kIN_X].type, in[nbInputs > kIN_OFFSET ? kIN_OFFSET : kIN_X].type, out.type};
}

ShapeView viewOf(Dims const* dims, int32_t nbInputs)
{
    ShapeView s;
    s.nbInputs = nbInputs;
    for (int32_t i = 0; i < std::min(nbInputs, kMAX_INPUTS); ++i)
    {
        s.rank[i] = dims[i].nbDims;
        for (int32_t k = 0; k < 4; ++k)
        {
            s.d[i][k] = k < dims[i].nbDims ? dims[i].d[k] : kUNKNOWN_DIM;
        }
    }
    return s;
}

IDimensionExpr const* outputSizeExpr(IExprBuilder& b, IDimensionExpr const& in, IDimensionExpr const& kernel,
    int32_t stride, int32_t pad, int32_t dilation, int64_t constantValue)
{
    using Op = nvinfer1::DimensionOperation;
    if (constantValue >= 0)
    {
        return constantExpr(b, constantValue);
    }
    // numerator = in + 2p - d*(k-1) - 1; with stride 1 the trailing +1 is folded into it.
    int64_t const unit = stride == 1 ? 1 : 0;
    int64_t const base = 2 * static_cast<int64_t>(pad) + dilation - 1 + unit;
    IDimensionExpr const* numerator{nullptr};
    if (kernel.isConstant())
    {
        int64_t const shift = base - static_cast<int64_t>(dilation) * kernel.getConstantValue();
        // Only non-negative constants are built: a negative shift becomes a subtraction.
        numerator = shift == 0 ? &in
            : shift > 0        ? operationExpr(b, Op::kSUM, in, *constantExpr(b, shift))
                               : operationExpr(b, Op::kSUB, in, *constantExpr(b, -shift));
    }
    else
    {
        IDimensionExpr const* span
            = dilation == 1 ? &kernel : operationExpr(b, Op::kPROD, *constantExpr(b, dilation), kernel);
        IDimensionExpr const* shifted = base == 0 ? &in : operationExpr(b, Op::kSUM, in, *constantExpr(b, base));
        numerator = operationExpr(b, Op::kSUB, *shifted, *span);
    }
    if (stride == 1)
    {
        return numerator;
    }
    IDimensionExpr const* divided = operationExpr(b, Op::kFLOOR_DIV, *numerator, *constantExpr(b, stride));
    return operationExpr(b, Op::kSUM, *divided, *constantExpr(b, 1));
}

std::string paramsText(DcnParams const& p)
{
    static char const* const kDTYPES[] = {"FLOAT32", "FLOAT16", "BFLOAT16", "INT8", "FP8E4M3"};
    std::ostringstream os;
    os << "DcnParams x [" << p.n << ", " << p.c << ", " << p.h << ", " << p.w << "] out [" << p.n << ", " << p.cout
       << ", " << p.ho << ", " << p.wo << "] kernel " << p.kh << "x" << p.kw << " stride " << p.strideH << "x"
       << p.strideW << " padding " << p.padH << "x" << p.padW << " dilation " << p.dilationH << "x" << p.dilationW
       << " group " << p.group << " deformable_group " << p.deformableGroup << " bias " << p.withBias << " dtype "
       << (p.dtype >= 0 && p.dtype < 3 ? kDTYPES[p.dtype] : "?") << " algo " << p.algo << " math "
       << (p.math == kDCN_MATH_TF32 ? "TF32" : p.math == kDCN_MATH_ACCURATE ? "ACCURATE" : "?");
    if (p.quant != kDCN_QUANT_NONE)
    {
        os << " quant " << quantTypeName(p.quant) << " x_scale " << p.xScale << " out "
           << (p.outType >= 0 && p.outType < 5 ? kDTYPES[p.outType] : "?");
        if (p.outType == kDCN_INT8 || p.outType == kDCN_FP8E4M3)
        {
            os << " output_scale " << p.outScale;
        }
    }
    return os.str();
}

char const* dataTypeName(DataType type) noexcept
{
    switch (static_cast<int32_t>(type))
    {
    case 0: return "FLOAT";
    case 1: return "HALF";
    case 2: return "INT8";
    case 3: return "INT32";
    case 4: return "BOOL";
    case 5: return "UINT8";
    case 6: return "FP8";
    case 7: return "BF16";
    case 8: return "INT64";
    case 9: return "INT4";
    case 10: return "FP4";
    case 11: return "E8M0";
    default: return "unknown DataType";
    }
}

} // namespace trt
} // namespace dcnconvert
