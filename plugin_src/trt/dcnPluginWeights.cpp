/*
 * dcnconvert TensorRT glue: device copies of embedded weights (dcnPluginWeights.h).
 */
#include "dcnPluginWeights.h"

#include "checkMacros.h"

#include "../core/dcnForward.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

namespace dcnconvert
{
namespace trt
{
namespace
{

//! Device buffers and a stream freed on every path out of DeviceWeights::make.
struct Scratch
{
    void* src{nullptr};
    void* oihw{nullptr};
    cudaStream_t stream{nullptr};
    ~Scratch()
    {
        if (stream != nullptr)
        {
            (void) cudaStreamSynchronize(stream);
            (void) cudaStreamDestroy(stream);
        }
        for (void* ptr : {src, oihw})
        {
            if (ptr != nullptr)
            {
                (void) cudaFree(ptr);
            }
        }
    }
};

void freeQuietly(void* ptr) noexcept
{
    if (ptr != nullptr)
    {
        (void) cudaFree(ptr); // at process exit the runtime may be gone already: nothing to report
    }
}

} // namespace

std::vector<uint8_t> packQuantWeights(DcnParams const& p, EmbeddedWeights const& host)
{
    size_t const offset = dcnQuantScalesOffset(&p);
    size_t const total = dcnQuantWeightBytes(&p);
    size_t const scaleBytes = host.weightScale.size() * sizeof(float);
    DCN_VALIDATE(p.quant != kDCN_QUANT_NONE && offset >= host.codes.size() && total >= offset + scaleBytes
            && static_cast<int64_t>(host.weightScale.size()) == p.cout,
        "the core's quantized weight layout (scales at byte " << offset << ", " << total << " bytes) does not hold "
            << host.codes.size() << " weights and " << host.weightScale.size() << " scales");
    std::vector<uint8_t> packed(total, 0);
    std::memcpy(packed.data(), host.codes.data(), host.codes.size());
    std::memcpy(packed.data() + offset, host.weightScale.data(), scaleBytes);
    return packed;
}

int32_t dcnTypeOfField(nvinfer1::PluginFieldType type) noexcept
{
    switch (type)
    {
    case nvinfer1::PluginFieldType::kFLOAT32: return kDCN_FLOAT32;
    case nvinfer1::PluginFieldType::kFLOAT16: return kDCN_FLOAT16;
    case nvinfer1::PluginFieldType::kBF16: return kDCN_BFLOAT16;
    default: return -1;
    }
}

DeviceWeights::DeviceWeights(std::shared_ptr<EmbeddedWeights const> host)
    : mHost(std::move(host))
{
}

DeviceWeights::~DeviceWeights()
{
    int current = -1;
    bool const restore = cudaGetDevice(&current) == cudaSuccess;
    for (Entry const& e : mEntries)
    {
        if (cudaSetDevice(e.device) == cudaSuccess)
        {
            freeQuietly(e.prepared);
            freeQuietly(e.bias);
        }
    }
    if (restore)
    {
        (void) cudaSetDevice(current);
    }
    (void) cudaGetLastError();
}

DeviceWeights::View DeviceWeights::get(DcnParams const& p)
{
    int device = 0;
    DCN_CHECK_CUDA(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mMutex);
    for (Entry const& e : mEntries)
    {
        if (e.device == device && e.dtype == p.dtype && e.math == p.math && e.quant == p.quant)
        {
            return View{e.prepared, e.bias};
        }
    }
    Entry const e = make(p, device);
    mEntries.push_back(e);
    return View{e.prepared, e.bias};
}

DeviceWeights::Entry DeviceWeights::make(DcnParams const& p, int32_t device) const
{
    Entry e{device, p.dtype, p.math, p.quant, nullptr, nullptr};
    EmbeddedWeights const& host = *mHost;
    size_t const elem = p.dtype == kDCN_FLOAT32 ? 4 : 2;
    Scratch s;
    char msg[512] = {0};
    try
    {
        DCN_CHECK_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
        DcnParams q = p;
        q.weightLayout = kDCN_WEIGHT_OIHW;
        size_t const preparedSize = dcnPreparedWeightsSize(&q);
        DCN_VALIDATE(preparedSize > 0, "the core has no prepared-weight layout for these parameters");
        DcnStatus st = kDCN_SUCCESS;
        if (p.quant != kDCN_QUANT_NONE)
        {
            // The core's quantized OIHW buffer: the one-byte codes, then the FP32 weight scales at
            // dcnQuantScalesOffset; then prepared like the float weights.
            std::vector<uint8_t> const packed = packQuantWeights(q, host);
            DCN_CHECK_CUDA(cudaMalloc(&s.oihw, packed.size()));
            DCN_CHECK_CUDA(cudaMemcpyAsync(s.oihw, packed.data(), packed.size(), cudaMemcpyHostToDevice, s.stream));
            DCN_CHECK_CUDA(cudaStreamSynchronize(s.stream)); // `packed` is freed on return
        }
        else
        {
            // The field's elements, converted to the run's type, then prepared (OIHW first, then the
            // kernels' K orders).
            DCN_CHECK_CUDA(cudaMalloc(&s.src, host.weight.bytes.size()));
            DCN_CHECK_CUDA(cudaMemcpyAsync(
                s.src, host.weight.bytes.data(), host.weight.bytes.size(), cudaMemcpyHostToDevice, s.stream));
            DCN_CHECK_CUDA(cudaMalloc(&s.oihw, host.weight.count * elem));
            st = dcnConvertElements(s.src, dcnTypeOfField(host.weight.type), s.oihw, p.dtype, host.weight.count,
                s.stream, msg, sizeof(msg));
            DCN_VALIDATE_CODE(st == kDCN_SUCCESS, nvinfer1::ErrorCode::kFAILED_EXECUTION, "weight conversion: " << msg);
        }
        DCN_CHECK_CUDA(cudaMalloc(&e.prepared, preparedSize));
        st = dcnPrepareWeights(&q, s.oihw, e.prepared, preparedSize, s.stream, msg, sizeof(msg));
        DCN_VALIDATE_CODE(st == kDCN_SUCCESS, nvinfer1::ErrorCode::kFAILED_EXECUTION, "weight preparation: " << msg);
        DCN_CHECK_CUDA(cudaStreamSynchronize(s.stream));
        if (host.hasBias)
        {
            (void) cudaFree(s.src);
            s.src = nullptr;
            DCN_CHECK_CUDA(cudaMalloc(&s.src, host.bias.bytes.size()));
            DCN_CHECK_CUDA(cudaMemcpyAsync(
                s.src, host.bias.bytes.data(), host.bias.bytes.size(), cudaMemcpyHostToDevice, s.stream));
            DCN_CHECK_CUDA(cudaMalloc(&e.bias, host.bias.count * elem));
            st = dcnConvertElements(
                s.src, dcnTypeOfField(host.bias.type), e.bias, p.dtype, host.bias.count, s.stream, msg, sizeof(msg));
            DCN_VALIDATE_CODE(st == kDCN_SUCCESS, nvinfer1::ErrorCode::kFAILED_EXECUTION, "bias conversion: " << msg);
            DCN_CHECK_CUDA(cudaStreamSynchronize(s.stream));
        }
        return e;
    }
    catch (...)
    {
        if (s.stream != nullptr)
        {
            (void) cudaStreamSynchronize(s.stream); // nothing still reads or writes what is freed
        }
        freeQuietly(e.prepared);
        freeQuietly(e.bias);
        throw;
    }
}

} // namespace trt
} // namespace dcnconvert
