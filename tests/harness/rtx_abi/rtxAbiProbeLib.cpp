/*
 * dcnconvert tests: the smallest plugin library for IPluginRegistry::loadLibrary, for the TensorRT-RTX
 * ABI probe (rtxAbiProbe.cpp). setLoggerFinder() prints the finder's dynamic type, asks it for a logger
 * and logs through it; getCreators() hands out one creator ("DcnAbiProbeLib", "1", "dcnabi");
 * probeLogger() is an ILogger of these headers, for a builder the probe program makes.
 */
#include "rtxAbiProbe.h"

#include <cstdint>
#include <cstdio>

#define PROBE_EXPORT extern "C" __attribute__((visibility("default")))

PROBE_EXPORT void* probeLogger()
{
    static rtxprobe::ProbeLogger logger("library_logger_message");
    return static_cast<nvinfer1::ILogger*>(&logger);
}

PROBE_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    std::printf("finder_type: %s\n", rtxprobe::dynamicTypeTree(finder).c_str());
    std::fflush(stdout);
    if (finder == nullptr)
    {
        return;
    }
    nvinfer1::ILogger* logger = finder->findLogger();
    std::printf("found_logger_type: %s\n", rtxprobe::dynamicTypeTree(logger).c_str());
    std::fflush(stdout);
    if (logger != nullptr)
    {
        logger->log(nvinfer1::ILogger::Severity::kWARNING, "rtx-abi-probe-lib: through the logger finder");
        std::printf("found_logger_log_returned: 1\n");
        std::fflush(stdout);
    }
}

PROBE_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    static rtxprobe::ProbeCreator creator("DcnAbiProbeLib", "dcnabi");
    static nvinfer1::IPluginCreatorInterface* const creators[] = {&creator};
    nbCreators = 1;
    std::printf("get_creators_called: 1\n");
    std::fflush(stdout);
    return creators;
}
