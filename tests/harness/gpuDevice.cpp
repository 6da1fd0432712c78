/*
 * dcnconvert plugin harness, `gpu` mode: a case's fields and tensor descriptions, and one
 * onShapeChange + enqueue on device buffers.
 */
#include "gpuCases.h"

#include <cstring>

#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::IPluginV3OneRuntime;

namespace harness
{

namespace
{

//! NCHW element bits -> NHWC.
std::vector<uint8_t> toChannelLast(std::vector<uint8_t> const& x, Dims const& d, size_t elem)
{
    std::vector<uint8_t> y(x.size());
    int64_t const n = d.d[0], c = d.d[1], hw = d.d[2] * d.d[3];
    for (int64_t i = 0; i < n; ++i)
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t q = 0; q < hw; ++q)
                std::memcpy(&y[((i * hw + q) * c + ch) * elem], &x[((i * c + ch) * hw + q) * elem], elem);
    return y;
}

} // namespace

CaseFields::CaseFields(Case const& c, HostData const& data)
    : mBase(c.p.attrs)
{
    nvinfer1::PluginFieldCollection const* base = mBase.collection();
    mFields.assign(base->fields, base->fields + base->nbFields);
    if (c.embed)
    {
        using nvinfer1::PluginFieldType;
        PluginFieldType const floating = c.type == DataType::kFLOAT ? PluginFieldType::kFLOAT32
            : c.type == DataType::kHALF                              ? PluginFieldType::kFLOAT16
                                                                     : PluginFieldType::kBF16;
        PluginFieldType const weight = c.quantized() ? c.weightField : floating;
        int64_t const wd[4] = {c.p.cout, c.p.c / c.p.attrs.group, c.p.kh, c.p.kw};
        for (int32_t k = 0; k < 4; ++k)
        {
            mShape[k] = static_cast<int32_t>(wd[k]);
        }
        auto const count = [](std::vector<uint8_t> const& bits, PluginFieldType t) {
            return static_cast<int32_t>(bits.size() / elementSize(fieldElementType(t)));
        };
        mFields.emplace_back("weight", data.inputs[3].data(), weight, count(data.inputs[3], weight));
        mFields.emplace_back("weight_shape", mShape, PluginFieldType::kINT32, 4);
        if (c.p.bias)
        {
            mFields.emplace_back("bias", data.inputs[4].data(), floating, count(data.inputs[4], floating));
        }
        if (c.quantized())
        {
            // quant_type as the ONNX parser passes a STRING attribute: with its NUL.
            char const* const name = c.quant == Quant::kINT8 ? "int8" : "fp8e4m3";
            mFields.emplace_back("quant_type", name, PluginFieldType::kCHAR, static_cast<int32_t>(std::strlen(name) + 1));
            mFields.emplace_back("x_scale", &data.xScale, PluginFieldType::kFLOAT32, 1);
            mFields.emplace_back("weight_scale", data.weightScale.data(), PluginFieldType::kFLOAT32,
                static_cast<int32_t>(data.weightScale.size()));
            if (c.outputScale)
            {
                mFields.emplace_back("output_scale", &data.outputScale, PluginFieldType::kFLOAT32, 1);
            }
        }
    }
    mCollection.nbFields = static_cast<int32_t>(mFields.size());
    mCollection.fields = mFields.data();
}

std::vector<nvinfer1::PluginTensorDesc> inputDescs(Case const& c, HostData const& data)
{
    std::vector<Dims> dims = c.p.inputDims();
    dims.resize(static_cast<size_t>(c.nbInputs()));
    auto in = staticDescs(dims, c.type);
    in[0].type = c.qType();
    in[0].format = c.xFormat;
    // PluginTensorDesc::scale is "only valid when data type is DataType::kINT8" (else -1): an INT8
    // x carries x_scale, as TensorRT 10 gives it; the plugin compares it with the field.
    if (c.quantized())
    {
        for (auto& d : in)
        {
            d.scale = -1.F;
        }
        in[0].scale = c.quant == Quant::kINT8 ? data.xScale : -1.F;
    }
    return in;
}

nvinfer1::PluginTensorDesc outputDesc(Case const& c, HostData const& data)
{
    nvinfer1::PluginTensorDesc out = staticDescs({c.p.outputDims()}, c.outType())[0];
    if (c.quantized())
    {
        out.scale = c.quant == Quant::kINT8 && c.outputScale ? data.outputScale : -1.F;
    }
    return out;
}

bool runOnDevice(IPluginV3OneRuntime* rt, Case const& c, HostData const& data, size_t workspaceBytes,
    std::vector<uint8_t>& out, std::string const& what)
{
    std::vector<Dims> inDims = c.p.inputDims();
    inDims.resize(static_cast<size_t>(c.nbInputs()));
    Dims const outDims = c.p.outputDims();
    auto in = inputDescs(c, data);
    nvinfer1::PluginTensorDesc o = outputDesc(c, data);
    int32_t const s = rt->onShapeChange(in.data(), static_cast<int32_t>(inDims.size()), &o, 1);
    HCHECK(s == 0, what << ": onShapeChange");
    if (s != 0)
    {
        return false;
    }
    std::vector<void*> buffers(inDims.size(), nullptr);
    void* outBuffer = nullptr;
    void* workspace = nullptr;
    cudaStream_t stream = nullptr;
    size_t const outBytes = static_cast<size_t>(volume(outDims)) * elementSize(c.outType());
    int32_t const fill = c.outType() == DataType::kINT8 ? 0x80 : 0xFF;
    bool ok = HCUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (size_t i = 0; ok && i < inDims.size(); ++i)
    {
        std::vector<uint8_t> const& bits = i == 0 && c.xFormat != nvinfer1::TensorFormat::kLINEAR
            ? toChannelLast(data.inputs[0], inDims[0], elementSize(c.qType()))
            : data.inputs[i];
        ok = HCUDA(cudaMalloc(&buffers[i], bits.size()))
            && HCUDA(cudaMemcpy(buffers[i], bits.data(), bits.size(), cudaMemcpyHostToDevice));
    }
    ok = ok && HCUDA(cudaMalloc(&outBuffer, outBytes)) && HCUDA(cudaMemset(outBuffer, fill, outBytes));
    if (ok && workspaceBytes > 0)
    {
        ok = HCUDA(cudaMalloc(&workspace, workspaceBytes));
    }
    if (ok)
    {
        std::vector<void const*> inPtrs(buffers.begin(), buffers.end());
        void* outPtrs[1] = {outBuffer};
        int32_t const e = rt->enqueue(in.data(), &o, inPtrs.data(), outPtrs, workspace, stream);
        HCHECK(e == 0, what << ": enqueue returns 0 (got " << e << ")");
        ok = e == 0 && HCUDA(cudaStreamSynchronize(stream)) && HCUDA(cudaGetLastError());
        out.assign(outBytes, 0);
        ok = ok && HCUDA(cudaMemcpy(out.data(), outBuffer, outBytes, cudaMemcpyDeviceToHost));
    }
    for (void* b : buffers)
    {
        if (b != nullptr)
        {
            HCUDA(cudaFree(b));
        }
    }
    if (outBuffer != nullptr)
    {
        HCUDA(cudaFree(outBuffer));
    }
    if (workspace != nullptr)
    {
        HCUDA(cudaFree(workspace));
    }
    if (stream != nullptr)
    {
        HCUDA(cudaStreamDestroy(stream));
    }
    return ok;
}

} // namespace harness
