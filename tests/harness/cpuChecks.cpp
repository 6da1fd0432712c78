/*
 * dcnconvert plugin harness, `cpu` mode: every call TensorRT makes at network construction, build,
 * deserialization and context creation, plus bad input, without touching a GPU. runCpu opens the
 * library, finds the creator and runs the check families of CpuRun (cpuChecks.h) over a few problems.
 */
#include "cpuChecks.h"

#include <string>
#include <vector>

namespace harness
{

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
    Problem d = a; // allow_tf32 = 1: the whole pipeline with the optional field, round trip included
    d.attrs.allowTf32 = 1;
    problems.push_back(d);
    Problem e = b;
    e.attrs.allowTf32 = 1;
    problems.push_back(e);
    for (Problem const& p : problems)
    {
        run.pipeline(p);
        run.symbolicShapes(p);
    }
    run.formatCombinations(problems[0]);
    run.formatCombinations(problems[2]);
    Problem channelLast = problems[0]; // 64 channels: x may be channel-last too
    channelLast.c = 64;
    channelLast.cout = 6;
    run.formatCombinations(channelLast);
    run.embeddedWeights();
    run.typeChecks();
    run.shapeErrors();
    run.badFields();
    run.allowTf32();
    run.runtimeErrors();
    for (bool fp8 : {false, true})
    {
        for (bool outputScale : {false, true})
        {
            run.quantFields(fp8, outputScale);
            run.quantTypes(fp8, outputScale);
            run.quantFormats(fp8, outputScale, 64); // x may be kHWC16
            run.quantFormats(fp8, outputScale, 32); // 16 channels per group: kLINEAR only
        }
    }
    run.quantBadFields();
    return checks().failed == 0 ? 0 : 1;
}

} // namespace harness
