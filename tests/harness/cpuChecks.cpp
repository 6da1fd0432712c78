/*
 * dcnconvert plugin harness, `cpu` mode: every call TensorRT makes at network construction, build,
 * deserialization and context creation, plus bad input, without touching a GPU.
 */
#include "harness.h"

#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::IPluginV3;
using nvinfer1::IPluginV3OneBuild;
using nvinfer1::IPluginV3OneCore;
using nvinfer1::IPluginV3OneRuntime;
using nvinfer1::PluginCapabilityType;
using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;
using nvinfer1::TensorRTPhase;

namespace harness
{
namespace
{

struct PluginDeleter
{
    void operator()(IPluginV3* p) const
    {
        delete p;
    }
};
using PluginPtr = std::unique_ptr<IPluginV3, PluginDeleter>;

IPluginV3OneBuild* buildOf(IPluginV3* p)
{
    return static_cast<IPluginV3OneBuild*>(p->getCapabilityInterface(PluginCapabilityType::kBUILD));
}

IPluginV3OneRuntime* runtimeOf(IPluginV3* p)
{
    return static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
}

IPluginV3OneCore* coreOf(IPluginV3* p)
{
    return static_cast<IPluginV3OneCore*>(p->getCapabilityInterface(PluginCapabilityType::kCORE));
}

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
        + " dg " + std::to_string(a.deformableGroup);
}

bool sameAttrs(Attrs const& a, Attrs const& b)
{
    return std::memcmp(&a, &b, sizeof(Attrs)) == 0;
}

class CpuRun
{
public:
    CpuRun(PluginLibrary& lib, nvinfer1::IPluginCreatorV3One* creator, TestLogger& logger)
        : mLib(lib)
        , mCreator(creator)
        , mLogger(logger)
    {
    }

    void identity();
    void pipeline(Problem const& p);
    void symbolicShapes(Problem const& p);
    void typeChecks();
    void shapeErrors();
    void formatCombinations(Problem const& p);
    void badFields();
    void runtimeErrors();

private:
    PluginPtr create(Attrs const& a, TensorRTPhase phase = TensorRTPhase::kBUILD)
    {
        FieldSet f(a);
        return PluginPtr(mCreator->createPlugin("dcn_layer", f.collection(), phase));
    }

    PluginLibrary& mLib;
    nvinfer1::IPluginCreatorV3One* mCreator;
    TestLogger& mLogger;
};

void CpuRun::identity()
{
    nvinfer1::InterfaceInfo const info = mCreator->getInterfaceInfo();
    HCHECK(std::strcmp(info.kind, "PLUGIN CREATOR_V3ONE") == 0 && info.major == 1, "creator is an IPluginCreatorV3One");
    HCHECK(std::strcmp(mCreator->getPluginName(), "ModulatedDeformConv2d") == 0, "creator name");
    HCHECK(std::strcmp(mCreator->getPluginVersion(), "1") == 0, "creator version");
    HCHECK(std::strcmp(mCreator->getPluginNamespace(), "dcnconvert") == 0, "creator namespace");
    PluginFieldCollection const* fc = mCreator->getFieldNames();
    char const* const names[] = {"stride", "padding", "dilation", "group", "deformable_group"};
    int32_t const lengths[] = {2, 2, 2, 1, 1};
    bool ok = fc != nullptr && fc->nbFields == 5 && fc->fields != nullptr;
    for (int32_t i = 0; ok && i < 5; ++i)
    {
        ok = std::strcmp(fc->fields[i].name, names[i]) == 0 && fc->fields[i].type == PluginFieldType::kINT32
            && fc->fields[i].length == lengths[i];
    }
    HCHECK(ok, "getFieldNames: stride/padding/dilation INT32x2, group/deformable_group INT32x1");
}

void CpuRun::pipeline(Problem const& p)
{
    std::string const tag = attrsText(p.attrs) + " x [" + std::to_string(p.n) + "," + std::to_string(p.c) + ","
        + std::to_string(p.h) + "," + std::to_string(p.w) + "] k " + std::to_string(p.kh) + "x"
        + std::to_string(p.kw) + (p.bias ? " bias" : " no bias");
    size_t const mark = mLogger.entries.size();
    PluginPtr plugin = create(p.attrs);
    HCHECK(plugin != nullptr, "createPlugin(kBUILD) with the ONNX parser's int32 fields: " << tag);
    if (!plugin)
    {
        return;
    }
    HCHECK(std::strcmp(plugin->getInterfaceInfo().kind, "PLUGIN") == 0, "IPluginV3 interface kind");
    IPluginV3OneCore* core = coreOf(plugin.get());
    IPluginV3OneBuild* build = buildOf(plugin.get());
    IPluginV3OneRuntime* runtime = runtimeOf(plugin.get());
    HCHECK(core != nullptr && build != nullptr && runtime != nullptr, "kCORE, kBUILD and kRUNTIME capabilities");
    if (core == nullptr || build == nullptr || runtime == nullptr)
    {
        return;
    }
    HCHECK(std::strcmp(core->getInterfaceInfo().kind, "PLUGIN_V3ONE_CORE") == 0
            && std::strcmp(build->getInterfaceInfo().kind, "PLUGIN_V3ONE_BUILD") == 0
            && std::strcmp(runtime->getInterfaceInfo().kind, "PLUGIN_V3ONE_RUNTIME") == 0,
        "capability interface kinds");
    HCHECK(std::strcmp(core->getPluginName(), "ModulatedDeformConv2d") == 0
            && std::strcmp(core->getPluginVersion(), "1") == 0
            && std::strcmp(core->getPluginNamespace(), "dcnconvert") == 0,
        "IPluginV3OneCore identity");
    HCHECK(build->getNbOutputs() == 1, "getNbOutputs() == 1");

    for (DataType t : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16})
    {
        std::vector<DataType> in(p.nbInputs(), t);
        DataType out = DataType::kINT8;
        int32_t const s = build->getOutputDataTypes(&out, 1, in.data(), p.nbInputs());
        HCHECK(s == 0 && out == t, "getOutputDataTypes(" << typeName(t) << ") -> " << typeName(out));
    }

