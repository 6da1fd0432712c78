/*
 * dcnconvert: ModulatedDeformConv2d IPluginV3: lifetime, error recorder, IPluginV3 and
 * IPluginV3OneCore. The build capability is in dcnPluginBuild.cpp, the runtime capability in
 * dcnPluginRuntime.cpp, the fields in dcnPluginFields.cpp. See dcnPlugin.h and plugin_src/README.md.
 */
#include "dcnPlugin.h"

#include "checkMacros.h"

#include <exception>
#include <string>
#include <utility>

namespace dcnconvert
{
namespace trt
{

// --- DcnPlugin ---

DcnPlugin::DcnPlugin(std::string layerName, DcnAttributes const& attrs)
    : mLayerName(std::move(layerName))
    , mAttrs(attrs)
{
    buildSerializationFields();
}

DcnPlugin::DcnPlugin(DcnPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mLayerName(other.mLayerName)
    , mAttrs(other.mAttrs)
    , mNbInputs(other.mNbInputs)
{
    setErrorRecorder(other.mRecorder);
    buildSerializationFields();
}

DcnPlugin::~DcnPlugin()
{
    setErrorRecorder(nullptr);
}

void DcnPlugin::setErrorRecorder(nvinfer1::IErrorRecorder* recorder) noexcept
{
    if (recorder == mRecorder)
    {
        return;
    }
    if (recorder != nullptr)
    {
        recorder->incRefCount();
    }
    if (mRecorder != nullptr)
    {
        mRecorder->decRefCount();
    }
    mRecorder = recorder;
}

std::string DcnPlugin::where(char const* method) const
{
    return std::string(kDCN_PLUGIN_NAME) + " (" + kDCN_PLUGIN_NAMESPACE + ") layer '" + mLayerName + "': " + method;
}

nvinfer1::IPluginCapability* DcnPlugin::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept
{
    try
    {
        switch (type)
        {
        case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
        case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
        case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
        }
        DCN_VALIDATE(false, "unknown PluginCapabilityType " << static_cast<int32_t>(type));
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "getCapabilityInterface", e);
    }
    return nullptr;
}

nvinfer1::IPluginV3* DcnPlugin::clone() noexcept
{
    try
    {
        return new DcnPlugin(*this);
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "clone", e);
    }
    return nullptr;
}

char const* DcnPlugin::getPluginName() const noexcept
{
    return kDCN_PLUGIN_NAME;
}

char const* DcnPlugin::getPluginVersion() const noexcept
{
    return kDCN_PLUGIN_VERSION;
}

char const* DcnPlugin::getPluginNamespace() const noexcept
{
    return kDCN_PLUGIN_NAMESPACE;
}

} // namespace trt
} // namespace dcnconvert
