/*
 * dcnconvert plugin harness, `cpu` mode: helpers shared by the check families (messages logged or
 * recorded, build-time descriptors, constant output shapes, attribute text). See cpuChecks.h.
 */
#include "cpuChecks.h"

#include <cstring>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::IPluginV3OneBuild;
using nvinfer1::TensorFormat;

namespace harness
{

bool containsAll(std::string const& text, std::vector<char const*> const& parts)
{
    for (char const* p : parts)
    {
        if (text.find(p) == std::string::npos)
        {
            return false;
        }
    }
    return true;
}

//! True when some error logged since `mark` contains every part.
bool loggedError(TestLogger const& logger, size_t mark, std::vector<char const*> const& parts)
{
    for (std::string const& e : logger.errorsSince(mark))
    {
        if (containsAll(e, parts))
        {
            return true;
        }
    }
    return false;
}

bool loggedAt(TestLogger const& logger, size_t mark, nvinfer1::ILogger::Severity severity,
    std::vector<char const*> const& parts)
{
    for (size_t i = mark; i < logger.entries.size(); ++i)
    {
        if (logger.entries[i].severity == severity && containsAll(logger.entries[i].text, parts))
        {
            return true;
        }
    }
    return false;
}

bool recordedError(TestErrorRecorder const& rec, size_t mark, std::vector<char const*> const& parts)
{
    for (size_t i = mark; i < rec.errors.size(); ++i)
    {
        if (containsAll(rec.errors[i].second, parts))
        {
            return true;
        }
    }
    return false;
}

std::vector<DynamicPluginTensorDesc> dynamicDescs(std::vector<Dims> const& dims, DataType type)
{
    std::vector<DynamicPluginTensorDesc> out(dims.size());
    for (size_t i = 0; i < dims.size(); ++i)
    {
        out[i].desc.dims = dims[i];
        out[i].desc.type = type;
        out[i].desc.format = TensorFormat::kLINEAR;
        out[i].desc.scale = 1.F;
        out[i].min = dims[i];
        out[i].opt = dims[i];
        out[i].max = dims[i];
    }
    return out;
}

//! getOutputShapes with every input dim a constant; returns the status and the output dims.
int32_t constantShapes(IPluginV3OneBuild* build, std::vector<Dims> const& in, Dims& out)
{
    TestExprBuilder b;
    std::vector<DimsExprs> exprs(in.size());
    for (size_t i = 0; i < in.size(); ++i)
    {
        exprs[i].nbDims = in[i].nbDims;
        for (int32_t k = 0; k < in[i].nbDims; ++k)
        {
            exprs[i].d[k] = b.constantExpr(in[i].d[k]);
        }
    }
    DimsExprs outExpr{};
    int32_t const status = build->getOutputShapes(
        exprs.data(), static_cast<int32_t>(exprs.size()), nullptr, 0, &outExpr, 1, b);
    out = Dims{};
    out.nbDims = outExpr.nbDims;
    for (int32_t k = 0; status == 0 && k < outExpr.nbDims; ++k)
    {
        TestExpr const* e = b.owned(outExpr.d[k]);
        out.d[k] = e != nullptr && e->kind() == TestExpr::Kind::kCONSTANT ? e->evaluate({}) : -999;
    }
    return status;
}

std::string attrsText(Attrs const& a)
{
    return "stride [" + std::to_string(a.stride[0]) + "," + std::to_string(a.stride[1]) + "] padding ["
        + std::to_string(a.padding[0]) + "," + std::to_string(a.padding[1]) + "] dilation ["
        + std::to_string(a.dilation[0]) + "," + std::to_string(a.dilation[1]) + "] group " + std::to_string(a.group)
        + " dg " + std::to_string(a.deformableGroup) + (a.allowTf32 != 0 ? " allow_tf32 1" : "");
}

bool sameAttrs(Attrs const& a, Attrs const& b)
{
    return std::memcmp(&a, &b, sizeof(Attrs)) == 0;
}

} // namespace harness
