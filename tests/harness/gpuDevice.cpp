/*
 * dcnconvert plugin harness, `gpu` mode: one onShapeChange + enqueue on device buffers.
 */
#include "gpuCases.h"

#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::IPluginV3OneRuntime;

namespace harness
{

bool runOnDevice(IPluginV3OneRuntime* rt, Problem const& p, DataType t, HostData const& data, size_t workspaceBytes,
    std::vector<uint8_t>& out, std::string const& what)
{
    std::vector<Dims> const inDims = p.inputDims();
    Dims const outDims = p.outputDims();
    auto in = staticDescs(inDims, t);
    auto o = staticDescs({outDims}, t);
    int32_t const s = rt->onShapeChange(in.data(), p.nbInputs(), o.data(), 1);
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
        ok = HCUDA(cudaMalloc(&buffers[i], data.inputs[i].size()))
            && HCUDA(cudaMemcpy(buffers[i], data.inputs[i].data(), data.inputs[i].size(), cudaMemcpyHostToDevice));
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
