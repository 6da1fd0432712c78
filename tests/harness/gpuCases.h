/*
 * dcnconvert plugin harness, `gpu` mode: a case (problem, types, seed), its host data, and the steps
 * shared by the case runners (gpuCases.cpp): inputs (gpuInputs.cpp; quantized ones and the quantized
 * cases in gpuQuantCases.cpp), running on the device (gpuDevice.cpp) and writing the results
 * (gpuManifest.cpp). Internal to the harness.
 */
#ifndef DCN_HARNESS_GPU_CASES_H
#define DCN_HARNESS_GPU_CASES_H

#include "harness.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <fstream>
#include <random>
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

//! The quantization of a case's node: the fields quant_type ("int8", "fp8e4m3"), x_scale,
//! weight_scale and, optionally, output_scale.
enum class Quant
{
    kNONE,
    kINT8,
    kFP8
};

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
    //! A quantized node (embed must be set: it carries its weights): x is INT8 or FP8, `type` is the
    //! float type of offset, mask and bias, the field `weight` has the type weightField (INT8, or
    //! FLOAT16/FLOAT32/BF16 holding E4M3 values), and the output has `type` or, with outputScale,
    //! the quantized type.
    Quant quant{Quant::kNONE};
    bool outputScale{false};
    nvinfer1::PluginFieldType weightField{nvinfer1::PluginFieldType::kINT8};
    int32_t nbInputs() const
    {
        return embed ? 3 : p.nbInputs();
    }
    bool quantized() const
    {
        return quant != Quant::kNONE;
    }
    //! The quantized type of a quantized case (kINT8 or kFP8); `type` for a float case.
    nvinfer1::DataType qType() const
    {
        return quant == Quant::kINT8 ? nvinfer1::DataType::kINT8
            : quant == Quant::kFP8   ? nvinfer1::DataType::kFP8
                                     : type;
    }
    nvinfer1::DataType outType() const
    {
        return outputScale ? qType() : type;
    }
};

struct HostData
{
    //! x, offset, mask, weight[, bias] as element bits (a quantized case: x as INT8 or E4M3 bytes and
    //! the weight as the elements of its field).
    std::vector<std::vector<uint8_t>> inputs;
    //! A quantized case's scales (the fields x_scale, weight_scale, output_scale).
    float xScale{0.F};
    std::vector<float> weightScale;
    float outputScale{0.F};
};

//! Bytes of one element: 4 (FLOAT), 2 (HALF, BF16) or 1 (INT8, FP8).
size_t elementSize(nvinfer1::DataType t);

//! The DataType whose elements a PluginField of `t` holds (kINT8, kFLOAT32, kFLOAT16, kBF16).
nvinfer1::DataType fieldElementType(nvinfer1::PluginFieldType t);

//! Host values converted to the bits of a float type (FLOAT, HALF, BF16; round to nearest even).
std::vector<uint8_t> encode(std::vector<float> const& v, nvinfer1::DataType t);

int64_t volume(nvinfer1::Dims const& d);

//! Seeded random inputs of a case (x, offset with some samples far outside, mask in [0, 1), weight, bias).
HostData makeInputs(Case const& c);

//! A quantized case's x and weight (values on the 8-bit grid) and its scales (gpuQuantCases.cpp).
void makeQuantInputs(Case const& c, std::mt19937& rng, HostData& data);

//! The quantized cases (gpuQuantCases.cpp).
std::vector<Case> quantCases();

//! The descriptions of a case's tensors at onShapeChange/enqueue: x (its type, format and, for an
//! INT8 x, x_scale as TensorRT 10 gives it), offset, mask[, weight, bias] and the output.
std::vector<nvinfer1::PluginTensorDesc> inputDescs(Case const& c, HostData const& data);
nvinfer1::PluginTensorDesc outputDesc(Case const& c, HostData const& data);

//! onShapeChange + enqueue on fresh device buffers; the output is pre-filled with 0xFF (NaN for the
//! float types and FP8; INT8 outputs with 0x80, -128, which only a saturated value takes). x goes in
//! as c.xFormat (channel-last: transposed on upload); with c.embed only x, offset and mask go in.
bool runOnDevice(nvinfer1::IPluginV3OneRuntime* rt, Case const& c, HostData const& data, size_t workspaceBytes,
    std::vector<uint8_t>& out, std::string const& what);

//! The fields of a case: its attributes and, with c.embed, the weights and bias of `data` as the
//! tensor fields (in the case's type; a quantized case's weight as c.weightField) and weight_shape;
//! a quantized case's quant_type, x_scale, weight_scale[, output_scale]. Points into c and data.
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

//! Where the cases run: on the device, or only through the build-phase calls and deserialization
//! (`gpu-inputs` mode: no device; the inputs are written with an all-zero output).
enum class RunOn
{
    kDEVICE,
    kNONE
};

//! A case's full call sequence (build phase, clone + attach, deserialized plugin) and, on the
//! device, enqueue of both plugins; writes its files (gpuCases.cpp).
void runCase(nvinfer1::IPluginCreatorV3One* creator, Case const& c, std::string const& outDir,
    std::ofstream& manifest, RunOn where);

//! Writes the inputs and output of a case to <outDir>/<case>_<tensor>.bin (a quantized case also
//! <case>_weight_scale.bin) and one manifest line.
void writeCase(std::string const& outDir, std::ofstream& manifest, Case const& c, HostData const& data,
    std::vector<uint8_t> const& output, RuntimeCompare runtime, std::string const& path);

} // namespace harness

#endif // DCN_HARNESS_GPU_CASES_H