    std::vector<Dims> const inDims = p.inputDims();
    Dims outDims{};
    int32_t const ss = constantShapes(build, inDims, outDims);
    Dims const expected = p.outputDims();
    HCHECK(ss == 0 && dimsText(outDims) == dimsText(expected),
        "getOutputShapes (constants) -> " << dimsText(outDims) << ", expected " << dimsText(expected));

    // configurePlugin as at build time: desc.dims constant here, min = opt = max.
    auto inDesc = dynamicDescs(inDims, DataType::kFLOAT);
    auto outDesc = dynamicDescs({expected}, DataType::kFLOAT);
    HCHECK(build->configurePlugin(inDesc.data(), p.nbInputs(), outDesc.data(), 1) == 0, "configurePlugin");
    size_t const ws = build->getWorkspaceSize(inDesc.data(), p.nbInputs(), outDesc.data(), 1);
    HCHECK(ws < (size_t{1} << 40), "getWorkspaceSize -> " << ws << " bytes");
    HCHECK(mLogger.errorsSince(mark).empty(), "no error logged during the build calls");

    PluginPtr clone(plugin->clone());
    HCHECK(clone != nullptr && clone.get() != plugin.get(), "clone() returns a new object");
    TestErrorRecorder recorder;
    {
        TestResourceContext context(&recorder);
        PluginPtr attached(runtime->attachToContext(&context));
        HCHECK(attached != nullptr && attached.get() != plugin.get(), "attachToContext returns a new object");
        HCHECK(recorder.refCount == 1, "the attached plugin holds a reference to the recorder (" << recorder.refCount << ")");
        if (attached)
        {
            auto inStatic = staticDescs(inDims, DataType::kFLOAT);
            auto outStatic = staticDescs({expected}, DataType::kFLOAT);
            HCHECK(runtimeOf(attached.get())->onShapeChange(inStatic.data(), p.nbInputs(), outStatic.data(), 1) == 0,
                "onShapeChange on the attached plugin");
            Attrs serial{};
            std::string why;
            bool const read = readSerialized(runtimeOf(attached.get())->getFieldsToSerialize(), serial, why);
            HCHECK(read && sameAttrs(serial, p.attrs), "getFieldsToSerialize: INT32 fields equal to the input " << why);
            if (read)
            {
                // Engine deserialization: exactly the serialized fields, phase kRUNTIME.
                PluginPtr restored(mCreator->createPlugin(
                    "dcn_layer", runtimeOf(attached.get())->getFieldsToSerialize(), TensorRTPhase::kRUNTIME));
                HCHECK(restored != nullptr, "createPlugin(kRUNTIME) with the serialized fields");
                if (restored)
                {
                    PluginPtr restoredAttached(runtimeOf(restored.get())->attachToContext(&context));
                    HCHECK(restoredAttached != nullptr
                            && runtimeOf(restoredAttached.get())
                                    ->onShapeChange(inStatic.data(), p.nbInputs(), outStatic.data(), 1)
                                == 0,
                        "runtime plugin: attachToContext + onShapeChange");
                    Attrs again{};
                    HCHECK(restoredAttached && readSerialized(runtimeOf(restoredAttached.get())->getFieldsToSerialize(), again, why)
                            && sameAttrs(again, p.attrs),
                        "round trip build -> serialize -> runtime -> serialize is exact");
                }
            }
        }
    }
    HCHECK(recorder.refCount == 0, "recorder references released when the plugins are destroyed (" << recorder.refCount << ")");
    HCHECK(recorder.errors.empty(), "no error recorded");
    Attrs cloned{};
    std::string why;
    HCHECK(clone && readSerialized(runtimeOf(clone.get())->getFieldsToSerialize(), cloned, why)
            && sameAttrs(cloned, p.attrs),
        "the clone has the same fields");
}

