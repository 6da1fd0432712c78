/*
 * dcnconvert plugin harness: a plugin registry standing in for libnvinfer's, exported (the harness
 * links with -rdynamic) as getPluginRegistry / getInferLibMajorVersion so that the plugin's load-time
 * registration finds it exactly as it would find TensorRT's.
 *
 * Environment (read at each call): DCN_FAKE_NO_REGISTRY=1 makes getPluginRegistry() return null;
 * DCN_FAKE_TRT_MAJOR=<n> makes getInferLibMajorVersion() report another TensorRT major version.
 *
 * The same file, built alone as a shared library named libnvinfer.so.<major> (with that soname), is
 * the stand-in for a libnvinfer that the tensorrt Python module loaded RTLD_LOCAL, i.e. outside the
 * global symbol scope (tests/test_plugin_harness.py); dcnFakeRegistryFind lets the test query it.
 */
#include "harness.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <string>
#include <vector>

namespace harness
{
namespace
{

struct Entry
{
    nvinfer1::IPluginCreatorInterface* creator;
    std::string ns;
};

std::string identityOf(nvinfer1::IPluginCreatorInterface const* c)
{
    // Only V3 creators are expected here; name|version for the duplicate check.
    if (std::strcmp(c->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") == 0)
    {
        auto const* v3 = static_cast<nvinfer1::IPluginCreatorV3One const*>(c);
        return std::string(v3->getPluginName()) + "|" + v3->getPluginVersion();
    }
    return std::string("?|") + c->getInterfaceInfo().kind;
}

class FakeRegistry : public nvinfer1::IPluginRegistry
{
public:
    bool registerCreator(nvinfer1::IPluginCreatorInterface& creator, nvinfer1::AsciiChar const* const ns) noexcept override
    {
        std::lock_guard<std::mutex> lock(mMutex);
        ++stats.registerCalls;
        std::string const nsText = ns != nullptr ? ns : "";
        for (auto const& e : mEntries)
        {
            if (identityOf(e.creator) == identityOf(&creator) && e.ns == nsText)
            {
                ++stats.failedRegistrations; // TensorRT refuses a second creator with the same identity
                return false;
            }
        }
        mEntries.push_back({&creator, nsText});
        mList.push_back(&creator);
        return true;
    }

    nvinfer1::IPluginCreatorInterface* const* getAllCreators(int32_t* const numCreators) const noexcept override
    {
        *numCreators = static_cast<int32_t>(mList.size());
        return mList.data();
    }

    nvinfer1::IPluginCreatorInterface* getCreator(nvinfer1::AsciiChar const* const name,
        nvinfer1::AsciiChar const* const version, nvinfer1::AsciiChar const* const ns) noexcept override
    {
        std::lock_guard<std::mutex> lock(mMutex);
        std::string const want = std::string(name) + "|" + version;
        for (auto const& e : mEntries)
        {
            if (identityOf(e.creator) == want && e.ns == (ns != nullptr ? ns : ""))
            {
                return e.creator;
            }
        }
        return nullptr;
    }

    bool deregisterCreator(nvinfer1::IPluginCreatorInterface const& creator) noexcept override
    {
        std::lock_guard<std::mutex> lock(mMutex);
        ++stats.deregisterCalls;
        for (size_t i = 0; i < mEntries.size(); ++i)
        {
            if (mEntries[i].creator == &creator)
            {
                mEntries.erase(mEntries.begin() + static_cast<std::ptrdiff_t>(i));
                mList.erase(mList.begin() + static_cast<std::ptrdiff_t>(i));
                return true;
            }
        }
        return false;
    }

    void setErrorRecorder(nvinfer1::IErrorRecorder* const recorder) noexcept override
    {
        mRecorder = recorder;
    }
    nvinfer1::IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return mRecorder;
    }
    bool isParentSearchEnabled() const override
    {
        return false;
    }
    void setParentSearchEnabled(bool const) override {}
    PluginLibraryHandle loadLibrary(nvinfer1::AsciiChar const* pluginPath) noexcept override
    {
        return registryLoadLibrary(pluginPath, nullptr);
    }
    void deregisterLibrary(PluginLibraryHandle) noexcept override {}
    nvinfer1::IPluginResource* acquirePluginResource(
        nvinfer1::AsciiChar const*, nvinfer1::IPluginResource*) noexcept override
    {
        return nullptr;
    }
    int32_t releasePluginResource(nvinfer1::AsciiChar const*) noexcept override
    {
        return -1;
    }

#if NV_TENSORRT_MAJOR > 10 || (NV_TENSORRT_MAJOR == 10 && NV_TENSORRT_MINOR >= 10)
    // Added in TensorRT 10.10.
    nvinfer1::IPluginCreatorInterface* const* getAllCreatorsRecursive(int32_t* const numCreators) noexcept override
    {
        return getAllCreators(numCreators);
    }
#endif

#if NV_TENSORRT_MAJOR < 11
    // IPluginV2-era overloads, removed in TensorRT 11; the plugin must never call them.
    bool registerCreator(nvinfer1::IPluginCreator&, nvinfer1::AsciiChar const* const) noexcept override
    {
        ++stats.v1Calls;
        return false;
    }
    nvinfer1::IPluginCreator* const* getPluginCreatorList(int32_t* const numCreators) const noexcept override
    {
        *numCreators = 0;
        return nullptr;
    }
    nvinfer1::IPluginCreator* getPluginCreator(nvinfer1::AsciiChar const* const, nvinfer1::AsciiChar const* const,
        nvinfer1::AsciiChar const* const) noexcept override
    {
        ++stats.v1Calls;
        return nullptr;
    }
    bool deregisterCreator(nvinfer1::IPluginCreator const&) noexcept override
    {
        ++stats.v1Calls;
        return false;
    }
#endif

    std::string namespaceOf(nvinfer1::IPluginCreatorInterface const* creator)
    {
        std::lock_guard<std::mutex> lock(mMutex);
        for (auto const& e : mEntries)
        {
            if (e.creator == creator)
            {
                return e.ns;
            }
        }
        return "";
    }

    int32_t size()
    {
        std::lock_guard<std::mutex> lock(mMutex);
        return static_cast<int32_t>(mEntries.size());
    }

    struct Stats
    {
        int32_t registerCalls{0};
        int32_t deregisterCalls{0};
        int32_t failedRegistrations{0};
        int32_t v1Calls{0};
    } stats;

private:
    std::mutex mMutex;
    std::vector<Entry> mEntries;
    std::vector<nvinfer1::IPluginCreatorInterface*> mList;
    nvinfer1::IErrorRecorder* mRecorder{nullptr};
};

FakeRegistry& fake()
{
    static FakeRegistry* const instance = new FakeRegistry();
    return *instance;
}

bool envFlag(char const* name)
{
    char const* v = std::getenv(name);
    return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

} // namespace

RegistryStats registryStats()
{
    RegistryStats s;
    s.registerCalls = fake().stats.registerCalls;
    s.deregisterCalls = fake().stats.deregisterCalls;
    s.failedRegistrations = fake().stats.failedRegistrations;
    s.v1Calls = fake().stats.v1Calls;
    s.count = fake().size();
    return s;
}

nvinfer1::IPluginCreatorInterface* registryGetCreator(char const* name, char const* version, char const* ns)
{
    return fake().getCreator(name, version, ns);
}

std::string registryNamespaceOf(nvinfer1::IPluginCreatorInterface const* creator)
{
    return fake().namespaceOf(creator);
}

void* registryLoadLibrary(char const* path, nvinfer1::ILoggerFinder* finder)
{
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr)
    {
        return nullptr;
    }
    using GetCreatorsFn = nvinfer1::IPluginCreatorInterface* const* (*) (int32_t&);
    using SetLoggerFinderFn = void (*)(nvinfer1::ILoggerFinder*);
    auto getCreators = reinterpret_cast<GetCreatorsFn>(dlsym(handle, "getCreators"));
    auto setLoggerFinder = reinterpret_cast<SetLoggerFinderFn>(dlsym(handle, "setLoggerFinder"));
    if (getCreators == nullptr)
    {
        return nullptr;
    }
    if (setLoggerFinder != nullptr && finder != nullptr)
    {
        setLoggerFinder(finder);
    }
    int32_t n = 0;
    nvinfer1::IPluginCreatorInterface* const* creators = getCreators(n);
    if (creators == nullptr || n <= 0)
    {
        return nullptr; // TensorRT's loadLibrary fails for a library that offers no creator
    }
    for (int32_t i = 0; i < n; ++i)
    {
        nvinfer1::IPluginCreatorInterface* c = creators[i];
        char const* ns = "";
        if (std::strcmp(c->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") == 0)
        {
            ns = static_cast<nvinfer1::IPluginCreatorV3One*>(c)->getPluginNamespace();
        }
        if (!fake().registerCreator(*c, ns))
        {
            return nullptr; // "The call will fail and return nullptr if any of the plugins are already registered."
        }
    }
    return handle;
}

} // namespace harness

extern "C" __attribute__((visibility("default"))) nvinfer1::IPluginRegistry* getPluginRegistry() noexcept
{
    if (harness::envFlag("DCN_FAKE_NO_REGISTRY"))
    {
        return nullptr;
    }
    return &harness::fake();
}

extern "C" __attribute__((visibility("default"))) int32_t getInferLibMajorVersion() noexcept
{
    char const* v = std::getenv("DCN_FAKE_TRT_MAJOR");
    return v != nullptr && v[0] != '\0' ? std::atoi(v) : NV_TENSORRT_MAJOR;
}

//! 1 when a creator (name, version) is registered in namespace `ns` of this fake registry, else 0.
extern "C" __attribute__((visibility("default"))) int32_t dcnFakeRegistryFind(
    char const* name, char const* version, char const* ns) noexcept
{
    return harness::registryGetCreator(name, version, ns) != nullptr ? 1 : 0;
}
