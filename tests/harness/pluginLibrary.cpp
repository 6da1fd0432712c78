/*
 * dcnconvert plugin harness: the plugin library under test (dlopen, entry points, the creator) and
 * handles on the plugins its creator makes.
 */
#include "harness.h"

#include <cstring>
#include <dlfcn.h>
#include <memory>

using nvinfer1::IPluginV3;
using nvinfer1::IPluginV3OneBuild;
using nvinfer1::IPluginV3OneCore;
using nvinfer1::IPluginV3OneRuntime;
using nvinfer1::PluginCapabilityType;

namespace harness
{

bool PluginLibrary::open(std::string const& path, std::string& error)
{
    dlerror();
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr)
    {
        char const* e = dlerror();
        error = e != nullptr ? e : "dlopen failed";
        return false;
    }
    getCreators = reinterpret_cast<GetCreatorsFn>(dlsym(handle, "getCreators"));
    setLoggerFinder = reinterpret_cast<SetLoggerFinderFn>(dlsym(handle, "setLoggerFinder"));
    if (getCreators == nullptr || setLoggerFinder == nullptr)
    {
        error = "getCreators or setLoggerFinder is not exported";
        return false;
    }
    return true;
}

nvinfer1::IPluginCreatorV3One* findCreator(PluginLibrary& lib)
{
    int32_t n = 0;
    nvinfer1::IPluginCreatorInterface* const* creators = lib.getCreators(n);
    for (int32_t i = 0; creators != nullptr && i < n; ++i)
    {
        nvinfer1::IPluginCreatorInterface* c = creators[i];
        if (c != nullptr && std::strcmp(c->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") == 0)
        {
            auto* v3 = static_cast<nvinfer1::IPluginCreatorV3One*>(c);
            if (std::strcmp(v3->getPluginName(), "ModulatedDeformConv2d") == 0)
            {
                return v3;
            }
        }
    }
    return nullptr;
}

bool Session::start(std::string const& libPath)
{
    std::string error;
    if (!lib.open(libPath, error))
    {
        HCHECK(false, "dlopen " << libPath << ": " << error);
        return false;
    }
    finder = std::make_unique<TestLoggerFinder>(&logger);
    lib.setLoggerFinder(finder.get());
    creator = findCreator(lib);
    HCHECK(creator != nullptr, "getCreators() returns a V3 ModulatedDeformConv2d creator");
    return creator != nullptr;
}

// --- Plugin capabilities ---

IPluginV3OneBuild* buildOf(IPluginV3* p)
{
    return static_cast<IPluginV3OneBuild*>(p->getCapabilityInterface(PluginCapabilityType::kBUILD));
}

IPluginV3OneRuntime* runtimeOf(IPluginV3* p)
{
    return static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
}

IPluginV3OneCore* coreOf(IPluginV3* p)
{
    return static_cast<IPluginV3OneCore*>(p->getCapabilityInterface(PluginCapabilityType::kCORE));
}

} // namespace harness