void CpuRun::symbolicShapes(Problem const& p)
{
    PluginPtr plugin = create(p.attrs);
    if (!plugin)
    {
        HCHECK(false, "createPlugin for symbolic shapes");
        return;
    }
    IPluginV3OneBuild* build = buildOf(plugin.get());
    for (bool symbolicKernel : {false, true})
    {
        TestExprBuilder b;
        int64_t const dg = p.attrs.deformableGroup;
        std::vector<DimsExprs> in(p.nbInputs());
        auto set = [](DimsExprs& d, std::initializer_list<nvinfer1::IDimensionExpr const*> v) {
            d.nbDims = 0;
            for (auto const* e : v)
            {
                d.d[d.nbDims++] = e;
            }
        };
        TestExpr const* n = b.symbol("N");
        TestExpr const* h = b.symbol("H");
        TestExpr const* w = b.symbol("W");
        TestExpr const* kh = symbolicKernel ? b.symbol("KH") : b.constantExpr(p.kh);
        TestExpr const* kw = symbolicKernel ? b.symbol("KW") : b.constantExpr(p.kw);
        // offset/mask spatial dims: their own symbols (TensorRT knows nothing more at network time).
        set(in[0], {n, b.constantExpr(p.c), h, w});
        set(in[1], {n, symbolicKernel ? b.symbol("OC") : b.constantExpr(2 * dg * p.kh * p.kw), b.symbol("OH"), b.symbol("OW")});
        set(in[2], {n, symbolicKernel ? b.symbol("MC") : b.constantExpr(dg * p.kh * p.kw), b.symbol("OH"), b.symbol("OW")});
        set(in[3], {b.constantExpr(p.cout), b.constantExpr(p.c / p.attrs.group), kh, kw});
        if (p.bias)
        {
            set(in[4], {b.constantExpr(p.cout)});
        }
        DimsExprs out{};
        int32_t const s = build->getOutputShapes(in.data(), p.nbInputs(), nullptr, 0, &out, 1, b);
        std::string const what = std::string(symbolicKernel ? "symbolic N/H/W/kernel" : "symbolic N/H/W") + ", "
            + attrsText(p.attrs);
        HCHECK(s == 0 && out.nbDims == 4, "getOutputShapes (" << what << ")");
        if (s != 0 || out.nbDims != 4)
        {
            continue;
        }
        HCHECK(out.d[0] == n, "output dim 0 is x's batch expression");
        TestExpr const* c1 = b.owned(out.d[1]);
        HCHECK(c1 != nullptr && c1->kind() == TestExpr::Kind::kCONSTANT && c1->evaluate({}) == p.cout,
            "output dim 1 is the constant Cout " << p.cout);
        TestExpr const* eh = b.owned(out.d[2]);
        TestExpr const* ew = b.owned(out.d[3]);
        HCHECK(eh != nullptr && ew != nullptr && eh->kind() != TestExpr::Kind::kCONSTANT
                && ew->kind() != TestExpr::Kind::kCONSTANT,
            "output H/W are (non-constant) expressions of the IExprBuilder: " << (eh ? eh->text() : "?") << ", "
                                                                       << (ew ? ew->text() : "?"));
        if (eh == nullptr || ew == nullptr)
        {
            continue;
        }
        int32_t compared = 0;
        int32_t wrong = 0;
        std::string firstWrong;
        for (int64_t kernel = 1; kernel <= (symbolicKernel ? 5 : 1); ++kernel)
        {
            for (int64_t size = 1; size <= 64; ++size)
            {
                int64_t const khv = symbolicKernel ? kernel : p.kh;
                int64_t const kwv = symbolicKernel ? kernel : p.kw;
                std::map<std::string, int64_t> const bind{{"N", 2}, {"H", size}, {"W", size + 3}, {"KH", khv}, {"KW", kwv}};
                int64_t const wantH = outputSize(size, khv, p.attrs.stride[0], p.attrs.padding[0], p.attrs.dilation[0]);
                int64_t const wantW = outputSize(size + 3, kwv, p.attrs.stride[1], p.attrs.padding[1], p.attrs.dilation[1]);
                if (wantH < 1 || wantW < 1)
                {
                    continue; // no valid output; TensorRT rejects the shape itself
                }
                ++compared;
                int64_t const gotH = eh->evaluate(bind);
                int64_t const gotW = ew->evaluate(bind);
                if (gotH != wantH || gotW != wantW)
                {
                    if (wrong++ == 0)
                    {
                        firstWrong = "H " + std::to_string(size) + " k " + std::to_string(khv) + ": got "
                            + std::to_string(gotH) + "x" + std::to_string(gotW) + ", want " + std::to_string(wantH)
                            + "x" + std::to_string(wantW);
                    }
                }
            }
        }
        HCHECK(compared > 10 && wrong == 0,
            "output H/W expressions evaluate to the formula at " << compared << " bindings " << firstWrong);
    }
}

