/*
 * dcnconvert plugin harness, `cpu` mode: output data types (unsupported and mixed input types, wrong
 * counts, unknown capability) and supportsFormatCombination over every position x type x format.
 */
#include "cpuChecks.h"

#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::IPluginV3OneBuild;
using nvinfer1::PluginCapabilityType;
using nvinfer1::TensorFormat;

namespace harness
{

void CpuRun::typeChecks()
{
    Problem p;
    PluginPtr plugin = create(p.attrs);
    IPluginV3OneBuild* build = buildOf(plugin.get());
    size_t mark = mLogger.entries.size();
    std::vector<DataType> in(5, DataType::kINT8);
    DataType out = DataType::kFLOAT;
    HCHECK(build->getOutputDataTypes(&out, 1, in.data(), 5) != 0 && loggedError(mLogger, mark, {"INT8", "x"}),
        "getOutputDataTypes rejects INT8 with a message naming the type");
    mark = mLogger.entries.size();
    in = {DataType::kHALF, DataType::kHALF, DataType::kHALF, DataType::kFLOAT, DataType::kFLOAT};
    int32_t const s = build->getOutputDataTypes(&out, 1, in.data(), 5);
    bool warned = false;
    for (size_t i = mark; i < mLogger.entries.size(); ++i)
    {
        warned |= mLogger.entries[i].severity == nvinfer1::ILogger::Severity::kWARNING
            && containsAll(mLogger.entries[i].text, {"weight", "FLOAT", "HALF"});
    }
    HCHECK(s == 0 && out == DataType::kHALF && warned,
        "mixed network types: output follows x, with a warning naming the input");
    mark = mLogger.entries.size();
    HCHECK(build->getOutputDataTypes(&out, 2, in.data(), 5) != 0 && loggedError(mLogger, mark, {"1 output"}),
        "getOutputDataTypes rejects 2 outputs");
    HCHECK(build->getOutputDataTypes(&out, 1, in.data(), 3) != 0 && loggedError(mLogger, mark, {"got 3"}),
        "getOutputDataTypes rejects 3 inputs");
    mark = mLogger.entries.size();
    HCHECK(plugin->getCapabilityInterface(static_cast<PluginCapabilityType>(7)) == nullptr
            && loggedError(mLogger, mark, {"PluginCapabilityType"}),
        "an unknown capability type gives null and a message");
}

void CpuRun::formatCombinations(Problem const& p)
{
    PluginPtr plugin = create(p.attrs);
    IPluginV3OneBuild* build = buildOf(plugin.get());
    int32_t const nbIO = p.nbInputs() + 1;
    std::vector<Dims> dims = p.inputDims();
    dims.push_back(p.outputDims());
    int32_t const nbTypes = nvinfer1::EnumMax<DataType>();
    int32_t const nbFormats = nvinfer1::EnumMax<TensorFormat>();
    bool const channelLastChannels = p.c % (32 * p.attrs.group) == 0 && p.c % (32 * p.attrs.deformableGroup) == 0;
    int32_t queried = 0;
    int32_t accepted = 0;
    int32_t mismatches = 0;
    std::string firstMismatch;
    size_t const mark = mLogger.entries.size();
    for (DataType first : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16, DataType::kINT8})
    {
        for (int32_t pos = 0; pos < nbIO; ++pos)
        {
            for (int32_t t = 0; t < nbTypes; ++t)
            {
                for (int32_t f = 0; f < nbFormats; ++f)
                {
                    // TensorRT decides pos from inOut[0..pos]; earlier positions hold an accepted choice.
                    auto io = dynamicDescs(dims, first);
                    io[pos].desc.type = static_cast<DataType>(t);
                    io[pos].desc.format = static_cast<TensorFormat>(f);
                    if (pos == 0 && static_cast<DataType>(t) != first)
                    {
                        continue;
                    }
                    bool const got = build->supportsFormatCombination(pos, io.data(), p.nbInputs(), 1);
                    auto const type = static_cast<DataType>(t);
                    bool const floatType = type == DataType::kFLOAT || type == DataType::kHALF || type == DataType::kBF16;
                    // x may also be channel-last where the channel-vectorised kernel takes its channels.
                    auto const format = static_cast<TensorFormat>(f);
                    bool const channelLast = pos == 0 && channelLastChannels
                        && ((type == DataType::kHALF && (format == TensorFormat::kHWC8 || format == TensorFormat::kHWC16))
                            || (type == DataType::kBF16 && format == TensorFormat::kHWC8)
                            || (type == DataType::kFLOAT && format == TensorFormat::kHWC));
                    bool const want = (format == TensorFormat::kLINEAR || channelLast) && floatType
                        && (pos == 0 || type == first);
                    ++queried;
                    accepted += got ? 1 : 0;
                    if (got != want && mismatches++ == 0)
                    {
                        firstMismatch = "pos " + std::to_string(pos) + " type " + typeName(type) + " format "
                            + std::to_string(f) + " with x " + typeName(first);
                    }
                }
            }
        }
    }
    HCHECK(mismatches == 0 && accepted == 3 * nbIO + (channelLastChannels ? 4 : 0),
        "supportsFormatCombination over " << queried << " (pos, type, format) queries (" << nbTypes << " types x "
                                          << nbFormats << " formats), " << p.c << " channels: " << accepted
                                          << " accepted = FLOAT/HALF/BF16 x LINEAR, all the same type"
                                          << (channelLastChannels ? ", and x as kHWC (FLOAT), kHWC8/kHWC16 (HALF), "
                                                                    "kHWC8 (BF16)"
                                                                  : "")
                                          << " " << firstMismatch);
    HCHECK(mLogger.errorsSince(mark).empty(), "no error logged while querying formats");
    auto io = dynamicDescs(dims, DataType::kFLOAT);
    size_t const mark2 = mLogger.entries.size();
    HCHECK(!build->supportsFormatCombination(nbIO, io.data(), p.nbInputs(), 1)
            && loggedError(mLogger, mark2, {"position"}),
        "supportsFormatCombination: out-of-range position gives false and a message");
}

} // namespace harness
