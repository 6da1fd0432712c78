/*
 * dcnconvert: how TensorRT finds the ModulatedDeformConv2d creator, and where messages go.
 *
 * Two ways, exactly one registration at a time (plugin_src/README.md, "Loading the plugin"):
 *  1. Loading the library (ctypes.CDLL, Polygraphy --plugins, trtexec --staticPlugins, Triton
 *     plugins=...): a library constructor looks up libnvinfer's getPluginRegistry() at run time
 *     (the library does not link libnvinfer) and registers the creator in namespace "dcnconvert".
 *  2. IPluginRegistry::loadLibrary (trtexec --dynamicPlugins): TensorRT dlopen()s the library (so
 *     the constructor has registered already), then calls getCreators() and registers what it
 *     returns. getCreators() therefore first deregisters the constructor's registration, so that
 *     loadLibrary's is the only one.
 * Setting DCNCONVERT_PLUGIN_NO_AUTO_REGISTER=1 turns the constructor's registration off.
 */
#include "dcnPlugin.h"

#include "checkMacros.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <exception>
#include <mutex>
#include <string>

#define DCN_EXPORT extern "C" __attribute__((visibility("default")))

#define DCN_STRINGIFY_IMPL(x) #x
#define DCN_STRINGIFY(x) DCN_STRINGIFY_IMPL(x)

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

using GetPluginRegistryFn = nvinfer1::IPluginRegistry* (*) ();
using GetMajorVersionFn = int32_t (*)();

//! getPluginRegistry() of a libnvinfer of our major version visible through `handle`, or null.
GetPluginRegistryFn registryFunction(void* handle)
{
    auto getRegistry = reinterpret_cast<GetPluginRegistryFn>(dlsym(handle, "getPluginRegistry"));
    if (getRegistry == nullptr)
    {
        return nullptr;
    }
    auto getMajor = reinterpret_cast<GetMajorVersionFn>(dlsym(handle, "getInferLibMajorVersion"));
    if (getMajor != nullptr && getMajor() != NV_TENSORRT_MAJOR)
    {
        logMessage(nvinfer1::ILogger::Severity::kERROR,
            std::string(kDCN_PLUGIN_NAME) + ": not registering with a TensorRT " + std::to_string(getMajor())
                + " library: this plugin was built with TensorRT " DCN_STRINGIFY(NV_TENSORRT_MAJOR) " headers");
        return nullptr;
    }
    return getRegistry;
}

nvinfer1::IPluginRegistry* findPluginRegistry()
{
    // 1. A libnvinfer in the global scope (linked by the executable, or loaded RTLD_GLOBAL).
    if (GetPluginRegistryFn getRegistry = registryFunction(RTLD_DEFAULT))
    {
        if (nvinfer1::IPluginRegistry* registry = getRegistry())
        {
            return registry;
        }
    }
    // 2. The instance already loaded RTLD_LOCAL (by the tensorrt Python module or a Triton backend),
    //    found by its soname. RTLD_NOLOAD never loads a second copy; dlclose() only drops the
    //    reference it added (the library stays loaded by whoever loaded it).
    nvinfer1::IPluginRegistry* registry = nullptr;
    void* handle = dlopen("libnvinfer.so." DCN_STRINGIFY(NV_TENSORRT_MAJOR), RTLD_NOLOAD | RTLD_LAZY);
    if (handle != nullptr)
    {
        if (GetPluginRegistryFn getRegistry = registryFunction(handle))
        {
            registry = getRegistry();
        }
        dlclose(handle);
    }
    return registry;
}

nvinfer1::IPluginCreatorInterface& creatorInterface()
{
    return static_cast<nvinfer1::IPluginCreatorInterface&>(creatorInstance());
}

__attribute__((constructor)) void registerOnLoad() noexcept
{
    try
    {
        char const* off = std::getenv("DCNCONVERT_PLUGIN_NO_AUTO_REGISTER");
        if (off != nullptr && off[0] != '\0' && std::strcmp(off, "0") != 0)
        {
            return;
        }
        nvinfer1::IPluginRegistry* registry = findPluginRegistry();
        if (registry == nullptr)
        {
            return; // TensorRT is not loaded: nothing to register with (loadLibrary can still use getCreators).
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
DCN_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    dcnconvert::trt::gLoggerFinder.store(finder);
}
