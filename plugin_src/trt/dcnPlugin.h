/*
 * dcnconvert: the ModulatedDeformConv2d TensorRT plugin (IPluginV3) and its creator.
 *
 * Thin glue: converts TensorRT tensor descriptors into DcnParams and calls the TensorRT-free core
 * (plugin_src/core/dcnForward.h). Identity and fields must agree with dcnconvert/schema.py; the
 * contract test (tests/test_plugin_contract.py) reads the constants and the field table below.
 */
#ifndef DCN_TRT_DCN_PLUGIN_H
#define DCN_TRT_DCN_PLUGIN_H

#include "NvInferRuntime.h"

#include "../core/dcnParams.h"
#include "dcnPluginQuant.h"
#include "dcnPluginWeights.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dcnconvert
{
namespace trt
{

// --- Identity (schema.py: PLUGIN_NAME, PLUGIN_VERSION, PLUGIN_NAMESPACE) ---
constexpr char const* kDCN_PLUGIN_NAME{"ModulatedDeformConv2d"};
constexpr char const* kDCN_PLUGIN_VERSION{"1"};
constexpr char const* kDCN_PLUGIN_NAMESPACE{"dcnconvert"};

// --- Fields (schema.py: PLUGIN_FIELDS, OPTIONAL_PLUGIN_FIELDS, WEIGHT_FIELDS, QUANT_FIELDS), in order ---
struct DcnFieldSpec
{
    char const* name;
    nvinfer1::PluginFieldType type; //!< kFLOAT32 rows take kFLOAT32, kFLOAT16 or kBF16 values
    int32_t length;                 //!< -1: as many as the other fields say (see below)
    bool required; //!< an optional field may be absent (its default applies)
    int32_t minimum; //!< smallest accepted value of every element
    int32_t maximum; //!< largest accepted value of every element
};

constexpr int32_t kDCN_NB_FIELDS{13};
constexpr DcnFieldSpec kDCN_FIELDS[kDCN_NB_FIELDS] = {
    {"stride", nvinfer1::PluginFieldType::kINT32, 2, true, 1, INT32_MAX},
    {"padding", nvinfer1::PluginFieldType::kINT32, 2, true, 0, INT32_MAX},
    {"dilation", nvinfer1::PluginFieldType::kINT32, 2, true, 1, INT32_MAX},
    {"group", nvinfer1::PluginFieldType::kINT32, 1, true, 1, INT32_MAX},
    {"deformable_group", nvinfer1::PluginFieldType::kINT32, 1, true, 1, INT32_MAX},
    // 1: FLOAT32 math may use TF32 (DcnParams.math = kDCN_MATH_TF32); 0 or absent: FP32-accurate.
    {"allow_tf32", nvinfer1::PluginFieldType::kINT32, 1, false, 0, 1},
    // Constant weights carried by the node (dcnPluginWeights.h): the OIHW weights, prod(weight_shape)
    // values; their shape [cout, c / group, kh, kw]; the bias, weight_shape[0] values (only with
    // weight). A node with them has the inputs x, offset and mask only.
    {"weight", nvinfer1::PluginFieldType::kFLOAT32, -1, false, 0, 0},
    {"weight_shape", nvinfer1::PluginFieldType::kINT32, 4, false, 1, INT32_MAX},
    {"bias", nvinfer1::PluginFieldType::kFLOAT32, -1, false, 0, 0},
    // A quantized node (dcnPluginQuant.h; embedded weights only): quant_type "int8" or "fp8e4m3" (a
    // NUL-terminated string), x_scale (1 value), weight_scale (weight_shape[0] values) and, for a
    // quantized output, output_scale (1 value); scales > 0 and finite. Its weight holds the quantized
    // values: INT8 data for int8, exact E4M3 values as FLOAT16 (or FLOAT32, BF16) data for fp8e4m3.
    {"quant_type", nvinfer1::PluginFieldType::kCHAR, -1, false, 0, 0},
    {"x_scale", nvinfer1::PluginFieldType::kFLOAT32, 1, false, 0, 0},
    {"weight_scale", nvinfer1::PluginFieldType::kFLOAT32, -1, false, 0, 0},
    {"output_scale", nvinfer1::PluginFieldType::kFLOAT32, 1, false, 0, 0},
};
constexpr int32_t kFIELD_WEIGHT{6};
constexpr int32_t kFIELD_WEIGHT_SHAPE{7};
constexpr int32_t kFIELD_BIAS{8};
constexpr int32_t kFIELD_QUANT_TYPE{9};
constexpr int32_t kFIELD_X_SCALE{10};
constexpr int32_t kFIELD_WEIGHT_SCALE{11};
constexpr int32_t kFIELD_OUTPUT_SCALE{12};

// --- Inputs (schema.py: INPUT_NAMES) ---
constexpr int32_t kIN_X{0};
constexpr int32_t kIN_OFFSET{1};
constexpr int32_t kIN_MASK{2};
constexpr int32_t kIN_WEIGHT{3};
constexpr int32_t kIN_BIAS{4};
constexpr int32_t kMIN_INPUTS{4};
constexpr int32_t kMAX_INPUTS{5};
constexpr int32_t kEMBEDDED_INPUTS{3}; //!< x, offset, mask: the weights (and bias) are fields
constexpr char const* kINPUT_NAMES[kMAX_INPUTS] = {"x", "offset", "mask", "weight", "bias"};

//! The plugin's attributes; pairs are (h, w) as in the ONNX node.
struct DcnAttributes
{
    int32_t stride[2]{1, 1};
    int32_t padding[2]{0, 0};
    int32_t dilation[2]{1, 1};
    int32_t group{1};
    int32_t deformableGroup{1};
    int32_t allowTf32{0}; //!< 0 or 1 (optional field allow_tf32)
    std::shared_ptr<EmbeddedWeights const> embedded; //!< the fields weight, weight_shape, bias; or null
    QuantAttributes quant; //!< quant_type, x_scale, output_scale (weight_scale is in `embedded`)
};

//! DcnParams.math for the attributes: kDCN_MATH_TF32 when allow_tf32 is 1, else kDCN_MATH_ACCURATE.
int32_t mathOf(DcnAttributes const& a) noexcept;

//! Parses and validates a field collection (createPlugin in either phase; dcnPluginFields.cpp). The
//! required fields must be present, an optional one may be absent; int32 and int64 are accepted;
//! messages name the field and the value. Throws DcnError.
DcnAttributes parseFields(nvinfer1::PluginFieldCollection const* fc);

/*
 * The quantization fields of a collection (dcnPluginQuant.cpp): `fields[k]` is the field of
 * kDCN_FIELDS[k] or null when absent; `a.embedded` as parsed. Fills a.quant and, for a quantized
 * node, the weights' codes and scales; checks that a float node has none of them and float weights.
 * Throws DcnError naming the field and the value.
 */
void parseQuantFields(nvinfer1::PluginField const* const (&fields)[kDCN_NB_FIELDS], DcnAttributes& a);

//! Sets DcnParams dtype, quant, outType, xScale and outScale for the attributes and the
//! configuration's types (checked); throws DcnError naming a type the node does not take.
void setTypeParams(DcnParams& p, DcnAttributes const& a, TensorTypes const& types);

//! Text of a DataType for messages ("FLOAT", "HALF", "BF16", ... or "DataType(<n>)").
char const* dataTypeName(nvinfer1::DataType type) noexcept;

class DcnPlugin final : public nvinfer1::IPluginV3,
                        public nvinfer1::IPluginV3OneCore,
                        public nvinfer1::IPluginV3OneBuild,
                        public nvinfer1::IPluginV3OneRuntime
{
public:
    DcnPlugin(std::string layerName, DcnAttributes const& attrs);
    DcnPlugin(DcnPlugin const& other);
    DcnPlugin& operator=(DcnPlugin const&) = delete;
    ~DcnPlugin() override;

    DcnAttributes const& attributes() const noexcept
    {
        return mAttrs;
    }

    // --- IPluginV3 methods ---
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
    nvinfer1::IPluginV3* clone() noexcept override;

    // --- IPluginV3OneCore methods ---
    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;

    // --- IPluginV3OneBuild methods ---
    int32_t getNbOutputs() const noexcept override;
    int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs, nvinfer1::DataType const* inputTypes,
        int32_t nbInputs) const noexcept override;
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const* shapeInputs,
        int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
        int32_t nbOutputs) noexcept override;
    int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;

    // --- IPluginV3OneRuntime methods ---
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs) noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

