/*
 * dcnconvert: ModulatedDeformConv2d IPluginV3 (build and runtime capabilities).
 * See dcnPlugin.h and plugin_src/README.md.
 */
#include "dcnPlugin.h"

#include "checkMacros.h"

#include "../core/dcnForward.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <sstream>
#include <utility>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::ErrorCode;
using nvinfer1::IDimensionExpr;
using nvinfer1::IExprBuilder;
using nvinfer1::PluginFieldType;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;

namespace dcnconvert
{
namespace trt
{
namespace
{

constexpr int64_t kUNKNOWN_DIM{-1};

char const* const kINPUT_NAMES[kMAX_INPUTS] = {"x", "offset", "mask", "weight", "bias"};

//! DcnDataType for a TensorRT type, or -1 when the plugin does not support it.
int32_t toDcnDataType(DataType type) noexcept
{
    if (type == DataType::kFLOAT)
    {
        return kDCN_FLOAT32;
    }
    if (type == DataType::kHALF)
    {
        return kDCN_FLOAT16;
    }
    if (type == DataType::kBF16)
    {
        return kDCN_BFLOAT16;
    }
    return -1;
}

//! Dims of one input as int64 values, kUNKNOWN_DIM where not known; rank -1 when not given.
struct ShapeView
{
    int32_t nbInputs{0};
    int32_t rank[kMAX_INPUTS]{-1, -1, -1, -1, -1};
    int64_t d[kMAX_INPUTS][4]{};

