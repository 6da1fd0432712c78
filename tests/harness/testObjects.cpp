/*
 * dcnconvert plugin harness: the TensorRT-side objects (logger, recorder, IExprBuilder, fields) and
 * the plugin library loader.
 */
#include "harness.h"

#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <stdexcept>

namespace harness
{

void Checks::record(bool ok, std::string const& what)
{
    ++total;
    if (!ok)
    {
        ++failed;
    }
    if (!ok || verbose)
    {
        std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
        std::fflush(stdout);
    }
}

Checks& checks()
{
    static Checks instance;
    return instance;
}

// --- TestLogger ---

void TestLogger::log(Severity severity, nvinfer1::AsciiChar const* msg) noexcept
{
    entries.push_back({severity, msg != nullptr ? msg : "(null)"});
    if (!quiet)
    {
        static char const* const kTAGS[] = {"F", "E", "W", "I", "V"};
        auto const s = static_cast<int32_t>(severity);
        std::printf("  log[%s] %s\n", s >= 0 && s < 5 ? kTAGS[s] : "?", entries.back().text.c_str());
        std::fflush(stdout);
    }
}

int32_t TestLogger::count(Severity severity) const
{
    int32_t n = 0;
    for (auto const& e : entries)
    {
        n += e.severity == severity ? 1 : 0;
    }
    return n;
}

std::vector<std::string> TestLogger::errorsSince(size_t mark) const
{
    std::vector<std::string> out;
    for (size_t i = mark; i < entries.size(); ++i)
    {
        if (entries[i].severity == Severity::kERROR || entries[i].severity == Severity::kINTERNAL_ERROR)
        {
            out.push_back(entries[i].text);
        }
    }
    return out;
}

// --- TestErrorRecorder ---

int32_t TestErrorRecorder::getNbErrors() const noexcept
{
    return static_cast<int32_t>(errors.size());
}

nvinfer1::ErrorCode TestErrorRecorder::getErrorCode(int32_t errorIdx) const noexcept
{
    return errorIdx >= 0 && errorIdx < getNbErrors() ? errors[errorIdx].first : nvinfer1::ErrorCode::kINVALID_ARGUMENT;
}

TestErrorRecorder::ErrorDesc TestErrorRecorder::getErrorDesc(int32_t errorIdx) const noexcept
{
    return errorIdx >= 0 && errorIdx < getNbErrors() ? errors[errorIdx].second.c_str() : "";
}

bool TestErrorRecorder::hasOverflowed() const noexcept
{
    return false;
}

void TestErrorRecorder::clear() noexcept
{
    errors.clear();
}

bool TestErrorRecorder::reportError(nvinfer1::ErrorCode val, ErrorDesc desc) noexcept
{
    errors.emplace_back(val, desc != nullptr ? desc : "(null)");
    std::printf("  recorder[%d] %s\n", static_cast<int32_t>(val), errors.back().second.c_str());
    std::fflush(stdout);
    return true;
}

TestErrorRecorder::RefCount TestErrorRecorder::incRefCount() noexcept
{
    return ++refCount;
}

TestErrorRecorder::RefCount TestErrorRecorder::decRefCount() noexcept
{
    return --refCount;
}

// --- TestExpr / TestExprBuilder ---

TestExpr::TestExpr(Kind kind, int64_t value, std::string symbol, nvinfer1::DimensionOperation op, TestExpr const* a,
    TestExpr const* b)
    : mKind(kind)
    , mValue(value)
    , mSymbol(std::move(symbol))
    , mOp(op)
    , mA(a)
    , mB(b)
    , mImplObject(this)
{
    mImpl = &mImplObject;
}

bool TestExpr::Impl::isConstant() const
{
    return mOwner->mKind == Kind::kCONSTANT;
}

int64_t TestExpr::Impl::getConstantValue() const
{
    // TensorRT documents the result for a non-constant as undefined; make misuse visible.
    return mOwner->mKind == Kind::kCONSTANT ? mOwner->mValue : INT64_MIN;
}

namespace
{
int64_t floorDiv(int64_t a, int64_t b)
{
    if (b == 0)
    {
        throw std::runtime_error("division by zero");
    }
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
    {
        --q;
    }
    return q;
}

int64_t apply(nvinfer1::DimensionOperation op, int64_t a, int64_t b)
{
    using Op = nvinfer1::DimensionOperation;
    switch (op)
    {
    case Op::kSUM: return a + b;
    case Op::kPROD: return a * b;
    case Op::kMAX: return a > b ? a : b;
    case Op::kMIN: return a < b ? a : b;
    case Op::kSUB: return a - b;
    case Op::kEQUAL: return a == b ? 1 : 0;
    case Op::kLESS: return a < b ? 1 : 0;
    case Op::kFLOOR_DIV: return floorDiv(a, b);
    case Op::kCEIL_DIV: return -floorDiv(-a, b);
    }
    throw std::runtime_error("unknown DimensionOperation");
}

char const* opName(nvinfer1::DimensionOperation op)
{
    static char const* const kNAMES[] = {"+", "*", "max", "min", "-", "==", "<", "floordiv", "ceildiv"};
    auto const i = static_cast<int32_t>(op);
    return i >= 0 && i < 9 ? kNAMES[i] : "?";
}
} // namespace

int64_t TestExpr::evaluate(std::map<std::string, int64_t> const& bindings) const
{
    switch (mKind)
    {
    case Kind::kCONSTANT: return mValue;
    case Kind::kSYMBOL:
    {
        auto it = bindings.find(mSymbol);
        if (it == bindings.end())
        {
            throw std::runtime_error("unbound symbol " + mSymbol);
        }
        return it->second;
    }
    case Kind::kOPERATION: return apply(mOp, mA->evaluate(bindings), mB->evaluate(bindings));
    }
    throw std::runtime_error("bad expression");
}

std::string TestExpr::text() const
{
    switch (mKind)
    {
    case Kind::kCONSTANT: return std::to_string(mValue);
    case Kind::kSYMBOL: return mSymbol;
    case Kind::kOPERATION: return "(" + mA->text() + " " + opName(mOp) + " " + mB->text() + ")";
    }
    return "?";
}

TestExprBuilder::TestExprBuilder()
    : mImplObject(this)
{
    mImpl = &mImplObject;
}

TestExpr const* TestExprBuilder::add(std::unique_ptr<TestExpr> e)
{
    mExprs.push_back(std::move(e));
    return mExprs.back().get();
}

TestExpr const* TestExprBuilder::symbol(std::string const& name)
{
    return add(std::make_unique<TestExpr>(
        TestExpr::Kind::kSYMBOL, 0, name, nvinfer1::DimensionOperation::kSUM, nullptr, nullptr));
}

TestExpr const* TestExprBuilder::constantExpr(int64_t value)
{
    return add(std::make_unique<TestExpr>(
        TestExpr::Kind::kCONSTANT, value, "", nvinfer1::DimensionOperation::kSUM, nullptr, nullptr));
}

TestExpr const* TestExprBuilder::owned(nvinfer1::IDimensionExpr const* e) const
{
    for (auto const& p : mExprs)
    {
        if (p.get() == e)
        {
            return p.get();
        }
    }
    return nullptr;
}

nvinfer1::IDimensionExpr const* TestExprBuilder::Impl::constant(int64_t value)
{
    return mOwner->constantExpr(value);
}

nvinfer1::IDimensionExpr const* TestExprBuilder::Impl::operation(
    nvinfer1::DimensionOperation op, nvinfer1::IDimensionExpr const& first, nvinfer1::IDimensionExpr const& second)
{
    TestExpr const* a = mOwner->owned(&first);
    TestExpr const* b = mOwner->owned(&second);
    if (a == nullptr || b == nullptr || static_cast<int32_t>(op) < 0 || static_cast<int32_t>(op) > 8)
    {
        return nullptr; // TensorRT returns null for an invalid operation; foreign operands are a plugin bug.
    }
    ++mOwner->nbOperations;
    if (a->kind() == TestExpr::Kind::kCONSTANT && b->kind() == TestExpr::Kind::kCONSTANT)
    {
        return mOwner->constantExpr(apply(op, a->evaluate({}), b->evaluate({}))); // folded, as TensorRT does
    }
    return mOwner->add(std::make_unique<TestExpr>(TestExpr::Kind::kOPERATION, 0, "", op, a, b));
}

// --- Plugin library ---

bool PluginLibrary::open(std::string const& path, std::string& error)
{
    dlerror();
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr)
    {
        char const* e = dlerror();
        error = e != nullptr ? e : "dlopen failed";
        return false;
    }
    getCreators = reinterpret_cast<GetCreatorsFn>(dlsym(handle, "getCreators"));
    setLoggerFinder = reinterpret_cast<SetLoggerFinderFn>(dlsym(handle, "setLoggerFinder"));
    if (getCreators == nullptr || setLoggerFinder == nullptr)
    {
        error = "getCreators or setLoggerFinder is not exported";
        return false;
    }
    return true;
}