void CpuRun::typeChecks()
{
    Problem p;
    PluginPtr plugin = create(p.attrs);
    IPluginV3OneBuild* build = buildOf(plugin.get());
    size_t mark = mLogger.entries.size();
    std::vector<DataType> in(5, DataType::kINT8);
    DataType out = DataType::kFLOAT;
    HCHECK(build->getOutputDataTypes(&out, 1, in.data(), 5) != 0 && loggedError(mLogger, mark, {"INT8", "x"}),
        "getOutputDataTypes rejects INT8 with a message naming the type");
    mark = mLogger.entries.size();
    in = {DataType::kHALF, DataType::kHALF, DataType::kHALF, DataType::kFLOAT, DataType::kFLOAT};
    int32_t const s = build->getOutputDataTypes(&out, 1, in.data(), 5);
    bool warned = false;
    for (size_t i = mark; i < mLogger.entries.size(); ++i)
    {
        warned |= mLogger.entries[i].severity == nvinfer1::ILogger::Severity::kWARNING
            && containsAll(mLogger.entries[i].text, {"weight", "FLOAT", "HALF"});
    }
    HCHECK(s == 0 && out == DataType::kHALF && warned,
        "mixed network types: output follows x, with a warning naming the input");
    mark = mLogger.entries.size();
    HCHECK(build->getOutputDataTypes(&out, 2, in.data(), 5) != 0 && loggedError(mLogger, mark, {"1 output"}),
        "getOutputDataTypes rejects 2 outputs");
    HCHECK(build->getOutputDataTypes(&out, 1, in.data(), 3) != 0 && loggedError(mLogger, mark, {"got 3"}),
        "getOutputDataTypes rejects 3 inputs");
    mark = mLogger.entries.size();
    HCHECK(plugin->getCapabilityInterface(static_cast<PluginCapabilityType>(7)) == nullptr
            && loggedError(mLogger, mark, {"PluginCapabilityType"}),
        "an unknown capability type gives null and a message");
}

