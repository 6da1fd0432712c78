/*
 * dcnconvert plugin harness, `gpu` mode: one onShapeChange + enqueue on device buffers.
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
        PluginFieldType const type = c.type == DataType::kFLOAT ? PluginFieldType::kFLOAT32
            : c.type == DataType::kHALF                          ? PluginFieldType::kFLOAT16
                                                                 : PluginFieldType::kBF16;
        int64_t const wd[4] = {c.p.cout, c.p.c / c.p.attrs.group, c.p.kh, c.p.kw};
        for (int32_t k = 0; k < 4; ++k)
        {
            mShape[k] = static_cast<int32_t>(wd[k]);
        }
        size_t const elem = elementSize(c.type);
        mFields.emplace_back("weight", data.inputs[3].data(), type, static_cast<int32_t>(data.inputs[3].size() / elem));
        mFields.emplace_back("weight_shape", mShape, PluginFieldType::kINT32, 4);
        if (c.p.bias)
        {
            mFields.emplace_back("bias", data.inputs[4].data(), type, static_cast<int32_t>(data.inputs[4].size() / elem));
        }
    }
    mCollection.nbFields = static_cast<int32_t>(mFields.size());
    mCollection.fields = mFields.data();
}

bool runOnDevice(IPluginV3OneRuntime* rt, Problem const& p, DataType t, HostData const& data, size_t workspaceBytes,
    std::vector<uint8_t>& out, std::string const& what, nvinfer1::TensorFormat xFormat, bool embed)
{
    std::vector<Dims> inDims = p.inputDims();
    if (embed)
    {
        inDims.resize(3);
    }
    Dims const outDims = p.outputDims();
    auto in = staticDescs(inDims, t);
    in[0].format = xFormat;
    auto o = staticDescs({outDims}, t);
    int32_t const s = rt->onShapeChange(in.data(), static_cast<int32_t>(inDims.size()), o.data(), 1);
    HCHECK(s == 0, what << ": onShapeChange");
    if (s != 0)
    {
        return false;
    }
    std::vector<void*> buffers(inDims.size(), nullptr);
    void* outBuffer = nullptr;
    void* workspace = nullptr;
    cudaStream_t stream = nullptr;
    size_t const outBytes = static_cast<size_t>(volume(outDims)) * elementSize(t);
    bool ok = HCUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (size_t i = 0; ok && i < inDims.size(); ++i)
    {
        std::vector<uint8_t> const& bits = i == 0 && xFormat != nvinfer1::TensorFormat::kLINEAR
            ? toChannelLast(data.inputs[0], inDims[0], elementSize(t))
            : data.inputs[i];
        ok = HCUDA(cudaMalloc(&buffers[i], bits.size()))
            && HCUDA(cudaMemcpy(buffers[i], bits.data(), bits.size(), cudaMemcpyHostToDevice));
    }
    ok = ok && HCUDA(cudaMalloc(&outBuffer, outBytes)) && HCUDA(cudaMemset(outBuffer, 0xFF, outBytes));
    if (ok && workspaceBytes > 0)
    {
        ok = HCUDA(cudaMalloc(&workspace, workspaceBytes));
    }
    if (ok)
    {
        std::vector<void const*> inPtrs(buffers.begin(), buffers.end());
        void* outPtrs[1] = {outBuffer};
        int32_t const e = rt->enqueue(in.data(), o.data(), inPtrs.data(), outPtrs, workspace, stream);
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
