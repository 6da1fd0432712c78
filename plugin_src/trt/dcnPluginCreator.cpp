/*
 * dcnconvert: IPluginCreatorV3One for ModulatedDeformConv2d. The fields it accepts are parsed and
 * validated by parseFields (dcnPluginFields.cpp).
 */
#include "dcnPlugin.h"

#include "checkMacros.h"

#include <exception>

using nvinfer1::PluginFieldCollection;

namespace dcnconvert
{
namespace trt
{

// --- DcnPluginCreator ---

DcnPluginCreator::DcnPluginCreator()
{
    for (DcnFieldSpec const& spec : kDCN_FIELDS)
    {
        // Tensor fields have no fixed length: 0 here (the parser passes what the node holds).
        mFieldNames.emplace_back(spec.name, nullptr, spec.type, spec.length < 0 ? 0 : spec.length);
    }
    mFieldCollection.nbFields = static_cast<int32_t>(mFieldNames.size());
    mFieldCollection.fields = mFieldNames.data();
}

char const* DcnPluginCreator::getPluginName() const noexcept
{
    return kDCN_PLUGIN_NAME;
}

char const* DcnPluginCreator::getPluginVersion() const noexcept
{
    return kDCN_PLUGIN_VERSION;
}

char const* DcnPluginCreator::getPluginNamespace() const noexcept
{
    return kDCN_PLUGIN_NAMESPACE;
}

PluginFieldCollection const* DcnPluginCreator::getFieldNames() noexcept
{
    return &mFieldCollection;
}

nvinfer1::IPluginV3* DcnPluginCreator::createPlugin(
    char const* name, PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept
{
    char const* const method = phase == nvinfer1::TensorRTPhase::kBUILD ? "createPlugin(kBUILD)"
        : phase == nvinfer1::TensorRTPhase::kRUNTIME                    ? "createPlugin(kRUNTIME)"
                                                                        : "createPlugin(unknown phase)";
    try
    {
        DCN_VALIDATE(phase == nvinfer1::TensorRTPhase::kBUILD || phase == nvinfer1::TensorRTPhase::kRUNTIME,
            "unknown TensorRTPhase " << static_cast<int32_t>(phase));
        return new DcnPlugin(name != nullptr ? name : "", parseFields(fc));
    }
    catch (std::exception const& e)
    {
        reportException(nullptr, name, method, e);
    }
    return nullptr;
}

DcnPluginCreator& creatorInstance()
{
    // Never destroyed: a plugin registry may still hold the pointer while the process exits.
    static DcnPluginCreator* const instance = new DcnPluginCreator();
    return *instance;
}

} // namespace trt
} // namespace dcnconvert