private:
    //! "ModulatedDeformConv2d 'layer': method" for messages.
    std::string where(char const* method) const;
    //! DcnParams from concrete dims and the types of x, offset and the output (validated by the
    //! core); throws DcnError.
    DcnParams makeParams(nvinfer1::Dims const* inDims, int32_t nbInputs, nvinfer1::Dims const& outDims,
        TensorTypes const& types) const;
    //! Throws DcnError unless the inputs' and output's types and formats are what the node takes
    //! (supportsFormatCombination); `method` names the caller in messages.
    void checkTypesAndFormats(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::PluginTensorDesc const& out) const;
    //! Warns once when TensorRT describes x or the output with a valid INT8 scale that differs
    //! from the node's x_scale or output_scale (which the plugin uses).
    void warnOnDescScales(nvinfer1::PluginTensorDesc const& x, nvinfer1::PluginTensorDesc const& out) noexcept;
    void setErrorRecorder(nvinfer1::IErrorRecorder* recorder) noexcept;
    void buildSerializationFields();
    //! The inputs' dims as the core sees them: x, offset, mask, weight[, bias], the last two from the
    //! embedded weights when the node carries them. Returns their count (4 or 5).
    int32_t logicalDims(nvinfer1::Dims const* in, int32_t nbInputs, nvinfer1::Dims (&out)[kMAX_INPUTS]) const;
    //! Whether x may have the channel-last format of `x` (supportsFormatCombination).
    bool channelLastOk(nvinfer1::PluginTensorDesc const& x) const noexcept;
    //! Throws DcnError unless nbInputs is what the node takes (3 with embedded weights, else 4 or 5).
    void checkInputCount(int32_t nbInputs) const;

    std::string mLayerName;
    DcnAttributes mAttrs;
    nvinfer1::IErrorRecorder* mRecorder{nullptr};
    int32_t mNbInputs{0}; //!< 3, 4 or 5 once configurePlugin/onShapeChange ran (enqueue has no count)
    int32_t mXLayout{kDCN_LAYOUT_NCHW}; //!< DcnLayout of x (its TensorFormat), from onShapeChange
    bool mScaleWarned{false};           //!< warnOnDescScales has warned (once per plugin object)
    std::shared_ptr<DeviceWeights> mDeviceWeights; //!< embedded weights on the device; shared by clones
    std::vector<nvinfer1::PluginField> mSerialFields;
    nvinfer1::PluginFieldCollection mSerialCollection{};
};

class DcnPluginCreator final : public nvinfer1::IPluginCreatorV3One
{
public:
    DcnPluginCreator();
    ~DcnPluginCreator() override = default;

    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override;
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept override;

private:
    std::vector<nvinfer1::PluginField> mFieldNames;
    nvinfer1::PluginFieldCollection mFieldCollection{};
};

//! The library's one creator instance (never destroyed, so a registry may keep pointing at it).
DcnPluginCreator& creatorInstance();

} // namespace trt
} // namespace dcnconvert

#endif // DCN_TRT_DCN_PLUGIN_H