    int64_t get(int32_t input, int32_t axis) const noexcept
    {
        return d[input][axis];
    }
};

std::string pairText(int32_t const* v)
{
    std::ostringstream os;
    os << "[" << v[0] << ", " << v[1] << "]";
    return os.str();
}

bool known(int64_t v) noexcept
{
    return v >= 0;
}

/*
 * Checks everything about the input shapes that can be checked from the known dims, throws
 * DcnError naming the input and values. Returns the computed (ho, wo), kUNKNOWN_DIM where not
 * computable. When `complete` is true every dim must be known.
 */
std::pair<int64_t, int64_t> checkShapes(ShapeView const& s, DcnAttributes const& a, bool complete)
{
    DCN_VALIDATE(s.nbInputs == kMIN_INPUTS || s.nbInputs == kMAX_INPUTS,
        "expected 4 inputs (x, offset, mask, weight) or 5 (with bias), got " << s.nbInputs);
    for (int32_t i = 0; i < s.nbInputs; ++i)
    {
        int32_t const expectedRank = i == kIN_BIAS ? 1 : 4;
        DCN_VALIDATE(s.rank[i] == expectedRank,
            "input " << i << " ('" << kINPUT_NAMES[i] << "') must have rank " << expectedRank << ", got rank "
                     << s.rank[i]);
        for (int32_t k = 0; k < expectedRank; ++k)
        {
            int64_t const v = s.get(i, k);
            DCN_VALIDATE(!complete || known(v),
                "input '" << kINPUT_NAMES[i] << "' has an unknown dimension " << k << " (" << v << ") at run time");
            DCN_VALIDATE(v == kUNKNOWN_DIM || v >= 0,
                "input '" << kINPUT_NAMES[i] << "' has an invalid dimension " << k << " = " << v);
        }
    }
    int64_t const n = s.get(kIN_X, 0);
    int64_t const c = s.get(kIN_X, 1);
    int64_t const h = s.get(kIN_X, 2);
    int64_t const w = s.get(kIN_X, 3);
    int64_t const cout = s.get(kIN_WEIGHT, 0);
    int64_t const cPerGroup = s.get(kIN_WEIGHT, 1);
    int64_t const kh = s.get(kIN_WEIGHT, 2);
    int64_t const kw = s.get(kIN_WEIGHT, 3);
    int64_t const g = a.group;
    int64_t const dg = a.deformableGroup;

    DCN_VALIDATE(!known(kh) || kh >= 1, "weight kernel height (weight dim 2) must be >= 1, got " << kh);
    DCN_VALIDATE(!known(kw) || kw >= 1, "weight kernel width (weight dim 3) must be >= 1, got " << kw);
    DCN_VALIDATE(!known(c) || c % g == 0, "x has " << c << " channels, not divisible by group = " << g);
    DCN_VALIDATE(!known(c) || c % dg == 0, "x has " << c << " channels, not divisible by deformable_group = " << dg);
    DCN_VALIDATE(!known(cout) || cout % g == 0,
        "weight has " << cout << " output channels (dim 0), not divisible by group = " << g);
    DCN_VALIDATE(!known(c) || !known(cPerGroup) || cPerGroup * g == c,
        "weight dim 1 (" << cPerGroup << ") times group (" << g << ") must equal the channels of x (" << c << ")");
    for (int32_t i : {kIN_OFFSET, kIN_MASK})
    {
        int64_t const ni = s.get(i, 0);
        DCN_VALIDATE(!known(n) || !known(ni) || n == ni,
            "input '" << kINPUT_NAMES[i] << "' has batch " << ni << " but x has batch " << n);
    }
    if (known(kh) && known(kw))
    {
        int64_t const taps = dg * kh * kw;
        int64_t const oc = s.get(kIN_OFFSET, 1);
        int64_t const mc = s.get(kIN_MASK, 1);
        DCN_VALIDATE(!known(oc) || oc == 2 * taps,
            "offset has " << oc << " channels but 2*deformable_group*kh*kw = 2*" << dg << "*" << kh << "*" << kw
                          << " = " << 2 * taps << " are needed");
        DCN_VALIDATE(!known(mc) || mc == taps,
            "mask has " << mc << " channels but deformable_group*kh*kw = " << dg << "*" << kh << "*" << kw << " = "
                        << taps << " are needed");
    }
    if (s.nbInputs == kMAX_INPUTS)
    {
        int64_t const b = s.get(kIN_BIAS, 0);
        DCN_VALIDATE(!known(b) || !known(cout) || b == cout,
            "bias has " << b << " elements but weight has " << cout << " output channels");
    }

    int64_t ho = kUNKNOWN_DIM;
    int64_t wo = kUNKNOWN_DIM;
    if (known(h) && known(kh))
    {
        ho = dcnOutputSize(h, static_cast<int32_t>(kh), a.stride[0], a.padding[0], a.dilation[0]);
        DCN_VALIDATE(ho >= 1,
            "the kernel does not fit: input height " << h << ", kernel height " << kh << ", stride "
                                                     << pairText(a.stride) << ", padding " << pairText(a.padding)
                                                     << ", dilation " << pairText(a.dilation)
                                                     << " give an output height < 1");
    }
    if (known(w) && known(kw))
    {
        wo = dcnOutputSize(w, static_cast<int32_t>(kw), a.stride[1], a.padding[1], a.dilation[1]);
        DCN_VALIDATE(wo >= 1,
            "the kernel does not fit: input width " << w << ", kernel width " << kw << ", stride "
                                                    << pairText(a.stride) << ", padding " << pairText(a.padding)
                                                    << ", dilation " << pairText(a.dilation)
                                                    << " give an output width < 1");
    }
    for (int32_t i : {kIN_OFFSET, kIN_MASK})
    {
        int64_t const hi = s.get(i, 2);
        int64_t const wi = s.get(i, 3);
        DCN_VALIDATE(!known(ho) || !known(hi) || hi == ho,
            "input '" << kINPUT_NAMES[i] << "' has height " << hi << " but the output height computed from x ("
                      << h << "), the kernel (" << kh << "), stride " << pairText(a.stride) << ", padding "
                      << pairText(a.padding) << " and dilation " << pairText(a.dilation) << " is " << ho);
        DCN_VALIDATE(!known(wo) || !known(wi) || wi == wo,
            "input '" << kINPUT_NAMES[i] << "' has width " << wi << " but the output width computed from x (" << w
                      << "), the kernel (" << kw << "), stride " << pairText(a.stride) << ", padding "
                      << pairText(a.padding) << " and dilation " << pairText(a.dilation) << " is " << wo);
    }
    int64_t const oh = s.get(kIN_OFFSET, 2);
    int64_t const mh = s.get(kIN_MASK, 2);
    int64_t const ow = s.get(kIN_OFFSET, 3);
    int64_t const mw = s.get(kIN_MASK, 3);
    DCN_VALIDATE((!known(oh) || !known(mh) || oh == mh) && (!known(ow) || !known(mw) || ow == mw),
        "offset spatial size " << oh << "x" << ow << " differs from mask spatial size " << mh << "x" << mw);
    return {ho, wo};
}

ShapeView viewOf(Dims const* dims, int32_t nbInputs)
{
    ShapeView s;
    s.nbInputs = nbInputs;
    for (int32_t i = 0; i < std::min(nbInputs, kMAX_INPUTS); ++i)
    {
        s.rank[i] = dims[i].nbDims;
        for (int32_t k = 0; k < 4; ++k)
        {
            s.d[i][k] = k < dims[i].nbDims ? dims[i].d[k] : kUNKNOWN_DIM;
        }
    }
    return s;
}

IDimensionExpr const* constantExpr(IExprBuilder& b, int64_t value)
{
    IDimensionExpr const* e = b.constant(value);
    DCN_VALIDATE(e != nullptr, "IExprBuilder::constant(" << value << ") returned null");
    return e;
}

IDimensionExpr const* operationExpr(
    IExprBuilder& b, nvinfer1::DimensionOperation op, IDimensionExpr const& first, IDimensionExpr const& second)
{
    IDimensionExpr const* e = b.operation(op, first, second);
    DCN_VALIDATE(e != nullptr, "IExprBuilder::operation(" << static_cast<int32_t>(op) << ") returned null");
    return e;
}

/*
 * Output size expression: floor((in + 2p - d*(k-1) - 1) / s) + 1, folded to a constant when
 * `in` and `kernel` are constants (constantValue >= 0).
 */
IDimensionExpr const* outputSizeExpr(IExprBuilder& b, IDimensionExpr const& in, IDimensionExpr const& kernel,
    int32_t stride, int32_t pad, int32_t dilation, int64_t constantValue)
{
    using Op = nvinfer1::DimensionOperation;
    if (constantValue >= 0)
    {
        return constantExpr(b, constantValue);
    }
    // numerator = in + 2p - d*(k-1) - 1; with stride 1 the trailing +1 is folded into it.
    int64_t const unit = stride == 1 ? 1 : 0;
    int64_t const base = 2 * static_cast<int64_t>(pad) + dilation - 1 + unit;
    IDimensionExpr const* numerator{nullptr};
    if (kernel.isConstant())
    {
        int64_t const shift = base - static_cast<int64_t>(dilation) * kernel.getConstantValue();
        // Only non-negative constants are built: a negative shift becomes a subtraction.
        numerator = shift == 0 ? &in
            : shift > 0        ? operationExpr(b, Op::kSUM, in, *constantExpr(b, shift))
                               : operationExpr(b, Op::kSUB, in, *constantExpr(b, -shift));
    }
    else
    {
        IDimensionExpr const* span
            = dilation == 1 ? &kernel : operationExpr(b, Op::kPROD, *constantExpr(b, dilation), kernel);
        IDimensionExpr const* shifted = base == 0 ? &in : operationExpr(b, Op::kSUM, in, *constantExpr(b, base));
        numerator = operationExpr(b, Op::kSUB, *shifted, *span);
    }
    if (stride == 1)
    {
        return numerator;
    }
    IDimensionExpr const* divided = operationExpr(b, Op::kFLOOR_DIV, *numerator, *constantExpr(b, stride));
    return operationExpr(b, Op::kSUM, *divided, *constantExpr(b, 1));
}

} // namespace

char const* dataTypeName(DataType type) noexcept
{
    switch (static_cast<int32_t>(type))
    {
    case 0: return "FLOAT";
    case 1: return "HALF";
    case 2: return "INT8";
    case 3: return "INT32";
    case 4: return "BOOL";
    case 5: return "UINT8";
    case 6: return "FP8";
    case 7: return "BF16";
    case 8: return "INT64";
    case 9: return "INT4";
    case 10: return "FP4";
    case 11: return "E8M0";
    default: return "unknown DataType";
    }
}

// --- DcnPlugin ---

DcnPlugin::DcnPlugin(std::string layerName, DcnAttributes const& attrs)
    : mLayerName(std::move(layerName))
    , mAttrs(attrs)
{
    buildSerializationFields();
}

DcnPlugin::DcnPlugin(DcnPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mLayerName(other.mLayerName)
    , mAttrs(other.mAttrs)
    , mNbInputs(other.mNbInputs)
{
    setErrorRecorder(other.mRecorder);
    buildSerializationFields();
}

DcnPlugin::~DcnPlugin()
{
    setErrorRecorder(nullptr);
}

void DcnPlugin::setErrorRecorder(nvinfer1::IErrorRecorder* recorder) noexcept
{
    if (recorder == mRecorder)
    {
        return;
    }
    if (recorder != nullptr)
    {
        recorder->incRefCount();
    }
    if (mRecorder != nullptr)
    {
        mRecorder->decRefCount();
    }
    mRecorder = recorder;
}

void DcnPlugin::buildSerializationFields()
{
    // Exactly the types createPlugin(kBUILD) receives from the ONNX parser: int32.
    void const* const data[kDCN_NB_FIELDS]
        = {mAttrs.stride, mAttrs.padding, mAttrs.dilation, &mAttrs.group, &mAttrs.deformableGroup};
    mSerialFields.clear();
    for (int32_t i = 0; i < kDCN_NB_FIELDS; ++i)
    {
        mSerialFields.emplace_back(kDCN_FIELDS[i].name, data[i], kDCN_FIELDS[i].type, kDCN_FIELDS[i].length);
    }
    mSerialCollection.nbFields = static_cast<int32_t>(mSerialFields.size());
    mSerialCollection.fields = mSerialFields.data();
}

std::string DcnPlugin::where(char const* method) const
{
    return std::string(kDCN_PLUGIN_NAME) + " (" + kDCN_PLUGIN_NAMESPACE + ") layer '" + mLayerName + "': " + method;
}

nvinfer1::IPluginCapability* DcnPlugin::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept
{
    try
    {
        switch (type)
        {
        case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
        case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
        case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
        }
        DCN_VALIDATE(false, "unknown PluginCapabilityType " << static_cast<int32_t>(type));
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "getCapabilityInterface", e);
    }
    return nullptr;
}

nvinfer1::IPluginV3* DcnPlugin::clone() noexcept
{
    try
    {
        return new DcnPlugin(*this);
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "clone", e);
    }
    return nullptr;
}

char const* DcnPlugin::getPluginName() const noexcept
{
    return kDCN_PLUGIN_NAME;
}

char const* DcnPlugin::getPluginVersion() const noexcept
{
    return kDCN_PLUGIN_VERSION;
}

char const* DcnPlugin::getPluginNamespace() const noexcept
{
    return kDCN_PLUGIN_NAMESPACE;
}

// --- IPluginV3OneBuild ---

int32_t DcnPlugin::getNbOutputs() const noexcept
{
    return 1;
}

int32_t DcnPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    try
    {
        DCN_VALIDATE(nbOutputs == 1, "expected 1 output, got " << nbOutputs);
        DCN_VALIDATE(nbInputs == kMIN_INPUTS || nbInputs == kMAX_INPUTS,
            "expected 4 inputs (x, offset, mask, weight) or 5 (with bias), got " << nbInputs);
        DCN_VALIDATE(outputTypes != nullptr && inputTypes != nullptr, "null type array");
        DCN_VALIDATE(toDcnDataType(inputTypes[kIN_X]) >= 0,
            "input 'x' has type " << dataTypeName(inputTypes[kIN_X])
                                  << "; supported types are FLOAT, HALF and BF16 (all inputs the same)");
        for (int32_t i = 1; i < nbInputs; ++i)
        {
            if (inputTypes[i] != inputTypes[kIN_X])
            {
                logMessage(nvinfer1::ILogger::Severity::kWARNING,
                    where("getOutputDataTypes") + ": input '" + kINPUT_NAMES[i] + "' has type "
                        + dataTypeName(inputTypes[i]) + " but x has " + dataTypeName(inputTypes[kIN_X])
                        + "; the plugin runs with all inputs of one type, so TensorRT must cast (a strongly typed "
                          "network cannot and will find no format combination)");
            }
        }
        outputTypes[0] = inputTypes[kIN_X];
        return 0;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "getOutputDataTypes", e);
    }
    return -1;
}

