/*
 * dcnconvert plugin harness, `gpu` mode: a case (problem, type, seed), its host data, and the steps
 * shared by the case runners (gpuCases.cpp): inputs (gpuInputs.cpp), running on the device
 * (gpuDevice.cpp) and writing the results (gpuManifest.cpp). Internal to the harness.
 */
#ifndef DCN_HARNESS_GPU_CASES_H
#define DCN_HARNESS_GPU_CASES_H

#include "harness.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

//! Runs a CUDA call; on failure records a failed check naming the call and the error and gives false.
#define HCUDA(call)                                                                                                    \
    [&]() {                                                                                                            \
        cudaError_t const e_ = (call);                                                                                 \
        if (e_ != cudaSuccess)                                                                                         \
        {                                                                                                              \
            HCHECK(false, #call << " failed: " << cudaGetErrorName(e_) << ": " << cudaGetErrorString(e_));             \
            return false;                                                                                              \
        }                                                                                                              \
        return true;                                                                                                   \
    }()

namespace harness
{

struct Case
{
    std::string name;
    Problem p;
    nvinfer1::DataType type{nvinfer1::DataType::kFLOAT};
    float offsetScale{2.F};
    uint32_t seed{0};
    //! x's TensorFormat (channel-last ones hold x as [n][h][w][c] on the device; the case files keep NCHW).
    nvinfer1::TensorFormat xFormat{nvinfer1::TensorFormat::kLINEAR};
    //! The weights (and bias) as the fields weight/weight_shape/bias, in the case's type: 3 inputs.
    bool embed{false};
    int32_t nbInputs() const
    {
        return embed ? 3 : p.nbInputs();
    }
};

struct HostData
{
    std::vector<std::vector<uint8_t>> inputs; // x, offset, mask, weight[, bias] as element bits
};

size_t elementSize(nvinfer1::DataType t);

int64_t volume(nvinfer1::Dims const& d);

//! Seeded random inputs of a case (x, offset with some samples far outside, mask in [0, 1), weight, bias).
HostData makeInputs(Case const& c);

//! onShapeChange + enqueue on fresh device buffers; the output is pre-filled with 0xFF (NaN). x goes
//! in as xFormat (channel-last: transposed on upload); with `embed` only x, offset and mask go in.
bool runOnDevice(nvinfer1::IPluginV3OneRuntime* rt, Problem const& p, nvinfer1::DataType t, HostData const& data,
    size_t workspaceBytes, std::vector<uint8_t>& out, std::string const& what,
    nvinfer1::TensorFormat xFormat = nvinfer1::TensorFormat::kLINEAR, bool embed = false);

//! The fields of a case: its attributes and, with c.embed, the weights and bias of `data` as the
//! tensor fields (in the case's type) and weight_shape.
struct CaseFields
{
    CaseFields(Case const& c, HostData const& data);
    nvinfer1::PluginFieldCollection const* collection()
    {
        return &mCollection;
    }

private:
    FieldSet mBase;
    int32_t mShape[4]{};
    std::vector<nvinfer1::PluginField> mFields;
    nvinfer1::PluginFieldCollection mCollection{};
};

//! Outcome of running the deserialized (kRUNTIME) plugin on the same inputs as the build plugin.
enum class RuntimeCompare
{
    kIDENTICAL,   //!< bit-identical outputs
    kDIFFERENT,   //!< compared, and the outputs differ (or the second run failed)
    kNOT_COMPARED //!< no deserialized plugin ran for this case (written as null)
};

//! Writes the inputs and output of a case to <outDir>/<case>_<tensor>.bin and one manifest line.
void writeCase(std::string const& outDir, std::ofstream& manifest, Case const& c, HostData const& data,
    std::vector<uint8_t> const& output, RuntimeCompare runtime, std::string const& path);

} // namespace harness

#endif // DCN_HARNESS_GPU_CASES_H
