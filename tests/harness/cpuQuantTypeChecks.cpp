/*
 * dcnconvert plugin harness, `cpu` mode: what a quantized node takes and gives: output data types,
 * supportsFormatCombination over every position x type x format, the DcnParams it hands the core,
 * TensorRT's PluginTensorDesc::scale against the fields, and the type errors of a deserialized plugin.
 */
#include "cpuChecks.h"

#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::IPluginV3OneBuild;
using nvinfer1::IPluginV3OneRuntime;
using nvinfer1::PluginFieldCollection;
using nvinfer1::TensorFormat;
using nvinfer1::TensorRTPhase;

namespace harness
{
namespace
{

PluginPtr createQuant(nvinfer1::IPluginCreatorV3One* creator, QuantNode& node, TensorRTPhase phase)
{
    PluginFieldCollection fc{static_cast<int32_t>(node.fields.size()), node.fields.data()};
    return PluginPtr(creator->createPlugin("quant_layer", &fc, phase));
}

//! x, offset, mask (the node carries its weights).
std::vector<Dims> quantInputDims(Problem const& p)
{
    std::vector<Dims> dims = p.inputDims();
    dims.resize(3);
    return dims;
}

bool floatType(DataType t)
{
    return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16;
}

} // namespace

void CpuRun::quantTypes(bool fp8, bool outputScale)
{
    QuantNode node(fp8, outputScale);
    std::string const what = std::string(fp8 ? "fp8e4m3" : "int8") + (outputScale ? " with output_scale" : "");
    PluginPtr plugin = createQuant(mCreator, node, TensorRTPhase::kBUILD);
    HCHECK(plugin != nullptr, "createPlugin for the type checks (" << what << ")");
    if (!plugin)
    {
        return;
    }
    IPluginV3OneBuild* build = buildOf(plugin.get());
    DataType const q = node.qtype();
    DataType const other = fp8 ? DataType::kINT8 : DataType::kFP8;
    for (DataType f : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16})
    {
        DataType in[3] = {q, f, f};
        DataType out = DataType::kINT32;
        size_t const mark = mLogger.entries.size();
        HCHECK(build->getOutputDataTypes(&out, 1, in, 3) == 0 && out == (outputScale ? q : f)
                && mLogger.errorsSince(mark).empty(),
            "getOutputDataTypes (" << what << ", offset " << typeName(f) << ") -> "
                                   << typeName(outputScale ? q : f));
    }
    struct Bad
    {
        DataType in[3];
        std::vector<char const*> expect;
    };
    std::vector<Bad> const bad = {
        {{DataType::kHALF, DataType::kHALF, DataType::kHALF}, {"'x'", "HALF", fp8 ? "FP8" : "INT8", "QuantizeLinear"}},
        {{other, DataType::kHALF, DataType::kHALF}, {"'x'", typeName(other), fp8 ? "FP8" : "INT8"}},
        {{q, q, q}, {"'offset'", fp8 ? "FP8" : "INT8", "FLOAT, HALF and BF16"}},
    };
    for (Bad const& b : bad)
    {
        DataType out = DataType::kINT32;
        size_t const mark = mLogger.entries.size();
        HCHECK(build->getOutputDataTypes(&out, 1, b.in, 3) != 0 && loggedError(mLogger, mark, b.expect),
            "getOutputDataTypes (" << what << ") rejects x " << typeName(b.in[0]) << ", offset "
                                   << typeName(b.in[1]) << " naming the input and type");
    }
    DataType mixed[3] = {q, DataType::kHALF, DataType::kFLOAT};
    DataType out = DataType::kINT32;
    size_t mark = mLogger.entries.size();
    HCHECK(build->getOutputDataTypes(&out, 1, mixed, 3) == 0
            && loggedAt(mLogger, mark, nvinfer1::ILogger::Severity::kWARNING, {"'mask'", "FLOAT", "HALF"}),
        "getOutputDataTypes warns when mask and offset differ (" << what << ")");