int32_t DcnPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs, IExprBuilder& exprBuilder) noexcept
{
    try
    {
        DCN_VALIDATE(nbOutputs == 1, "expected 1 output, got " << nbOutputs);
        DCN_VALIDATE(nbShapeInputs == 0, "the plugin takes no shape inputs, got " << nbShapeInputs);
        DCN_VALIDATE(inputs != nullptr && outputs != nullptr, "null shape array");
        ShapeView s;
        s.nbInputs = nbInputs;
        for (int32_t i = 0; i < std::min(nbInputs, kMAX_INPUTS); ++i)
        {
            s.rank[i] = inputs[i].nbDims;
            for (int32_t k = 0; k < 4; ++k)
            {
                IDimensionExpr const* e = k < inputs[i].nbDims ? inputs[i].d[k] : nullptr;
                s.d[i][k] = e != nullptr && e->isConstant() ? e->getConstantValue() : kUNKNOWN_DIM;
            }
        }
        std::pair<int64_t, int64_t> const hw = checkShapes(s, mAttrs, false);
        DimsExprs const& x = inputs[kIN_X];
        DimsExprs const& weight = inputs[kIN_WEIGHT];
        outputs[0].nbDims = 4;
        outputs[0].d[0] = x.d[0];
        outputs[0].d[1] = weight.d[0];
        outputs[0].d[2] = outputSizeExpr(
            exprBuilder, *x.d[2], *weight.d[2], mAttrs.stride[0], mAttrs.padding[0], mAttrs.dilation[0], hw.first);
        outputs[0].d[3] = outputSizeExpr(
            exprBuilder, *x.d[3], *weight.d[3], mAttrs.stride[1], mAttrs.padding[1], mAttrs.dilation[1], hw.second);
        return 0;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "getOutputShapes", e);
    }
    return -1;
}

