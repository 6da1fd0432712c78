/*
 * dcnconvert plugin harness, `gpu` mode: the full TensorRT call sequence ending in enqueue() on real
 * device buffers, for build-phase and deserialized (kRUNTIME) plugins, over a grid of problems.
 *
 * For every case it writes the exact input bits it uploaded and the output it read back to
 * <out-dir>/<case>_<tensor>.bin plus one line of <out-dir>/manifest.jsonl; the Python test
 * (tests/test_plugin_harness.py) compares them with dcnconvert.reference in float64.
 *
 * This file holds the float cases and the runners; the quantized cases are in gpuQuantCases.cpp, the
 * inputs, the device run and the result files in gpuInputs.cpp, gpuDevice.cpp and gpuManifest.cpp
 * (gpuCases.h). The `gpu-inputs` mode (runGpuInputs) runs the cases without a device: every call but
 * enqueue, and their input files with an all-zero output.
 */
#include "gpuCases.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::IPluginV3OneBuild;
using nvinfer1::TensorRTPhase;

namespace harness
{
namespace
{

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
    // The case `of` again with allow_tf32 = 1: same problem, type and inputs (same seed).
    auto addTf32 = [&](std::string const& name, std::string const& of) {
        for (Case const& c : cases)
        {
            if (c.name == of)
            {
                Case t = c;
                t.name = name;
                t.p.attrs.allowTf32 = 1;
                cases.push_back(t);
                return;
            }
        }
        HCHECK(false, "gpu grid: no case '" << of << "' to repeat with allow_tf32");
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
    // Channels per group and per deformable group in multiples of 32: the channel-vectorised kernel,
    // which needs the workspace. On an H200 AUTO runs FP32 (3xTF32) on wg-128x64-tf32 with K split
    // 4 ways, so the workspace holds both TF32 parts of the weights and the partial sums; TF32 runs
    // tma-128x64-fp32, also with 4 K splits (dcnFusedSplitTail, host only).
    Problem vec = base;
    vec.c = 128;
    vec.h = 40;
    vec.w = 48;
    vec.cout = 128;
    vec.attrs = Attrs{{1, 1}, {1, 1}, {1, 1}, 1, 1};

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
    add("fp32_larger", larger, DataType::kFLOAT, 4.F);
    add("fp32_vec", vec, DataType::kFLOAT, 3.F);
    // allow_tf32 = 1: FP32 within the TF32 bound; FP16/BF16 ignore it (bit-identical to the case without it).
    addTf32("fp32_larger_tf32", "fp32_larger");
    addTf32("fp32_vec_tf32", "fp32_vec");
    addTf32("fp32_k5_g4_s3x2_tf32", "fp32_k5_g4_s3x2");
    addTf32("fp16_larger_tf32", "fp16_larger");
    addTf32("bf16_larger_tf32", "bf16_larger");
    // Every format of x the plugin offers, with the weights as inputs and carried by the node, on a
    // problem the channel-vectorised kernel takes (64 channels, 2 deformable groups); and embedded
    // weights on problems that run the NCHW kernels.
    Problem formats = base;
    formats.n = 2;
    formats.c = 64;
    formats.h = 13;
    formats.w = 17;
    formats.cout = 48;
    formats.attrs = Attrs{{2, 1}, {1, 2}, {1, 1}, 1, 2};
    using nvinfer1::TensorFormat;
    struct Layout
    {
        char const* name;
        DataType type;
        TensorFormat format;
    };
    Layout const layouts[] = {{"fp32_linear", DataType::kFLOAT, TensorFormat::kLINEAR},
        {"fp32_hwc", DataType::kFLOAT, TensorFormat::kHWC}, {"fp16_linear", DataType::kHALF, TensorFormat::kLINEAR},
        {"fp16_hwc8", DataType::kHALF, TensorFormat::kHWC8}, {"fp16_hwc16", DataType::kHALF, TensorFormat::kHWC16},
        {"bf16_linear", DataType::kBF16, TensorFormat::kLINEAR}, {"bf16_hwc8", DataType::kBF16, TensorFormat::kHWC8}};
    for (Layout const& l : layouts)
    {
        for (bool embed : {false, true})
        {
            add(std::string("fmt_") + l.name + (embed ? "_embedded" : "_inputs"), formats, l.type, 2.5F);
            cases.back().xFormat = l.format;
            cases.back().embed = embed;
        }
    }
    add("fp32_nonsquare_g2_dg2_embedded", nonSquare, DataType::kFLOAT, 2.F);
    cases.back().embed = true;
    add("fp16_k1x3_dg4_nobias_embedded", oneByThree, DataType::kHALF, 3.F);
    cases.back().embed = true;
    return cases;
}

} // namespace

//! Build-phase calls (every position's format) and enqueue, then the engine round trip (serialize ->
//! createPlugin(kRUNTIME)) and enqueue again: the two outputs must be bit-identical. Without a
//! device: the same calls but enqueue, and the input files.
void runCase(nvinfer1::IPluginCreatorV3One* creator, Case const& c, std::string const& outDir, std::ofstream& manifest,
    RunOn where)
{
    HostData const data = makeInputs(c);
    CaseFields fields(c, data);
    PluginPtr plugin(creator->createPlugin(c.name.c_str(), fields.collection(), TensorRTPhase::kBUILD));
    HCHECK(plugin != nullptr, c.name << ": createPlugin(kBUILD)");
    if (!plugin)
    {
        return;
    }
    IPluginV3OneBuild* build = buildOf(plugin.get());
    std::vector<nvinfer1::PluginTensorDesc> const descs = inputDescs(c, data);
    std::vector<DynamicPluginTensorDesc> in(descs.size());
    for (size_t i = 0; i < descs.size(); ++i)
    {
        in[i].desc = descs[i];
        in[i].min = in[i].opt = in[i].max = descs[i].dims;
    }
    DynamicPluginTensorDesc out{};
    out.desc = outputDesc(c, data);
    out.min = out.opt = out.max = c.p.outputDims();
    std::vector<DynamicPluginTensorDesc> inOut(in);
    inOut.push_back(out);
    for (int32_t pos = 0; pos <= c.nbInputs(); ++pos)
    {
        HCHECK(build->supportsFormatCombination(pos, inOut.data(), c.nbInputs(), 1),
            c.name << ": supportsFormatCombination takes position " << pos << " (x as format "
                   << static_cast<int32_t>(c.xFormat) << ", type " << typeName(inOut[pos].desc.type) << ")");
    }
    HCHECK(build->configurePlugin(in.data(), c.nbInputs(), &out, 1) == 0, c.name << ": configurePlugin");
    size_t const workspace = build->getWorkspaceSize(in.data(), c.nbInputs(), &out, 1);
    PluginPtr clone(plugin->clone());
    TestErrorRecorder recorder;
    TestResourceContext context(&recorder);
    PluginPtr attached(clone ? runtimeOf(clone.get())->attachToContext(&context) : nullptr);
    HCHECK(attached != nullptr, c.name << ": clone + attachToContext");
    if (!attached)
    {
        return;
    }
    bool const device = where == RunOn::kDEVICE;
    std::vector<uint8_t> first;
    std::vector<uint8_t> second;
    bool const ran = device && runOnDevice(runtimeOf(attached.get()), c, data, workspace, first, c.name + " (build)");
    PluginPtr restored(creator->createPlugin(
        c.name.c_str(), runtimeOf(attached.get())->getFieldsToSerialize(), TensorRTPhase::kRUNTIME));
    HCHECK(restored != nullptr, c.name << ": createPlugin(kRUNTIME) with getFieldsToSerialize()");
    PluginPtr restoredAttached(restored ? runtimeOf(restored.get())->attachToContext(&context) : nullptr);
    HCHECK(restoredAttached != nullptr, c.name << ": the deserialized plugin attaches to a context");
    if (!device)
    {
        // No device: the input files and an all-zero output, for the comparison's own tests.
        HCHECK(recorder.errors.empty(), c.name << ": no error recorded");
        first.assign(static_cast<size_t>(volume(c.p.outputDims())) * elementSize(c.outType()), 0);
        writeCase(outDir, manifest, c, data, first, RuntimeCompare::kNOT_COMPARED, "inputs-only");
        return;
    }
    bool const ranAgain = restoredAttached
        && runOnDevice(runtimeOf(restoredAttached.get()), c, data, workspace, second, c.name + " (runtime)");
    bool const identical = ran && ranAgain && first == second;
    HCHECK(identical, c.name << ": deserialized plugin output is bit-identical to the build plugin's");
    HCHECK(recorder.errors.empty(), c.name << ": no error recorded");
    if (ran)
    {
        writeCase(outDir, manifest, c, data, first,
            identical ? RuntimeCompare::kIDENTICAL : RuntimeCompare::kDIFFERENT, "build+runtime");
    }
}

namespace
{

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
        in[i].desc = staticDescs({lo[i]}, DataType::kFLOAT)[0];
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
    out.desc = staticDescs({small.p.outputDims()}, DataType::kFLOAT)[0];
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
            && runOnDevice(runtimeOf(attached.get()), *c, data, workspace, output,
                c->name + " (shape change " + std::to_string(step) + ")");
        if (ran && step == 0)
        {
            firstSmall = output;
        }
        if (ran && step < 2)
        {
            // No deserialized plugin here; the repeat of shape A below is this path's bitwise check.
            writeCase(outDir, manifest, *c, data, output, RuntimeCompare::kNOT_COMPARED, "dynamic");
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
        runCase(session.creator, c, outDir, manifest, RunOn::kDEVICE);
    }
    for (Case const& c : quantCases())
    {
        runCase(session.creator, c, outDir, manifest, RunOn::kDEVICE);
    }
    runDynamic(session.creator, outDir, manifest);
    HCHECK(session.logger.errorsSince(0).empty(), "no error logged in the whole GPU run");
    return checks().failed == 0 ? 0 : 1;
}

int32_t runGpuInputs(std::string const& libPath, std::string const& outDir)
{
    Session session;
    if (!session.start(libPath))
    {
        return 1;
    }
    std::ofstream manifest(outDir + "/manifest.jsonl");
    HCHECK(static_cast<bool>(manifest), "open " << outDir << "/manifest.jsonl");
    std::vector<Case> cases = gridCases();
    for (Case const& c : quantCases())
    {
        cases.push_back(c);
    }
    for (Case const& c : cases)
    {
        runCase(session.creator, c, outDir, manifest, RunOn::kNONE);
    }
    HCHECK(session.logger.errorsSince(0).empty(), "no error logged");
    return checks().failed == 0 ? 0 : 1;
}

} // namespace harness
