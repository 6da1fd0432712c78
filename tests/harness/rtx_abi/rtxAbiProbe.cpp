/*
 * dcnconvert tests: calls TensorRT-RTX's plugin registry and logger through the TensorRT headers this
 * program is compiled against, and prints what came back, one "key: value" line each.
 *
 *     rtx_abi_probe LIBTENSORRT_RTX registry
 *     rtx_abi_probe LIBTENSORRT_RTX library PROBE_PLUGIN_LIBRARY
 *     rtx_abi_probe LIBTENSORRT_RTX library-logger PROBE_PLUGIN_LIBRARY
 *
 * registry:       registerCreator(IPluginCreatorInterface&, ns), getCreator, getAllCreators,
 *                 deregisterCreator, getCreator again; and the registry's dynamic type.
 * library:        a builder made with this program's ILogger, then loadLibrary on rtxAbiProbeLib.cpp's
 *                 library, which stores the ILoggerFinder it is given, calls findLogger() and log()
 *                 through it, and hands out one creator by getCreators(). TensorRT-RTX logs the
 *                 loading through our logger (does its call reach our log()?).
 * library-logger: the same with the library's own ILogger (probeLogger()), so that the library may be
 *                 compiled against other headers than this program.
 * The library is dlopen()ed RTLD_LOCAL, as the tensorrt_rtx Python module does. Run each mode in a
 * process of its own: a call through a wrong vtable slot may crash it.
 */
#include "rtxAbiProbe.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <string>

namespace
{

void say(char const* key, std::string const& value)
{
    std::printf("%s: %s\n", key, value.c_str());
    std::fflush(stdout);
}

void say(char const* key, long long value)
{
    say(key, std::to_string(value));
}

template <typename Fn>
Fn symbol(void* handle, char const* name)
{
    auto fn = reinterpret_cast<Fn>(dlsym(handle, name));
    say((std::string("symbol ") + name).c_str(), fn != nullptr ? "found" : "missing");
    return fn;
}

int registryMode(nvinfer1::IPluginRegistry* registry)
{
    static rtxprobe::ProbeCreator creator("DcnAbiProbe", "dcnabi");
    nvinfer1::IPluginCreatorInterface& mine = creator;
    say("registered", registry->registerCreator(mine, "dcnabi"));
    nvinfer1::IPluginCreatorInterface* found = registry->getCreator("DcnAbiProbe", "1", "dcnabi");
    say("get_creator_is_ours", found == &mine);
    int32_t count = -1;
    nvinfer1::IPluginCreatorInterface* const* all = registry->getAllCreators(&count);
    bool listed = false;
    for (int32_t i = 0; all != nullptr && i < count; ++i)
    {
        listed = listed || all[i] == &mine;
    }
    say("all_creators_count", count);
    say("all_creators_lists_ours", listed);
    say("deregistered", registry->deregisterCreator(mine));
    say("get_creator_after_deregister_is_null", registry->getCreator("DcnAbiProbe", "1", "dcnabi") == nullptr);
    return 0;
}

using CreateBuilderFn = void* (*) (void*, int32_t);
using VersionFn = int32_t (*)();

//! A builder made with `logger` (so that TensorRT-RTX has a logger to log through and to find), then
//! loadLibrary on `library`.
int libraryMode(void* core, nvinfer1::IPluginRegistry* registry, char const* library, bool libraryLogger)
{
    static rtxprobe::ProbeLogger ours("probe_logger_message");
    void* logger = &ours;
    if (libraryLogger)
    {
        void* own = dlopen(library, RTLD_NOW | RTLD_LOCAL);
        auto get = own != nullptr ? reinterpret_cast<void* (*) ()>(dlsym(own, "probeLogger")) : nullptr;
        logger = get != nullptr ? get() : nullptr;
        say("library_logger", logger != nullptr);
        if (logger == nullptr)
        {
            return 5;
        }
    }
    auto create = symbol<CreateBuilderFn>(core, "createInferBuilder_INTERNAL");
    auto version = symbol<VersionFn>(core, "getInferLibVersion");
    void* builder = create != nullptr && version != nullptr ? create(logger, version()) : nullptr;
    say("builder_created", builder != nullptr);
    void* handle = registry->loadLibrary(library);
    say("load_library_handle", handle != nullptr);
    say("library_creator_found", registry->getCreator("DcnAbiProbeLib", "1", "dcnabi") != nullptr);
    if (!libraryLogger)
    {
        say("probe_logger_calls", ours.calls());
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 3 || (std::strncmp(argv[2], "library", 7) == 0 && argc < 4))
    {
        std::fprintf(stderr, "usage: %s LIBTENSORRT_RTX registry|library|library-logger [PROBE_PLUGIN_LIBRARY]\n",
            argv[0]);
        return 2;
    }
    say("headers", std::to_string(NV_TENSORRT_MAJOR) + "." + std::to_string(NV_TENSORRT_MINOR));
    void* core = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (core == nullptr)
    {
        std::fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 3;
    }
    if (auto major = symbol<VersionFn>(core, "getInferLibMajorVersion"))
    {
        say("runtime_major", major());
    }
    auto getRegistry = symbol<nvinfer1::IPluginRegistry* (*) ()>(core, "getPluginRegistry");
    nvinfer1::IPluginRegistry* registry = getRegistry != nullptr ? getRegistry() : nullptr;
    say("registry_type", rtxprobe::dynamicTypeTree(registry));
    if (registry == nullptr)
    {
        return 4;
    }
    std::string const mode = argv[2];
    if (mode == "registry")
    {
        return registryMode(registry);
    }
    if (mode == "library" || mode == "library-logger")
    {
        return libraryMode(core, registry, argv[3], mode == "library-logger");
    }
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
}
