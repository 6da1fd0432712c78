/*
 * dcnconvert plugin harness, `cpu` mode: the optional field allow_tf32. Absent, 0 or 1 (INT32 as the ONNX
 * parser gives it, INT64 too) in both phases; the value serialized (always, INT32) and restored; bad
 * values, types and lengths rejected with a message naming the field; serialized data from before the
 * field existed; and the DcnParams.math the plugin hands the core, read from its kVERBOSE DcnParams
 * line at onShapeChange (the same params enqueue passes to dcnForward).
 */
#include "cpuChecks.h"

#include <cstdint>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::IPluginV3;
using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;
using nvinfer1::TensorRTPhase;

namespace harness
{
namespace
{

char const* phaseText(TensorRTPhase phase)
{
    return phase == TensorRTPhase::kBUILD ? "kBUILD" : "kRUNTIME";
}

//! The base problem's fields plus `extra` (what the ONNX parser hands over for a node with more attributes).
struct Fields
{
    explicit Fields(Attrs const& a, std::vector<PluginField> const& extra)
        : set(a)
    {
        set.collection();
        fields = set.fields;
        fields.insert(fields.end(), extra.begin(), extra.end());
        fc = PluginFieldCollection{static_cast<int32_t>(fields.size()), fields.data()};
    }
    FieldSet set;
    std::vector<PluginField> fields;
    PluginFieldCollection fc{};
};

} // namespace

void CpuRun::allowTf32()
{
    Problem const p; // 1x4x8x8, 3x3, bias
    Attrs const base = p.attrs;
    auto const inStatic = staticDescs(p.inputDims(), DataType::kFLOAT);
    auto const outStatic = staticDescs({p.outputDims()}, DataType::kFLOAT);

    // "TF32" / "ACCURATE" as named by the DcnParams line that onShapeChange logs, or what went wrong.
    auto mathSeen = [&](IPluginV3* plugin) -> std::string {
        if (plugin == nullptr)
        {
            return "no plugin";
        }
        TestErrorRecorder recorder;
        TestResourceContext context(&recorder);
        PluginPtr attached(runtimeOf(plugin)->attachToContext(&context));
        if (!attached)
        {
            return "attachToContext failed";
        }
        size_t const mark = mLogger.entries.size();
        if (runtimeOf(attached.get())->onShapeChange(inStatic.data(), p.nbInputs(), outStatic.data(), 1) != 0)
        {
            return "onShapeChange failed";
        }
        std::string seen = "no DcnParams line";
        for (size_t i = mark; i < mLogger.entries.size(); ++i)
        {
            std::string const& text = mLogger.entries[i].text;
            if (mLogger.entries[i].severity == nvinfer1::ILogger::Severity::kVERBOSE
                && text.find("DcnParams") != std::string::npos)
            {
                seen = containsAll(text, {"math TF32"}) ? "TF32"
                    : containsAll(text, {"math ACCURATE"}) ? "ACCURATE"
                                                          : "DcnParams line without math: " + text;
            }
        }
        return seen;
    };
    auto serialized = [](IPluginV3* plugin, Attrs& out, std::string& why) {
        return plugin != nullptr && readSerialized(runtimeOf(plugin)->getFieldsToSerialize(), out, why);
    };

    // --- Accepted: absent, 0 or 1, INT32 or INT64, in both phases ---
    int32_t const zero32 = 0;
    int32_t const one32 = 1;
    int64_t const zero64 = 0;
    int64_t const one64 = 1;
    struct Accepted
    {
        char const* what;
        std::vector<PluginField> extra;
        int32_t expect;
    };
    std::vector<Accepted> const accepted = {
        {"absent (a node rewritten without it)", {}, 0},
        {"INT32 0", {PluginField("allow_tf32", &zero32, PluginFieldType::kINT32, 1)}, 0},
        {"INT32 1 (the ONNX parser's type)", {PluginField("allow_tf32", &one32, PluginFieldType::kINT32, 1)}, 1},
        {"INT64 0", {PluginField("allow_tf32", &zero64, PluginFieldType::kINT64, 1)}, 0},
        {"INT64 1", {PluginField("allow_tf32", &one64, PluginFieldType::kINT64, 1)}, 1},
    };
    for (Accepted const& c : accepted)
    {
        for (TensorRTPhase phase : {TensorRTPhase::kBUILD, TensorRTPhase::kRUNTIME})
        {
            Fields f(base, c.extra);
            size_t const mark = mLogger.entries.size();
            PluginPtr plugin(mCreator->createPlugin("tf32_layer", &f.fc, phase));
            HCHECK(plugin != nullptr && mLogger.errorsSince(mark).empty(),
                "createPlugin(" << phaseText(phase) << ") accepts allow_tf32 " << c.what);
            Attrs back{};
            std::string why;
            Attrs expected = base;
            expected.allowTf32 = c.expect;
            HCHECK(serialized(plugin.get(), back, why) && sameAttrs(back, expected),
                "allow_tf32 " << c.what << " (" << phaseText(phase) << "): serialized as INT32 " << c.expect
                              << " with the other fields unchanged " << why);
            std::string const math = mathSeen(plugin.get());
            char const* const want = c.expect != 0 ? "TF32" : "ACCURATE";
            HCHECK(math == want,
                "allow_tf32 " << c.what << " (" << phaseText(phase) << "): the core gets math " << want
                              << " (seen: " << math << ")");
        }
    }

    // --- Round trip: build plugin -> clone -> attach -> serialize -> createPlugin(kRUNTIME) -> serialize ---
    {
        Attrs tf32 = base;
        tf32.allowTf32 = 1;
        FieldSet f(tf32);
        PluginPtr built(mCreator->createPlugin("tf32_layer", f.collection(), TensorRTPhase::kBUILD));
        PluginPtr clone(built ? built->clone() : nullptr);
        TestErrorRecorder recorder;
        TestResourceContext context(&recorder);
        PluginPtr attached(clone ? runtimeOf(clone.get())->attachToContext(&context) : nullptr);
        PluginPtr restored(attached ? mCreator->createPlugin("tf32_layer",
                                          runtimeOf(attached.get())->getFieldsToSerialize(), TensorRTPhase::kRUNTIME)
                                    : nullptr);
        Attrs again{};
        std::string why;
        HCHECK(serialized(restored.get(), again, why) && sameAttrs(again, tf32),
            "allow_tf32 1 survives build -> clone -> attachToContext -> serialize -> kRUNTIME -> serialize " << why);
        HCHECK(mathSeen(restored.get()) == "TF32", "the deserialized plugin hands the core math TF32");
        HCHECK(recorder.errors.empty(), "round trip: no error recorded");
    }

    // --- Serialized data from before the field existed (5 fields): FP32-accurate, no message ---
    {
        FieldSet f(base);
        PluginPtr source(mCreator->createPlugin("old_engine", f.collection(), TensorRTPhase::kBUILD));
        PluginFieldCollection const* fc = source ? runtimeOf(source.get())->getFieldsToSerialize() : nullptr;
        bool const six = fc != nullptr && fc->nbFields == 6;
        HCHECK(six, "getFieldsToSerialize writes all 6 fields, allow_tf32 included, also when it is 0");
        if (six)
        {
            std::vector<PluginField> old(fc->fields, fc->fields + 5);
            PluginFieldCollection oldFc{5, old.data()};
            size_t const mark = mLogger.entries.size();
            PluginPtr restored(mCreator->createPlugin("old_engine", &oldFc, TensorRTPhase::kRUNTIME));
            Attrs back{};
            std::string why;
            HCHECK(serialized(restored.get(), back, why) && sameAttrs(back, base) && mLogger.errorsSince(mark).empty(),
                "a 5-field engine from before allow_tf32 deserializes with allow_tf32 0 " << why);
            HCHECK(mathSeen(restored.get()) == "ACCURATE", "... and hands the core math ACCURATE");
        }
    }

    // --- Rejected: values other than 0/1, wrong types and lengths, twice, in both phases ---
    int32_t const two32 = 2;
    int32_t const minus32 = -1;
    int32_t const pair32[2] = {1, 1};
    int64_t const two64 = 2;
    int64_t const huge64 = int64_t{1} << 33;
    float const oneFloat = 1.F;
    int8_t const oneInt8 = 1;
    struct Rejected
    {
        char const* what;
        std::vector<PluginField> extra;
        std::vector<char const*> expect;
    };
    std::vector<Rejected> const rejected = {
        {"INT32 2", {PluginField("allow_tf32", &two32, PluginFieldType::kINT32, 1)},
            {"allow_tf32", "must be 0 or 1", "got 2"}},
        {"INT32 -1", {PluginField("allow_tf32", &minus32, PluginFieldType::kINT32, 1)},
            {"allow_tf32", "must be 0 or 1", "got -1"}},
        {"INT64 2", {PluginField("allow_tf32", &two64, PluginFieldType::kINT64, 1)},
            {"allow_tf32", "must be 0 or 1", "got 2"}},
        {"INT64 2^33", {PluginField("allow_tf32", &huge64, PluginFieldType::kINT64, 1)},
            {"allow_tf32", "8589934592", "int32"}},
        {"FLOAT32 1.0", {PluginField("allow_tf32", &oneFloat, PluginFieldType::kFLOAT32, 1)},
            {"allow_tf32", "FLOAT32"}},
        {"INT8 1", {PluginField("allow_tf32", &oneInt8, PluginFieldType::kINT8, 1)}, {"allow_tf32", "INT8"}},
        {"of length 2", {PluginField("allow_tf32", pair32, PluginFieldType::kINT32, 2)},
            {"allow_tf32", "length 2"}},
        {"of length 0", {PluginField("allow_tf32", &one32, PluginFieldType::kINT32, 0)},
            {"allow_tf32", "length 0"}},
        {"with null data", {PluginField("allow_tf32", nullptr, PluginFieldType::kINT32, 1)},
            {"allow_tf32", "no data"}},
        {"given twice",
            {PluginField("allow_tf32", &one32, PluginFieldType::kINT32, 1),
                PluginField("allow_tf32", &one32, PluginFieldType::kINT32, 1)},
            {"allow_tf32", "more than once"}},
    };
    for (Rejected const& c : rejected)
    {
        for (TensorRTPhase phase : {TensorRTPhase::kBUILD, TensorRTPhase::kRUNTIME})
        {
            Fields f(base, c.extra);
            size_t const mark = mLogger.entries.size();
            std::vector<char const*> parts = c.expect;
            parts.push_back("layer 'tf32_bad'");
            PluginPtr plugin(mCreator->createPlugin("tf32_bad", &f.fc, phase));
            HCHECK(plugin == nullptr && loggedError(mLogger, mark, parts),
                "createPlugin(" << phaseText(phase) << ") rejects allow_tf32 " << c.what
                                << " with a message naming the field and the value");
        }
    }
}

} // namespace harness
