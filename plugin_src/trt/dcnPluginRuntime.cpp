/*
 * dcnconvert: ModulatedDeformConv2d IPluginV3OneRuntime: onShapeChange, enqueue (-> dcnForward)
 * and attachToContext. getFieldsToSerialize is in dcnPluginFields.cpp.
 */
#include "dcnPlugin.h"

#include "checkMacros.h"
#include "dcnPluginTensors.h"

#include "../core/dcnForward.h"

#include <cstdint>
#include <exception>
#include <string>
#include <utility>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::ErrorCode;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;

namespace dcnconvert
{
namespace trt
{

DcnParams DcnPlugin::makeParams(Dims const* inDims, int32_t nbInputs, Dims const& outDims, TensorTypes const& types) const
{
    std::pair<int64_t, int64_t> const hw = checkShapes(viewOf(inDims, nbInputs), mAttrs, true);
    DCN_VALIDATE(outDims.nbDims == 4, "the output must have rank 4, got rank " << outDims.nbDims);
    int64_t const expected[4] = {inDims[kIN_X].d[0], inDims[kIN_WEIGHT].d[0], hw.first, hw.second};
    for (int32_t k = 0; k < 4; ++k)
    {
        DCN_VALIDATE(outDims.d[k] == expected[k],
            "output dimension " << k << " is " << outDims.d[k] << ", expected " << expected[k]);
    }
    DcnParams p{};
    p.n = inDims[kIN_X].d[0];
    p.c = inDims[kIN_X].d[1];
    p.h = inDims[kIN_X].d[2];
    p.w = inDims[kIN_X].d[3];
    p.cout = inDims[kIN_WEIGHT].d[0];
    p.ho = hw.first;
    p.wo = hw.second;
    DCN_VALIDATE(inDims[kIN_WEIGHT].d[2] <= INT32_MAX && inDims[kIN_WEIGHT].d[3] <= INT32_MAX,
        "kernel size " << inDims[kIN_WEIGHT].d[2] << "x" << inDims[kIN_WEIGHT].d[3] << " is too large");
    p.kh = static_cast<int32_t>(inDims[kIN_WEIGHT].d[2]);
    p.kw = static_cast<int32_t>(inDims[kIN_WEIGHT].d[3]);
    p.strideH = mAttrs.stride[0];
    p.strideW = mAttrs.stride[1];
    p.padH = mAttrs.padding[0];
    p.padW = mAttrs.padding[1];
    p.dilationH = mAttrs.dilation[0];
    p.dilationW = mAttrs.dilation[1];
    p.group = mAttrs.group;
    p.deformableGroup = mAttrs.deformableGroup;
    p.withBias = nbInputs == kMAX_INPUTS ? 1 : 0;
    setTypeParams(p, mAttrs, types);
    p.algo = kDCN_ALGO_AUTO;
    p.math = mathOf(mAttrs);
    p.xLayout = mXLayout;
    p.weightLayout = mAttrs.embedded ? kDCN_WEIGHT_PREPARED : kDCN_WEIGHT_OIHW;
    char message[512] = {0};
    DcnStatus const status = dcnValidate(&p, message, sizeof(message));
    DCN_VALIDATE(status == kDCN_SUCCESS, "the core rejected the problem (status " << status << "): " << message);
    return p;
}

void DcnPlugin::checkTypesAndFormats(PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const& out) const
{
    // What supportsFormatCombination accepts: a float node takes one type everywhere; a quantized
    // node its quantized x and one float type for offset and mask (setTypeParams checks x and the
    // output against the fields).
    bool const quantized = mAttrs.quant.quant != kDCN_QUANT_NONE;
    int32_t const lead = quantized && nbInputs > kIN_OFFSET ? kIN_OFFSET : kIN_X;
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        DCN_VALIDATE((quantized && i == kIN_X) || in[i].type == in[lead].type,
            "input '" << kINPUT_NAMES[i] << "' has type " << dataTypeName(in[i].type) << " but "
                      << kINPUT_NAMES[lead] << " has " << dataTypeName(in[lead].type)
                      << (quantized ? "; offset and mask must have the same type" : "; all inputs must have the same type"));
        DCN_VALIDATE(in[i].format == TensorFormat::kLINEAR || (i == kIN_X && channelLastOk(in[i])),
            "input '" << kINPUT_NAMES[i] << "' has format " << static_cast<int32_t>(in[i].format)
                      << "; supported: kLINEAR, and for x the channel-last formats of supportsFormatCombination");
    }
    DCN_VALIDATE(quantized || out.type == in[kIN_X].type,
        "the output has type " << dataTypeName(out.type) << " but x has " << dataTypeName(in[kIN_X].type));
    DCN_VALIDATE(out.format == TensorFormat::kLINEAR,
        "the output has format " << static_cast<int32_t>(out.format) << "; only kLINEAR is supported");
}

int32_t DcnPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    try
    {
        checkIoCounts(in, nbInputs, out, nbOutputs);
        Dims given[kMAX_INPUTS];
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            given[i] = in[i].dims;
        }
        checkTypesAndFormats(in, nbInputs, out[0]);
        warnOnDescScales(in[kIN_X], out[0]);
        Dims dims[kMAX_INPUTS];
        int32_t const logical = logicalDims(given, nbInputs, dims);
        mXLayout = in[kIN_X].format == TensorFormat::kLINEAR ? kDCN_LAYOUT_NCHW : kDCN_LAYOUT_NHWC;
        DcnParams const p = makeParams(dims, logical, out[0].dims, typesOf(in, nbInputs, out[0]));
        mNbInputs = nbInputs;
        if (mDeviceWeights)
        {
            // Made here (once per device and type; a shape change reuses them), never in enqueue,
            // which may run inside a CUDA graph capture.
            mDeviceWeights->get(p);
        }
        // What enqueue will hand the core for these shapes (shape changes only, never per enqueue).
        logMessage(nvinfer1::ILogger::Severity::kVERBOSE, where("onShapeChange") + ": " + paramsText(p));
        return 0;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "onShapeChange", e);
    }
    return -1;
}

