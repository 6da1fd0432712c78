/*
 * dcnconvert plugin harness: fields and shapes of test problems (what the ONNX parser hands the
 * creator, reading back serialized fields, the output-size formula, dims and descriptors).
 */
#include "harness.h"

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;

namespace harness
{

// --- Fields ---

FieldSet::FieldSet(Attrs const& a)
    : mAttrs(a)
{
}

nvinfer1::PluginFieldCollection const* FieldSet::collection()
{
    using nvinfer1::PluginFieldType;
    fields = {
        nvinfer1::PluginField("stride", mAttrs.stride, PluginFieldType::kINT32, 2),
        nvinfer1::PluginField("padding", mAttrs.padding, PluginFieldType::kINT32, 2),
        nvinfer1::PluginField("dilation", mAttrs.dilation, PluginFieldType::kINT32, 2),
        nvinfer1::PluginField("group", &mAttrs.group, PluginFieldType::kINT32, 1),
        nvinfer1::PluginField("deformable_group", &mAttrs.deformableGroup, PluginFieldType::kINT32, 1),
    };
    if (mAttrs.allowTf32 != 0)
    {
        fields.emplace_back("allow_tf32", &mAttrs.allowTf32, PluginFieldType::kINT32, 1);
    }
    mCollection.nbFields = static_cast<int32_t>(fields.size());
    mCollection.fields = fields.data();
    return &mCollection;
}

bool readSerialized(nvinfer1::PluginFieldCollection const* fc, Attrs& out, std::string& why)
{
    if (fc == nullptr || fc->nbFields != 6 || fc->fields == nullptr)
    {
        why = "expected 6 serialized fields";
        return false;
    }
    struct Want
    {
        char const* name;
        int32_t length;
        int32_t* dst;
    } const wants[] = {{"stride", 2, out.stride}, {"padding", 2, out.padding}, {"dilation", 2, out.dilation},
        {"group", 1, &out.group}, {"deformable_group", 1, &out.deformableGroup}, {"allow_tf32", 1, &out.allowTf32}};
    for (int32_t i = 0; i < 6; ++i)
    {
        nvinfer1::PluginField const& f = fc->fields[i];
        if (f.name == nullptr || std::strcmp(f.name, wants[i].name) != 0)
        {
            why = std::string("field ") + std::to_string(i) + " is not '" + wants[i].name + "'";
            return false;
        }
        if (f.type != nvinfer1::PluginFieldType::kINT32 || f.length != wants[i].length || f.data == nullptr)
        {
            why = std::string("field '") + wants[i].name + "' is not INT32 x" + std::to_string(wants[i].length);
            return false;
        }
        std::memcpy(wants[i].dst, f.data, sizeof(int32_t) * wants[i].length);
    }
    return true;
}

// --- Shapes ---

int64_t outputSize(int64_t in, int64_t kernel, int32_t stride, int32_t pad, int32_t dilation)
{
    int64_t const span = static_cast<int64_t>(dilation) * (kernel - 1) + 1;
    int64_t const padded = in + 2 * static_cast<int64_t>(pad);
    if (padded < span)
    {
        return -1;
    }
    return (padded - span) / stride + 1;
}

nvinfer1::Dims makeDims(std::initializer_list<int64_t> values)
{
    nvinfer1::Dims d{};
    d.nbDims = 0;
    for (int64_t v : values)
    {
        d.d[d.nbDims++] = v;
    }
    return d;
}

std::string dimsText(nvinfer1::Dims const& d)
{
    std::string s = "[";
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        s += (i ? ", " : "") + std::to_string(d.d[i]);
    }
    return s + "]";
}

std::vector<nvinfer1::Dims> Problem::inputDims() const
{
    int64_t const dg = attrs.deformableGroup;
    std::vector<nvinfer1::Dims> dims = {
        makeDims({n, c, h, w}),
        makeDims({n, 2 * dg * kh * kw, ho(), wo()}),
        makeDims({n, dg * kh * kw, ho(), wo()}),
        makeDims({cout, c / attrs.group, kh, kw}),
    };
    if (bias)
    {
        dims.push_back(makeDims({cout}));
    }
    return dims;
}

nvinfer1::Dims Problem::outputDims() const
{
    return makeDims({n, cout, ho(), wo()});
}

char const* typeName(nvinfer1::DataType t)
{
    static char const* const kNAMES[] = {"FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8", "FP8", "BF16", "INT64",
        "INT4", "FP4", "E8M0"};
    auto const i = static_cast<int32_t>(t);
    return i >= 0 && i < 12 ? kNAMES[i] : "?";
}

std::vector<PluginTensorDesc> staticDescs(std::vector<Dims> const& dims, DataType type)
{
    std::vector<PluginTensorDesc> out(dims.size());
    for (size_t i = 0; i < dims.size(); ++i)
    {
        out[i].dims = dims[i];
        out[i].type = type;
        out[i].format = TensorFormat::kLINEAR;
        out[i].scale = 1.F;
    }
    return out;
}

} // namespace harness