void CpuRun::shapeErrors()
{
    struct Case
    {
        char const* what;
        std::function<void(Problem&, std::vector<Dims>&)> mutate;
        std::vector<char const*> expect;
    };
    std::vector<Case> const cases = {
        {"offset height != computed output height", [](Problem&, std::vector<Dims>& d) { d[1].d[2] += 1; },
            {"offset", "height", "computed"}},
        {"mask width != computed output width", [](Problem&, std::vector<Dims>& d) { d[2].d[3] -= 1; },
            {"mask", "width"}},
        {"offset channels != 2*dg*kh*kw", [](Problem&, std::vector<Dims>& d) { d[1].d[1] -= 2; },
            {"offset has 16 channels", "18"}},
        {"mask channels != dg*kh*kw", [](Problem&, std::vector<Dims>& d) { d[2].d[1] += 1; }, {"mask has 10 channels"}},
        {"weight dim 1 * group != C", [](Problem&, std::vector<Dims>& d) { d[3].d[1] = 3; }, {"weight dim 1 (3)"}},
        {"bias length != Cout", [](Problem&, std::vector<Dims>& d) { d[4].d[0] = 5; }, {"bias has 5"}},
        {"x of rank 3", [](Problem&, std::vector<Dims>& d) { d[0] = makeDims({4, 8, 8}); }, {"'x'", "rank 4", "rank 3"}},
        {"3 inputs", [](Problem&, std::vector<Dims>& d) { d.resize(3); }, {"got 3"}},
        {"offset batch != x batch", [](Problem&, std::vector<Dims>& d) { d[1].d[0] = 2; }, {"offset", "batch 2"}},
        {"kernel larger than the padded input",
            [](Problem&, std::vector<Dims>& d) {
                d[0].d[2] = 2;
                d[1].d[2] = 1;
                d[2].d[2] = 1;
            },
            {"does not fit", "height 2"}},
        {"C not divisible by group",
            [](Problem&, std::vector<Dims>& d) {
                d[0].d[1] = 5;
                d[3].d[1] = 5;
            },
            {"5 channels", "group = 2"}},
    };
    Problem p;
    p.attrs.group = 2;
    p.c = 4;
    p.cout = 6;
    for (Case const& c : cases)
    {
        Problem q = p;
        std::vector<Dims> dims = q.inputDims();
        c.mutate(q, dims);
        PluginPtr plugin = create(q.attrs);
        size_t const mark = mLogger.entries.size();
        Dims out{};
        int32_t const s = constantShapes(buildOf(plugin.get()), dims, out);
        HCHECK(s != 0 && loggedError(mLogger, mark, c.expect), "getOutputShapes rejects " << c.what);
        // configurePlugin sees the same dims at build time.
        size_t const mark2 = mLogger.entries.size();
        auto in = dynamicDescs(dims, DataType::kFLOAT);
        auto o = dynamicDescs({p.outputDims()}, DataType::kFLOAT);
        HCHECK(buildOf(plugin.get())->configurePlugin(in.data(), static_cast<int32_t>(in.size()), o.data(), 1) != 0
                && loggedError(mLogger, mark2, c.expect),
            "configurePlugin rejects " << c.what);
    }
    // Dynamic dims (-1) are not errors at configure time; the profile's max sizes the workspace.
    Problem q;
    std::vector<Dims> dims = q.inputDims();
    PluginPtr plugin = create(q.attrs);
    auto in = dynamicDescs(dims, DataType::kHALF);
    auto out = dynamicDescs({q.outputDims()}, DataType::kHALF);
    for (auto* group : {&in, &out})
    {
        for (auto& d : *group)
        {
            d.min = d.desc.dims;
            d.max = d.desc.dims;
            d.desc.dims.d[0] = -1;
            if (d.desc.dims.nbDims == 4)
            {
                d.max.d[0] *= 8;
            }
        }
    }
    in[0].desc.dims.d[2] = -1;
    in[0].desc.dims.d[3] = -1;
    size_t const mark = mLogger.entries.size();
    HCHECK(buildOf(plugin.get())->configurePlugin(in.data(), 5, out.data(), 1) == 0,
        "configurePlugin accepts -1 (runtime) dims");
    size_t const ws = buildOf(plugin.get())->getWorkspaceSize(in.data(), 5, out.data(), 1);
    HCHECK(mLogger.errorsSince(mark).empty() && ws < (size_t{1} << 40),
        "getWorkspaceSize with -1 in desc.dims uses max dims, no error (" << ws << " bytes)");
}

