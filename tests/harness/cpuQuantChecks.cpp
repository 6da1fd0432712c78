/*
 * dcnconvert plugin harness, `cpu` mode: quantized nodes' fields (quant_type, x_scale, weight_scale,
 * output_scale with INT8 or E4M3 weights): creation in both phases, the serialization round trip,
 * and every field the creator refuses, with a message naming the field and the value.
 */
#include "cpuChecks.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;
using nvinfer1::TensorRTPhase;

namespace harness
{

double e4m3Value(uint8_t code)
{
    int32_t const exponent = (code >> 3) & 0xF;
    int32_t const mantissa = code & 0x7;
    if (exponent == 0xF && mantissa == 0x7)
    {
        return std::numeric_limits<double>::quiet_NaN();
    }
    double const v = exponent == 0 ? mantissa / 512.0 : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
    return (code & 0x80) != 0 ? -v : v;
}

uint16_t halfBitsOf(float value)
{
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    uint16_t const sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
    if ((bits & 0x7FFFFFFF) == 0)
    {
        return sign;
    }
    int32_t const exponent = static_cast<int32_t>((bits >> 23) & 0xFF) - 127 + 15;
    return static_cast<uint16_t>(sign | (exponent << 10) | ((bits & 0x7FFFFF) >> 13));
}

QuantNode::QuantNode(bool fp8Node, bool withOutputScale)
    : fp8(fp8Node)
    , outputScale(withOutputScale)
    , base(Attrs{{1, 2}, {1, 0}, {1, 1}, 2, 2})
{
    problem.attrs = Attrs{{1, 2}, {1, 0}, {1, 1}, 2, 2};
    problem.n = 2;
    problem.c = 64;
    problem.h = 9;
    problem.w = 7;
    problem.cout = 6;
    size_t const count = 6 * 32 * 3 * 3;
    for (size_t i = 0; i < count; ++i)
    {
        int32_t const v = static_cast<int32_t>((i * 37) % 256) - 128; // every INT8 value
        int8Weight.push_back(static_cast<int8_t>(v));
        uint8_t code = static_cast<uint8_t>(i % 256);
        code = (code & 0x7F) == 0x7F ? static_cast<uint8_t>(code ^ 1) : code; // no NaN: +-448 instead
        float const e4m3 = static_cast<float>(e4m3Value(code));
        halfWeight.push_back(halfBitsOf(e4m3));
        values.push_back(fp8 ? e4m3 : static_cast<float>(v));
    }
    for (int32_t o = 0; o < 6; ++o)
    {
        weightScale.push_back(0.01F * static_cast<float>(o + 1));
        bias.push_back(0.5F * static_cast<float>(o) - 1.F);
    }
    base.collection();
    fields = base.fields;
    fields.emplace_back("weight", fp8 ? static_cast<void const*>(halfWeight.data()) : int8Weight.data(),
        fp8 ? PluginFieldType::kFLOAT16 : PluginFieldType::kINT8, static_cast<int32_t>(count));
    fields.emplace_back("weight_shape", shape, PluginFieldType::kINT32, 4);
    fields.emplace_back("bias", bias.data(), PluginFieldType::kFLOAT32, 6);
    // STRING attributes reach the creator with their NUL (length counts it).
    fields.emplace_back("quant_type", fp8 ? "fp8e4m3" : "int8", PluginFieldType::kCHAR, fp8 ? 8 : 5);
    fields.emplace_back("x_scale", &xScale, PluginFieldType::kFLOAT32, 1);
    fields.emplace_back("weight_scale", weightScale.data(), PluginFieldType::kFLOAT32, 6);
    if (outputScale)
    {
        fields.emplace_back("output_scale", &outScale, PluginFieldType::kFLOAT32, 1);
    }
}

std::vector<PluginField> QuantNode::with(char const* name, PluginField const* replacement) const
{
    std::vector<PluginField> out;
    bool found = false;
    for (PluginField const& f : fields)
    {
        if (std::strcmp(f.name, name) != 0)
        {
            out.push_back(f);
        }
        else if ((found = true) && replacement != nullptr)
        {
            out.push_back(*replacement);
        }
    }
    if (!found && replacement != nullptr)
    {
        out.push_back(*replacement);
    }
    return out;
}

namespace
{

bool sameField(PluginField const& a, PluginField const& b)
{
    size_t const elem = a.type == PluginFieldType::kFLOAT32 || a.type == PluginFieldType::kINT32 ? 4
        : a.type == PluginFieldType::kFLOAT16 || a.type == PluginFieldType::kBF16                 ? 2
                                                                                                  : 1;
    return std::strcmp(a.name, b.name) == 0 && a.type == b.type && a.length == b.length
        && std::memcmp(a.data, b.data, elem * static_cast<size_t>(a.length)) == 0;
}

PluginField const* fieldNamed(PluginFieldCollection const* fc, char const* name)
{
    for (int32_t i = 0; fc != nullptr && i < fc->nbFields; ++i)
    {
        if (std::strcmp(fc->fields[i].name, name) == 0)
        {
            return &fc->fields[i];
        }
    }
    return nullptr;
}

} // namespace

void CpuRun::quantFields(bool fp8, bool outputScale)
{
    QuantNode node(fp8, outputScale);
    std::string const what = std::string(fp8 ? "fp8e4m3" : "int8") + (outputScale ? " with output_scale" : "");
    PluginFieldCollection fc{static_cast<int32_t>(node.fields.size()), node.fields.data()};
    PluginPtr plugin(mCreator->createPlugin("quant_layer", &fc, TensorRTPhase::kBUILD));
    HCHECK(plugin != nullptr, "createPlugin(kBUILD) takes a quantized node (" << what << ")");
    if (!plugin)
    {
        return;
    }
    PluginFieldCollection const* serial = runtimeOf(plugin.get())->getFieldsToSerialize();
    int32_t const expected = outputScale ? 13 : 12;
    bool same = serial != nullptr && serial->nbFields == expected;
    for (PluginField const& given : node.fields)
    {
        PluginField const* written = fieldNamed(serial, given.name);
        same = same && written != nullptr && sameField(given, *written);
    }
    HCHECK(same,
        "getFieldsToSerialize (" << what << "): " << expected << " fields, each with the name, type, length and "
                                 << "bytes it came with (quant_type as CHAR with its NUL, weight as "
                                 << (fp8 ? "FLOAT16" : "INT8") << ")");
    PluginPtr restored(mCreator->createPlugin("quant_layer", serial, TensorRTPhase::kRUNTIME));
    PluginFieldCollection const* again = restored ? runtimeOf(restored.get())->getFieldsToSerialize() : nullptr;
    bool roundTrip = again != nullptr && serial != nullptr && again->nbFields == serial->nbFields;
    for (int32_t i = 0; roundTrip && i < serial->nbFields; ++i)
    {
        roundTrip = sameField(serial->fields[i], again->fields[i]);
    }
    HCHECK(roundTrip, "createPlugin(kRUNTIME) from the serialized fields serializes the same fields again (" << what << ")");

    // The other float types of E4M3 weights: FLOAT32 (and the INT8 node takes float integers too).
    std::vector<float> const& asFloat = node.values;
    PluginField const floatWeight("weight", asFloat.data(), PluginFieldType::kFLOAT32, static_cast<int32_t>(asFloat.size()));
    std::vector<PluginField> floats = node.with("weight", &floatWeight);
    PluginFieldCollection floatFc{static_cast<int32_t>(floats.size()), floats.data()};
    PluginPtr fromFloats(mCreator->createPlugin("quant_layer", &floatFc, TensorRTPhase::kBUILD));
    HCHECK(fromFloats != nullptr, "createPlugin takes the " << what << " weights as exact FLOAT32 values too");

    // A quant_type without its NUL (a caller that builds the collection itself).
    PluginField const bare("quant_type", fp8 ? "fp8e4m3" : "int8", PluginFieldType::kCHAR, fp8 ? 7 : 4);
    std::vector<PluginField> noNul = node.with("quant_type", &bare);
    PluginFieldCollection noNulFc{static_cast<int32_t>(noNul.size()), noNul.data()};
    PluginPtr fromBare(mCreator->createPlugin("quant_layer", &noNulFc, TensorRTPhase::kRUNTIME));
    HCHECK(fromBare != nullptr, "createPlugin takes quant_type without a trailing NUL (" << what << ")");
}

void CpuRun::quantBadFields()
{
    QuantNode int8Node(false, true);
    QuantNode fp8Node(true, false);
    float const zero = 0.F;
    float const negative = -2.F;
    float const nan = std::numeric_limits<float>::quiet_NaN();
    float const inf = std::numeric_limits<float>::infinity();
    float const twoScales[2] = {0.1F, 0.2F};
    int32_t const intScale = 1;
    std::vector<float> badScales = int8Node.weightScale;
    badScales[3] = -1.F;
    std::vector<uint16_t> inexact = fp8Node.halfWeight;
    inexact[7] = halfBitsOf(1.0625F); // 1 + 1/16: FP16 holds it, E4M3 does not
    std::vector<uint16_t> tooLarge = fp8Node.halfWeight;
    tooLarge[0] = halfBitsOf(480.F);
    std::vector<uint16_t> notANumber = fp8Node.halfWeight;
    notANumber[5] = 0x7E00;
    std::vector<float> fractional(int8Node.int8Weight.begin(), int8Node.int8Weight.end());
    fractional[2] = 0.5F;
    std::vector<float> outOfRange(int8Node.int8Weight.begin(), int8Node.int8Weight.end());
    outOfRange[9] = 200.F;
    int32_t const n = static_cast<int32_t>(int8Node.int8Weight.size());
    PluginField const f[] = {
        PluginField("quant_type", "int4", PluginFieldType::kCHAR, 5),                    // 0
        PluginField("quant_type", &intScale, PluginFieldType::kINT32, 1),                // 1
        PluginField("x_scale", &zero, PluginFieldType::kFLOAT32, 1),                     // 2
        PluginField("x_scale", &nan, PluginFieldType::kFLOAT32, 1),                      // 3
        PluginField("x_scale", &inf, PluginFieldType::kFLOAT32, 1),                      // 4
        PluginField("x_scale", twoScales, PluginFieldType::kFLOAT32, 2),                 // 5
        PluginField("x_scale", &intScale, PluginFieldType::kINT32, 1),                   // 6
        PluginField("weight_scale", twoScales, PluginFieldType::kFLOAT32, 2),            // 7
        PluginField("weight_scale", badScales.data(), PluginFieldType::kFLOAT32, 6),     // 8
        PluginField("output_scale", &negative, PluginFieldType::kFLOAT32, 1),            // 9
        PluginField("weight", inexact.data(), PluginFieldType::kFLOAT16, n),             // 10
        PluginField("weight", tooLarge.data(), PluginFieldType::kFLOAT16, n),            // 11
        PluginField("weight", notANumber.data(), PluginFieldType::kFLOAT16, n),          // 12
        PluginField("weight", fractional.data(), PluginFieldType::kFLOAT32, n),          // 13
        PluginField("weight", outOfRange.data(), PluginFieldType::kFLOAT32, n),          // 14
        PluginField("weight", int8Node.int8Weight.data(), PluginFieldType::kINT8, n),    // 15
    };
    struct Case
    {
        char const* what;
        std::vector<PluginField> fields;
        std::vector<char const*> expect;
    };
    std::vector<PluginField> const plain(int8Node.base.fields.begin(), int8Node.base.fields.end());
    std::vector<PluginField> scalesOnly = plain;
    scalesOnly.push_back(f[2]);
    std::vector<PluginField> quantNoWeights = plain;
    quantNoWeights.push_back(int8Node.fields[int8Node.fields.size() - 4]); // quant_type "int8"
    std::vector<PluginField> int8NoQuant(int8Node.fields.begin(), int8Node.fields.begin() + 8);
    std::vector<Case> const cases = {
        {"an unknown quant_type", int8Node.with("quant_type", &f[0]), {"quant_type", "'int4'", "int8", "fp8e4m3"}},
        {"quant_type as INT32", int8Node.with("quant_type", &f[1]), {"quant_type", "CHAR"}},
        {"quant_type without the weights", quantNoWeights, {"quant_type", "weight", "weight_scale"}},
        {"x_scale 0", int8Node.with("x_scale", &f[2]), {"x_scale", "is 0", "> 0 and finite"}},
        {"x_scale NaN", int8Node.with("x_scale", &f[3]), {"x_scale", "nan", "> 0 and finite"}},
        {"x_scale infinite", int8Node.with("x_scale", &f[4]), {"x_scale", "inf"}},
        {"x_scale of 2 values", int8Node.with("x_scale", &f[5]), {"x_scale", "2 values", "expected 1"}},
        {"x_scale as INT32", int8Node.with("x_scale", &f[6]), {"x_scale", "FLOAT32"}},
        {"x_scale missing", int8Node.with("x_scale", nullptr), {"x_scale", "missing"}},
        {"weight_scale missing", fp8Node.with("weight_scale", nullptr), {"weight_scale", "missing"}},
        {"weight_scale of 2 values", int8Node.with("weight_scale", &f[7]), {"weight_scale", "2 values", "expected 6"}},
        {"a negative weight_scale", int8Node.with("weight_scale", &f[8]), {"weight_scale'[3]", "-1"}},
        {"a negative output_scale", fp8Node.with("output_scale", &f[9]), {"output_scale", "-2"}},
        {"x_scale without quant_type", scalesOnly, {"x_scale", "without 'quant_type'"}},
        {"INT8 weights without quant_type", int8NoQuant, {"weight", "INT8", "quant_type"}},
        {"an FP16 weight E4M3 cannot hold", fp8Node.with("weight", &f[10]), {"weight'[7]", "1.0625", "fp8e4m3"}},
        {"an FP16 weight above 448", fp8Node.with("weight", &f[11]), {"weight'[0]", "480", "448"}},
        {"a NaN weight", fp8Node.with("weight", &f[12]), {"weight'[5]", "nan"}},
        {"a fractional int8 weight", int8Node.with("weight", &f[13]), {"weight'[2]", "0.5", "[-128, 127]"}},
        {"an int8 weight out of range", int8Node.with("weight", &f[14]), {"weight'[9]", "200", "'int8'"}},
        {"INT8 weights on an fp8e4m3 node", fp8Node.with("weight", &f[15]), {"weight", "fp8e4m3", "FLOAT16"}},
    };
    for (Case const& c : cases)
    {
        std::vector<PluginField> fields = c.fields;
        PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
        for (TensorRTPhase phase : {TensorRTPhase::kBUILD, TensorRTPhase::kRUNTIME})
        {
            size_t const mark = mLogger.entries.size();
            PluginPtr bad(mCreator->createPlugin("bad_quant", &fc, phase));
            HCHECK(bad == nullptr && loggedError(mLogger, mark, c.expect),
                "createPlugin(" << (phase == TensorRTPhase::kBUILD ? "kBUILD" : "kRUNTIME") << ") rejects " << c.what
                                << " with a message naming it");
        }
    }
}

} // namespace harness
