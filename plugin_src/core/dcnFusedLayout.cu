/*
 * dcnconvert core: the layout of the workspace's prepared operands (nhwcBytes, declared with the
 * workspace layout in dcnFusedTiles.h) and of the prepared weights (dcnFusedLayout.h).
 */
#include "dcnFusedTiles.h"

#include <stdint.h>

namespace dcn
{
namespace fused
{

size_t nhwcBytes(DcnParams const& p)
{
    size_t const elem = elemBytes(p);
    // FP32 in 3xTF32: room for the weights' small TF32 parts too (operandParts).
    size_t const parts = kernelType(p) == kDCN_FLOAT32 && p.math != kDCN_MATH_TF32 ? 2 : 1;
    return alignUp(size_t(p.n) * p.c * p.h * p.w * elem)
        + alignUp(parts * p.cout * (p.c / p.group) * p.kh * p.kw * elem);
}

int weightPartOf(TileShape const& t, DcnParams const& p)
{
    if (!t.nhwc)
        return kPartOihw;
    int const bk = weightBk(t, p);
    if (bk == 128)
        return kPartK128;
    if (bk == 64)
        return kPartK64;
    return t.wgmma && kernelType(p) == kDCN_FLOAT32 ? kPartWg32 : kPartK32;
}

int32_t weightModeOf(TileShape const& t, DcnParams const& p)
{
    if (!(t.wgmma && kernelType(p) == kDCN_FLOAT32))
        return kWeightCopy;
    return p.math == kDCN_MATH_TF32 ? kWeightTf32 : kWeightSplit;
}

size_t preparedOffset(DcnParams const& p, int part)
{
    size_t const one = alignUp(size_t(p.cout) * (p.c / p.group) * p.kh * p.kw * elemBytes(p));
    bool const quant = p.quant != kDCN_QUANT_NONE;
    bool const fp32 = kernelType(p) == kDCN_FLOAT32;
    // A quantized layer: its OIHW buffer (values, then the weight scales) and 128-channel chunks, or
    // 64-channel blocks where two kernel points share a chunk (kpPairApplies).
    bool const held[kWeightParts] = {true, !quant && nhwcApplies(p, 32),
        (!quant && !fp32 && nhwcApplies(p, 64)) || kpPairApplies(p), fp32 && nhwcApplies(p, 32),
        quant && nhwcApplies(p, 128)};
    size_t offset = 0;
    for (int i = 0; i < kWeightParts; ++i)
    {
        if (i == part)
            return held[i] ? offset : SIZE_MAX;
        if (held[i])
            offset += i == kPartWg32 && p.math != kDCN_MATH_TF32 ? 2 * one
                : i == kPartOihw && quant                      ? alignUp(quantWeightBytes(p))
                                                               : one;
    }
    return offset; // part == kWeightParts: the end
}

size_t quantScalesOffset(DcnParams const& p)
{
    return (size_t(p.cout) * (p.c / p.group) * p.kh * p.kw + 15) / 16 * 16;
}

size_t quantWeightBytes(DcnParams const& p)
{
    return quantScalesOffset(p) + size_t(p.cout) * sizeof(float);
}

size_t preparedBytes(DcnParams const& p)
{
    return preparedOffset(p, kWeightParts);
}

} // namespace fused
} // namespace dcn
