/*
 * dcnconvert: ModulatedDeformConv2d IPluginV3OneBuild: output types and shapes, format
 * combinations, configurePlugin and the workspace size.
 */
#include "dcnPlugin.h"

#include "checkMacros.h"
#include "dcnPluginTensors.h"

#include "../core/dcnForward.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::IDimensionExpr;
using nvinfer1::IExprBuilder;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;

namespace dcnconvert
{
namespace trt
{

bool DcnPlugin::channelLastOk(PluginTensorDesc const& x) const noexcept
{
    // NvInferRuntime.h documents kHWC16 for "FP16, INT8 or FP8" in TensorRT 10.16 and 11.1 (for FP16
    // only in 10.3): a quantized node's x takes it, 16 one-byte channels per vector.
    bool const quantized = mAttrs.quant.quant != kDCN_QUANT_NONE;
    DataType const q = mAttrs.quant.quant == kDCN_QUANT_FP8 ? DataType::kFP8 : DataType::kINT8;
    bool const format = quantized
        ? x.type == q && x.format == TensorFormat::kHWC16
        : (x.type == DataType::kHALF && (x.format == TensorFormat::kHWC8 || x.format == TensorFormat::kHWC16))
            || (x.type == DataType::kBF16 && x.format == TensorFormat::kHWC8)
            || (x.type == DataType::kFLOAT && x.format == TensorFormat::kHWC);
    if (!format || x.dims.nbDims != 4)
    {
        return false;
    }
    int64_t const c = x.dims.d[1];
    return c > 0 && c % (32 * static_cast<int64_t>(mAttrs.group)) == 0
        && c % (32 * static_cast<int64_t>(mAttrs.deformableGroup)) == 0;
}

int32_t DcnPlugin::getNbOutputs() const noexcept
{
    return 1;
}

int32_t DcnPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    try
    {
        DCN_VALIDATE(nbOutputs == 1, "expected 1 output, got " << nbOutputs);
        checkInputCount(nbInputs);
        DCN_VALIDATE(outputTypes != nullptr && inputTypes != nullptr, "null type array");
        if (mAttrs.quant.quant != kDCN_QUANT_NONE)
        {
            DataType const q = quantDataType(mAttrs.quant.quant);
            DCN_VALIDATE(inputTypes[kIN_X] == q,
                "input 'x' has type " << dataTypeName(inputTypes[kIN_X]) << "; a quant_type '"
                                      << quantTypeName(mAttrs.quant.quant) << "' node takes " << dataTypeName(q)
                                      << " (keep the QuantizeLinear in front of it)");
            DCN_VALIDATE(toDcnDataType(inputTypes[kIN_OFFSET]) >= 0,
                "input 'offset' has type " << dataTypeName(inputTypes[kIN_OFFSET])
                                           << "; supported: FLOAT, HALF and BF16 (offset and mask the same)");
            if (inputTypes[kIN_MASK] != inputTypes[kIN_OFFSET])
            {
                logMessage(nvinfer1::ILogger::Severity::kWARNING,
                    where("getOutputDataTypes") + ": input 'mask' has type " + dataTypeName(inputTypes[kIN_MASK])
                        + " but offset has " + dataTypeName(inputTypes[kIN_OFFSET])
                        + "; the plugin takes both in one type, so TensorRT must cast");
            }
            outputTypes[0] = mAttrs.quant.hasOutputScale ? q : inputTypes[kIN_OFFSET];
            return 0;
        }
        DCN_VALIDATE(toDcnDataType(inputTypes[kIN_X]) >= 0,
            "input 'x' has type " << dataTypeName(inputTypes[kIN_X])
                                  << "; supported types are FLOAT, HALF and BF16 (all inputs the same)");
        for (int32_t i = 1; i < nbInputs; ++i)
        {
            if (inputTypes[i] != inputTypes[kIN_X])
            {
                logMessage(nvinfer1::ILogger::Severity::kWARNING,
                    where("getOutputDataTypes") + ": input '" + kINPUT_NAMES[i] + "' has type "
                        + dataTypeName(inputTypes[i]) + " but x has " + dataTypeName(inputTypes[kIN_X])
                        + "; the plugin runs with all inputs of one type, so TensorRT must cast (a strongly typed "
                          "network cannot and will find no format combination)");
            }
        }
        outputTypes[0] = inputTypes[kIN_X];
        return 0;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "getOutputDataTypes", e);
    }
    return -1;
}

