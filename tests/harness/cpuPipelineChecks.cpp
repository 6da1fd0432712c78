/*
 * dcnconvert plugin harness, `cpu` mode: the creator's identity and fields, and the whole call
 * sequence of a good problem (createPlugin, capabilities, output types and shapes, configure, workspace,
 * clone, attachToContext, onShapeChange, serialization round trip through createPlugin(kRUNTIME)).
 */
#include "cpuChecks.h"

#include <cstring>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::IPluginV3;
using nvinfer1::IPluginV3OneBuild;
using nvinfer1::IPluginV3OneCore;
using nvinfer1::IPluginV3OneRuntime;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;
using nvinfer1::TensorRTPhase;

namespace harness
{

void CpuRun::identity()
{
    nvinfer1::InterfaceInfo const info = mCreator->getInterfaceInfo();
    HCHECK(std::strcmp(info.kind, "PLUGIN CREATOR_V3ONE") == 0 && info.major == 1, "creator is an IPluginCreatorV3One");
    HCHECK(std::strcmp(mCreator->getPluginName(), "ModulatedDeformConv2d") == 0, "creator name");
    HCHECK(std::strcmp(mCreator->getPluginVersion(), "1") == 0, "creator version");
    HCHECK(std::strcmp(mCreator->getPluginNamespace(), "dcnconvert") == 0, "creator namespace");
    PluginFieldCollection const* fc = mCreator->getFieldNames();
    char const* const names[] = {"stride", "padding", "dilation", "group", "deformable_group", "allow_tf32", "weight",
        "weight_shape", "bias", "quant_type", "x_scale", "weight_scale", "output_scale"};
    int32_t const lengths[] = {2, 2, 2, 1, 1, 1, 0, 4, 0, 0, 1, 0, 1};
    PluginFieldType const types[] = {PluginFieldType::kINT32, PluginFieldType::kINT32, PluginFieldType::kINT32,
        PluginFieldType::kINT32, PluginFieldType::kINT32, PluginFieldType::kINT32, PluginFieldType::kFLOAT32,
        PluginFieldType::kINT32, PluginFieldType::kFLOAT32, PluginFieldType::kCHAR, PluginFieldType::kFLOAT32,
        PluginFieldType::kFLOAT32, PluginFieldType::kFLOAT32};
    bool ok = fc != nullptr && fc->nbFields == 13 && fc->fields != nullptr;
    for (int32_t i = 0; ok && i < 13; ++i)
    {
        ok = std::strcmp(fc->fields[i].name, names[i]) == 0 && fc->fields[i].type == types[i]
            && fc->fields[i].length == lengths[i];
    }
    HCHECK(ok,
        "getFieldNames: stride/padding/dilation INT32x2, group/deformable_group INT32x1, then the optional "
        "allow_tf32 INT32x1, weight FLOAT32 (any length), weight_shape INT32x4, bias FLOAT32, quant_type CHAR, "
        "x_scale FLOAT32x1, weight_scale FLOAT32 (any length), output_scale FLOAT32x1 (so that the ONNX parser "
        "passes them on)");
}

void CpuRun::pipeline(Problem const& p)
{
    std::string const tag = attrsText(p.attrs) + " x [" + std::to_string(p.n) + "," + std::to_string(p.c) + ","
        + std::to_string(p.h) + "," + std::to_string(p.w) + "] k " + std::to_string(p.kh) + "x"
        + std::to_string(p.kw) + (p.bias ? " bias" : " no bias");
    size_t const mark = mLogger.entries.size();
    PluginPtr plugin = create(p.attrs);
    HCHECK(plugin != nullptr, "createPlugin(kBUILD) with the ONNX parser's int32 fields: " << tag);
    if (!plugin)
    {
        return;
    }
    HCHECK(std::strcmp(plugin->getInterfaceInfo().kind, "PLUGIN") == 0, "IPluginV3 interface kind");
    IPluginV3OneCore* core = coreOf(plugin.get());
    IPluginV3OneBuild* build = buildOf(plugin.get());
    IPluginV3OneRuntime* runtime = runtimeOf(plugin.get());
    HCHECK(core != nullptr && build != nullptr && runtime != nullptr, "kCORE, kBUILD and kRUNTIME capabilities");
    if (core == nullptr || build == nullptr || runtime == nullptr)
    {
        return;
    }
    HCHECK(std::strcmp(core->getInterfaceInfo().kind, "PLUGIN_V3ONE_CORE") == 0
            && std::strcmp(build->getInterfaceInfo().kind, "PLUGIN_V3ONE_BUILD") == 0
            && std::strcmp(runtime->getInterfaceInfo().kind, "PLUGIN_V3ONE_RUNTIME") == 0,
        "capability interface kinds");
    HCHECK(std::strcmp(core->getPluginName(), "ModulatedDeformConv2d") == 0
            && std::strcmp(core->getPluginVersion(), "1") == 0
            && std::strcmp(core->getPluginNamespace(), "dcnconvert") == 0,
        "IPluginV3OneCore identity");
    HCHECK(build->getNbOutputs() == 1, "getNbOutputs() == 1");

    for (DataType t : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16})
    {
        std::vector<DataType> in(p.nbInputs(), t);
        DataType out = DataType::kINT8;
        int32_t const s = build->getOutputDataTypes(&out, 1, in.data(), p.nbInputs());
        HCHECK(s == 0 && out == t, "getOutputDataTypes(" << typeName(t) << ") -> " << typeName(out));
    }

