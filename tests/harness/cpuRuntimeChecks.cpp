/*
 * dcnconvert plugin harness, `cpu` mode: runtime errors of a deserialized plugin (enqueue before
 * onShapeChange, mismatching shapes and types, null device pointers) and where they are reported
 * (the context's error recorder, else the logger).
 */
#include "cpuChecks.h"

#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::IPluginV3OneRuntime;
using nvinfer1::TensorRTPhase;

namespace harness
{

void CpuRun::runtimeErrors()
{
    Problem p;
    FieldSet f(p.attrs);
    PluginPtr runtimePlugin(mCreator->createPlugin("rt_layer", f.collection(), TensorRTPhase::kRUNTIME));
    HCHECK(runtimePlugin != nullptr, "createPlugin(kRUNTIME)");
    if (!runtimePlugin)
    {
        return;
    }
    TestErrorRecorder recorder;
    TestResourceContext context(&recorder);
    PluginPtr attached(runtimeOf(runtimePlugin.get())->attachToContext(&context));
    HCHECK(attached != nullptr, "attachToContext");
    if (!attached)
    {
        return;
    }
    IPluginV3OneRuntime* rt = runtimeOf(attached.get());
    auto in = staticDescs(p.inputDims(), DataType::kFLOAT);
    auto out = staticDescs({p.outputDims()}, DataType::kFLOAT);
    void const* inPtrs[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
    void* outPtrs[1] = {nullptr};

    size_t mark = recorder.errors.size();
    int32_t s = rt->enqueue(in.data(), out.data(), inPtrs, outPtrs, nullptr, nullptr);
    HCHECK(s != 0 && recordedError(recorder, mark, {"rt_layer", "onShapeChange"}),
        "enqueue before onShapeChange fails with a recorded error (status " << s << ")");
    HCHECK(mark < recorder.errors.size() && recorder.errors[mark].first == nvinfer1::ErrorCode::kINVALID_STATE,
        "... with ErrorCode kINVALID_STATE");

    auto badOut = out;
    badOut[0].dims.d[2] += 1;
    mark = recorder.errors.size();
    HCHECK(rt->onShapeChange(in.data(), 5, badOut.data(), 1) != 0 && recordedError(recorder, mark, {"output dimension 2"}),
        "onShapeChange rejects an output shape that does not match");
    auto badFormat = out;
    badFormat[0].format = nvinfer1::TensorFormat::kCHW32;
    mark = recorder.errors.size();
    HCHECK(rt->onShapeChange(in.data(), 5, badFormat.data(), 1) != 0
            && recordedError(recorder, mark, {"output", "kLINEAR"}),
        "onShapeChange rejects a non-linear output format");
    auto badType = in;
    badType[3].type = DataType::kHALF;
    mark = recorder.errors.size();
    HCHECK(rt->onShapeChange(badType.data(), 5, out.data(), 1) != 0
            && recordedError(recorder, mark, {"weight", "HALF", "FLOAT"}),
        "onShapeChange rejects mixed input types");
    HCHECK(rt->onShapeChange(in.data(), 5, out.data(), 1) == 0, "onShapeChange with consistent shapes");
    auto badDims = in;
    badDims[1].dims.d[1] = 17;
    mark = recorder.errors.size();
    s = rt->enqueue(badDims.data(), out.data(), inPtrs, outPtrs, nullptr, nullptr);
    HCHECK(s != 0 && recordedError(recorder, mark, {"offset has 17 channels"}),
        "enqueue validates the descriptors before launching (status " << s << ")");
    mark = recorder.errors.size();
    s = rt->enqueue(in.data(), out.data(), inPtrs, outPtrs, nullptr, nullptr);
    HCHECK(s != 0 && recordedError(recorder, mark, {"dcnForward", "NULL"}),
        "enqueue with null device pointers returns the core's failure status " << s << " and its message");
    size_t const logMark = mLogger.entries.size();
    PluginPtr unattached(runtimeOf(runtimePlugin.get())->attachToContext(nullptr));
    HCHECK(unattached != nullptr, "attachToContext(null context) still gives a plugin");
    if (unattached)
    {
        runtimeOf(unattached.get())->enqueue(in.data(), out.data(), inPtrs, outPtrs, nullptr, nullptr);
        HCHECK(loggedError(mLogger, logMark, {"onShapeChange"}), "without a recorder, errors go to the logger");
    }
}

} // namespace harness
