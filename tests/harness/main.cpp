/*
 * dcnconvert plugin harness entry point.
 *
 *   dcn_harness info <plugin.so>                  identity and fields, one per line (contract test)
 *   dcn_harness registration <plugin.so> <0|1>    load-time registration and loadLibrary, with a fake
 *                                                 registry; 1 = the constructor is expected to register
 *   dcn_harness cpu <plugin.so>                   every build/runtime call that needs no GPU
 *   dcn_harness gpu <plugin.so> <out-dir>         enqueue on a GPU; writes inputs/outputs + manifest.jsonl
 *   dcn_harness gpu-inputs <plugin.so> <out-dir>  the GPU cases without a device: every call but
 *                                                 enqueue; writes their inputs (all-zero outputs)
 *
 * Prints one line per check ("ok: ..." / "FAIL: ...") and a summary; exit code 0 iff all passed.
 */
#include "harness.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace harness
{

int32_t runInfo(std::string const& libPath)
{
    PluginLibrary lib;
    std::string error;
    if (!lib.open(libPath, error))
    {
        std::printf("error: %s\n", error.c_str());
        return 2;
    }
    int32_t n = 0;
    nvinfer1::IPluginCreatorInterface* const* creators = lib.getCreators(n);
    std::printf("creators %d\n", n);
    for (int32_t i = 0; creators != nullptr && i < n; ++i)
    {
        nvinfer1::InterfaceInfo const info = creators[i]->getInterfaceInfo();
        std::printf("interface %s %d %d\n", info.kind, info.major, info.minor);
    }
    nvinfer1::IPluginCreatorV3One* creator = findCreator(lib);
    if (creator == nullptr)
    {
        std::printf("error: no V3 ModulatedDeformConv2d creator\n");
        return 2;
    }
    std::printf("name %s\nversion %s\nnamespace %s\n", creator->getPluginName(), creator->getPluginVersion(),
        creator->getPluginNamespace());
    nvinfer1::PluginFieldCollection const* fc = creator->getFieldNames();
    for (int32_t i = 0; fc != nullptr && i < fc->nbFields; ++i)
    {
        std::printf("field %s %d %d\n", fc->fields[i].name, static_cast<int32_t>(fc->fields[i].type),
            fc->fields[i].length);
    }
    std::printf("tensorrt_headers %d.%d\n", NV_TENSORRT_MAJOR, NV_TENSORRT_MINOR);
    return 0;
}

int32_t runRegistration(std::string const& libPath, int32_t expectAuto)
{
    RegistryStats const s0 = registryStats();
    HCHECK(s0.count == 0 && s0.registerCalls == 0, "registry starts empty");

    PluginLibrary lib;
    std::string error;
    bool const opened = lib.open(libPath, error);
    HCHECK(opened, "dlopen(" << libPath << ") as ctypes.CDLL / trtexec --staticPlugins do: " << error);
    if (!opened)
    {
        return 1;
    }
    RegistryStats const s1 = registryStats();
    nvinfer1::IPluginCreatorInterface* found = registryGetCreator("ModulatedDeformConv2d", "1", "dcnconvert");
    if (expectAuto != 0)
    {
        HCHECK(s1.count == 1 && s1.registerCalls == 1,
            "loading registers exactly one creator (count " << s1.count << ", calls " << s1.registerCalls << ")");
        HCHECK(found != nullptr, "getCreator(ModulatedDeformConv2d, 1, dcnconvert) finds it (ONNX parser lookup)");
        HCHECK(registryNamespaceOf(found) == "dcnconvert", "registered in namespace 'dcnconvert'");
        HCHECK(registryGetCreator("ModulatedDeformConv2d", "1", "") == nullptr,
            "nothing registered in the empty namespace (TensorRT's built-in plugin lives there)");
    }
    else
    {
        HCHECK(s1.count == 0 && s1.registerCalls == 0,
            "loading registers nothing here (count " << s1.count << ", calls " << s1.registerCalls << ")");
        HCHECK(found == nullptr, "no creator found by name");
    }

    // What IPluginRegistry::loadLibrary does (trtexec --dynamicPlugins): dlopen, setLoggerFinder,
    // getCreators, register each; it fails if any creator is already registered.
    TestLogger logger;
    TestLoggerFinder finder(&logger);
    void* handle = registryLoadLibrary(libPath.c_str(), &finder);
    RegistryStats const s2 = registryStats();
    char const* fakeMajor = std::getenv("DCN_FAKE_TRT_MAJOR");
    if (fakeMajor != nullptr && fakeMajor[0] != '\0' && std::atoi(fakeMajor) != NV_TENSORRT_MAJOR)
    {
        // A TensorRT of another major: getCreators offers nothing.
        HCHECK(handle == nullptr && s2.count == 0,
            "loadLibrary in a TensorRT of another major registers nothing (count " << s2.count << ")");
        return checks().failed == 0 ? 0 : 1;
    }
    HCHECK(handle != nullptr, "loadLibrary succeeds after the load-time registration (no duplicate)");
    HCHECK(s2.count == 1, "exactly one creator registered after loadLibrary (count " << s2.count << ")");
    HCHECK(s2.deregisterCalls == (expectAuto != 0 ? 1 : 0),
        "getCreators undid the load-time registration once (deregister calls " << s2.deregisterCalls << ")");
    HCHECK(s2.failedRegistrations == 0, "no registration was refused as a duplicate");
    nvinfer1::IPluginCreatorV3One* creator = findCreator(lib);
    HCHECK(creator != nullptr && registryGetCreator("ModulatedDeformConv2d", "1", "dcnconvert") == creator,
        "the registered creator is the one getCreators returns");

    // A second getCreators (e.g. the runtime's registry loading the same library) changes nothing.
    int32_t n = 0;
    lib.getCreators(n);
    RegistryStats const s3 = registryStats();
    HCHECK(n == 1 && s3.deregisterCalls == s2.deregisterCalls && s3.count == 1,
        "getCreators is idempotent (n " << n << ", deregister calls " << s3.deregisterCalls << ")");

    // Loading the library again (ctypes twice, or ctypes after loadLibrary) does not register again.
    PluginLibrary again;
    again.open(libPath, error);
    RegistryStats const s4 = registryStats();
    HCHECK(s4.registerCalls == s3.registerCalls && s4.count == 1, "a second dlopen registers nothing more");
    HCHECK(s4.v1Calls == 0, "the plugin never calls the IPluginV2-era registry methods");
    // The fake refuses duplicates like TensorRT (so the checks above can fail).
    if (creator != nullptr)
    {
        nvinfer1::IPluginRegistry* registry = getPluginRegistry();
        if (registry != nullptr)
        {
            HCHECK(!registry->registerCreator(*creator, "dcnconvert"), "the fake registry refuses a duplicate");
        }
    }
    return checks().failed == 0 ? 0 : 1;
}

} // namespace harness

