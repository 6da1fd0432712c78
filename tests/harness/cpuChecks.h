/*
 * dcnconvert plugin harness, `cpu` mode: the check families (CpuRun) and their shared helpers.
 * Internal to the harness; runCpu (cpuChecks.cpp) runs the families in order.
 */
#ifndef DCN_HARNESS_CPU_CHECKS_H
#define DCN_HARNESS_CPU_CHECKS_H

#include "harness.h"

#include <string>
#include <vector>

namespace harness
{

bool containsAll(std::string const& text, std::vector<char const*> const& parts);

//! True when some error logged since `mark` contains every part.
bool loggedError(TestLogger const& logger, size_t mark, std::vector<char const*> const& parts);

//! True when some message of exactly `severity` logged since `mark` contains every part.
bool loggedAt(TestLogger const& logger, size_t mark, nvinfer1::ILogger::Severity severity,
    std::vector<char const*> const& parts);

//! "math TF32" or "math ACCURATE": how the plugin's kVERBOSE DcnParams line names DcnParams.math.
inline char const* mathText(Attrs const& a)
{
    return a.allowTf32 != 0 ? "math TF32" : "math ACCURATE";
}

//! True when some error recorded since `mark` contains every part.
bool recordedError(TestErrorRecorder const& rec, size_t mark, std::vector<char const*> const& parts);

//! Build-time descriptors: desc.dims = min = opt = max = dims, linear, scale 1.
std::vector<nvinfer1::DynamicPluginTensorDesc> dynamicDescs(
    std::vector<nvinfer1::Dims> const& dims, nvinfer1::DataType type);

//! getOutputShapes with every input dim a constant; returns the status and the output dims.
int32_t constantShapes(nvinfer1::IPluginV3OneBuild* build, std::vector<nvinfer1::Dims> const& in, nvinfer1::Dims& out);

std::string attrsText(Attrs const& a);

bool sameAttrs(Attrs const& a, Attrs const& b);

//! A quantized node's fields as the ONNX parser passes them (cpuQuantChecks.cpp): x 2 x 64 x 9 x 7,
//! 6 output channels, 3x3, 2 groups, 2 deformable groups; quant_type "int8" (INT8 weights) or
//! "fp8e4m3" (E4M3 values as FLOAT16), x_scale, weight_scale, a FLOAT32 bias and, optionally,
//! output_scale. Not copyable: the fields point into it.
struct QuantNode
{
    QuantNode(bool fp8Node, bool withOutputScale);
    QuantNode(QuantNode const&) = delete;
    QuantNode& operator=(QuantNode const&) = delete;

    Problem problem;
    bool fp8;
    bool outputScale;
    int32_t shape[4]{6, 32, 3, 3};
    std::vector<int8_t> int8Weight;
    std::vector<uint16_t> halfWeight; //!< FP16 bits of E4M3 values
    std::vector<float> values;        //!< the node's weight values (INT8 or E4M3) as floats
    std::vector<float> weightScale;
    std::vector<float> bias;
    float xScale{0.05F};
    float outScale{0.25F};
    FieldSet base;
    std::vector<nvinfer1::PluginField> fields;

    nvinfer1::DataType qtype() const
    {
        return fp8 ? nvinfer1::DataType::kFP8 : nvinfer1::DataType::kINT8;
    }
    //! `fields` with the field `name` replaced by `replacement`, or dropped when it is null; appended
    //! when `name` is not among them.
    std::vector<nvinfer1::PluginField> with(char const* name, nvinfer1::PluginField const* replacement) const;
};

//! The value of an FP8 E4M3FN code, and the FP16 bits of a float that FP16 holds exactly (normal or 0).
double e4m3Value(uint8_t code);
uint16_t halfBitsOf(float value);

//! The `cpu` mode's check families, one file each:
//!   identity, pipeline                 cpuPipelineChecks.cpp
//!   symbolicShapes, shapeErrors        cpuShapeChecks.cpp
//!   typeChecks, formatCombinations     cpuTypeFormatChecks.cpp
//!   badFields                          cpuFieldChecks.cpp
//!   embeddedWeights                    cpuEmbeddedChecks.cpp
//!   allowTf32                          cpuTf32Checks.cpp
//!   runtimeErrors                      cpuRuntimeChecks.cpp
//!   quantFields                        cpuQuantChecks.cpp
//!   quantTypes, quantFormats           cpuQuantTypeChecks.cpp
class CpuRun
{
public:
    CpuRun(PluginLibrary& lib, nvinfer1::IPluginCreatorV3One* creator, TestLogger& logger)
        : mLib(lib)
        , mCreator(creator)
        , mLogger(logger)
    {
    }

    void identity();
    void pipeline(Problem const& p);
    void symbolicShapes(Problem const& p);
    void typeChecks();
    void shapeErrors();
    void formatCombinations(Problem const& p);
    void badFields();
    void embeddedWeights();
    void allowTf32();
    void runtimeErrors();
    void quantFields(bool fp8, bool outputScale);
    void quantBadFields();
    void quantTypes(bool fp8, bool outputScale);
    void quantFormats(bool fp8, bool outputScale, int64_t channels);

private:
    PluginPtr create(Attrs const& a, nvinfer1::TensorRTPhase phase = nvinfer1::TensorRTPhase::kBUILD)
    {
        FieldSet f(a);
        return PluginPtr(mCreator->createPlugin("dcn_layer", f.collection(), phase));
    }

    PluginLibrary& mLib;
    nvinfer1::IPluginCreatorV3One* mCreator;
    TestLogger& mLogger;
};

} // namespace harness

#endif // DCN_HARNESS_CPU_CHECKS_H
