/*
 * dcnconvert tests: what the ABI probe of TensorRT-RTX shares between the program and its plugin library.
 *
 * rtxAbiProbe.cpp (a program) and rtxAbiProbeLib.cpp (a plugin library TensorRT-RTX loads) are compiled
 * against one set of TensorRT headers (10.x or 11.x) and call TensorRT-RTX's registry, logger and
 * logger finder through those headers' classes. Where the headers' virtual methods are not where
 * TensorRT-RTX's are, a call lands on another method: a wrong result, or a crash of the probe process.
 */
#pragma once

#include <NvInferRuntime.h>

#include <cstdio>
#include <cxxabi.h>
#include <string>
#include <typeinfo>

namespace rtxprobe
{

//! The dynamic type of `object` and all its bases, as mangled names: "Derived(Base1(...),Base2)".
inline std::string typeTree(std::type_info const& type)
{
    std::string out = type.name();
    if (auto const* single = dynamic_cast<abi::__si_class_type_info const*>(&type))
    {
        return out + "(" + typeTree(*single->__base_type) + ")";
    }
    if (auto const* multi = dynamic_cast<abi::__vmi_class_type_info const*>(&type))
    {
        out += "(";
        for (unsigned i = 0; i < multi->__base_count; ++i)
        {
            out += (i ? "," : "") + typeTree(*multi->__base_info[i].__base_type);
        }
        return out + ")";
    }
    return out;
}

template <typename T>
std::string dynamicTypeTree(T const* object)
{
    return object == nullptr ? std::string("null") : typeTree(typeid(*object));
}

//! Counts the messages it gets; prints the first three, and every one from the probe, after `tag`.
class ProbeLogger final : public nvinfer1::ILogger
{
public:
    explicit ProbeLogger(char const* tag)
        : mTag(tag)
    {
    }
    void log(Severity severity, nvinfer1::AsciiChar const* msg) noexcept override
    {
        ++mCalls;
        try
        {
            std::string const text = msg != nullptr ? msg : "(null)";
            if (mCalls <= 3 || text.find("rtx-abi-probe") != std::string::npos)
            {
                std::printf("%s: %d %s\n", mTag, static_cast<int>(severity), text.c_str());
                std::fflush(stdout);
            }
        }
        catch (...)
        {
            std::fprintf(stderr, "%s: could not print a message\n", mTag);
        }
    }
    int calls() const
    {
        return mCalls;
    }

private:
    char const* mTag;
    int mCalls{0};
};

//! A creator that creates nothing: enough for the registry to store, find and drop it.
class ProbeCreator final : public nvinfer1::IPluginCreatorV3One
{
public:
    ProbeCreator(char const* name, char const* pluginNamespace)
        : mName(name)
        , mNamespace(pluginNamespace)
    {
    }
    char const* getPluginName() const noexcept override
    {
        return mName;
    }
    char const* getPluginVersion() const noexcept override
    {
        return "1";
    }
    char const* getPluginNamespace() const noexcept override
    {
        return mNamespace;
    }
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override
    {
        return &mFields;
    }
    nvinfer1::IPluginV3* createPlugin(
        char const*, nvinfer1::PluginFieldCollection const*, nvinfer1::TensorRTPhase) noexcept override
    {
        return nullptr;
    }

private:
    char const* mName;
    char const* mNamespace;
    nvinfer1::PluginFieldCollection mFields{0, nullptr};
};

} // namespace rtxprobe