int32_t DcnPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs, IExprBuilder& exprBuilder) noexcept
{
    try
    {
        DCN_VALIDATE(nbOutputs == 1, "expected 1 output, got " << nbOutputs);
        DCN_VALIDATE(nbShapeInputs == 0, "the plugin takes no shape inputs, got " << nbShapeInputs);
        DCN_VALIDATE(inputs != nullptr && outputs != nullptr, "null shape array");
        checkInputCount(nbInputs);
        EmbeddedWeights const* const e = mAttrs.embedded.get();
        ShapeView s;
        s.nbInputs = nbInputs;
        for (int32_t i = 0; i < std::min(nbInputs, kMAX_INPUTS); ++i)
        {
            s.rank[i] = inputs[i].nbDims;
            for (int32_t k = 0; k < 4; ++k)
            {
                IDimensionExpr const* d = k < inputs[i].nbDims ? inputs[i].d[k] : nullptr;
                s.d[i][k] = d != nullptr && d->isConstant() ? d->getConstantValue() : kUNKNOWN_DIM;
            }
        }
        // The weight's dims: the input's, or constants from weight_shape when the node carries them.
        IDimensionExpr const* weight[4] = {};
        if (e != nullptr)
        {
            s.nbInputs = e->hasBias ? kMAX_INPUTS : kMIN_INPUTS;
            s.rank[kIN_WEIGHT] = 4;
            for (int32_t k = 0; k < 4; ++k)
            {
                s.d[kIN_WEIGHT][k] = e->shape[k];
                weight[k] = exprBuilder.constant(e->shape[k]);
                DCN_VALIDATE(weight[k] != nullptr, "IExprBuilder::constant(" << e->shape[k] << ") returned null");
            }
            s.rank[kIN_BIAS] = 1;
            s.d[kIN_BIAS][0] = e->shape[0];
        }
        else
        {
            for (int32_t k = 0; k < 4; ++k)
            {
                weight[k] = inputs[kIN_WEIGHT].d[k];
            }
        }
        std::pair<int64_t, int64_t> const hw = checkShapes(s, mAttrs, false);
        DimsExprs const& x = inputs[kIN_X];
        outputs[0].nbDims = 4;
        outputs[0].d[0] = x.d[0];
        outputs[0].d[1] = weight[0];
        outputs[0].d[2] = outputSizeExpr(
            exprBuilder, *x.d[2], *weight[2], mAttrs.stride[0], mAttrs.padding[0], mAttrs.dilation[0], hw.first);
        outputs[0].d[3] = outputSizeExpr(
            exprBuilder, *x.d[3], *weight[3], mAttrs.stride[1], mAttrs.padding[1], mAttrs.dilation[1], hw.second);
        return 0;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "getOutputShapes", e);
    }
    return -1;
}

bool DcnPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    try
    {
        DCN_VALIDATE(inOut != nullptr, "null tensor descriptions");
        checkInputCount(nbInputs);
        DCN_VALIDATE(nbOutputs == 1, "expected 1 output, got " << nbOutputs);
        DCN_VALIDATE(pos >= 0 && pos < nbInputs + nbOutputs,
            "position " << pos << " out of range [0, " << nbInputs + nbOutputs << ")");
        PluginTensorDesc const& desc = inOut[pos].desc;
        if (mAttrs.quant.quant != kDCN_QUANT_NONE)
        {
            // x quantized; offset float; mask as offset; the output as offset, or quantized with output_scale.
            DataType const q = quantDataType(mAttrs.quant.quant);
            DataType const floating = pos > kIN_OFFSET ? inOut[kIN_OFFSET].desc.type : desc.type;
            DataType const want = pos == kIN_X ? q : pos == nbInputs && mAttrs.quant.hasOutputScale ? q : floating;
            if (desc.type != want || (pos != kIN_X && toDcnDataType(floating) < 0))
            {
                return false;
            }
        }
        else if (toDcnDataType(desc.type) < 0 || (pos > 0 && desc.type != inOut[0].desc.type))
        {
            return false;
        }
        if (desc.format == TensorFormat::kLINEAR)
        {
            return true;
        }
        // x may come channel-last (no transpose before the plugin where its producer writes that
        // format): FP16 as kHWC8 or kHWC16, BF16 as kHWC8, FP32 as kHWC, INT8/FP8 as kHWC16, when the
        // channels are known and the channel-vectorised kernel takes them (then kHWC8/kHWC16 hold
        // no padding).
        return pos == kIN_X && channelLastOk(desc);
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "supportsFormatCombination", e);
    }
    return false;
}