bool DcnPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    try
    {
        DCN_VALIDATE(inOut != nullptr, "null tensor descriptions");
        DCN_VALIDATE(nbInputs == kMIN_INPUTS || nbInputs == kMAX_INPUTS,
            "expected 4 inputs (x, offset, mask, weight) or 5 (with bias), got " << nbInputs);
        DCN_VALIDATE(nbOutputs == 1, "expected 1 output, got " << nbOutputs);
        DCN_VALIDATE(pos >= 0 && pos < nbInputs + nbOutputs,
            "position " << pos << " out of range [0, " << nbInputs + nbOutputs << ")");
        PluginTensorDesc const& desc = inOut[pos].desc;
        if (desc.format != TensorFormat::kLINEAR || toDcnDataType(desc.type) < 0)
        {
            return false;
        }
        return pos == 0 || desc.type == inOut[0].desc.type;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "supportsFormatCombination", e);
    }
    return false;
}

int32_t DcnPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    try
    {
        DCN_VALIDATE(in != nullptr && out != nullptr, "null tensor descriptions");
        DCN_VALIDATE(nbOutputs == 1, "expected 1 output, got " << nbOutputs);
        DCN_VALIDATE(nbInputs == kMIN_INPUTS || nbInputs == kMAX_INPUTS,
            "expected 4 inputs (x, offset, mask, weight) or 5 (with bias), got " << nbInputs);
        Dims dims[kMAX_INPUTS];
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            dims[i] = in[i].desc.dims;
        }
        checkShapes(viewOf(dims, nbInputs), mAttrs, false);
        mNbInputs = nbInputs;
        return 0;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "configurePlugin", e);
    }
    return -1;
}

