/*
 * dcnconvert: the runtime this library was built for (runtimeGuard.h), told apart from the others a
 * process may have loaded, and its plugin registry.
 *
 * The runtimes are told apart by the file that provides them: libnvinfer.so.N, libnvinfer_lean.so.N
 * and libnvinfer_dispatch.so.N are TensorRT, libtensorrt_rtx.so.N is TensorRT-RTX, and each reports
 * its version through getInferLibMajorVersion / getInferLibMinorVersion. TensorRT-RTX numbers its
 * releases on its own (1.x), so a version number alone does not say which headers fit it.
 *
 * Measured with tests/harness/rtx_abi (probe programs built with the 10.16 and 11.1 headers calling
 * registerCreator, getCreator, getAllCreators, deregisterCreator, loadLibrary, ILoggerFinder::findLogger
 * and ILogger::log of the real libraries): TensorRT-RTX 1.5, 1.6 and 1.7 have TensorRT 11's layout
 * (the 10.16 probes crash or get a null logger), 1.4 has TensorRT 10's (the 11.1 probes get wrong
 * answers). The TensorRT-RTX build therefore needs TensorRT 11's headers and accepts 1.5 to 1.x.
 */
#include "runtimeGuard.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <string>
#include <vector>

#define DCN_STRINGIFY_IMPL(x) #x
#define DCN_STRINGIFY(x) DCN_STRINGIFY_IMPL(x)

#ifndef DCN_BUILD_ARCHS
#define DCN_BUILD_ARCHS "unknown"
#endif

#if defined(DCN_RUNTIME_TENSORRT_RTX)
#if NV_TENSORRT_MAJOR != 11
#error "the TensorRT-RTX build (DCN_RUNTIME_TENSORRT_RTX) needs TensorRT 11's headers: TensorRT-RTX 1.5+ has their ABI"
#endif
#define DCN_RTX_MAJOR 1
#define DCN_RTX_MIN_MINOR 5
#define DCN_RUNTIME_INFO                                                                                               \
    "runtime=tensorrt-rtx runtime_major=" DCN_STRINGIFY(DCN_RTX_MAJOR) " runtime_min_minor=" DCN_STRINGIFY(           \
        DCN_RTX_MIN_MINOR)
#define DCN_BUILT_FOR                                                                                                  \
    "TensorRT-RTX " DCN_STRINGIFY(DCN_RTX_MAJOR) "." DCN_STRINGIFY(DCN_RTX_MIN_MINOR) " or a newer " DCN_STRINGIFY(     \
        DCN_RTX_MAJOR) ".x (TensorRT " DCN_STRINGIFY(NV_TENSORRT_MAJOR) "." DCN_STRINGIFY(NV_TENSORRT_MINOR) " headers)"
#else
#define DCN_RUNTIME_INFO "runtime=tensorrt runtime_major=" DCN_STRINGIFY(NV_TENSORRT_MAJOR)
#define DCN_BUILT_FOR                                                                                                  \
    "TensorRT " DCN_STRINGIFY(NV_TENSORRT_MAJOR) " (headers " DCN_STRINGIFY(NV_TENSORRT_MAJOR) "." DCN_STRINGIFY(      \
        NV_TENSORRT_MINOR) ")"
#endif