int32_t DcnPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    try
    {
        checkIoCounts(in, nbInputs, out, nbOutputs);
        Dims given[kMAX_INPUTS];
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            given[i] = in[i].desc.dims;
        }
        Dims dims[kMAX_INPUTS];
        int32_t const logical = logicalDims(given, nbInputs, dims);
        checkShapes(viewOf(dims, logical), mAttrs, false);
        warnOnDescScales(in[kIN_X].desc, out[0].desc);
        mNbInputs = nbInputs;
        return 0;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "configurePlugin", e);
    }
    return -1;
}

size_t DcnPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept
{
    try
    {
        checkIoCounts(inputs, nbInputs, outputs, nbOutputs);
        // Sized from the profile's maximum dims: desc.dims holds -1 for dynamic dimensions.
        Dims given[kMAX_INPUTS];
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            given[i] = inputs[i].max;
        }
        Dims dims[kMAX_INPUTS];
        int32_t const logical = logicalDims(given, nbInputs, dims);
        Dims const& x = dims[kIN_X];
        Dims const& weight = dims[kIN_WEIGHT];
        Dims const& out = outputs[0].max;
        DCN_VALIDATE(x.nbDims == 4 && weight.nbDims == 4 && out.nbDims == 4,
            "expected rank-4 x, weight and output in the profile's max dims, got ranks "
                << x.nbDims << ", " << weight.nbDims << ", " << out.nbDims);
        auto const clamp = [](int64_t v) { return std::max<int64_t>(v, 0); };
        DcnParams p{};
        p.n = clamp(x.d[0]);
        p.c = clamp(x.d[1]);
        p.h = clamp(x.d[2]);
        p.w = clamp(x.d[3]);
        p.cout = clamp(weight.d[0]);
        p.kh = static_cast<int32_t>(std::min<int64_t>(clamp(weight.d[2]), INT32_MAX));
        p.kw = static_cast<int32_t>(std::min<int64_t>(clamp(weight.d[3]), INT32_MAX));
        int64_t const hoMax
            = dcnOutputSize(p.h, std::max(p.kh, 1), mAttrs.stride[0], mAttrs.padding[0], mAttrs.dilation[0]);
        int64_t const woMax
            = dcnOutputSize(p.w, std::max(p.kw, 1), mAttrs.stride[1], mAttrs.padding[1], mAttrs.dilation[1]);
        p.ho = std::max(clamp(out.d[2]), hoMax);
        p.wo = std::max(clamp(out.d[3]), woMax);
        p.strideH = mAttrs.stride[0];
        p.strideW = mAttrs.stride[1];
        p.padH = mAttrs.padding[0];
        p.padW = mAttrs.padding[1];
        p.dilationH = mAttrs.dilation[0];
        p.dilationW = mAttrs.dilation[1];
        p.group = mAttrs.group;
        p.deformableGroup = mAttrs.deformableGroup;
        p.withBias = logical == kMAX_INPUTS ? 1 : 0;
        p.xLayout = inputs[kIN_X].desc.format == TensorFormat::kLINEAR ? kDCN_LAYOUT_NCHW : kDCN_LAYOUT_NHWC;
        p.weightLayout = mAttrs.embedded ? kDCN_WEIGHT_PREPARED : kDCN_WEIGHT_OIHW;
        DataType const floating = inputs[nbInputs > kIN_OFFSET ? kIN_OFFSET : kIN_X].desc.type;
        setTypeParams(p, mAttrs, TensorTypes{inputs[kIN_X].desc.type, floating, outputs[0].desc.type});
        p.algo = kDCN_ALGO_AUTO;
        p.math = mathOf(mAttrs);
        size_t const bytes = dcnWorkspaceSize(&p);
        logMessage(nvinfer1::ILogger::Severity::kVERBOSE,
            where("getWorkspaceSize") + ": " + std::to_string(bytes) + " bytes for the profile's maximum "
                + paramsText(p));
        return bytes;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "getWorkspaceSize", e);
    }
    return 0;
}

} // namespace trt
} // namespace dcnconvert