size_t DcnPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept
{
    try
    {
        DCN_VALIDATE(inputs != nullptr && outputs != nullptr, "null tensor descriptions");
        DCN_VALIDATE(nbOutputs == 1, "expected 1 output, got " << nbOutputs);
        DCN_VALIDATE(nbInputs == kMIN_INPUTS || nbInputs == kMAX_INPUTS,
            "expected 4 inputs (x, offset, mask, weight) or 5 (with bias), got " << nbInputs);
        // Sized from the profile's maximum dims: desc.dims holds -1 for dynamic dimensions.
        Dims const& x = inputs[kIN_X].max;
        Dims const& weight = inputs[kIN_WEIGHT].max;
        Dims const& out = outputs[0].max;
        DCN_VALIDATE(x.nbDims == 4 && weight.nbDims == 4 && out.nbDims == 4,
            "expected rank-4 x, weight and output in the profile's max dims, got ranks " << x.nbDims << ", "
                                                                                            << weight.nbDims << ", "
                                                                                            << out.nbDims);
        auto const clamp = [](int64_t v) { return std::max<int64_t>(v, 0); };
        DcnParams p{};
        p.n = clamp(x.d[0]);
        p.c = clamp(x.d[1]);
        p.h = clamp(x.d[2]);
        p.w = clamp(x.d[3]);
        p.cout = clamp(weight.d[0]);
        p.kh = static_cast<int32_t>(std::min<int64_t>(clamp(weight.d[2]), INT32_MAX));
        p.kw = static_cast<int32_t>(std::min<int64_t>(clamp(weight.d[3]), INT32_MAX));
        p.ho = std::max(clamp(out.d[2]), dcnOutputSize(p.h, std::max(p.kh, 1), mAttrs.stride[0], mAttrs.padding[0], mAttrs.dilation[0]));
        p.wo = std::max(clamp(out.d[3]), dcnOutputSize(p.w, std::max(p.kw, 1), mAttrs.stride[1], mAttrs.padding[1], mAttrs.dilation[1]));
        p.strideH = mAttrs.stride[0];
        p.strideW = mAttrs.stride[1];
        p.padH = mAttrs.padding[0];
        p.padW = mAttrs.padding[1];
        p.dilationH = mAttrs.dilation[0];
        p.dilationW = mAttrs.dilation[1];
        p.group = mAttrs.group;
        p.deformableGroup = mAttrs.deformableGroup;
        p.withBias = nbInputs == kMAX_INPUTS ? 1 : 0;
        int32_t const dtype = toDcnDataType(inputs[kIN_X].desc.type);
        p.dtype = dtype >= 0 ? dtype : kDCN_FLOAT32;
        p.algo = kDCN_ALGO_AUTO;
        return dcnWorkspaceSize(&p);
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "getWorkspaceSize", e);
    }
    return 0;
}

