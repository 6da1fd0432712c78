/*
 * dcnconvert TensorRT glue: quantized nodes: their fields, the weights' one-byte codes, the types
 * they take and the DcnParams they make. See dcnPluginQuant.h.
 */
#include "dcnPluginQuant.h"

#include "checkMacros.h"
#include "dcnPlugin.h"
#include "dcnPluginTensors.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <sstream>
#include <string>

using nvinfer1::DataType;
using nvinfer1::PluginField;
using nvinfer1::PluginFieldType;

namespace dcnconvert
{
namespace trt
{
namespace
{

float halfBitsToFloat(uint16_t h)
{
    int32_t const exponent = (h >> 10) & 0x1F;
    int32_t const mantissa = h & 0x3FF;
    double v = exponent == 0 ? std::ldexp(mantissa, -24)
        : exponent == 31     ? (mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                                              : std::numeric_limits<double>::infinity())
                             : std::ldexp(1024 + mantissa, exponent - 25);
    return static_cast<float>((h & 0x8000) != 0 ? -v : v);
}

float bf16BitsToFloat(uint16_t b)
{
    uint32_t const bits = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

//! Element `i` of a field's data as a double (INT8, FLOAT32, FLOAT16 or BF16).
double elementAt(PluginFieldType type, void const* data, int64_t i)
{
    auto const* bytes = static_cast<uint8_t const*>(data);
    switch (type)
    {
    case PluginFieldType::kINT8: return static_cast<int8_t>(bytes[i]);
    case PluginFieldType::kFLOAT32:
    {
        float f;
        std::memcpy(&f, bytes + 4 * i, sizeof(f));
        return f;
    }
    default:
    {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, sizeof(h));
        return type == PluginFieldType::kFLOAT16 ? halfBitsToFloat(h) : bf16BitsToFloat(h);
    }
    }
}

//! The E4M3FN code of v when E4M3FN holds v exactly, else -1.
int32_t fp8Code(double v)
{
    if (!std::isfinite(v) || std::fabs(v) > 448.0)
    {
        return -1;
    }
    int32_t const sign = std::signbit(v) ? 0x80 : 0;
    double const a = std::fabs(v);
    int32_t code = -1;
    if (a == 0.0)
    {
        code = 0;
    }
    else
    {
        int e = 0;
        double const m = std::frexp(a, &e); // a = m * 2^e, m in [0.5, 1)
        int32_t const biased = e - 1 + 7;
        if (biased >= 1)
        {
            double const f = (2.0 * m - 1.0) * 8.0;
            code = f == std::floor(f) ? (biased << 3) | static_cast<int32_t>(f) : -1;
        }
        else
        {
            double const f = std::ldexp(a, 9); // subnormals: f * 2^-9, f in 1..7
            code = f == std::floor(f) && f >= 1.0 && f <= 7.0 ? static_cast<int32_t>(f) : -1;
        }
    }
    if (code < 0 || (code & 0x7F) == 0x7F || fp8Value(static_cast<uint8_t>(code | sign)) != v)
    {
        return -1;
    }
    return code | sign;
}

std::string fieldText(PluginField const& field)
{
    std::string text(static_cast<char const*>(field.data), static_cast<size_t>(field.length));
    while (!text.empty() && text.back() == '\0')
    {
        text.pop_back();
    }
    return text;
}

} // namespace

char const* quantTypeName(int32_t quant) noexcept
{
    return quant == kDCN_QUANT_INT8 ? "int8" : quant == kDCN_QUANT_FP8 ? "fp8e4m3" : "none";
}

DataType quantDataType(int32_t quant) noexcept
{
    return quant == kDCN_QUANT_FP8 ? DataType::kFP8 : DataType::kINT8;
}

int32_t quantDcnType(int32_t quant) noexcept
{
    return quant == kDCN_QUANT_FP8 ? kDCN_FP8E4M3 : kDCN_INT8;
}

double fp8Value(uint8_t code)
{
    int32_t const exponent = (code >> 3) & 0xF;
    int32_t const mantissa = code & 0x7;
    if (exponent == 0xF && mantissa == 0x7)
    {
        return std::numeric_limits<double>::quiet_NaN();
    }
    double const v = exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, exponent - 10);
    return (code & 0x80) != 0 ? -v : v;
}

int32_t parseQuantType(PluginField const& field)
{
    DCN_VALIDATE(field.type == PluginFieldType::kCHAR,
        "field 'quant_type' has PluginFieldType " << static_cast<int32_t>(field.type)
                                                  << "; expected CHAR (the ONNX node's STRING attribute)");
    DCN_VALIDATE(field.length >= 1 && field.data != nullptr, "field 'quant_type' is empty; expected 'int8' or 'fp8e4m3'");
    std::string const text = fieldText(field);
    for (int32_t quant : {kDCN_QUANT_INT8, kDCN_QUANT_FP8})
    {
        if (text == quantTypeName(quant))
        {
            return quant;
        }
    }
    DCN_VALIDATE(false, "field 'quant_type' is '" << text << "'; expected 'int8' or 'fp8e4m3'");
    return kDCN_QUANT_NONE;
}

std::vector<float> readScales(PluginField const& field, int32_t count)
{
    DCN_VALIDATE(field.type == PluginFieldType::kFLOAT32,
        "field '" << field.name << "' has PluginFieldType " << static_cast<int32_t>(field.type)
                  << "; expected FLOAT32 (an ONNX FLOAT attribute or FLOAT tensor)");
    DCN_VALIDATE(field.length == count,
        "field '" << field.name << "' has " << field.length << " values; expected " << count
                  << (count == 1 ? "" : " (one per output channel, weight_shape[0])"));
    DCN_VALIDATE(field.data != nullptr, "field '" << field.name << "' has length " << field.length << " but no data");
    std::vector<float> scales(static_cast<size_t>(count));
    std::memcpy(scales.data(), field.data, scales.size() * sizeof(float));
    for (int32_t i = 0; i < count; ++i)
    {
        DCN_VALIDATE(std::isfinite(scales[i]) && scales[i] > 0.F,
            "field '" << field.name << "'" << (count == 1 ? "" : "[" + std::to_string(i) + "]") << " is "
                      << scales[i] << "; a scale must be > 0 and finite");
    }
    return scales;
}

std::vector<uint8_t> quantCodes(PluginFieldType type, void const* data, int64_t count, int32_t quant)
{
    bool const floatData = type == PluginFieldType::kFLOAT32 || type == PluginFieldType::kFLOAT16
        || type == PluginFieldType::kBF16;
    DCN_VALIDATE(floatData || (quant == kDCN_QUANT_INT8 && type == PluginFieldType::kINT8),
        "field 'weight' has PluginFieldType " << static_cast<int32_t>(type) << "; a quant_type '" << quantTypeName(quant)
                                              << "' node takes "
                                              << (quant == kDCN_QUANT_INT8 ? "INT8 (or FLOAT32, FLOAT16, BF16) values"
                                                                           : "FLOAT16 (or FLOAT32, BF16) values"));
    std::vector<uint8_t> codes(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
    {
        double const v = elementAt(type, data, i);
        int32_t code = -1;
        if (quant == kDCN_QUANT_INT8)
        {
            code = v == std::floor(v) && v >= -128.0 && v <= 127.0 ? static_cast<int32_t>(v) & 0xFF : -1;
        }
        else
        {
            code = fp8Code(v);
        }
        DCN_VALIDATE(code >= 0,
            "field 'weight'[" << i << "] is " << v << ", which quant_type '" << quantTypeName(quant)
                              << "' cannot hold; expected "
                              << (quant == kDCN_QUANT_INT8 ? "an integer in [-128, 127]"
                                                           : "an exact FP8 E4M3 value (|v| <= 448)"));
        codes[static_cast<size_t>(i)] = static_cast<uint8_t>(code);
    }
    return codes;
}

void parseQuantFields(PluginField const* const (&fields)[kDCN_NB_FIELDS], DcnAttributes& a)
{
    PluginField const* const quantType = fields[kFIELD_QUANT_TYPE];
    if (quantType == nullptr)
    {
        for (int32_t k : {kFIELD_X_SCALE, kFIELD_WEIGHT_SCALE, kFIELD_OUTPUT_SCALE})
        {
            DCN_VALIDATE(fields[k] == nullptr,
                "field '" << kDCN_FIELDS[k].name << "' is given without 'quant_type'; a quantized node needs "
                          << "quant_type ('int8' or 'fp8e4m3'), x_scale and weight_scale");
        }
        DCN_VALIDATE(a.embedded == nullptr || a.embedded->weight.type != PluginFieldType::kINT8,
            "field 'weight' has INT8 values but no 'quant_type'; INT8 weights need quant_type 'int8', x_scale and "
            "weight_scale");
        return;
    }
    a.quant.quant = parseQuantType(*quantType);
    DCN_VALIDATE(a.embedded != nullptr,
        "field 'quant_type' ('" << quantTypeName(a.quant.quant)
                                << "') needs the node's weights: a quantized node carries weight, weight_shape and "
                                   "weight_scale (and takes the inputs x, offset, mask)");
    for (int32_t k : {kFIELD_X_SCALE, kFIELD_WEIGHT_SCALE})
    {
        DCN_VALIDATE(fields[k] != nullptr,
            "field '" << kDCN_FIELDS[k].name << "' is missing; a quant_type '" << quantTypeName(a.quant.quant)
                      << "' node needs x_scale (1 value) and weight_scale (weight_shape[0] values)");
    }
    a.quant.xScale = readScales(*fields[kFIELD_X_SCALE], 1)[0];
    if (fields[kFIELD_OUTPUT_SCALE] != nullptr)
    {
        a.quant.hasOutputScale = true;
        a.quant.outputScale = readScales(*fields[kFIELD_OUTPUT_SCALE], 1)[0];
    }
    auto e = std::make_shared<EmbeddedWeights>(*a.embedded);
    e->weightScale = readScales(*fields[kFIELD_WEIGHT_SCALE], e->shape[0]);
    e->codes = quantCodes(e->weight.type, e->weight.bytes.data(), e->weight.count, a.quant.quant);
    a.embedded = std::move(e);
}

void setTypeParams(DcnParams& p, DcnAttributes const& a, TensorTypes const& types)
{
    int32_t const dtype = toDcnDataType(types.floating);
    bool const quantized = a.quant.quant != kDCN_QUANT_NONE;
    DCN_VALIDATE(dtype >= 0,
        (quantized ? "offset" : "x") << " has type " << dataTypeName(types.floating)
                                     << "; supported: FLOAT, HALF, BF16");
    p.dtype = dtype;
    p.quant = a.quant.quant;
    p.outType = dtype;
    if (!quantized)
    {
        DCN_VALIDATE(types.x == types.floating && types.out == types.floating,
            "x, offset and the output have types " << dataTypeName(types.x) << ", " << dataTypeName(types.floating)
                                                   << ", " << dataTypeName(types.out) << "; a float node takes one type");
        return;
    }
    DataType const q = quantDataType(a.quant.quant);
    DCN_VALIDATE(types.x == q,
        "x has type " << dataTypeName(types.x) << "; a quant_type '" << quantTypeName(a.quant.quant) << "' node takes "
                      << dataTypeName(q) << " (the output of the QuantizeLinear in front of it)");
    DataType const out = a.quant.hasOutputScale ? q : types.floating;
    DCN_VALIDATE(types.out == out,
        "the output has type " << dataTypeName(types.out) << "; expected " << dataTypeName(out)
                               << (a.quant.hasOutputScale ? " (the node has output_scale)" : " (the offset's type)"));
    p.xScale = a.quant.xScale;
    if (a.quant.hasOutputScale)
    {
        p.outType = quantDcnType(a.quant.quant);
        p.outScale = a.quant.outputScale;
    }
}

void DcnPlugin::warnOnDescScales(nvinfer1::PluginTensorDesc const& x, nvinfer1::PluginTensorDesc const& out) noexcept
{
    try
    {
        if (mAttrs.quant.quant == kDCN_QUANT_NONE || mScaleWarned)
        {
            return;
        }
        // PluginTensorDesc::scale: "only valid when data type is DataType::kINT8 ... -1.0F if it is
        // invalid" (NvInferRuntimePlugin.h). A valid one that differs from the field is reported; the
        // fields, which the rewritten graph's QuantizeLinear and `verify` hold, stay in force.
        auto const differs = [](nvinfer1::PluginTensorDesc const& d, float field) {
            return d.type == DataType::kINT8 && std::isfinite(d.scale) && d.scale > 0.F
                && std::fabs(d.scale - field) > 1e-6F * field;
        };
        std::ostringstream os;
        if (differs(x, mAttrs.quant.xScale))
        {
            os << " x has scale " << x.scale << " but the field x_scale is " << mAttrs.quant.xScale << ";";
        }
        if (mAttrs.quant.hasOutputScale && differs(out, mAttrs.quant.outputScale))
        {
            os << " the output has scale " << out.scale << " but the field output_scale is "
               << mAttrs.quant.outputScale << ";";
        }
        if (!os.str().empty())
        {
            mScaleWarned = true;
            logMessage(nvinfer1::ILogger::Severity::kWARNING,
                where("scales") + ": TensorRT's tensor description (PluginTensorDesc::scale) disagrees with the node:"
                    + os.str() + " the plugin uses the node's fields (the scales of its Q/DQ graph)");
        }
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "scales", e);
    }
}

} // namespace trt
} // namespace dcnconvert