    // configurePlugin and the DcnParams of getWorkspaceSize (kVERBOSE line).
    Problem const& p = node.problem;
    DataType const outType = outputScale ? q : DataType::kHALF;
    auto in = dynamicDescs(quantInputDims(p), DataType::kHALF);
    in[0].desc.type = q;
    in[0].desc.scale = -1.F;
    auto o = dynamicDescs({p.outputDims()}, outType);
    o[0].desc.scale = -1.F;
    mark = mLogger.entries.size();
    HCHECK(build->configurePlugin(in.data(), 3, o.data(), 1) == 0 && mLogger.errorsSince(mark).empty(),
        "configurePlugin with x " << typeName(q) << ", offset/mask HALF, output " << typeName(outType));
    mark = mLogger.entries.size();
    build->getWorkspaceSize(in.data(), 3, o.data(), 1);
    std::vector<char const*> params = {"getWorkspaceSize", fp8 ? "quant fp8e4m3" : "quant int8", "x_scale 0.05",
        "dtype FLOAT16", outputScale ? (fp8 ? "out FP8E4M3" : "out INT8") : "out FLOAT16"};
    if (outputScale)
    {
        params.push_back("output_scale 0.25");
    }
    HCHECK(loggedAt(mLogger, mark, nvinfer1::ILogger::Severity::kVERBOSE, params),
        "getWorkspaceSize hands the core quant, x_scale, dtype (offset's), outType" << (outputScale ? ", outScale" : "")
                                                                                   << " (" << what << ")");

    // PluginTensorDesc::scale: used only as a check against the fields (INT8 only; -1 = none).
    auto warnings = [&](size_t from) {
        return loggedAt(mLogger, from, nvinfer1::ILogger::Severity::kWARNING, {"PluginTensorDesc::scale"});
    };
    in[0].desc.scale = node.xScale;
    o[0].desc.scale = outputScale ? node.outScale : -1.F;
    mark = mLogger.entries.size();
    build->configurePlugin(in.data(), 3, o.data(), 1);
    HCHECK(!warnings(mark), "a desc scale equal to the fields gives no warning (" << what << ")");
    in[0].desc.scale = 0.5F;
    mark = mLogger.entries.size();
    build->configurePlugin(in.data(), 3, o.data(), 1);
    bool const warned = loggedAt(mLogger, mark, nvinfer1::ILogger::Severity::kWARNING,
        {"quant_layer", "x has scale 0.5", "x_scale is 0.05", "uses the node's fields"});
    HCHECK(fp8 ? !warnings(mark) : warned,
        (fp8 ? "an FP8 x's desc scale (documented for INT8 only) is not compared"
             : "an INT8 x whose desc scale differs from x_scale: a warning naming both, the fields used"));
    mark = mLogger.entries.size();
    build->configurePlugin(in.data(), 3, o.data(), 1);
    HCHECK(!warnings(mark), "the scale warning comes once per plugin (" << what << ")");

    // A deserialized plugin: the configurations onShapeChange refuses, before any device work.
    PluginPtr restored = createQuant(mCreator, node, TensorRTPhase::kRUNTIME);
    TestErrorRecorder recorder;
    TestResourceContext context(&recorder);
    PluginPtr attached(restored ? runtimeOf(restored.get())->attachToContext(&context) : nullptr);
    HCHECK(attached != nullptr, "createPlugin(kRUNTIME) and attachToContext (" << what << ")");
    if (!attached)
    {
        return;
    }
    IPluginV3OneRuntime* rt = runtimeOf(attached.get());
    auto sin = staticDescs(quantInputDims(p), DataType::kHALF);
    sin[0].type = q;
    auto sout = staticDescs({p.outputDims()}, outType);
    struct RuntimeCase
    {
        char const* what;
        int32_t input; // -1: the output
        DataType type;
        TensorFormat format;
        std::vector<char const*> expect;
    };
    std::vector<RuntimeCase> const cases = {
        {"mask of another type than offset", 2, DataType::kFLOAT, TensorFormat::kLINEAR, {"'mask'", "FLOAT", "offset"}},
        {"x as HALF", 0, DataType::kHALF, TensorFormat::kLINEAR, {"x has type HALF", fp8 ? "FP8" : "INT8"}},
        {"x in kHWC8", 0, q, TensorFormat::kHWC8, {"'x'", "format 2"}},
        {"an output of the wrong type", -1, outputScale ? DataType::kHALF : q, TensorFormat::kLINEAR,
            {"the output has type", outputScale ? "output_scale" : "offset"}},
    };
    for (RuntimeCase const& c : cases)
    {
        auto badIn = sin;
        auto badOut = sout;
        nvinfer1::PluginTensorDesc& d = c.input < 0 ? badOut[0] : badIn[c.input];
        d.type = c.type;
        d.format = c.format;
        size_t const before = recorder.errors.size();
        HCHECK(rt->onShapeChange(badIn.data(), 3, badOut.data(), 1) != 0 && recordedError(recorder, before, c.expect),
            "onShapeChange (" << what << ") rejects " << c.what << " with a recorded error naming it");
    }
}

