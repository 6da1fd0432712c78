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

//! The `cpu` mode's check families, one file each:
//!   identity, pipeline                 cpuPipelineChecks.cpp
//!   symbolicShapes, shapeErrors        cpuShapeChecks.cpp
//!   typeChecks, formatCombinations     cpuTypeFormatChecks.cpp
//!   badFields                          cpuFieldChecks.cpp
//!   embeddedWeights                    cpuEmbeddedChecks.cpp
//!   allowTf32                          cpuTf32Checks.cpp
//!   runtimeErrors                      cpuRuntimeChecks.cpp
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
