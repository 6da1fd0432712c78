/*
 * dcnconvert: how TensorRT finds the ModulatedDeformConv2d creator, and where messages go.
 *
 * Two ways, exactly one registration at a time (docs/plugin.md, "Loading it"):
 *  1. Loading the library (ctypes.CDLL, Polygraphy --plugins, trtexec --staticPlugins, Triton
 *     plugins=...): a library constructor looks up libnvinfer's getPluginRegistry() at run time
 *     (the library does not link libnvinfer) and registers the creator in namespace "dcnconvert".
 *  2. IPluginRegistry::loadLibrary (trtexec --dynamicPlugins): TensorRT dlopen()s the library (so
 *     the constructor has registered already), then calls getCreators() and registers what it
 *     returns. getCreators() therefore first deregisters the constructor's registration, so that
 *     loadLibrary's is the only one.
 * Setting DCNCONVERT_PLUGIN_NO_AUTO_REGISTER=1 turns the constructor's registration off.
 *
 * A library runs only inside the TensorRT major version whose headers it was built with. The
 * interfaces TensorRT hands to a plugin library are not the same across majors (TensorRT 11's
 * ILoggerFinder derives from IVersionedInterface, 10's does not; 11 removed IPluginRegistry's
 * IPluginCreator overloads, which moved its later methods), so a call through them from a library of
 * the other major lands on the wrong method. Before it trusts anything TensorRT gives it, the library
 * asks every loaded TensorRT library (libnvinfer, libnvinfer_lean, libnvinfer_dispatch) for its major
 * version; when none matches its own it registers nothing, never calls the logger finder, and says so
 * once on stderr.
 */
#include "dcnPlugin.h"

#include "checkMacros.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#define DCN_EXPORT extern "C" __attribute__((visibility("default")))

#define DCN_STRINGIFY_IMPL(x) #x
#define DCN_STRINGIFY(x) DCN_STRINGIFY_IMPL(x)

