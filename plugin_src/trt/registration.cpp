/*
 * dcnconvert: how a TensorRT runtime finds the ModulatedDeformConv2d creator, and where messages go.
 *
 * Two ways, exactly one registration at a time (docs/plugin.md, "Loading it"):
 *  1. Loading the library (ctypes.CDLL, Polygraphy --plugins, trtexec --staticPlugins, Triton
 *     plugins=...): a library constructor looks up the getPluginRegistry() of the runtime already
 *     loaded in the process (the library links none: libnvinfer, or libtensorrt_rtx for the
 *     TensorRT-RTX build) and registers the creator in namespace "dcnconvert".
 *  2. IPluginRegistry::loadLibrary (trtexec --dynamicPlugins, registry.load_library): the runtime
 *     dlopen()s the library (so the constructor has registered already), then calls getCreators() and
 *     registers what it returns. getCreators() therefore first deregisters the constructor's
 *     registration, so that loadLibrary's is the only one.
 * Setting DCNCONVERT_PLUGIN_NO_AUTO_REGISTER=1 turns the constructor's registration off.
 *
 * The TensorRT-RTX build's constructor also loads the forwarding object beside the library, so that
 * TensorRT-RTX's ONNX parser finds libtensorrt_rtx.so (rtxParserLink.h), on both ways and whether or not
 * the constructor registers; getCreators() tries again, for a library loaded before TensorRT-RTX.
 *
 * A library runs only inside the runtime it was built for (runtimeGuard.h): TensorRT of its headers'
 * major, or TensorRT-RTX 1.5+ for the build made with DCN_RUNTIME_TENSORRT_RTX. The interfaces a
 * runtime hands to a plugin library differ between them (TensorRT 11's ILoggerFinder and ILogger derive
 * from IVersionedInterface, 10's do not; 11 removed IPluginRegistry's IPluginCreator overloads, which
 * moved its later methods), so a call through them from a library built for another lands on the wrong
 * method. Before it trusts anything a runtime gives it, the library asks every loaded runtime library
 * for its family and version; when none fits, it registers nothing, never calls the logger finder, and
 * says so once on stderr.
 */
#include "dcnPlugin.h"

#include "checkMacros.h"
#include "rtxParserLink.h"
#include "runtimeGuard.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#define DCN_EXPORT extern "C" __attribute__((visibility("default")))

namespace dcnconvert
{
namespace trt
{
namespace
{

std::atomic<nvinfer1::ILoggerFinder*> gLoggerFinder{nullptr};

std::mutex gRegistrationMutex;
//! The registry the constructor registered the creator in; null once getCreators() undid it.
nvinfer1::IPluginRegistry* gSelfRegistry{nullptr};

nvinfer1::IPluginCreatorInterface& creatorInterface()
{
    return static_cast<nvinfer1::IPluginCreatorInterface&>(creatorInstance());
}

__attribute__((constructor)) void registerOnLoad() noexcept
{
    try
    {
#if defined(DCN_RUNTIME_TENSORRT_RTX)
        linkRtxForParser();
#endif
        char const* off = std::getenv("DCNCONVERT_PLUGIN_NO_AUTO_REGISTER");
        if (off != nullptr && off[0] != '\0' && std::strcmp(off, "0") != 0)
        {
            return;
        }
        nvinfer1::IPluginRegistry* registry = findPluginRegistry();
        if (registry == nullptr)
        {
            // No runtime this library was built for is loaded: nothing to register with (loadLibrary can
            // still use getCreators). Another runtime's process is told why nothing happened.
            refuseForeignRuntime();
            return;
        }
        std::lock_guard<std::mutex> lock(gRegistrationMutex);
        if (registry->registerCreator(creatorInterface(), kDCN_PLUGIN_NAMESPACE))
        {
            gSelfRegistry = registry;
        }
    }
    catch (...)
    {
        // A library constructor must not throw; registration simply did not happen.
    }
}

} // namespace

void logMessage(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept
{
    try
    {
        nvinfer1::ILogger* logger = nullptr;
        if (nvinfer1::ILoggerFinder* finder = gLoggerFinder.load())
        {
            logger = finder->findLogger();
        }
        std::string const text = "[dcnconvert] " + message;
        if (logger != nullptr)
        {
            logger->log(severity, text.c_str());
        }
        else if (severity == nvinfer1::ILogger::Severity::kERROR
            || severity == nvinfer1::ILogger::Severity::kINTERNAL_ERROR)
        {
            std::fprintf(stderr, "%s\n", text.c_str());
        }
    }
    catch (...)
    {
    }
}

void reportError(nvinfer1::IErrorRecorder* recorder, nvinfer1::ErrorCode code, std::string const& message) noexcept
{
    try
    {
        if (recorder != nullptr)
        {
            recorder->reportError(code, message.c_str());
            // Also to the logger when one was given (never to stderr: the recorder is the channel).
            if (nvinfer1::ILoggerFinder* finder = gLoggerFinder.load())
            {
                if (nvinfer1::ILogger* logger = finder->findLogger())
                {
                    logger->log(nvinfer1::ILogger::Severity::kERROR, ("[dcnconvert] " + message).c_str());
                }
            }
            return;
        }
        logMessage(nvinfer1::ILogger::Severity::kERROR, message);
    }
    catch (...)
    {
    }
}

void reportException(
    nvinfer1::IErrorRecorder* recorder, char const* layer, char const* method, std::exception const& e) noexcept
{
    try
    {
        auto const* dcnError = dynamic_cast<DcnError const*>(&e);
        nvinfer1::ErrorCode const code = dcnError != nullptr ? dcnError->code() : nvinfer1::ErrorCode::kINTERNAL_ERROR;
        reportError(recorder, code,
            std::string(kDCN_PLUGIN_NAME) + " (" + kDCN_PLUGIN_NAMESPACE + ") layer '"
                + (layer != nullptr ? layer : "") + "': " + method + ": " + e.what());
    }
    catch (...)
    {
    }
}

} // namespace trt
} // namespace dcnconvert

//! For IPluginRegistry::loadLibrary (trtexec --dynamicPlugins): the creators of this library.
DCN_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    using namespace dcnconvert::trt;
    nbCreators = 0;
    try
    {
        if (refuseForeignRuntime())
        {
            return nullptr;
        }
#if defined(DCN_RUNTIME_TENSORRT_RTX)
        linkRtxForParser(); // nothing to do when the constructor did it
#endif
        static nvinfer1::IPluginCreatorInterface* const creators[] = {&creatorInterface()};
        std::lock_guard<std::mutex> lock(gRegistrationMutex);
        if (gSelfRegistry != nullptr)
        {
            // loadLibrary registers what we return and fails on duplicates: undo the constructor's registration.
            gSelfRegistry->deregisterCreator(creatorInterface());
            gSelfRegistry = nullptr;
        }
        nbCreators = static_cast<int32_t>(sizeof(creators) / sizeof(creators[0]));
        return creators;
    }
    catch (...)
    {
        logMessage(nvinfer1::ILogger::Severity::kERROR, std::string(kDCN_PLUGIN_NAME) + ": getCreators failed");
    }
    return nullptr;
}

//! For IPluginRegistry::loadLibrary: where this library's log messages go.
//! A finder from a TensorRT of another major version is never stored: its methods are not where ours are.
DCN_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    try
    {
        if (finder != nullptr && dcnconvert::trt::refuseForeignRuntime())
        {
            return;
        }
        dcnconvert::trt::gLoggerFinder.store(finder);
    }
    catch (...)
    {
    }
}