// --- IPluginV3OneRuntime ---

DcnParams DcnPlugin::makeParams(Dims const* inDims, int32_t nbInputs, Dims const& outDims, DataType type) const
{
    std::pair<int64_t, int64_t> const hw = checkShapes(viewOf(inDims, nbInputs), mAttrs, true);
    DCN_VALIDATE(outDims.nbDims == 4, "the output must have rank 4, got rank " << outDims.nbDims);
    int64_t const expected[4] = {inDims[kIN_X].d[0], inDims[kIN_WEIGHT].d[0], hw.first, hw.second};
    for (int32_t k = 0; k < 4; ++k)
    {
        DCN_VALIDATE(outDims.d[k] == expected[k],
            "output dimension " << k << " is " << outDims.d[k] << ", expected " << expected[k]);
    }
    int32_t const dtype = toDcnDataType(type);
    DCN_VALIDATE(dtype >= 0, "type " << dataTypeName(type) << " is not supported (FLOAT, HALF, BF16)");
    DcnParams p{};
    p.n = inDims[kIN_X].d[0];
    p.c = inDims[kIN_X].d[1];
    p.h = inDims[kIN_X].d[2];
    p.w = inDims[kIN_X].d[3];
    p.cout = inDims[kIN_WEIGHT].d[0];
    p.ho = hw.first;
    p.wo = hw.second;
    DCN_VALIDATE(inDims[kIN_WEIGHT].d[2] <= INT32_MAX && inDims[kIN_WEIGHT].d[3] <= INT32_MAX,
        "kernel size " << inDims[kIN_WEIGHT].d[2] << "x" << inDims[kIN_WEIGHT].d[3] << " is too large");
    p.kh = static_cast<int32_t>(inDims[kIN_WEIGHT].d[2]);
    p.kw = static_cast<int32_t>(inDims[kIN_WEIGHT].d[3]);
    p.strideH = mAttrs.stride[0];
    p.strideW = mAttrs.stride[1];
    p.padH = mAttrs.padding[0];
    p.padW = mAttrs.padding[1];
    p.dilationH = mAttrs.dilation[0];
    p.dilationW = mAttrs.dilation[1];
    p.group = mAttrs.group;
    p.deformableGroup = mAttrs.deformableGroup;
    p.withBias = nbInputs == kMAX_INPUTS ? 1 : 0;
    p.dtype = dtype;
    p.algo = kDCN_ALGO_AUTO;
    p.reserved = 0;
    char message[512] = {0};
    DcnStatus const status = dcnValidate(&p, message, sizeof(message));
    DCN_VALIDATE(status == kDCN_SUCCESS, "the core rejected the problem (status " << status << "): " << message);
    return p;
}