void CpuRun::formatCombinations(Problem const& p)
{
    PluginPtr plugin = create(p.attrs);
    IPluginV3OneBuild* build = buildOf(plugin.get());
    int32_t const nbIO = p.nbInputs() + 1;
    std::vector<Dims> dims = p.inputDims();
    dims.push_back(p.outputDims());
    int32_t const nbTypes = nvinfer1::EnumMax<DataType>();
    int32_t const nbFormats = nvinfer1::EnumMax<TensorFormat>();
    int32_t queried = 0;
    int32_t accepted = 0;
    int32_t mismatches = 0;
    std::string firstMismatch;
    size_t const mark = mLogger.entries.size();
    for (DataType first : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16, DataType::kINT8})
    {
        for (int32_t pos = 0; pos < nbIO; ++pos)
        {
            for (int32_t t = 0; t < nbTypes; ++t)
            {
                for (int32_t f = 0; f < nbFormats; ++f)
                {
                    // TensorRT decides pos from inOut[0..pos]; earlier positions hold an accepted choice.
                    auto io = dynamicDescs(dims, first);
                    io[pos].desc.type = static_cast<DataType>(t);
                    io[pos].desc.format = static_cast<TensorFormat>(f);
                    if (pos == 0 && static_cast<DataType>(t) != first)
                    {
                        continue;
                    }
                    bool const got = build->supportsFormatCombination(pos, io.data(), p.nbInputs(), 1);
                    auto const type = static_cast<DataType>(t);
                    bool const floatType = type == DataType::kFLOAT || type == DataType::kHALF || type == DataType::kBF16;
                    bool const want = static_cast<TensorFormat>(f) == TensorFormat::kLINEAR && floatType
                        && (pos == 0 || type == first);
                    ++queried;
                    accepted += got ? 1 : 0;
                    if (got != want && mismatches++ == 0)
                    {
                        firstMismatch = "pos " + std::to_string(pos) + " type " + typeName(type) + " format "
                            + std::to_string(f) + " with x " + typeName(first);
                    }
                }
            }
        }
    }
    HCHECK(mismatches == 0 && accepted == 3 * nbIO,
        "supportsFormatCombination over " << queried << " (pos, type, format) queries (" << nbTypes << " types x "
                                          << nbFormats << " formats): " << accepted
                                          << " accepted = FLOAT/HALF/BF16 x LINEAR, all the same type "
                                          << firstMismatch);
    HCHECK(mLogger.errorsSince(mark).empty(), "no error logged while querying formats");
    auto io = dynamicDescs(dims, DataType::kFLOAT);
    size_t const mark2 = mLogger.entries.size();
    HCHECK(!build->supportsFormatCombination(nbIO, io.data(), p.nbInputs(), 1)
            && loggedError(mLogger, mark2, {"position"}),
        "supportsFormatCombination: out-of-range position gives false and a message");
}

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