void CpuRun::quantFormats(bool fp8, bool outputScale, int64_t channels)
{
    QuantNode node(fp8, outputScale);
    node.problem.c = channels;
    node.shape[1] = static_cast<int32_t>(channels / node.problem.attrs.group);
    size_t const count = static_cast<size_t>(node.shape[0]) * node.shape[1] * 9;
    node.int8Weight.resize(count, 1);
    node.halfWeight.resize(count, halfBitsOf(1.F));
    node.fields[5].data = fp8 ? static_cast<void const*>(node.halfWeight.data()) : node.int8Weight.data();
    node.fields[5].length = static_cast<int32_t>(count);
    PluginPtr plugin = createQuant(mCreator, node, TensorRTPhase::kBUILD);
    HCHECK(plugin != nullptr, "createPlugin with " << channels << " channels");
    if (!plugin)
    {
        return;
    }
    IPluginV3OneBuild* build = buildOf(plugin.get());
    Problem const& p = node.problem;
    std::vector<Dims> dims = quantInputDims(p);
    dims.push_back(p.outputDims());
    DataType const q = node.qtype();
    int32_t const nbTypes = nvinfer1::EnumMax<DataType>();
    int32_t const nbFormats = nvinfer1::EnumMax<TensorFormat>();
    bool const channelLast = p.c % (32 * p.attrs.group) == 0 && p.c % (32 * p.attrs.deformableGroup) == 0;
    int32_t queried = 0;
    int32_t accepted = 0;
    int32_t mismatches = 0;
    std::string firstMismatch;
    size_t const mark = mLogger.entries.size();
    for (DataType offsetType : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16})
    {
        for (int32_t pos = 0; pos < 4; ++pos)
        {
            for (int32_t t = 0; t < nbTypes; ++t)
            {
                for (int32_t f = 0; f < nbFormats; ++f)
                {
                    // Positions before pos hold an accepted choice: x quantized, offset and mask `offsetType`.
                    std::vector<DynamicPluginTensorDesc> io = dynamicDescs(dims, offsetType);
                    io[0].desc.type = q;
                    io[3].desc.type = outputScale ? q : offsetType;
                    auto const type = static_cast<DataType>(t);
                    auto const format = static_cast<TensorFormat>(f);
                    if (pos == 1 && type != offsetType)
                    {
                        continue; // each offset type once, from its own loop
                    }
                    io[pos].desc.type = type;
                    io[pos].desc.format = format;
                    bool const got = build->supportsFormatCombination(pos, io.data(), 3, 1);
                    bool const linear = format == TensorFormat::kLINEAR;
                    bool const want = pos == 0 ? type == q && (linear || (channelLast && format == TensorFormat::kHWC16))
                        : pos == 1             ? linear && floatType(type)
                        : pos == 2             ? linear && type == offsetType
                                               : linear && type == (outputScale ? q : offsetType);
                    ++queried;
                    accepted += got ? 1 : 0;
                    if (got != want && mismatches++ == 0)
                    {
                        firstMismatch = "first mismatch: pos " + std::to_string(pos) + " type " + typeName(type)
                            + " format " + std::to_string(f) + " offset " + typeName(offsetType);
                    }
                }
            }
        }
    }
    // Per offset type: x LINEAR (+ kHWC16), offset, mask and output LINEAR.
    int32_t const expected = 3 * ((channelLast ? 2 : 1) + 3);
    HCHECK(mismatches == 0 && accepted == expected,
        "supportsFormatCombination, " << (fp8 ? "fp8e4m3" : "int8") << (outputScale ? " with output_scale" : "") << ", "
                                      << channels << " channels, over " << queried << " queries: " << accepted
                                      << " accepted (expected " << expected << ": x " << typeName(q) << " LINEAR"
                                      << (channelLast ? " or kHWC16" : "") << ", offset FLOAT/HALF/BF16, mask as offset, "
                                      << "output " << (outputScale ? typeName(q) : "as offset") << ") " << firstMismatch);
    HCHECK(mLogger.errorsSince(mark).empty(), "no error logged while querying formats");
}

} // namespace harness
