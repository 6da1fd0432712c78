/*
 * dcnconvert plugin harness, `cpu` mode: bad fields in both phases (missing, wrong type, wrong length,
 * out of range, duplicated, unnamed), corrupt collections and serialized data, and the accepted
 * variants (INT64 fields, an unknown extra field).
 */
#include "cpuChecks.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;
using nvinfer1::TensorRTPhase;

namespace harness
{

void CpuRun::badFields()
{
    Attrs const good{{2, 1}, {1, 0}, {1, 2}, 2, 2};
    int32_t const two[2] = {1, 1};
    int32_t const zeroStride[2] = {0, 1};
    int32_t const negPad[2] = {-1, 0};
    int32_t const zeroDil[2] = {1, 0};
    int32_t const three[3] = {1, 1, 1};
    int32_t const zero = 0;
    int32_t const negOne = -1;
    float const floats[2] = {1.F, 1.F};
    int8_t const int8One = 1;
    int64_t const bigValues[2] = {int64_t{1} << 33, 1};
    char const chars[2] = {'1', '1'};

    struct Case
    {
        std::string what;
        std::function<void(std::vector<PluginField>&)> mutate;
        std::vector<char const*> expect;
    };
    auto replace = [](char const* name, PluginField f) {
        return [name, f](std::vector<PluginField>& v) {
            for (auto& x : v)
            {
                if (std::strcmp(x.name, name) == 0)
                {
                    x = f;
                }
            }
        };
    };
    auto remove = [](char const* name) {
        return [name](std::vector<PluginField>& v) {
            for (size_t i = 0; i < v.size(); ++i)
            {
                if (std::strcmp(v[i].name, name) == 0)
                {
                    v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
                    return;
                }
            }
        };
    };
    std::vector<Case> cases;
    for (char const* name : {"stride", "padding", "dilation", "group", "deformable_group"})
    {
        cases.push_back({std::string("missing ") + name, remove(name), {name, "missing"}});
    }
    cases.push_back({"stride as FLOAT32", replace("stride", PluginField("stride", floats, PluginFieldType::kFLOAT32, 2)),
        {"stride", "FLOAT32"}});
    cases.push_back({"group as INT8", replace("group", PluginField("group", &int8One, PluginFieldType::kINT8, 1)),
        {"group", "INT8"}});
    cases.push_back({"padding as CHAR", replace("padding", PluginField("padding", chars, PluginFieldType::kCHAR, 2)),
        {"padding", "CHAR"}});
    cases.push_back({"stride of length 1", replace("stride", PluginField("stride", two, PluginFieldType::kINT32, 1)),
        {"stride", "length 1"}});
    cases.push_back({"dilation of length 3",
        replace("dilation", PluginField("dilation", three, PluginFieldType::kINT32, 3)), {"dilation", "length 3"}});
    cases.push_back({"group of length 2", replace("group", PluginField("group", two, PluginFieldType::kINT32, 2)),
        {"group", "length 2"}});
    cases.push_back({"zero stride", replace("stride", PluginField("stride", zeroStride, PluginFieldType::kINT32, 2)),
        {"stride", "[0, 1]"}});
    cases.push_back({"negative padding",
        replace("padding", PluginField("padding", negPad, PluginFieldType::kINT32, 2)), {"padding", "[-1, 0]"}});
    cases.push_back({"zero dilation", replace("dilation", PluginField("dilation", zeroDil, PluginFieldType::kINT32, 2)),
        {"dilation", "[1, 0]"}});
    cases.push_back({"group 0", replace("group", PluginField("group", &zero, PluginFieldType::kINT32, 1)),
        {"group", "got 0"}});
    cases.push_back({"deformable_group -1",
        replace("deformable_group", PluginField("deformable_group", &negOne, PluginFieldType::kINT32, 1)),
        {"deformable_group", "got -1"}});
    cases.push_back({"stride with null data", replace("stride", PluginField("stride", nullptr, PluginFieldType::kINT32, 2)),
        {"stride", "no data"}});
    cases.push_back({"negative length", replace("padding", PluginField("padding", two, PluginFieldType::kINT32, -1)),
        {"padding", "length -1"}});
    cases.push_back({"int64 value beyond int32",
        replace("stride", PluginField("stride", bigValues, PluginFieldType::kINT64, 2)), {"stride", "8589934592"}});
    cases.push_back({"duplicated field",
        [&](std::vector<PluginField>& v) { v.push_back(PluginField("group", &zero, PluginFieldType::kINT32, 1)); },
        {"group", "more than once"}});
    cases.push_back({"field without a name", [](std::vector<PluginField>& v) { v[2].name = nullptr; }, {"no name"}});

    for (Case const& c : cases)
    {
        FieldSet f(good);
        f.collection();
        std::vector<PluginField> fields = f.fields;
        c.mutate(fields);
        PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
        for (TensorRTPhase phase : {TensorRTPhase::kBUILD, TensorRTPhase::kRUNTIME})
        {
            size_t const mark = mLogger.entries.size();
            PluginPtr plugin(mCreator->createPlugin("bad_layer", &fc, phase));
            bool found = false;
            for (std::string const& e : mLogger.errorsSince(mark))
            {
                bool all = e.find("bad_layer") != std::string::npos;
                for (char const* part : c.expect)
                {
                    all = all && e.find(part) != std::string::npos;
                }
                found |= all;
            }
            HCHECK(plugin == nullptr && found,
                "createPlugin(" << (phase == TensorRTPhase::kBUILD ? "kBUILD" : "kRUNTIME") << ") rejects " << c.what
                                << " with a message naming it");
        }
    }

    // Collections that are themselves corrupt.
    size_t mark = mLogger.entries.size();
    HCHECK(mCreator->createPlugin("bad_layer", nullptr, TensorRTPhase::kRUNTIME) == nullptr
            && loggedError(mLogger, mark, {"null"}),
        "createPlugin(null collection) -> null + message");
    PluginFieldCollection negative{-1, nullptr};
    mark = mLogger.entries.size();
    HCHECK(mCreator->createPlugin("bad_layer", &negative, TensorRTPhase::kRUNTIME) == nullptr
            && loggedError(mLogger, mark, {"negative field count"}),
        "createPlugin(nbFields = -1) -> null + message");
    PluginFieldCollection nullFields{5, nullptr};
    mark = mLogger.entries.size();
    HCHECK(mCreator->createPlugin("bad_layer", &nullFields, TensorRTPhase::kRUNTIME) == nullptr
            && loggedError(mLogger, mark, {"null field array"}),
        "createPlugin(5 fields, null array) -> null + message");
    FieldSet f(good);
    mark = mLogger.entries.size();
    HCHECK(mCreator->createPlugin("bad_layer", f.collection(), static_cast<TensorRTPhase>(7)) == nullptr
            && loggedError(mLogger, mark, {"TensorRTPhase"}),
        "createPlugin(unknown phase) -> null + message");

    // Corrupt serialized data: what a damaged plan would hand to createPlugin(kRUNTIME).
    PluginPtr source = create(good);
    PluginFieldCollection const* serialized = runtimeOf(source.get())->getFieldsToSerialize();
    std::vector<PluginField> copy(serialized->fields, serialized->fields + serialized->nbFields);
    struct Corruption
    {
        char const* what;
        std::function<void(std::vector<PluginField>&, PluginFieldCollection&)> apply;
        char const* expect;
    };
    std::vector<Corruption> const corruptions = {
        {"truncated to 3 fields", [](std::vector<PluginField>&, PluginFieldCollection& c) { c.nbFields = 3; }, "missing"},
        {"stride length 0", [](std::vector<PluginField>& v, PluginFieldCollection&) { v[0].length = 0; }, "length 0"},
        {"group data null", [](std::vector<PluginField>& v, PluginFieldCollection&) { v[3].data = nullptr; }, "no data"},
        {"dilation type INT16", [](std::vector<PluginField>& v, PluginFieldCollection&) { v[2].type = PluginFieldType::kINT16; }, "INT16"},
        {"padding length 2^31-1", [](std::vector<PluginField>& v, PluginFieldCollection&) { v[1].length = INT32_MAX; }, "length 2147483647"},
    };
    for (Corruption const& c : corruptions)
    {
        std::vector<PluginField> v = copy;
        PluginFieldCollection fc{static_cast<int32_t>(v.size()), v.data()};
        c.apply(v, fc);
        mark = mLogger.entries.size();
        PluginPtr plugin(mCreator->createPlugin("bad_layer", &fc, TensorRTPhase::kRUNTIME));
        HCHECK(plugin == nullptr && loggedError(mLogger, mark, {c.expect}),
            "createPlugin(kRUNTIME) rejects corrupt serialized data: " << c.what);
    }

    // Accepted variants: int64 fields (same values), and an unknown extra field (warning only).
    int64_t const s64[2] = {2, 1};
    int64_t const p64[2] = {1, 0};
    int64_t const d64[2] = {1, 2};
    int64_t const g64 = 2;
    std::vector<PluginField> wide = {PluginField("stride", s64, PluginFieldType::kINT64, 2),
        PluginField("padding", p64, PluginFieldType::kINT64, 2), PluginField("dilation", d64, PluginFieldType::kINT64, 2),
        PluginField("group", &g64, PluginFieldType::kINT64, 1),
        PluginField("deformable_group", &g64, PluginFieldType::kINT64, 1)};
    PluginFieldCollection wideFc{5, wide.data()};
    PluginPtr fromWide(mCreator->createPlugin("wide", &wideFc, TensorRTPhase::kBUILD));
    Attrs back{};
    std::string why;
    HCHECK(fromWide && readSerialized(runtimeOf(fromWide.get())->getFieldsToSerialize(), back, why)
            && sameAttrs(back, good),
        "INT64 fields are accepted and serialized back as INT32 with the same values " << why);
    std::vector<PluginField> extra = copy;
    extra.push_back(PluginField("plugin_version", "1", PluginFieldType::kCHAR, 2));
    PluginFieldCollection extraFc{static_cast<int32_t>(extra.size()), extra.data()};
    mark = mLogger.entries.size();
    PluginPtr withExtra(mCreator->createPlugin("extra", &extraFc, TensorRTPhase::kBUILD));
    HCHECK(withExtra != nullptr && mLogger.errorsSince(mark).empty(), "an unknown extra field is ignored (warning)");
}

} // namespace harness
