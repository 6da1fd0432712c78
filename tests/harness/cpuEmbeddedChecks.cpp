/*
 * dcnconvert plugin harness, `cpu` mode: a node that carries its weights (the fields weight,
 * weight_shape and bias): creation in both phases, the 3-input build calls, serialization round
 * trip, and the field combinations the creator refuses.
 */
#include "cpuChecks.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::IPluginV3OneBuild;
using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;
using nvinfer1::TensorRTPhase;

namespace harness
{

void CpuRun::embeddedWeights()
{
    // 2 x 8 x 11 x 7, 6 output channels, 3x3, 2 groups, 2 deformable groups.
    Problem p;
    p.n = 2;
    p.c = 8;
    p.h = 11;
    p.w = 7;
    p.cout = 6;
    p.attrs = Attrs{{2, 1}, {1, 0}, {1, 2}, 2, 2};
    int32_t const shape[4] = {6, 4, 3, 3};
    std::vector<uint16_t> weight(6 * 4 * 3 * 3);
    for (size_t i = 0; i < weight.size(); ++i)
    {
        weight[i] = static_cast<uint16_t>(0x3C00 + i); // FP16 bits near 1.0
    }
    float const bias[6] = {0.5F, -1.F, 2.F, 0.F, 3.F, -4.F};
    FieldSet base(p.attrs);
    base.collection();
    auto withWeights = [&](std::vector<PluginField> extra) {
        std::vector<PluginField> v = base.fields;
        v.insert(v.end(), extra.begin(), extra.end());
        return v;
    };
    PluginField const wField("weight", weight.data(), PluginFieldType::kFLOAT16, static_cast<int32_t>(weight.size()));
    PluginField const sField("weight_shape", shape, PluginFieldType::kINT32, 4);
    PluginField const bField("bias", bias, PluginFieldType::kFLOAT32, 6);
    std::vector<PluginField> good = withWeights({wField, sField, bField});
    PluginFieldCollection goodFc{static_cast<int32_t>(good.size()), good.data()};

    // Creation, the 3-input build calls, serialization.
    PluginPtr plugin(mCreator->createPlugin("carried", &goodFc, TensorRTPhase::kBUILD));
    HCHECK(plugin != nullptr, "createPlugin(kBUILD) takes weight (FLOAT16), weight_shape and bias (FLOAT32)");
    if (!plugin)
    {
        return;
    }
    IPluginV3OneBuild* build = buildOf(plugin.get());
    std::vector<Dims> inputs = p.inputDims();
    inputs.resize(3); // x, offset, mask
    Dims out{};
    int32_t const shaped = constantShapes(build, inputs, out);
    HCHECK(shaped == 0 && out.nbDims == 4 && out.d[0] == p.n && out.d[1] == p.cout && out.d[2] == p.ho()
            && out.d[3] == p.wo(),
        "getOutputShapes with 3 inputs: [N, weight_shape[0], Ho, Wo] = " << dimsText(out));
    auto in = dynamicDescs(inputs, DataType::kHALF);
    auto o = dynamicDescs({p.outputDims()}, DataType::kHALF);
    HCHECK(build->configurePlugin(in.data(), 3, o.data(), 1) == 0, "configurePlugin with x, offset and mask");
    std::vector<nvinfer1::DynamicPluginTensorDesc> io(in);
    io.push_back(o[0]);
    HCHECK(build->supportsFormatCombination(3, io.data(), 3, 1), "supportsFormatCombination: the output at pos 3");
    size_t mark = mLogger.entries.size();
    auto in5 = dynamicDescs(p.inputDims(), DataType::kHALF);
    HCHECK(build->configurePlugin(in5.data(), 5, o.data(), 1) != 0
            && loggedError(mLogger, mark, {"carries its weights", "3 inputs", "got 5"}),
        "configurePlugin with 5 inputs on a node that carries its weights fails, naming the count");
    PluginFieldCollection const* serial = runtimeOf(plugin.get())->getFieldsToSerialize();
    bool typesKept = serial != nullptr && serial->nbFields == 9;
    for (int32_t i = 0; typesKept && i < serial->nbFields; ++i)
    {
        PluginField const& f = serial->fields[i];
        if (std::strcmp(f.name, "weight") == 0)
        {
            typesKept = f.type == PluginFieldType::kFLOAT16 && f.length == static_cast<int32_t>(weight.size())
                && std::memcmp(f.data, weight.data(), weight.size() * 2) == 0;
        }
        else if (std::strcmp(f.name, "bias") == 0)
        {
            typesKept = f.type == PluginFieldType::kFLOAT32 && f.length == 6 && std::memcmp(f.data, bias, 24) == 0;
        }
    }
    HCHECK(typesKept, "getFieldsToSerialize: 9 fields, weight and bias in the type and bits they came in");
    PluginPtr restored(mCreator->createPlugin("carried", serial, TensorRTPhase::kRUNTIME));
    HCHECK(restored != nullptr
            && constantShapes(buildOf(restored.get()), inputs, out) == 0 && out.d[1] == p.cout,
        "createPlugin(kRUNTIME) from the serialized fields, same output shape");
    std::vector<PluginField> noBias = withWeights({wField, sField});
    PluginFieldCollection noBiasFc{static_cast<int32_t>(noBias.size()), noBias.data()};
    PluginPtr withoutBias(mCreator->createPlugin("carried", &noBiasFc, TensorRTPhase::kBUILD));
    HCHECK(withoutBias != nullptr && runtimeOf(withoutBias.get())->getFieldsToSerialize()->nbFields == 8,
        "weights without a bias: 8 serialized fields");

    // What the creator refuses, in both phases, with a message naming the field.
    std::vector<int32_t> const ints(weight.size(), 1);
    int32_t const zeroShape[4] = {6, 0, 3, 3};
    int32_t const oddShape[4] = {5, 4, 3, 3};
    struct Case
    {
        char const* what;
        std::vector<PluginField> fields;
        std::vector<char const*> expect;
    };
    std::vector<Case> const cases = {
        {"weight without weight_shape", withWeights({wField}), {"weight", "weight_shape"}},
        {"weight_shape without weight", withWeights({sField}), {"weight_shape", "weight"}},
        {"bias without weight", withWeights({bField}), {"bias", "without 'weight'"}},
        {"weight of the wrong count",
            withWeights({PluginField("weight", weight.data(), PluginFieldType::kFLOAT16, 100), sField}),
            {"weight", "100 values", "216"}},
        {"bias of the wrong count", withWeights({wField, sField, PluginField("bias", bias, PluginFieldType::kFLOAT32, 5)}),
            {"bias", "5 values"}},
        {"weight as INT32",
            withWeights({PluginField("weight", ints.data(), PluginFieldType::kINT32, static_cast<int32_t>(ints.size())),
                sField}),
            {"weight", "INT32", "FLOAT32, FLOAT16 or BF16"}},
        {"weight of length 0", withWeights({PluginField("weight", weight.data(), PluginFieldType::kFLOAT16, 0), sField}),
            {"weight", "length 0"}},
        {"a zero in weight_shape", withWeights({wField, PluginField("weight_shape", zeroShape, PluginFieldType::kINT32, 4)}),
            {"weight_shape", "[6, 0, 3, 3]"}},
        {"output channels not divisible by group",
            withWeights({PluginField("weight", weight.data(), PluginFieldType::kFLOAT16, 180),
                PluginField("weight_shape", oddShape, PluginFieldType::kINT32, 4)}),
            {"weight_shape[0] = 5", "group = 2"}},
    };
    for (Case const& c : cases)
    {
        std::vector<PluginField> fields = c.fields;
        PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
        for (TensorRTPhase phase : {TensorRTPhase::kBUILD, TensorRTPhase::kRUNTIME})
        {
            mark = mLogger.entries.size();
            PluginPtr bad(mCreator->createPlugin("bad_layer", &fc, phase));
            HCHECK(bad == nullptr && loggedError(mLogger, mark, c.expect),
                "createPlugin(" << (phase == TensorRTPhase::kBUILD ? "kBUILD" : "kRUNTIME") << ") rejects " << c.what
                                << " with a message naming it");
        }
    }
    // A node without carried weights keeps refusing 3 inputs.
    PluginPtr plain = create(p.attrs);
    mark = mLogger.entries.size();
    HCHECK(buildOf(plain.get())->configurePlugin(in.data(), 3, o.data(), 1) != 0
            && loggedError(mLogger, mark, {"3 inputs need the fields weight and weight_shape"}),
        "configurePlugin with 3 inputs on a node without carried weights fails, naming the fields");
}

} // namespace harness