int32_t DcnPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    try
    {
        DCN_VALIDATE_CODE(mNbInputs >= kEMBEDDED_INPUTS && mNbInputs <= kMAX_INPUTS, ErrorCode::kINVALID_STATE,
            "enqueue before onShapeChange/configurePlugin: the number of inputs is not known");
        DCN_VALIDATE(inputDesc != nullptr && outputDesc != nullptr && inputs != nullptr && outputs != nullptr,
            "null tensor descriptions or pointers");
        Dims given[kMAX_INPUTS];
        for (int32_t i = 0; i < mNbInputs; ++i)
        {
            given[i] = inputDesc[i].dims;
        }
        checkTypesAndFormats(inputDesc, mNbInputs, outputDesc[0]);
        DCN_VALIDATE(
            (inputDesc[kIN_X].format == TensorFormat::kLINEAR) == (mXLayout == kDCN_LAYOUT_NCHW),
            "x has format " << static_cast<int32_t>(inputDesc[kIN_X].format) << " but onShapeChange saw another");
        Dims dims[kMAX_INPUTS];
        int32_t const logical = logicalDims(given, mNbInputs, dims);
        DcnParams const p = makeParams(dims, logical, outputDesc[0].dims, typesOf(inputDesc, mNbInputs, outputDesc[0]));
        size_t const workspaceSize = dcnWorkspaceSize(&p);
        DCN_VALIDATE(workspaceSize == 0 || workspace != nullptr,
            "the core needs " << workspaceSize << " bytes of workspace but TensorRT passed none");
        void const* weight = mNbInputs > kEMBEDDED_INPUTS ? inputs[kIN_WEIGHT] : nullptr;
        void const* bias = mNbInputs == kMAX_INPUTS ? inputs[kIN_BIAS] : nullptr;
        if (mDeviceWeights)
        {
            DeviceWeights::View const v = mDeviceWeights->get(p); // made by onShapeChange
            weight = v.weight;
            bias = v.bias;
        }
        char message[512] = {0};
        DcnStatus const status = dcnForward(&p, inputs[kIN_X], inputs[kIN_OFFSET], inputs[kIN_MASK], weight, bias,
            outputs[0], workspace, workspaceSize, stream, message, sizeof(message));
        if (status != kDCN_SUCCESS)
        {
            ErrorCode const code = status == kDCN_CUDA_ERROR ? ErrorCode::kFAILED_EXECUTION
                                                              : status == kDCN_INVALID_ARGUMENT
                    ? ErrorCode::kINVALID_ARGUMENT
                    : ErrorCode::kUNSPECIFIED_ERROR;
            reportError(mRecorder, code,
                where("enqueue") + ": dcnForward failed (status " + std::to_string(static_cast<int32_t>(status))
                    + "): " + message);
            return static_cast<int32_t>(status);
        }
        return 0;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "enqueue", e);
    }
    return -1;
}

nvinfer1::IPluginV3* DcnPlugin::attachToContext(nvinfer1::IPluginResourceContext* context) noexcept
{
    try
    {
        auto* attached = new DcnPlugin(*this);
        attached->setErrorRecorder(context != nullptr ? context->getErrorRecorder() : nullptr);
        return attached;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "attachToContext", e);
    }
    return nullptr;
}

} // namespace trt
} // namespace dcnconvert