void CpuRun::runtimeErrors()
{
    Problem p;
    FieldSet f(p.attrs);
    PluginPtr runtimePlugin(mCreator->createPlugin("rt_layer", f.collection(), TensorRTPhase::kRUNTIME));
    HCHECK(runtimePlugin != nullptr, "createPlugin(kRUNTIME)");
    if (!runtimePlugin)
    {
        return;
    }
    TestErrorRecorder recorder;
    TestResourceContext context(&recorder);
    PluginPtr attached(runtimeOf(runtimePlugin.get())->attachToContext(&context));
    HCHECK(attached != nullptr, "attachToContext");
    if (!attached)
    {
        return;
    }
    IPluginV3OneRuntime* rt = runtimeOf(attached.get());
    auto in = staticDescs(p.inputDims(), DataType::kFLOAT);
    auto out = staticDescs({p.outputDims()}, DataType::kFLOAT);
    void const* inPtrs[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
    void* outPtrs[1] = {nullptr};

    size_t mark = recorder.errors.size();
    int32_t s = rt->enqueue(in.data(), out.data(), inPtrs, outPtrs, nullptr, nullptr);
    HCHECK(s != 0 && recordedError(recorder, mark, {"rt_layer", "onShapeChange"}),
        "enqueue before onShapeChange fails with a recorded error (status " << s << ")");
    HCHECK(mark < recorder.errors.size() && recorder.errors[mark].first == nvinfer1::ErrorCode::kINVALID_STATE,
        "... with ErrorCode kINVALID_STATE");

    auto badOut = out;
    badOut[0].dims.d[2] += 1;
    mark = recorder.errors.size();
    HCHECK(rt->onShapeChange(in.data(), 5, badOut.data(), 1) != 0 && recordedError(recorder, mark, {"output dimension 2"}),
        "onShapeChange rejects an output shape that does not match");
    auto badType = in;
    badType[3].type = DataType::kHALF;
    mark = recorder.errors.size();
    HCHECK(rt->onShapeChange(badType.data(), 5, out.data(), 1) != 0
            && recordedError(recorder, mark, {"weight", "HALF", "FLOAT"}),
        "onShapeChange rejects mixed input types");
    HCHECK(rt->onShapeChange(in.data(), 5, out.data(), 1) == 0, "onShapeChange with consistent shapes");
    auto badDims = in;
    badDims[1].dims.d[1] = 17;
    mark = recorder.errors.size();
    s = rt->enqueue(badDims.data(), out.data(), inPtrs, outPtrs, nullptr, nullptr);
    HCHECK(s != 0 && recordedError(recorder, mark, {"offset has 17 channels"}),
        "enqueue validates the descriptors before launching (status " << s << ")");
    mark = recorder.errors.size();
    s = rt->enqueue(in.data(), out.data(), inPtrs, outPtrs, nullptr, nullptr);
    HCHECK(s != 0 && recordedError(recorder, mark, {"dcnForward", "NULL"}),
        "enqueue with null device pointers returns the core's failure status " << s << " and its message");
    size_t const logMark = mLogger.entries.size();
    PluginPtr unattached(runtimeOf(runtimePlugin.get())->attachToContext(nullptr));
    HCHECK(unattached != nullptr, "attachToContext(null context) still gives a plugin");
    if (unattached)
    {
        runtimeOf(unattached.get())->enqueue(in.data(), out.data(), inPtrs, outPtrs, nullptr, nullptr);
        HCHECK(loggedError(mLogger, logMark, {"onShapeChange"}), "without a recorder, errors go to the logger");
    }
}

} // namespace

int32_t runCpu(std::string const& libPath)
{
    PluginLibrary lib;
    std::string error;
    if (!lib.open(libPath, error))
    {
        HCHECK(false, "dlopen " << libPath << ": " << error);
        return 1;
    }
    // The ONNX parser finds the creator in the registry by name, version and namespace.
    auto* registered = registryGetCreator("ModulatedDeformConv2d", "1", "dcnconvert");
    TestLogger logger;
    TestLoggerFinder finder(&logger);
    lib.setLoggerFinder(&finder);
    nvinfer1::IPluginCreatorV3One* creator = findCreator(lib);
    HCHECK(creator != nullptr, "getCreators() returns the V3 creator");
    HCHECK(registered == creator, "the creator registered at load time is the one getCreators returns");
    if (creator == nullptr)
    {
        return 1;
    }
    CpuRun run(lib, creator, logger);
    run.identity();
    Problem base;
    std::vector<Problem> problems;
    problems.push_back(base);
    Problem a = base;
    a.attrs = Attrs{{2, 1}, {1, 0}, {1, 2}, 2, 2};
    a.n = 3;
    a.c = 8;
    a.h = 11;
    a.w = 7;
    a.cout = 6;
    problems.push_back(a);
    Problem b = base;
    b.bias = false;
    b.kh = 1;
    b.kw = 3;
    b.attrs = Attrs{{1, 3}, {0, 2}, {2, 1}, 1, 4};
    b.c = 8;
    problems.push_back(b);
    Problem c = base;
    c.kh = 5;
    c.kw = 5;
    c.h = 5;
    c.w = 9;
    c.attrs = Attrs{{3, 2}, {2, 2}, {1, 1}, 4, 1};
    c.c = 8;
    c.cout = 8;
    problems.push_back(c);
    for (Problem const& p : problems)
    {
        run.pipeline(p);
        run.symbolicShapes(p);
    }
    run.formatCombinations(problems[0]);
    run.formatCombinations(problems[2]);
    run.typeChecks();
    run.shapeErrors();
    run.badFields();
    run.runtimeErrors();
    return checks().failed == 0 ? 0 : 1;
}

} // namespace harness