int main(int argc, char** argv)
{
    if (argc < 3)
    {
        std::fprintf(stderr,
            "usage: %s info|registration|cpu|gpu|gpu-inputs <plugin.so> [<0|1> | <out-dir>]\n"
            "built with TensorRT %d.%d headers\n",
            argv[0], NV_TENSORRT_MAJOR, NV_TENSORRT_MINOR);
        return 2;
    }
    std::string const mode = argv[1];
    std::string const lib = argv[2];
    int32_t rc = 2;
    if (mode == "info")
    {
        return harness::runInfo(lib);
    }
    if (mode == "registration" && argc >= 4)
    {
        rc = harness::runRegistration(lib, std::atoi(argv[3]));
    }
    else if (mode == "cpu")
    {
        rc = harness::runCpu(lib);
    }
    else if (mode == "gpu" && argc >= 4)
    {
        rc = harness::runGpu(lib, argv[3]);
    }
    else if (mode == "gpu-inputs" && argc >= 4)
    {
        rc = harness::runGpuInputs(lib, argv[3]);
    }
    else
    {
        std::fprintf(stderr, "unknown mode or missing argument: %s\n", mode.c_str());
        return 2;
    }
    harness::Checks const& c = harness::checks();
    std::printf("harness %s (TensorRT %d.%d headers): %d checks, %d failed\n", mode.c_str(), NV_TENSORRT_MAJOR,
        NV_TENSORRT_MINOR, c.total, c.failed);
    return c.failed == 0 && c.total > 0 && rc == 0 ? 0 : 1;
}
