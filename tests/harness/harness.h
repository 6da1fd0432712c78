/*
 * dcnconvert plugin harness: drives libdcnconvert_plugin.so the way TensorRT does, without TensorRT.
 *
 * The plugin library is dlopen()ed and used only through its exported entry points (getCreators,
 * setLoggerFinder) and the TensorRT interfaces, like libnvinfer would. The harness supplies what
 * TensorRT would: a plugin registry (exported getPluginRegistry, see fakeRegistry.cpp), a logger,
 * an error recorder, a resource context and an IExprBuilder with constant and symbolic dimensions.
 */
#ifndef DCN_HARNESS_H
#define DCN_HARNESS_H

#include "NvInferRuntime.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace harness
{

// --- Check bookkeeping: every check prints one line; the exit code is the failure count > 0. ---
struct Checks
{
    int32_t total{0};
    int32_t failed{0};
    bool verbose{true};
    void record(bool ok, std::string const& what);
};
Checks& checks();

#define HCHECK(cond, what)                                                                                             \
    do                                                                                                                 \
    {                                                                                                                  \
        std::ostringstream hcheckText_;                                                                                \
        hcheckText_ << what;                                                                                           \
        ::harness::checks().record(static_cast<bool>(cond), hcheckText_.str() + "  [" #cond "]");                      \
    } while (0)

// --- Logger / finder / recorder / resource context (testObjects.cpp) ---
class TestLogger : public nvinfer1::ILogger
{
public:
    void log(Severity severity, nvinfer1::AsciiChar const* msg) noexcept override;
    struct Entry
    {
        Severity severity;
        std::string text;
    };
    std::vector<Entry> entries;
    int32_t count(Severity severity) const;
    //! Messages of severity kERROR or worse logged since `mark`.
    std::vector<std::string> errorsSince(size_t mark) const;
    bool quiet{false};
};

class TestLoggerFinder : public nvinfer1::ILoggerFinder
{
public:
    explicit TestLoggerFinder(TestLogger* logger)
        : mLogger(logger)
    {
    }
    nvinfer1::ILogger* findLogger() override
    {
        return mLogger;
    }

private:
    TestLogger* mLogger;
};

class TestErrorRecorder : public nvinfer1::IErrorRecorder
{
public:
    int32_t getNbErrors() const noexcept override;
    nvinfer1::ErrorCode getErrorCode(int32_t errorIdx) const noexcept override;
    ErrorDesc getErrorDesc(int32_t errorIdx) const noexcept override;
    bool hasOverflowed() const noexcept override;
    void clear() noexcept override;
    bool reportError(nvinfer1::ErrorCode val, ErrorDesc desc) noexcept override;
    RefCount incRefCount() noexcept override;
    RefCount decRefCount() noexcept override;

    std::vector<std::pair<nvinfer1::ErrorCode, std::string>> errors;
    RefCount refCount{0};
};

class TestResourceContext : public nvinfer1::IPluginResourceContext
{
public:
    explicit TestResourceContext(nvinfer1::IErrorRecorder* recorder)
        : mRecorder(recorder)
    {
    }
    nvinfer1::IGpuAllocator* getGpuAllocator() const noexcept override
    {
        return nullptr;
    }
    nvinfer1::IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return mRecorder;
    }

private:
    nvinfer1::IErrorRecorder* mRecorder;
};

// --- IExprBuilder with constants, named symbols and operations, evaluable (testExprBuilder.cpp) ---
class TestExprBuilder;

class TestExpr : public nvinfer1::IDimensionExpr
{
public:
    enum class Kind
    {
        kCONSTANT,
        kSYMBOL,
        kOPERATION
    };
    TestExpr(Kind kind, int64_t value, std::string symbol, nvinfer1::DimensionOperation op, TestExpr const* a,
        TestExpr const* b);
    ~TestExpr() noexcept override = default;

    //! Value with symbols bound; throws std::runtime_error for an unbound symbol or division by zero.
    int64_t evaluate(std::map<std::string, int64_t> const& bindings) const;
    std::string text() const;
    Kind kind() const
    {
        return mKind;
    }

private:
    class Impl : public nvinfer1::apiv::VDimensionExpr
    {
    public:
        explicit Impl(TestExpr const* owner)
            : mOwner(owner)
        {
        }
        bool isConstant() const override;
        int64_t getConstantValue() const override;
        bool isSizeTensor() const override
        {
            return false;
        }

    private:
        TestExpr const* mOwner;
    };

    Kind mKind;
    int64_t mValue;
    std::string mSymbol;
    nvinfer1::DimensionOperation mOp;
    TestExpr const* mA;
    TestExpr const* mB;
    Impl mImplObject;
};

class TestExprBuilder : public nvinfer1::IExprBuilder
{
public:
    TestExprBuilder();
    ~TestExprBuilder() noexcept override = default;
    TestExpr const* symbol(std::string const& name);
    TestExpr const* constantExpr(int64_t value);
    //! Expression owned by this builder (for checks on what the plugin returned), else null.
    TestExpr const* owned(nvinfer1::IDimensionExpr const* e) const;
    int32_t nbOperations{0};

private:
    class Impl : public nvinfer1::apiv::VExprBuilder
    {
    public:
        explicit Impl(TestExprBuilder* owner)
            : mOwner(owner)
        {
        }
        nvinfer1::IDimensionExpr const* constant(int64_t value) override;
        nvinfer1::IDimensionExpr const* operation(nvinfer1::DimensionOperation op,
            nvinfer1::IDimensionExpr const& first, nvinfer1::IDimensionExpr const& second) override;
        nvinfer1::IDimensionExpr const* declareSizeTensor(
            int32_t, nvinfer1::IDimensionExpr const&, nvinfer1::IDimensionExpr const&) override
        {
            return nullptr;
        }

    private:
        TestExprBuilder* mOwner;
    };
    TestExpr const* add(std::unique_ptr<TestExpr> e);
    Impl mImplObject;
    std::vector<std::unique_ptr<TestExpr>> mExprs;
};

// --- Fake plugin registry (fakeRegistry.cpp), exported to the plugin as getPluginRegistry. ---
struct RegistryStats
{
    int32_t registerCalls{0};
    int32_t deregisterCalls{0};
    int32_t failedRegistrations{0};
    int32_t v1Calls{0}; //!< calls of the IPluginV2-era overloads (10.x only); must stay 0
    int32_t count{0};
};
RegistryStats registryStats();
//! What the ONNX parser does: look the creator up by name, version and namespace.
nvinfer1::IPluginCreatorInterface* registryGetCreator(char const* name, char const* version, char const* ns);
//! What IPluginRegistry::loadLibrary does: dlopen, setLoggerFinder, getCreators, register each
//! (failing on a duplicate). Returns the dlopen handle or null.
void* registryLoadLibrary(char const* path, nvinfer1::ILoggerFinder* finder);
//! Namespace a creator was registered with ("" if absent).
std::string registryNamespaceOf(nvinfer1::IPluginCreatorInterface const* creator);

// --- The plugin library under test (pluginLibrary.cpp) ---
struct PluginLibrary
{
    void* handle{nullptr};
    using GetCreatorsFn = nvinfer1::IPluginCreatorInterface* const* (*) (int32_t&);
    using SetLoggerFinderFn = void (*)(nvinfer1::ILoggerFinder*);
    GetCreatorsFn getCreators{nullptr};
    SetLoggerFinderFn setLoggerFinder{nullptr};
    //! dlopen()s `path` (RTLD_NOW | RTLD_LOCAL, as trtexec/ctypes do) and resolves the entry points.
    bool open(std::string const& path, std::string& error);
};

//! The ModulatedDeformConv2d V3 creator of the library (via getCreators), or null.
nvinfer1::IPluginCreatorV3One* findCreator(PluginLibrary& lib);

// --- Plugins made by the creator: ownership and capability interfaces (pluginLibrary.cpp) ---
struct PluginDeleter
{
    void operator()(nvinfer1::IPluginV3* p) const
    {
        delete p;
    }
};
using PluginPtr = std::unique_ptr<nvinfer1::IPluginV3, PluginDeleter>;
nvinfer1::IPluginV3OneCore* coreOf(nvinfer1::IPluginV3* p);
nvinfer1::IPluginV3OneBuild* buildOf(nvinfer1::IPluginV3* p);
nvinfer1::IPluginV3OneRuntime* runtimeOf(nvinfer1::IPluginV3* p);

// --- Field helpers: what the ONNX parser builds from a rewritten node's attributes (testProblems.cpp) ---
struct Attrs
{
    int32_t stride[2]{1, 1};
    int32_t padding[2]{0, 0};
    int32_t dilation[2]{1, 1};
    int32_t group{1};
    int32_t deformableGroup{1};
    int32_t allowTf32{0}; //!< the optional field allow_tf32 (absent from a FieldSet when 0)
};

class FieldSet
{
public:
    explicit FieldSet(Attrs const& a);
    //! Fields as the ONNX parser makes them from INTS/INT attributes: kINT32. allow_tf32 is given only
    //! when it is 1, as the rewrite writes the attribute only when asked for.
    nvinfer1::PluginFieldCollection const* collection();
    std::vector<nvinfer1::PluginField> fields;

private:
    Attrs mAttrs;
    nvinfer1::PluginFieldCollection mCollection{};
};

//! Reads back the int32 fields of a serialized collection (all six, allow_tf32 last); false (with
//! reason) if malformed.
bool readSerialized(nvinfer1::PluginFieldCollection const* fc, Attrs& out, std::string& why);

// --- Modes ---
int32_t runRegistration(std::string const& libPath, int32_t expectAuto);
int32_t runInfo(std::string const& libPath);
int32_t runCpu(std::string const& libPath);
int32_t runGpu(std::string const& libPath, std::string const& outDir);
//! The GPU cases (but the dynamic-shape one) without a device (gpuCases.cpp).
int32_t runGpuInputs(std::string const& libPath, std::string const& outDir);

// --- Shared plumbing for cpu/gpu modes ---
struct Session
{
    PluginLibrary lib;
    TestLogger logger;
    std::unique_ptr<TestLoggerFinder> finder;
    nvinfer1::IPluginCreatorV3One* creator{nullptr};
    //! Opens the library, installs the logger finder, finds the creator.
    bool start(std::string const& libPath);
};

//! Output size of one axis (the schema formula), -1 if < 1.
int64_t outputSize(int64_t in, int64_t kernel, int32_t stride, int32_t pad, int32_t dilation);

//! Shapes of one problem: x [n,c,h,w], weight [cout, c/g, kh, kw].
struct Problem
{
    Attrs attrs;
    int64_t n{1}, c{4}, h{8}, w{8}, cout{4}, kh{3}, kw{3};
    bool bias{true};
    int64_t ho() const
    {
        return outputSize(h, kh, attrs.stride[0], attrs.padding[0], attrs.dilation[0]);
    }
    int64_t wo() const
    {
        return outputSize(w, kw, attrs.stride[1], attrs.padding[1], attrs.dilation[1]);
    }
    int32_t nbInputs() const
    {
        return bias ? 5 : 4;
    }
    //! Input dims in plugin order (x, offset, mask, weight[, bias]) and the output dims.
    std::vector<nvinfer1::Dims> inputDims() const;
    nvinfer1::Dims outputDims() const;
};

nvinfer1::Dims makeDims(std::initializer_list<int64_t> values);
//! Descriptors as at onShapeChange/enqueue: the given dims and type, kLINEAR, scale 1.
std::vector<nvinfer1::PluginTensorDesc> staticDescs(std::vector<nvinfer1::Dims> const& dims, nvinfer1::DataType type);
std::string dimsText(nvinfer1::Dims const& d);
char const* typeName(nvinfer1::DataType t);

} // namespace harness

#endif // DCN_HARNESS_H
