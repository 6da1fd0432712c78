/*
 * dcnconvert plugin harness, `gpu` mode: the full TensorRT call sequence ending in enqueue() on real
 * device buffers, for build-phase and deserialized (kRUNTIME) plugins, over a grid of problems.
 *
 * For every case it writes the exact input bits it uploaded and the output it read back to
 * <out-dir>/<case>_<tensor>.bin plus one line of <out-dir>/manifest.jsonl; the Python test
 * (tests/test_plugin_harness.py) compares them with dcnconvert.reference in float64.
 */
#include "harness.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::IPluginV3;
using nvinfer1::IPluginV3OneBuild;
using nvinfer1::IPluginV3OneRuntime;
using nvinfer1::PluginCapabilityType;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;
using nvinfer1::TensorRTPhase;

namespace harness
{
namespace
{

#define HCUDA(call)                                                                                                    \
    [&]() {                                                                                                            \
        cudaError_t const e_ = (call);                                                                                 \
        if (e_ != cudaSuccess)                                                                                         \
        {                                                                                                              \
            HCHECK(false, #call << " failed: " << cudaGetErrorName(e_) << ": " << cudaGetErrorString(e_));             \
            return false;                                                                                              \
        }                                                                                                              \
        return true;                                                                                                   \
    }()

size_t elementSize(DataType t)
{
    return t == DataType::kFLOAT ? 4 : 2;
}

char const* dtypeText(DataType t)
{
    return t == DataType::kFLOAT ? "float32" : t == DataType::kHALF ? "float16" : "bfloat16";
}

//! Host values converted to the element type's bits (round to nearest even).
std::vector<uint8_t> encode(std::vector<float> const& v, DataType t)
{
    std::vector<uint8_t> out(v.size() * elementSize(t));
    for (size_t i = 0; i < v.size(); ++i)
    {
        if (t == DataType::kFLOAT)
        {
            std::memcpy(out.data() + 4 * i, &v[i], 4);
        }
        else if (t == DataType::kHALF)
        {
            __half const h = __float2half_rn(v[i]);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
        else
        {
            __nv_bfloat16 const b = __float2bfloat16_rn(v[i]);
            std::memcpy(out.data() + 2 * i, &b, 2);
        }
    }
    return out;
}

int64_t volume(Dims const& d)
{
    int64_t v = 1;
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        v *= d.d[i];
    }
    return v;
}

struct Case
{
    std::string name;
    Problem p;
    DataType type{DataType::kFLOAT};
    float offsetScale{2.F};
    uint32_t seed{0};
};

struct HostData
{
    std::vector<std::vector<uint8_t>> inputs; // x, offset, mask, weight[, bias] as element bits
};

HostData makeInputs(Case const& c)
{
    std::mt19937 rng(1000003U * (c.seed + 1));
    std::uniform_real_distribution<float> unit(-1.F, 1.F);
    std::uniform_real_distribution<float> positive(0.F, 1.F);
    std::normal_distribution<float> offsetDist(0.F, c.offsetScale);
    std::bernoulli_distribution far(0.05);
    std::vector<Dims> const dims = c.p.inputDims();
    double const fanIn = static_cast<double>(c.p.c / c.p.attrs.group * c.p.kh * c.p.kw);
    HostData data;
    for (size_t i = 0; i < dims.size(); ++i)
    {
        std::vector<float> v(static_cast<size_t>(volume(dims[i])));
        for (float& x : v)
        {
            switch (i)
            {
            case 0: x = unit(rng); break;
            case 1: x = far(rng) ? 12.F * unit(rng) : offsetDist(rng); break; // some samples far outside
            case 2: x = positive(rng); break;
            case 3: x = unit(rng) / static_cast<float>(std::sqrt(fanIn)); break;
            default: x = unit(rng); break;
            }
        }
        data.inputs.push_back(encode(v, c.type));
    }
    return data;
}

std::vector<PluginTensorDesc> descsOf(std::vector<Dims> const& dims, DataType t)
{
    std::vector<PluginTensorDesc> out(dims.size());
    for (size_t i = 0; i < dims.size(); ++i)
    {
        out[i].dims = dims[i];
        out[i].type = t;
        out[i].format = TensorFormat::kLINEAR;
        out[i].scale = 1.F;
    }
    return out;
}

IPluginV3OneRuntime* runtimeOf(IPluginV3* p)
{
    return static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
}

IPluginV3OneBuild* buildOf(IPluginV3* p)
{
    return static_cast<IPluginV3OneBuild*>(p->getCapabilityInterface(PluginCapabilityType::kBUILD));
}

//! onShapeChange + enqueue on fresh device buffers; the output is pre-filled with 0xFF (NaN).
bool runOnDevice(IPluginV3OneRuntime* rt, Problem const& p, DataType t, HostData const& data, size_t workspaceBytes,
    std::vector<uint8_t>& out, std::string const& what)
{
    std::vector<Dims> const inDims = p.inputDims();
    Dims const outDims = p.outputDims();
    auto in = descsOf(inDims, t);
    auto o = descsOf({outDims}, t);
    int32_t const s = rt->onShapeChange(in.data(), p.nbInputs(), o.data(), 1);
    HCHECK(s == 0, what << ": onShapeChange");
    if (s != 0)
    {
        return false;
    }
    std::vector<void*> buffers(inDims.size(), nullptr);
    void* outBuffer = nullptr;
    void* workspace = nullptr;
    cudaStream_t stream = nullptr;
    size_t const outBytes = static_cast<size_t>(volume(outDims)) * elementSize(t);
    bool ok = HCUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (size_t i = 0; ok && i < inDims.size(); ++i)
    {
        ok = HCUDA(cudaMalloc(&buffers[i], data.inputs[i].size()))
            && HCUDA(cudaMemcpy(buffers[i], data.inputs[i].data(), data.inputs[i].size(), cudaMemcpyHostToDevice));
    }
    ok = ok && HCUDA(cudaMalloc(&outBuffer, outBytes)) && HCUDA(cudaMemset(outBuffer, 0xFF, outBytes));
    if (ok && workspaceBytes > 0)
    {
        ok = HCUDA(cudaMalloc(&workspace, workspaceBytes));
    }
    if (ok)
    {
        std::vector<void const*> inPtrs(buffers.begin(), buffers.end());
        void* outPtrs[1] = {outBuffer};
        int32_t const e = rt->enqueue(in.data(), o.data(), inPtrs.data(), outPtrs, workspace, stream);
        HCHECK(e == 0, what << ": enqueue returns 0 (got " << e << ")");
        ok = e == 0 && HCUDA(cudaStreamSynchronize(stream)) && HCUDA(cudaGetLastError());
        out.assign(outBytes, 0);
        ok = ok && HCUDA(cudaMemcpy(out.data(), outBuffer, outBytes, cudaMemcpyDeviceToHost));
    }
    for (void* b : buffers)
    {
        if (b != nullptr)
        {
            HCUDA(cudaFree(b));
        }
    }
    if (outBuffer != nullptr)
    {
        HCUDA(cudaFree(outBuffer));
    }
    if (workspace != nullptr)
    {
        HCUDA(cudaFree(workspace));
    }
    if (stream != nullptr)
    {
        HCUDA(cudaStreamDestroy(stream));
    }
    return ok;
}

std::string jsonDims(Dims const& d)
{
    std::string s = "[";
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        s += (i ? ", " : "") + std::to_string(d.d[i]);
    }
    return s + "]";
}

bool writeFile(std::string const& path, std::vector<uint8_t> const& bytes)
{
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<char const*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return static_cast<bool>(f);
}

void writeCase(std::string const& outDir, std::ofstream& manifest, Case const& c, HostData const& data,
    std::vector<uint8_t> const& output, bool runtimeIdentical, std::string const& path)
{
    char const* const names[] = {"x", "offset", "mask", "weight", "bias"};
    std::vector<Dims> const dims = c.p.inputDims();
    std::string files;
    std::string shapes;
    for (size_t i = 0; i < dims.size(); ++i)
    {
        std::string const file = c.name + "_" + names[i] + ".bin";
        HCHECK(writeFile(outDir + "/" + file, data.inputs[i]), "write " << file);
        files += std::string(i ? ", " : "") + "\"" + names[i] + "\": \"" + file + "\"";
        shapes += std::string(i ? ", " : "") + "\"" + names[i] + "\": " + jsonDims(dims[i]);
    }
    std::string const outFile = c.name + "_out.bin";
    HCHECK(writeFile(outDir + "/" + outFile, output), "write " << outFile);
    Attrs const& a = c.p.attrs;
    manifest << "{\"name\": \"" << c.name << "\", \"dtype\": \"" << dtypeText(c.type) << "\", \"path\": \"" << path
             << "\", \"stride\": [" << a.stride[0] << ", " << a.stride[1] << "], \"padding\": [" << a.padding[0]
             << ", " << a.padding[1] << "], \"dilation\": [" << a.dilation[0] << ", " << a.dilation[1]
             << "], \"group\": " << a.group << ", \"deformable_group\": " << a.deformableGroup << ", \"shapes\": {"
             << shapes << ", \"out\": " << jsonDims(c.p.outputDims()) << "}, \"files\": {" << files
             << ", \"out\": \"" << outFile << "\"}, \"runtime_bitwise_identical\": "
             << (runtimeIdentical ? "true" : "false") << "}\n";
    manifest.flush();
}

struct PluginDeleter
{
    void operator()(IPluginV3* p) const
    {
        delete p;
    }
};
using PluginPtr = std::unique_ptr<IPluginV3, PluginDeleter>;

std::vector<Case> gridCases()
{
    std::vector<Case> cases;
    auto add = [&](std::string const& name, Problem p, DataType t, float scale) {
        Case c;
        c.name = name;
        c.p = p;
        c.type = t;
        c.offsetScale = scale;
        c.seed = static_cast<uint32_t>(cases.size());
        cases.push_back(c);
    };
    Problem base; // 1x4x8x8, 3x3, bias
    Problem nonSquare = base;
    nonSquare.attrs = Attrs{{2, 1}, {1, 0}, {1, 2}, 2, 2};
    nonSquare.n = 3;
    nonSquare.c = 8;
    nonSquare.h = 11;
    nonSquare.w = 7;
    nonSquare.cout = 6;
    Problem oneByThree = base;
    oneByThree.bias = false;
    oneByThree.kh = 1;
    oneByThree.kw = 3;
    oneByThree.attrs = Attrs{{1, 3}, {0, 2}, {2, 1}, 1, 4};
    oneByThree.c = 8;
    oneByThree.h = 12;
    oneByThree.w = 13;
    Problem fiveByFive = base;
    fiveByFive.kh = 5;
    fiveByFive.kw = 5;
    fiveByFive.h = 9;
    fiveByFive.w = 14;
    fiveByFive.attrs = Attrs{{3, 2}, {2, 2}, {1, 1}, 4, 1};
    fiveByFive.c = 8;
    fiveByFive.cout = 8;
    fiveByFive.n = 2;
    Problem pointwise = base;
    pointwise.kh = 1;
    pointwise.kw = 1;
    pointwise.attrs = Attrs{{2, 2}, {0, 0}, {1, 1}, 1, 3};
    pointwise.n = 2;
    pointwise.c = 6;
    pointwise.h = 9;
    pointwise.w = 10;
    pointwise.cout = 5;
    Problem tiny = base;
    tiny.h = 1;
    tiny.w = 1;
    tiny.attrs = Attrs{{1, 1}, {1, 1}, {1, 1}, 1, 1};
    Problem larger = base;
    larger.n = 2;
    larger.c = 32;
    larger.h = 33;
    larger.w = 40;
    larger.cout = 16;
    larger.attrs = Attrs{{1, 1}, {1, 1}, {1, 1}, 1, 2};

    add("fp32_base", base, DataType::kFLOAT, 2.F);
    add("fp32_nonsquare_g2_dg2", nonSquare, DataType::kFLOAT, 2.F);
    add("fp32_k1x3_dg4_nobias", oneByThree, DataType::kFLOAT, 3.F);
    add("fp32_k5_g4_s3x2", fiveByFive, DataType::kFLOAT, 2.F);
    add("fp32_k1_dg3", pointwise, DataType::kFLOAT, 2.F);
    add("fp32_1x1_input", tiny, DataType::kFLOAT, 1.F);
    add("fp16_nonsquare_g2_dg2", nonSquare, DataType::kHALF, 2.F);
    add("fp16_k1x3_dg4_nobias", oneByThree, DataType::kHALF, 3.F);
    add("fp16_larger", larger, DataType::kHALF, 4.F);
    add("bf16_nonsquare_g2_dg2", nonSquare, DataType::kBF16, 2.F);
    add("bf16_k5_g4_s3x2", fiveByFive, DataType::kBF16, 2.F);
    add("bf16_larger", larger, DataType::kBF16, 4.F);
    return cases;
}

//! Build-phase pipeline + enqueue, then engine round trip (serialize -> createPlugin(kRUNTIME)) +
//! enqueue again; the two outputs must be bit-identical.
void runCase(nvinfer1::IPluginCreatorV3One* creator, Case const& c, std::string const& outDir, std::ofstream& manifest)
{
    FieldSet fields(c.p.attrs);
    PluginPtr plugin(creator->createPlugin(c.name.c_str(), fields.collection(), TensorRTPhase::kBUILD));
    HCHECK(plugin != nullptr, c.name << ": createPlugin(kBUILD)");
    if (!plugin)
    {
        return;
    }
    IPluginV3OneBuild* build = buildOf(plugin.get());
    std::vector<Dims> const inDims = c.p.inputDims();
    std::vector<DynamicPluginTensorDesc> in(inDims.size());
    for (size_t i = 0; i < inDims.size(); ++i)
    {
        in[i].desc = descsOf({inDims[i]}, c.type)[0];
        in[i].min = in[i].opt = in[i].max = inDims[i];
    }
    DynamicPluginTensorDesc out{};
    out.desc = descsOf({c.p.outputDims()}, c.type)[0];
    out.min = out.opt = out.max = c.p.outputDims();
    HCHECK(build->configurePlugin(in.data(), c.p.nbInputs(), &out, 1) == 0, c.name << ": configurePlugin");
    size_t const workspace = build->getWorkspaceSize(in.data(), c.p.nbInputs(), &out, 1);
    PluginPtr clone(plugin->clone());
    TestErrorRecorder recorder;
    TestResourceContext context(&recorder);
    PluginPtr attached(clone ? runtimeOf(clone.get())->attachToContext(&context) : nullptr);
    HCHECK(attached != nullptr, c.name << ": clone + attachToContext");
    if (!attached)
    {
        return;
    }
    HostData const data = makeInputs(c);
    std::vector<uint8_t> first;
    std::vector<uint8_t> second;
    bool const ran = runOnDevice(runtimeOf(attached.get()), c.p, c.type, data, workspace, first, c.name + " (build)");
    PluginPtr restored(creator->createPlugin(
        c.name.c_str(), runtimeOf(attached.get())->getFieldsToSerialize(), TensorRTPhase::kRUNTIME));
    HCHECK(restored != nullptr, c.name << ": createPlugin(kRUNTIME) with getFieldsToSerialize()");
    PluginPtr restoredAttached(restored ? runtimeOf(restored.get())->attachToContext(&context) : nullptr);
    bool const ranAgain = restoredAttached
        && runOnDevice(runtimeOf(restoredAttached.get()), c.p, c.type, data, workspace, second, c.name + " (runtime)");
    bool const identical = ran && ranAgain && first == second;
    HCHECK(identical, c.name << ": deserialized plugin output is bit-identical to the build plugin's");
    HCHECK(recorder.errors.empty(), c.name << ": no error recorded");
    if (ran)
    {
        writeCase(outDir, manifest, c, data, first, identical, "build+runtime");
    }
}

//! One plugin object across a dynamic profile: configure with -1 dims, then two different shapes.
void runDynamic(nvinfer1::IPluginCreatorV3One* creator, std::string const& outDir, std::ofstream& manifest)
{
    Case small;
    small.name = "fp32_dynamic_a";
    small.p.attrs = Attrs{{1, 2}, {1, 1}, {1, 1}, 1, 1};
    small.p.n = 1;
    small.p.h = 10;
    small.p.w = 12;
    small.seed = 101;
    Case big = small;
    big.name = "fp32_dynamic_b";
    big.p.n = 4;
    big.p.h = 6;
    big.p.w = 17;
    big.seed = 102;
    FieldSet fields(small.p.attrs);
    PluginPtr plugin(creator->createPlugin("dynamic", fields.collection(), TensorRTPhase::kBUILD));
    HCHECK(plugin != nullptr, "dynamic: createPlugin");
    if (!plugin)
    {
        return;
    }
    std::vector<Dims> const lo = small.p.inputDims();
    std::vector<Dims> const hi = big.p.inputDims();
    std::vector<DynamicPluginTensorDesc> in(lo.size());
    for (size_t i = 0; i < lo.size(); ++i)
    {
        in[i].desc = descsOf({lo[i]}, DataType::kFLOAT)[0];
        for (int32_t k = 0; k < lo[i].nbDims; ++k)
        {
            in[i].desc.dims.d[k] = lo[i].d[k] == hi[i].d[k] ? lo[i].d[k] : -1;
            in[i].min.d[k] = std::min(lo[i].d[k], hi[i].d[k]);
            in[i].max.d[k] = std::max(lo[i].d[k], hi[i].d[k]);
        }
        in[i].min.nbDims = in[i].max.nbDims = lo[i].nbDims;
        in[i].opt = in[i].max;
    }
    DynamicPluginTensorDesc out{};
    out.desc = descsOf({small.p.outputDims()}, DataType::kFLOAT)[0];
    Dims const ol = small.p.outputDims();
    Dims const oh = big.p.outputDims();
    out.min = out.max = ol;
    for (int32_t k = 0; k < 4; ++k)
    {
        out.desc.dims.d[k] = ol.d[k] == oh.d[k] ? ol.d[k] : -1;
        out.min.d[k] = std::min(ol.d[k], oh.d[k]);
        out.max.d[k] = std::max(ol.d[k], oh.d[k]);
    }
    out.opt = out.max;
    IPluginV3OneBuild* build = buildOf(plugin.get());
    HCHECK(build->configurePlugin(in.data(), 5, &out, 1) == 0, "dynamic: configurePlugin with -1 dims");
    size_t const workspace = build->getWorkspaceSize(in.data(), 5, &out, 1);
    TestErrorRecorder recorder;
    TestResourceContext context(&recorder);
    PluginPtr attached(runtimeOf(plugin.get())->attachToContext(&context));
    std::vector<uint8_t> firstSmall;
    int32_t step = 0;
    for (Case const* c : {&small, &big, &small})
    {
        HostData const data = makeInputs(*c);
        std::vector<uint8_t> output;
        bool const ran = attached
            && runOnDevice(runtimeOf(attached.get()), c->p, DataType::kFLOAT, data, workspace, output,
                c->name + " (shape change " + std::to_string(step) + ")");
        if (ran && step == 0)
        {
            firstSmall = output;
        }
        if (ran && step < 2)
        {
            writeCase(outDir, manifest, *c, data, output, true, "dynamic");
        }
        if (step == 2)
        {
            HCHECK(ran && output == firstSmall, "dynamic: shape A again after shape B gives a bit-identical output");
        }
        ++step;
    }
    HCHECK(recorder.errors.empty(), "dynamic: no error recorded");
}

} // namespace

int32_t runGpu(std::string const& libPath, std::string const& outDir)
{
    int32_t devices = 0;
    if (!HCUDA(cudaGetDeviceCount(&devices)) || devices < 1)
    {
        HCHECK(false, "a CUDA device is available");
        return 1;
    }
    cudaDeviceProp prop{};
    if (HCUDA(cudaGetDeviceProperties(&prop, 0)))
    {
        std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    }
    Session session;
    if (!session.start(libPath))
    {
        return 1;
    }
    std::ofstream manifest(outDir + "/manifest.jsonl");
    HCHECK(static_cast<bool>(manifest), "open " << outDir << "/manifest.jsonl");
    for (Case const& c : gridCases())
    {
        runCase(session.creator, c, outDir, manifest);
    }
    runDynamic(session.creator, outDir, manifest);
    HCHECK(session.logger.errorsSince(0).empty(), "no error logged in the whole GPU run");
    return checks().failed == 0 ? 0 : 1;
}

} // namespace harness