namespace dcnconvert
{
namespace trt
{
namespace
{

#ifndef DCN_BUILD_ARCHS
#define DCN_BUILD_ARCHS "unknown"
#endif

//! What this library was built for, read from the file by dcnconvert (dcnconvert/plugin_lib.py) to pick
//! the library that matches the installed TensorRT: one line of "key=value" pairs after the tag.
__attribute__((used)) char const kBUILD_INFO[] = "dcnconvert-plugin-build-info: tensorrt_headers=" DCN_STRINGIFY(
    NV_TENSORRT_MAJOR) "." DCN_STRINGIFY(NV_TENSORRT_MINOR) "." DCN_STRINGIFY(NV_TENSORRT_PATCH) " cuda_runtime="
    DCN_STRINGIFY(CUDART_VERSION) " archs=" DCN_BUILD_ARCHS;

std::atomic<nvinfer1::ILoggerFinder*> gLoggerFinder{nullptr};

std::mutex gRegistrationMutex;
//! The registry the constructor registered the creator in; null once getCreators() undid it.
nvinfer1::IPluginRegistry* gSelfRegistry{nullptr};

using GetPluginRegistryFn = nvinfer1::IPluginRegistry* (*) ();
using GetMajorVersionFn = int32_t (*)();

//! getPluginRegistry() of a TensorRT library of our major version visible through `handle`, or null.
GetPluginRegistryFn registryFunction(void* handle)
{
    auto getRegistry = reinterpret_cast<GetPluginRegistryFn>(dlsym(handle, "getPluginRegistry"));
    if (getRegistry == nullptr)
    {
        return nullptr;
    }
    auto getMajor = reinterpret_cast<GetMajorVersionFn>(dlsym(handle, "getInferLibMajorVersion"));
    return getMajor == nullptr || getMajor() == NV_TENSORRT_MAJOR ? getRegistry : nullptr;
}

//! The TensorRT libraries a plugin registry can come from, by soname stem ("libnvinfer" + stem + ".so.N").
constexpr char const* kRUNTIME_STEMS[] = {"", "_lean", "_dispatch"};

//! True when `path`'s file name is libnvinfer[_lean|_dispatch].so[.N...]; `sonameMajor` gets N (or -1).
bool isTensorRTLibrary(char const* path, int32_t& sonameMajor)
{
    sonameMajor = -1;
    if (path == nullptr || path[0] == '\0')
    {
        return false;
    }
    char const* slash = std::strrchr(path, '/');
    std::string const file = slash != nullptr ? slash + 1 : path;
    for (char const* stem : kRUNTIME_STEMS)
    {
        std::string const prefix = std::string("libnvinfer") + stem + ".so";
        if (file.compare(0, prefix.size(), prefix) != 0)
        {
            continue;
        }
        if (file.size() == prefix.size())
        {
            return true;
        }
        if (file[prefix.size()] != '.')
        {
            continue;
        }
        sonameMajor = std::atoi(file.c_str() + prefix.size() + 1);
        return true;
    }
    return false;
}

int collectTensorRTLibrary(dl_phdr_info* info, size_t /*size*/, void* data)
{
    int32_t sonameMajor = -1;
    if (isTensorRTLibrary(info->dlpi_name, sonameMajor))
    {
        static_cast<std::vector<std::pair<std::string, int32_t>>*>(data)->emplace_back(info->dlpi_name, sonameMajor);
    }
    return 0;
}

//! The major version of the TensorRT library `handle` (getInferLibMajorVersion), or `fallback`.
int32_t majorOf(void* handle, int32_t fallback)
{
    auto getMajor = reinterpret_cast<GetMajorVersionFn>(dlsym(handle, "getInferLibMajorVersion"));
    return getMajor != nullptr ? getMajor() : fallback;
}

//! The major versions of the TensorRT libraries loaded in this process (empty when there are none).
std::vector<int32_t> loadedTensorRTMajors()
{
    std::vector<int32_t> majors;
    // A TensorRT in the global scope (linked by the executable, or loaded RTLD_GLOBAL).
    if (dlsym(RTLD_DEFAULT, "getInferLibMajorVersion") != nullptr)
    {
        majors.push_back(majorOf(RTLD_DEFAULT, -1));
    }
    // Every TensorRT library loaded RTLD_LOCAL (the tensorrt and tensorrt_lean Python modules do).
    std::vector<std::pair<std::string, int32_t>> libraries;
    dl_iterate_phdr(collectTensorRTLibrary, &libraries);
    for (auto const& lib : libraries)
    {
        int32_t major = lib.second;
        if (void* handle = dlopen(lib.first.c_str(), RTLD_NOLOAD | RTLD_LAZY))
        {
            major = majorOf(handle, lib.second);
            dlclose(handle);
        }
        if (major >= 0)
        {
            majors.push_back(major);
        }
    }
    return majors;
}

//! Why this library must not register in this process, or "" when it may.
std::string runtimeMismatch()
{
    std::vector<int32_t> const majors = loadedTensorRTMajors();
    std::string seen;
    for (int32_t major : majors)
    {
        if (major == NV_TENSORRT_MAJOR)
        {
            return {};
        }
        seen += (seen.empty() ? "" : ", ") + std::to_string(major);
    }
    if (majors.empty())
    {
        return {}; // no TensorRT library loaded (a test harness, or a registry of the executable's own)
    }
    Dl_info self{};
    std::string const path
        = dladdr(reinterpret_cast<void*>(&runtimeMismatch), &self) != 0 && self.dli_fname != nullptr
        ? self.dli_fname
        : "libdcnconvert_plugin.so";
    return path + " was built for TensorRT " DCN_STRINGIFY(NV_TENSORRT_MAJOR) " (headers " DCN_STRINGIFY(
               NV_TENSORRT_MAJOR) "." DCN_STRINGIFY(NV_TENSORRT_MINOR) ") but the TensorRT loaded in this process is "
        + "major version " + seen + ": it registers no plugin there. Load the library built for that TensorRT "
        + "(`dcnconvert plugin-path` names it; `dcnconvert plugin build` makes one)";
}

//! Reports a major-version mismatch once per process on stderr (the logger is not safe to call then).
bool refuseForeignRuntime()
{
    std::string const why = runtimeMismatch();
    if (why.empty())
    {
        return false;
    }
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
    {
        std::fprintf(stderr, "[dcnconvert] error: %s\n", why.c_str());
    }
    return true;
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
    // 2. The instance already loaded RTLD_LOCAL (by the tensorrt or tensorrt_lean Python module, or a
    //    Triton backend), found by its soname. RTLD_NOLOAD never loads a second copy; dlclose() only
    //    drops the reference it added (the library stays loaded by whoever loaded it).
    for (char const* stem : kRUNTIME_STEMS)
    {
        std::string const soname = std::string("libnvinfer") + stem + ".so." DCN_STRINGIFY(NV_TENSORRT_MAJOR);
        void* handle = dlopen(soname.c_str(), RTLD_NOLOAD | RTLD_LAZY);
        if (handle == nullptr)
        {
            continue;
        }
        nvinfer1::IPluginRegistry* registry = nullptr;
        if (GetPluginRegistryFn getRegistry = registryFunction(handle))
        {
            registry = getRegistry();
        }
        dlclose(handle);
        if (registry != nullptr)
        {
            return registry;
        }
    }
    return nullptr;
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
            // No TensorRT of our major is loaded: nothing to register with (loadLibrary can still use
            // getCreators). One of another major is told why nothing happened.
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