nvinfer1::IPluginCreatorV3One* findCreator(PluginLibrary& lib)
{
    int32_t n = 0;
    nvinfer1::IPluginCreatorInterface* const* creators = lib.getCreators(n);
    for (int32_t i = 0; creators != nullptr && i < n; ++i)
    {
        nvinfer1::IPluginCreatorInterface* c = creators[i];
        if (c != nullptr && std::strcmp(c->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") == 0)
        {
            auto* v3 = static_cast<nvinfer1::IPluginCreatorV3One*>(c);
            if (std::strcmp(v3->getPluginName(), "ModulatedDeformConv2d") == 0)
            {
                return v3;
            }
        }
    }
    return nullptr;
}

bool Session::start(std::string const& libPath)
{
    std::string error;
    if (!lib.open(libPath, error))
    {
        HCHECK(false, "dlopen " << libPath << ": " << error);
        return false;
    }
    finder = std::make_unique<TestLoggerFinder>(&logger);
    lib.setLoggerFinder(finder.get());
    creator = findCreator(lib);
    HCHECK(creator != nullptr, "getCreators() returns a V3 ModulatedDeformConv2d creator");
    return creator != nullptr;
}

// --- Fields ---

FieldSet::FieldSet(Attrs const& a)
    : mAttrs(a)
{
}

nvinfer1::PluginFieldCollection const* FieldSet::collection()
{
    using nvinfer1::PluginFieldType;
    fields = {
        nvinfer1::PluginField("stride", mAttrs.stride, PluginFieldType::kINT32, 2),
        nvinfer1::PluginField("padding", mAttrs.padding, PluginFieldType::kINT32, 2),
        nvinfer1::PluginField("dilation", mAttrs.dilation, PluginFieldType::kINT32, 2),
        nvinfer1::PluginField("group", &mAttrs.group, PluginFieldType::kINT32, 1),
        nvinfer1::PluginField("deformable_group", &mAttrs.deformableGroup, PluginFieldType::kINT32, 1),
    };
    mCollection.nbFields = static_cast<int32_t>(fields.size());
    mCollection.fields = fields.data();
    return &mCollection;
}

bool readSerialized(nvinfer1::PluginFieldCollection const* fc, Attrs& out, std::string& why)
{
    if (fc == nullptr || fc->nbFields != 5 || fc->fields == nullptr)
    {
        why = "expected 5 serialized fields";
        return false;
    }
    struct Want
    {
        char const* name;
        int32_t length;
        int32_t* dst;
    } const wants[] = {{"stride", 2, out.stride}, {"padding", 2, out.padding}, {"dilation", 2, out.dilation},
        {"group", 1, &out.group}, {"deformable_group", 1, &out.deformableGroup}};
    for (int32_t i = 0; i < 5; ++i)
    {
        nvinfer1::PluginField const& f = fc->fields[i];
        if (f.name == nullptr || std::strcmp(f.name, wants[i].name) != 0)
        {
            why = std::string("field ") + std::to_string(i) + " is not '" + wants[i].name + "'";
            return false;
        }
        if (f.type != nvinfer1::PluginFieldType::kINT32 || f.length != wants[i].length || f.data == nullptr)
        {
            why = std::string("field '") + wants[i].name + "' is not INT32 x" + std::to_string(wants[i].length);
            return false;
        }
        std::memcpy(wants[i].dst, f.data, sizeof(int32_t) * wants[i].length);
    }
    return true;
}

// --- Shapes ---

int64_t outputSize(int64_t in, int64_t kernel, int32_t stride, int32_t pad, int32_t dilation)
{
    int64_t const span = static_cast<int64_t>(dilation) * (kernel - 1) + 1;
    int64_t const padded = in + 2 * static_cast<int64_t>(pad);
    if (padded < span)
    {
        return -1;
    }
    return (padded - span) / stride + 1;
}

nvinfer1::Dims makeDims(std::initializer_list<int64_t> values)
{
    nvinfer1::Dims d{};
    d.nbDims = 0;
    for (int64_t v : values)
    {
        d.d[d.nbDims++] = v;
    }
    return d;
}

std::string dimsText(nvinfer1::Dims const& d)
{
    std::string s = "[";
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        s += (i ? ", " : "") + std::to_string(d.d[i]);
    }
    return s + "]";
}

std::vector<nvinfer1::Dims> Problem::inputDims() const
{
    int64_t const dg = attrs.deformableGroup;
    std::vector<nvinfer1::Dims> dims = {
        makeDims({n, c, h, w}),
        makeDims({n, 2 * dg * kh * kw, ho(), wo()}),
        makeDims({n, dg * kh * kw, ho(), wo()}),
        makeDims({cout, c / attrs.group, kh, kw}),
    };
    if (bias)
    {
        dims.push_back(makeDims({cout}));
    }
    return dims;
}

nvinfer1::Dims Problem::outputDims() const
{
    return makeDims({n, cout, ho(), wo()});
}

char const* typeName(nvinfer1::DataType t)
{
    static char const* const kNAMES[] = {"FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8", "FP8", "BF16", "INT64",
        "INT4", "FP4", "E8M0"};
    auto const i = static_cast<int32_t>(t);
    return i >= 0 && i < 12 ? kNAMES[i] : "?";
}

} // namespace harness
