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
    if (mAttrs.embedded)
    {
        mDeviceWeights = std::make_shared<DeviceWeights>(mAttrs.embedded);
    }
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
    , mXLayout(other.mXLayout)
    , mDeviceWeights(other.mDeviceWeights)
{
    setErrorRecorder(other.mRecorder);
    buildSerializationFields();
}

DcnPlugin::~DcnPlugin()
{
    setErrorRecorder(nullptr);
}

void DcnPlugin::checkInputCount(int32_t nbInputs) const
{
    if (mAttrs.embedded)
    {
        DCN_VALIDATE(nbInputs == kEMBEDDED_INPUTS,
            "the node carries its weights (fields weight, weight_shape), so it takes 3 inputs (x, offset, mask), got "
                << nbInputs);
    }
    else
    {
        DCN_VALIDATE(nbInputs == kMIN_INPUTS || nbInputs == kMAX_INPUTS,
            "expected 4 inputs (x, offset, mask, weight) or 5 (with bias), got " << nbInputs
                << (nbInputs == kEMBEDDED_INPUTS ? "; 3 inputs need the fields weight and weight_shape" : ""));
    }
}

int32_t DcnPlugin::logicalDims(nvinfer1::Dims const* in, int32_t nbInputs, nvinfer1::Dims (&out)[kMAX_INPUTS]) const
{
    checkInputCount(nbInputs);
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        out[i] = in[i];
    }
    EmbeddedWeights const* const e = mAttrs.embedded.get();
    if (e == nullptr)
    {
        return nbInputs;
    }
    out[kIN_WEIGHT].nbDims = 4;
    for (int32_t k = 0; k < 4; ++k)
    {
        out[kIN_WEIGHT].d[k] = e->shape[k];
    }
    if (!e->hasBias)
    {
        return kMIN_INPUTS;
    }
    out[kIN_BIAS].nbDims = 1;
    out[kIN_BIAS].d[0] = e->shape[0];
    return kMAX_INPUTS;
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
