/*
 * dcnconvert: the ModulatedDeformConv2d fields: parsing and validation of a PluginFieldCollection
 * (createPlugin in both phases) and the collection the plugin serializes (getFieldsToSerialize).
 *
 * The same field types are accepted in both phases: the ONNX parser turns INTS/INT attributes into
 * kINT32 fields (build), and getFieldsToSerialize() writes kINT32 fields (runtime). kINT64 is
 * accepted too, for callers that build the collection themselves.
 *
 * The optional allow_tf32 (0 or 1, default 0) may be absent: nodes rewritten without it, and engines
 * serialized before it existed, mean FP32-accurate math. It is always serialized. The optional
 * tensor fields weight, weight_shape and bias (constant weights carried by the node) come together
 * (bias optional) and are serialized as they came. The quantization fields (quant_type, x_scale,
 * weight_scale, output_scale) are read by parseQuantFields (dcnPluginQuant.cpp) and serialized as the
 * ONNX parser passes them.
 */
#include "dcnPlugin.h"

#include "checkMacros.h"

#include <cstring>
#include <exception>
#include <limits>
#include <sstream>
#include <string>

using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;

namespace dcnconvert
{
namespace trt
{
namespace
{

char const* fieldTypeName(PluginFieldType type) noexcept
{
    static char const* const kNAMES[] = {"FLOAT16", "FLOAT32", "FLOAT64", "INT8", "INT16", "INT32", "CHAR", "DIMS",
        "UNKNOWN", "BF16", "INT64", "FP8", "INT4", "FP4"};
    auto const index = static_cast<int32_t>(type);
    if (index >= 0 && index < static_cast<int32_t>(sizeof(kNAMES) / sizeof(kNAMES[0])))
    {
        return kNAMES[index];
    }
    return "an unknown PluginFieldType";
}

std::string valuesText(int64_t const* values, int32_t count)
{
    std::ostringstream os;
    if (count == 1)
    {
        os << values[0];
        return os.str();
    }
    os << "[";
    for (int32_t i = 0; i < count; ++i)
    {
        os << (i ? ", " : "") << values[i];
    }
    os << "]";
    return os.str();
}

//! The accepted values of a field, for messages: ">= 1", "0 or 1", "in [a, b]".
std::string rangeText(DcnFieldSpec const& spec)
{
    if (spec.maximum == INT32_MAX)
    {
        return ">= " + std::to_string(spec.minimum);
    }
    if (spec.maximum == spec.minimum + 1)
    {
        return std::to_string(spec.minimum) + " or " + std::to_string(spec.maximum);
    }
    return "in [" + std::to_string(spec.minimum) + ", " + std::to_string(spec.maximum) + "]";
}

//! Reads one field's integers (int32 or int64, exactly spec.length of them) into `values`.
void readInts(PluginField const& field, DcnFieldSpec const& spec, int64_t* values)
{
    DCN_VALIDATE(field.type == PluginFieldType::kINT32 || field.type == PluginFieldType::kINT64,
        "field '" << spec.name << "' has type " << fieldTypeName(field.type) << " (PluginFieldType "
                  << static_cast<int32_t>(field.type) << "); expected INT32 (or INT64) with " << spec.length
                  << (spec.length == 1 ? " value" : " values"));
    DCN_VALIDATE(field.length == spec.length,
        "field '" << spec.name << "' has length " << field.length << "; expected " << spec.length
                  << (spec.length == 1 ? " value" : " values (h, w)"));
    DCN_VALIDATE(field.data != nullptr, "field '" << spec.name << "' has length " << field.length << " but no data");
    for (int32_t i = 0; i < spec.length; ++i)
    {
        if (field.type == PluginFieldType::kINT32)
        {
            int32_t v;
            std::memcpy(&v, static_cast<char const*>(field.data) + i * sizeof(int32_t), sizeof(v));
            values[i] = v;
        }
        else
        {
            int64_t v;
            std::memcpy(&v, static_cast<char const*>(field.data) + i * sizeof(int64_t), sizeof(v));
            DCN_VALIDATE(v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(),
                "field '" << spec.name << "' value " << v << " does not fit in int32");
            values[i] = v;
        }
    }
}

//! Reads a float tensor field (kFLOAT32, kFLOAT16 or kBF16, at least one value; the weight of a
//! quantized node may be kINT8) as given.
FieldTensor readTensor(PluginField const& field, DcnFieldSpec const& spec, bool int8)
{
    int32_t const dtype = int8 && field.type == PluginFieldType::kINT8 ? kDCN_INT8 : dcnTypeOfField(field.type);
    DCN_VALIDATE(dtype >= 0,
        "field '" << spec.name << "' has type " << fieldTypeName(field.type) << " (PluginFieldType "
                  << static_cast<int32_t>(field.type) << "); expected FLOAT32, FLOAT16 or BF16 (from the ONNX node's "
                  << "TENSOR attribute '" << spec.name << "')" << (int8 ? ", or INT8 with quant_type 'int8'" : ""));
    DCN_VALIDATE(field.length >= 1, "field '" << spec.name << "' has length " << field.length << "; expected >= 1");
    DCN_VALIDATE(field.data != nullptr, "field '" << spec.name << "' has length " << field.length << " but no data");
    FieldTensor t;
    t.type = field.type;
    t.count = field.length;
    size_t const bytes = static_cast<size_t>(field.length) * (dtype == kDCN_FLOAT32 ? 4 : dtype == kDCN_INT8 ? 1 : 2);
    auto const* data = static_cast<uint8_t const*>(field.data);
    t.bytes.assign(data, data + bytes);
    return t;
}

bool isTensorField(DcnFieldSpec const& spec) noexcept
{
    return spec.length < 0;
}

//! The quantization fields (quant_type, x_scale, weight_scale, output_scale): parseQuantFields reads them.
bool isQuantField(int32_t index) noexcept
{
    return index >= kFIELD_QUANT_TYPE;
}

} // namespace

DcnAttributes parseFields(PluginFieldCollection const* fc)
{
    DCN_VALIDATE(fc != nullptr, "no PluginFieldCollection (null); the fields "
                                "stride, padding, dilation, group, deformable_group are required");
    DCN_VALIDATE(fc->nbFields >= 0, "PluginFieldCollection has a negative field count " << fc->nbFields);
    DCN_VALIDATE(fc->nbFields == 0 || fc->fields != nullptr,
        "PluginFieldCollection has " << fc->nbFields << " fields but a null field array");

    int64_t values[kDCN_NB_FIELDS][4] = {};
    bool seen[kDCN_NB_FIELDS] = {};
    FieldTensor tensors[kDCN_NB_FIELDS];
    PluginField const* quantFields[kDCN_NB_FIELDS] = {};
    for (int32_t i = 0; i < fc->nbFields; ++i)
    {
        PluginField const& field = fc->fields[i];
        DCN_VALIDATE(field.name != nullptr, "field #" << i << " has no name (null)");
        int32_t index = -1;
        for (int32_t k = 0; k < kDCN_NB_FIELDS; ++k)
        {
            if (std::strcmp(field.name, kDCN_FIELDS[k].name) == 0)
            {
                index = k;
            }
        }
        if (index < 0)
        {
            logMessage(nvinfer1::ILogger::Severity::kWARNING,
                std::string(kDCN_PLUGIN_NAME) + ": ignoring unknown field '" + field.name + "'");
            continue;
        }
        DCN_VALIDATE(!seen[index], "field '" << field.name << "' is given more than once");
        if (isQuantField(index))
        {
            quantFields[index] = &field;
        }
        else if (isTensorField(kDCN_FIELDS[index]))
        {
            tensors[index] = readTensor(field, kDCN_FIELDS[index], index == kFIELD_WEIGHT);
        }
        else
        {
            readInts(field, kDCN_FIELDS[index], values[index]);
        }
        seen[index] = true;
    }
    for (int32_t k = 0; k < kDCN_NB_FIELDS; ++k)
    {
        DCN_VALIDATE(seen[k] || !kDCN_FIELDS[k].required,
            "required field '" << kDCN_FIELDS[k].name << "' is missing (INT32 x" << kDCN_FIELDS[k].length
                               << "; from the ONNX node's " << (kDCN_FIELDS[k].length == 1 ? "INT" : "INTS")
                               << " attribute '" << kDCN_FIELDS[k].name << "')");
    }

    // Ranges, in field order: stride >= 1, padding >= 0, dilation >= 1, group >= 1, deformable_group >= 1,
    // allow_tf32 0 or 1 (an absent optional field holds 0, its default).
    for (int32_t k = 0; k < kDCN_NB_FIELDS; ++k)
    {
        DcnFieldSpec const& spec = kDCN_FIELDS[k];
        for (int32_t i = 0; seen[k] && !isTensorField(spec) && !isQuantField(k) && i < spec.length; ++i)
        {
            DCN_VALIDATE(values[k][i] >= spec.minimum && values[k][i] <= spec.maximum,
                "field '" << spec.name << "' must be " << rangeText(spec) << ", got "
                          << valuesText(values[k], spec.length));
        }
    }
    DcnAttributes a;
    for (int32_t i = 0; i < 2; ++i)
    {
        a.stride[i] = static_cast<int32_t>(values[0][i]);
        a.padding[i] = static_cast<int32_t>(values[1][i]);
        a.dilation[i] = static_cast<int32_t>(values[2][i]);
    }
    a.group = static_cast<int32_t>(values[3][0]);
    a.deformableGroup = static_cast<int32_t>(values[4][0]);
    if (seen[5]) // else the default of DcnAttributes (0: FP32-accurate math)
    {
        a.allowTf32 = static_cast<int32_t>(values[5][0]);
    }
    bool const weight = seen[kFIELD_WEIGHT];
    DCN_VALIDATE(weight == seen[kFIELD_WEIGHT_SHAPE],
        "field '" << (weight ? "weight" : "weight_shape") << "' is given without '"
                  << (weight ? "weight_shape" : "weight") << "'; a node that carries its weights needs both");
    DCN_VALIDATE(weight || !seen[kFIELD_BIAS], "field 'bias' is given without 'weight'; carry both, or pass the "
                                              "weights and the bias as inputs");
    if (weight)
    {
        auto e = std::make_shared<EmbeddedWeights>();
        int64_t count = 1;
        for (int32_t i = 0; i < 4; ++i)
        {
            e->shape[i] = static_cast<int32_t>(values[kFIELD_WEIGHT_SHAPE][i]);
            count *= e->shape[i];
        }
        e->weight = std::move(tensors[kFIELD_WEIGHT]);
        DCN_VALIDATE(e->weight.count == count,
            "field 'weight' has " << e->weight.count << " values but weight_shape " << valuesText(values[7], 4)
                                  << " needs " << count);
        DCN_VALIDATE(e->shape[0] % a.group == 0,
            "weight_shape[0] = " << e->shape[0] << " output channels are not divisible by group = " << a.group);
        if (seen[kFIELD_BIAS])
        {
            e->hasBias = true;
            e->bias = std::move(tensors[kFIELD_BIAS]);
            DCN_VALIDATE(e->bias.count == e->shape[0],
                "field 'bias' has " << e->bias.count << " values but weight_shape[0] = " << e->shape[0]);
        }
        a.embedded = std::move(e);
    }
    parseQuantFields(quantFields, a);
    return a;
}

int32_t mathOf(DcnAttributes const& a) noexcept
{
    return a.allowTf32 != 0 ? kDCN_MATH_TF32 : kDCN_MATH_ACCURATE;
}

// --- Serialization ---

void DcnPlugin::buildSerializationFields()
{
    // Exactly the types createPlugin(kBUILD) receives from the ONNX parser: int32, and the embedded
    // tensors in the type they came in. Every integer field, the optional allow_tf32 included (so a
    // restored plugin never depends on a default); the tensor fields when the node carries them; the
    // quantization fields of a quantized node (quant_type as a NUL-terminated string, the scales FP32).
    EmbeddedWeights const* const e = mAttrs.embedded.get();
    QuantAttributes const& q = mAttrs.quant;
    bool const quantized = q.quant != kDCN_QUANT_NONE;
    char const* const quantType = quantTypeName(q.quant);
    void const* const data[kDCN_NB_FIELDS] = {mAttrs.stride, mAttrs.padding, mAttrs.dilation, &mAttrs.group,
        &mAttrs.deformableGroup, &mAttrs.allowTf32, e != nullptr ? e->weight.bytes.data() : nullptr,
        e != nullptr ? e->shape : nullptr, e != nullptr && e->hasBias ? e->bias.bytes.data() : nullptr,
        quantized ? quantType : nullptr, quantized ? &q.xScale : nullptr,
        quantized ? e->weightScale.data() : nullptr, quantized && q.hasOutputScale ? &q.outputScale : nullptr};
    mSerialFields.clear();
    for (int32_t i = 0; i < kDCN_NB_FIELDS; ++i)
    {
        if (data[i] == nullptr)
        {
            continue; // an embedded tensor the node does not carry
        }
        nvinfer1::PluginFieldType const type = i == kFIELD_WEIGHT ? e->weight.type
            : i == kFIELD_BIAS                                     ? e->bias.type
                                                                   : kDCN_FIELDS[i].type;
        int32_t const length = i == kFIELD_WEIGHT ? static_cast<int32_t>(e->weight.count)
            : i == kFIELD_BIAS                     ? static_cast<int32_t>(e->bias.count)
            : i == kFIELD_QUANT_TYPE               ? static_cast<int32_t>(std::strlen(quantType) + 1)
            : i == kFIELD_WEIGHT_SCALE             ? static_cast<int32_t>(e->weightScale.size())
                                                   : kDCN_FIELDS[i].length;
        mSerialFields.emplace_back(kDCN_FIELDS[i].name, data[i], type, length);
    }
    mSerialCollection.nbFields = static_cast<int32_t>(mSerialFields.size());
    mSerialCollection.fields = mSerialFields.data();
}

nvinfer1::PluginFieldCollection const* DcnPlugin::getFieldsToSerialize() noexcept
{
    try
    {
        buildSerializationFields();
        return &mSerialCollection;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "getFieldsToSerialize", e);
    }
    return nullptr;
}

} // namespace trt
} // namespace dcnconvert
