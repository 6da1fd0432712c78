/*
 * dcnconvert plugin harness, `cpu` mode: output shapes with symbolic dimensions (evaluated against
 * the formula) and inconsistent input shapes rejected by getOutputShapes and configurePlugin; -1 dims
 * at configure time and the workspace from the profile's max dims.
 */
#include "cpuChecks.h"

#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::IPluginV3OneBuild;

namespace harness
{

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
        {"kernel 70000x70000 (2*dg*kh*kw offset channels beyond int32)",
            [](Problem&, std::vector<Dims>& d) {
                d[3].d[2] = 70000;
                d[3].d[3] = 70000;
            },
            {"70000x70000", "2^31 - 1"}},
        {"kernel height beyond int32", [](Problem&, std::vector<Dims>& d) { d[3].d[2] = int64_t{1} << 33; },
            {"kernel height", "8589934592"}},
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

} // namespace harness