int32_t DcnPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    try
    {
        DCN_VALIDATE(in != nullptr && out != nullptr, "null tensor descriptions");
        DCN_VALIDATE(nbOutputs == 1, "expected 1 output, got " << nbOutputs);
        DCN_VALIDATE(nbInputs == kMIN_INPUTS || nbInputs == kMAX_INPUTS,
            "expected 4 inputs (x, offset, mask, weight) or 5 (with bias), got " << nbInputs);
        Dims dims[kMAX_INPUTS];
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            dims[i] = in[i].dims;
            DCN_VALIDATE(in[i].type == in[kIN_X].type,
                "input '" << kINPUT_NAMES[i] << "' has type " << dataTypeName(in[i].type) << " but x has "
                          << dataTypeName(in[kIN_X].type) << "; all inputs must have the same type");
            DCN_VALIDATE(in[i].format == TensorFormat::kLINEAR,
                "input '" << kINPUT_NAMES[i] << "' has format " << static_cast<int32_t>(in[i].format)
                          << "; only kLINEAR is supported");
        }
        DCN_VALIDATE(out[0].type == in[kIN_X].type, "the output has type " << dataTypeName(out[0].type)
                                                                            << " but x has " << dataTypeName(in[kIN_X].type));
        makeParams(dims, nbInputs, out[0].dims, in[kIN_X].type);
        mNbInputs = nbInputs;
        return 0;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "onShapeChange", e);
    }
    return -1;
}

int32_t DcnPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    try
    {
        DCN_VALIDATE_CODE(mNbInputs == kMIN_INPUTS || mNbInputs == kMAX_INPUTS, ErrorCode::kINVALID_STATE,
            "enqueue before onShapeChange/configurePlugin: the number of inputs is not known");
        DCN_VALIDATE(inputDesc != nullptr && outputDesc != nullptr && inputs != nullptr && outputs != nullptr,
            "null tensor descriptions or pointers");
        Dims dims[kMAX_INPUTS];
        for (int32_t i = 0; i < mNbInputs; ++i)
        {
            dims[i] = inputDesc[i].dims;
            DCN_VALIDATE(inputDesc[i].type == inputDesc[kIN_X].type,
                "input '" << kINPUT_NAMES[i] << "' has type " << dataTypeName(inputDesc[i].type) << " but x has "
                          << dataTypeName(inputDesc[kIN_X].type));
        }
        DCN_VALIDATE(outputDesc[0].type == inputDesc[kIN_X].type,
            "the output has type " << dataTypeName(outputDesc[0].type) << " but x has "
                                   << dataTypeName(inputDesc[kIN_X].type));
        DcnParams const p = makeParams(dims, mNbInputs, outputDesc[0].dims, inputDesc[kIN_X].type);
        size_t const workspaceSize = dcnWorkspaceSize(&p);
        DCN_VALIDATE(workspaceSize == 0 || workspace != nullptr,
            "the core needs " << workspaceSize << " bytes of workspace but TensorRT passed none");
        char message[512] = {0};
        DcnStatus const status = dcnForward(&p, inputs[kIN_X], inputs[kIN_OFFSET], inputs[kIN_MASK],
            inputs[kIN_WEIGHT], mNbInputs == kMAX_INPUTS ? inputs[kIN_BIAS] : nullptr, outputs[0], workspace,
            workspaceSize, stream, message, sizeof(message));
        if (status != kDCN_SUCCESS)
        {
            ErrorCode const code = status == kDCN_CUDA_ERROR ? ErrorCode::kFAILED_EXECUTION
                                                              : status == kDCN_INVALID_ARGUMENT
                    ? ErrorCode::kINVALID_ARGUMENT
                    : ErrorCode::kUNSPECIFIED_ERROR;
            reportError(mRecorder, code,
                where("enqueue") + ": dcnForward failed (status " + std::to_string(static_cast<int32_t>(status))
                    + "): " + message);
            return static_cast<int32_t>(status);
        }
        return 0;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "enqueue", e);
    }
    return -1;
}

nvinfer1::IPluginV3* DcnPlugin::attachToContext(nvinfer1::IPluginResourceContext* context) noexcept
{
    try
    {
        auto* attached = new DcnPlugin(*this);
        attached->setErrorRecorder(context != nullptr ? context->getErrorRecorder() : nullptr);
        return attached;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "attachToContext", e);
    }
    return nullptr;
}

nvinfer1::PluginFieldCollection const* DcnPlugin::getFieldsToSerialize() noexcept
{
    try
    {
        buildSerializationFields();
        return &mSerialCollection;
    }
    catch (std::exception const& e)
    {
        reportException(mRecorder, mLayerName.c_str(), "getFieldsToSerialize", e);
    }
    return nullptr;
}

} // namespace trt
} // namespace dcnconvert