    std::vector<Dims> const inDims = p.inputDims();
    Dims outDims{};
    int32_t const ss = constantShapes(build, inDims, outDims);
    Dims const expected = p.outputDims();
    HCHECK(ss == 0 && dimsText(outDims) == dimsText(expected),
        "getOutputShapes (constants) -> " << dimsText(outDims) << ", expected " << dimsText(expected));

    // configurePlugin as at build time: desc.dims constant here, min = opt = max.
    auto inDesc = dynamicDescs(inDims, DataType::kFLOAT);
    auto outDesc = dynamicDescs({expected}, DataType::kFLOAT);
    HCHECK(build->configurePlugin(inDesc.data(), p.nbInputs(), outDesc.data(), 1) == 0, "configurePlugin");
    size_t const wsMark = mLogger.entries.size();
    size_t const ws = build->getWorkspaceSize(inDesc.data(), p.nbInputs(), outDesc.data(), 1);
    HCHECK(ws < (size_t{1} << 40), "getWorkspaceSize -> " << ws << " bytes");
    HCHECK(loggedAt(mLogger, wsMark, nvinfer1::ILogger::Severity::kVERBOSE,
               {"layer 'dcn_layer'", "getWorkspaceSize", "DcnParams", mathText(p.attrs)}),
        "getWorkspaceSize sizes DcnParams with " << mathText(p.attrs) << " (allow_tf32 " << p.attrs.allowTf32 << ")");
    HCHECK(mLogger.errorsSince(mark).empty(), "no error logged during the build calls");

    PluginPtr clone(plugin->clone());
    HCHECK(clone != nullptr && clone.get() != plugin.get(), "clone() returns a new object");
    TestErrorRecorder recorder;
    {
        TestResourceContext context(&recorder);
        PluginPtr attached(runtime->attachToContext(&context));
        HCHECK(attached != nullptr && attached.get() != plugin.get(), "attachToContext returns a new object");
        HCHECK(recorder.refCount == 1, "the attached plugin holds a reference to the recorder (" << recorder.refCount << ")");
        if (attached)
        {
            auto inStatic = staticDescs(inDims, DataType::kFLOAT);
            auto outStatic = staticDescs({expected}, DataType::kFLOAT);
            size_t const shapeMark = mLogger.entries.size();
            HCHECK(runtimeOf(attached.get())->onShapeChange(inStatic.data(), p.nbInputs(), outStatic.data(), 1) == 0,
                "onShapeChange on the attached plugin");
            HCHECK(loggedAt(mLogger, shapeMark, nvinfer1::ILogger::Severity::kVERBOSE,
                       {"layer 'dcn_layer'", "onShapeChange", "DcnParams", mathText(p.attrs)}),
                "onShapeChange: the DcnParams for enqueue carry " << mathText(p.attrs));
            Attrs serial{};
            std::string why;
            bool const read = readSerialized(runtimeOf(attached.get())->getFieldsToSerialize(), serial, why);
            HCHECK(read && sameAttrs(serial, p.attrs), "getFieldsToSerialize: INT32 fields equal to the input " << why);
            if (read)
            {
                // Engine deserialization: exactly the serialized fields, phase kRUNTIME.
                PluginPtr restored(mCreator->createPlugin(
                    "dcn_layer", runtimeOf(attached.get())->getFieldsToSerialize(), TensorRTPhase::kRUNTIME));
                HCHECK(restored != nullptr, "createPlugin(kRUNTIME) with the serialized fields");
                if (restored)
                {
                    PluginPtr restoredAttached(runtimeOf(restored.get())->attachToContext(&context));
                    size_t const restoredMark = mLogger.entries.size();
                    HCHECK(restoredAttached != nullptr
                            && runtimeOf(restoredAttached.get())
                                    ->onShapeChange(inStatic.data(), p.nbInputs(), outStatic.data(), 1)
                                == 0,
                        "runtime plugin: attachToContext + onShapeChange");
                    HCHECK(loggedAt(mLogger, restoredMark, nvinfer1::ILogger::Severity::kVERBOSE,
                               {"onShapeChange", "DcnParams", mathText(p.attrs)}),
                        "runtime plugin: the DcnParams for enqueue carry " << mathText(p.attrs));
                    Attrs again{};
                    HCHECK(restoredAttached && readSerialized(runtimeOf(restoredAttached.get())->getFieldsToSerialize(), again, why)
                            && sameAttrs(again, p.attrs),
                        "round trip build -> serialize -> runtime -> serialize is exact");
                }
            }
        }
    }
    HCHECK(recorder.refCount == 0, "recorder references released when the plugins are destroyed (" << recorder.refCount << ")");
    HCHECK(recorder.errors.empty(), "no error recorded");
    Attrs cloned{};
    std::string why;
    HCHECK(clone && readSerialized(runtimeOf(clone.get())->getFieldsToSerialize(), cloned, why)
            && sameAttrs(cloned, p.attrs),
        "the clone has the same fields");
}

} // namespace harness