namespace dcnconvert
{
namespace trt
{
namespace
{

//! What this library was built for, read from the file by dcnconvert (dcnconvert/backend/plugin/library.py)
//! to pick the library that matches the runtime in use: one line of "key=value" pairs after the tag.
__attribute__((used)) char const kBUILD_INFO[] = "dcnconvert-plugin-build-info: tensorrt_headers=" DCN_STRINGIFY(
    NV_TENSORRT_MAJOR) "." DCN_STRINGIFY(NV_TENSORRT_MINOR) "." DCN_STRINGIFY(NV_TENSORRT_PATCH) " " DCN_RUNTIME_INFO
    " cuda_runtime=" DCN_STRINGIFY(CUDART_VERSION) " archs=" DCN_BUILD_ARCHS;

enum class Family
{
    kTENSORRT,     //!< libnvinfer, libnvinfer_lean, libnvinfer_dispatch
    kTENSORRT_RTX, //!< libtensorrt_rtx
    kUNKNOWN,      //!< getPluginRegistry from another file (an executable's own registry, a test harness)
};

//! A runtime loaded in this process.
struct Runtime
{
    Family family{Family::kUNKNOWN};
    int32_t major{-1}; //!< getInferLibMajorVersion, else the soname's number, else -1
    int32_t minor{-1}; //!< getInferLibMinorVersion, else -1
    std::string path;  //!< as loaded (empty for the global scope's)
    bool global{false}; //!< found through dlsym(RTLD_DEFAULT)
};

using GetPluginRegistryFn = nvinfer1::IPluginRegistry* (*) ();
using GetVersionFn = int32_t (*)();

//! The family of the library file at `path` (by its name), and the number after ".so." (or -1).
Family familyOf(char const* path, int32_t& sonameMajor)
{
    sonameMajor = -1;
    if (path == nullptr || path[0] == '\0')
    {
        return Family::kUNKNOWN;
    }
    char const* slash = std::strrchr(path, '/');
    std::string const file = slash != nullptr ? slash + 1 : path;
    struct Stem
    {
        char const* prefix;
        Family family;
    };
    static Stem const kSTEMS[] = {{"libnvinfer.so", Family::kTENSORRT}, {"libnvinfer_lean.so", Family::kTENSORRT},
        {"libnvinfer_dispatch.so", Family::kTENSORRT}, {"libtensorrt_rtx.so", Family::kTENSORRT_RTX}};
    for (Stem const& stem : kSTEMS)
    {
        std::size_t const n = std::strlen(stem.prefix);
        if (file.compare(0, n, stem.prefix) != 0 || (file.size() > n && file[n] != '.'))
        {
            continue;
        }
        if (file.size() > n)
        {
            sonameMajor = std::atoi(file.c_str() + n + 1);
        }
        return stem.family;
    }
    return Family::kUNKNOWN;
}

int32_t versionOf(void* handle, char const* name, int32_t fallback)
{
    auto fn = reinterpret_cast<GetVersionFn>(dlsym(handle, name));
    return fn != nullptr ? fn() : fallback;
}

//! True when this library was built for `runtime`: the only runtimes whose objects it calls.
bool accepts(Runtime const& runtime)
{
#if defined(DCN_RUNTIME_TENSORRT_RTX)
    return runtime.family != Family::kTENSORRT && runtime.major == DCN_RTX_MAJOR && runtime.minor >= DCN_RTX_MIN_MINOR;
#else
    if (runtime.family == Family::kUNKNOWN)
    {
        return runtime.major == NV_TENSORRT_MAJOR || runtime.major < 0;
    }
    return runtime.family == Family::kTENSORRT && runtime.major == NV_TENSORRT_MAJOR;
#endif
}

int collectRuntime(dl_phdr_info* info, size_t /*size*/, void* data)
{
    Runtime runtime;
    runtime.family = familyOf(info->dlpi_name, runtime.major);
    if (runtime.family != Family::kUNKNOWN)
    {
        runtime.path = info->dlpi_name;
        static_cast<std::vector<Runtime>*>(data)->push_back(runtime);
    }
    return 0;
}

//! The runtimes loaded in this process: the global scope's (linked by the executable, or loaded
//! RTLD_GLOBAL) first, then every TensorRT-family library loaded RTLD_LOCAL (as the tensorrt,
//! tensorrt_lean and tensorrt_rtx Python modules load theirs).
std::vector<Runtime> loadedRuntimes()
{
    std::vector<Runtime> runtimes;
    void* registryFn = dlsym(RTLD_DEFAULT, "getPluginRegistry");
    void* majorFn = dlsym(RTLD_DEFAULT, "getInferLibMajorVersion");
    if (registryFn != nullptr || majorFn != nullptr)
    {
        Runtime global;
        Dl_info where{};
        int32_t ignored = -1;
        if (dladdr(registryFn != nullptr ? registryFn : majorFn, &where) != 0)
        {
            global.family = familyOf(where.dli_fname, ignored);
        }
        global.major = versionOf(RTLD_DEFAULT, "getInferLibMajorVersion", -1);
        global.minor = versionOf(RTLD_DEFAULT, "getInferLibMinorVersion", -1);
        global.global = true;
        runtimes.push_back(global);
    }
    std::vector<Runtime> local;
    dl_iterate_phdr(collectRuntime, &local);
    for (Runtime& runtime : local)
    {
        // RTLD_NOLOAD never loads a second copy; dlclose() drops only the reference added here.
        if (void* handle = dlopen(runtime.path.c_str(), RTLD_NOLOAD | RTLD_LAZY))
        {
            runtime.major = versionOf(handle, "getInferLibMajorVersion", runtime.major);
            runtime.minor = versionOf(handle, "getInferLibMinorVersion", -1);
            dlclose(handle);
        }
        runtimes.push_back(runtime);
    }
    return runtimes;
}

std::string describe(Runtime const& runtime)
{
    if (runtime.family == Family::kTENSORRT_RTX)
    {
        return "TensorRT-RTX " + std::to_string(runtime.major) + "." + std::to_string(runtime.minor);
    }
    return runtime.major >= 0 ? "major version " + std::to_string(runtime.major) : "of an unknown version";
}

//! How to get a library that fits what is loaded.
std::string fixFor(std::vector<Runtime> const& runtimes)
{
    for (Runtime const& runtime : runtimes)
    {
        if (runtime.family != Family::kTENSORRT_RTX)
        {
            continue;
        }
#if defined(DCN_RUNTIME_TENSORRT_RTX)
        if (runtime.major == DCN_RTX_MAJOR && runtime.minor < DCN_RTX_MIN_MINOR)
        {
            return "TensorRT-RTX " DCN_STRINGIFY(DCN_RTX_MAJOR) ".4 and older have TensorRT 10's plugin interfaces: "
                   "upgrade TensorRT-RTX to " DCN_STRINGIFY(DCN_RTX_MAJOR) "." DCN_STRINGIFY(
                       DCN_RTX_MIN_MINOR) " or newer (pip install -U tensorrt-rtx)";
        }
#else
        return "Load the library built for TensorRT-RTX (`dcnconvert plugin-path --runtime tensorrt-rtx` names it; "
               "`dcnconvert plugin build --runtime tensorrt-rtx` makes one)";
#endif
    }
    return "Load the library built for that TensorRT (`dcnconvert plugin-path` names it; `dcnconvert plugin build` "
           "makes one)";
}

//! Why this library must not register in this process, or "" when it may.
std::string runtimeMismatch()
{
    std::vector<Runtime> const runtimes = loadedRuntimes();
    std::vector<std::string> described;
    std::string seen;
    for (Runtime const& runtime : runtimes)
    {
        if (accepts(runtime))
        {
            return {};
        }
        std::string const text = describe(runtime);
        if (std::find(described.begin(), described.end(), text) == described.end())
        {
            described.push_back(text);
            seen += (seen.empty() ? "" : ", ") + text;
        }
    }
    if (runtimes.empty())
    {
        return {}; // no runtime loaded (a test harness calling getCreators, or a registry of the executable's own)
    }
    Dl_info self{};
    std::string const path = dladdr(reinterpret_cast<void*>(&runtimeMismatch), &self) != 0 && self.dli_fname != nullptr
        ? self.dli_fname
        : "libdcnconvert_plugin.so";
    return path + " was built for " DCN_BUILT_FOR " but the TensorRT loaded in this process is " + seen
        + ": it registers no plugin there. " + fixFor(runtimes);
}

} // namespace

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
        std::fprintf(stderr, "[dcnconvert] error: %s\n", why.c_str()); // the logger is not safe to call then
    }
    return true;
}

nvinfer1::IPluginRegistry* findPluginRegistry()
{
    for (Runtime const& runtime : loadedRuntimes())
    {
        if (!accepts(runtime))
        {
            continue;
        }
        nvinfer1::IPluginRegistry* registry = nullptr;
        if (runtime.global)
        {
            if (auto fn = reinterpret_cast<GetPluginRegistryFn>(dlsym(RTLD_DEFAULT, "getPluginRegistry")))
            {
                registry = fn();
            }
        }
        else if (void* handle = dlopen(runtime.path.c_str(), RTLD_NOLOAD | RTLD_LAZY))
        {
            if (auto fn = reinterpret_cast<GetPluginRegistryFn>(dlsym(handle, "getPluginRegistry")))
            {
                registry = fn();
            }
            dlclose(handle);
        }
        if (registry != nullptr)
        {
            return registry;
        }
    }
    return nullptr;
}

} // namespace trt
} // namespace dcnconvert
