/*
 * dcnconvert TensorRT glue: constant weights carried by the plugin (the optional fields weight,
 * weight_shape and bias) and their device copies, prepared once per device and element type for
 * the core (dcnPrepareWeights) and shared by every clone of a plugin. Internal to the plugin library.
 */
#ifndef DCN_TRT_DCN_PLUGIN_WEIGHTS_H
#define DCN_TRT_DCN_PLUGIN_WEIGHTS_H

#include "NvInferRuntime.h"

#include "../core/dcnParams.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace dcnconvert
{
namespace trt
{

//! One tensor of a field: its elements as given (type kFLOAT32, kFLOAT16 or kBF16; kINT8 for the
//! weights of an int8 node).
struct FieldTensor
{
    nvinfer1::PluginFieldType type{nvinfer1::PluginFieldType::kFLOAT32};
    int64_t count{0};
    std::vector<uint8_t> bytes;
};

//! The weights of a node that carries them: OIHW weights [shape[0], shape[1], shape[2], shape[3]]
//! and, with hasBias, a bias of shape[0] elements. For a quantized node (dcnPluginQuant.h) `weight`
//! is the field as given (serialized as such), `codes` its one-byte quantized values and
//! `weightScale` the shape[0] scales of the field weight_scale.
struct EmbeddedWeights
{
    int32_t shape[4]{0, 0, 0, 0};
    FieldTensor weight;
    bool hasBias{false};
    FieldTensor bias;
    std::vector<uint8_t> codes;
    std::vector<float> weightScale;
};

//! The buffer dcnPrepareWeights takes for a quantized p (DcnParams.quant): the codes of `host`, then
//! its weight scales at dcnQuantScalesOffset(p); dcnQuantWeightBytes(p) bytes. Throws DcnError.
std::vector<uint8_t> packQuantWeights(DcnParams const& p, EmbeddedWeights const& host);

//! DcnDataType of a float field type, or -1.
int32_t dcnTypeOfField(nvinfer1::PluginFieldType type) noexcept;

/*
 * The device copies of one node's embedded weights: per (device, element type, math, quant), the
 * prepared weights (of a quantized node: from the packed codes and scales, dcnQuantWeightBytes)
 * and the bias, made on first use with a private stream that is synchronised
 * (onShapeChange, before any enqueue), freed with the last plugin that shares them.
 */
class DeviceWeights
{
public:
    explicit DeviceWeights(std::shared_ptr<EmbeddedWeights const> host);
    DeviceWeights(DeviceWeights const&) = delete;
    DeviceWeights& operator=(DeviceWeights const&) = delete;
    ~DeviceWeights();

    struct View
    {
        void const* weight{nullptr}; //!< dcnPrepareWeights' buffer for p (weightLayout PREPARED)
        void const* bias{nullptr};   //!< nullptr without a bias
    };

    //! The copies for p (its dtype, math, quant and shapes) on the current device; throws DcnError.
    View get(DcnParams const& p);

private:
    struct Entry
    {
        int32_t device;
        int32_t dtype;
        int32_t math;
        int32_t quant;
        void* prepared;
        void* bias;
    };
    Entry make(DcnParams const& p, int32_t device) const;

    std::shared_ptr<EmbeddedWeights const> mHost;
    std::mutex mMutex;
    std::vector<Entry> mEntries;
};

} // namespace trt
} // namespace dcnconvert

#endif // DCN_TRT_DCN_PLUGIN_WEIGHTS_H
