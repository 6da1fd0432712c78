/*
 * dcnconvert TensorRT glue: quantized nodes (the fields quant_type, x_scale, weight_scale and
 * output_scale; schema.py QUANT_FIELDS). Internal to the plugin library.
 *
 * A quantized node carries its weights (the fields weight, weight_shape[, bias]) as quantized values
 * with one FP32 scale per output channel, and takes x quantized (INT8 for "int8", FP8 for "fp8e4m3")
 * with the per-tensor scale x_scale; offset, mask and bias stay float. Its output has the offset's
 * float type, or the quantized type with output_scale. The fields are the source of truth for the
 * scales: TensorRT 10 may also describe an INT8 tensor's scale (PluginTensorDesc::scale, "only valid
 * when data type is DataType::kINT8", -1 otherwise); the plugin compares and warns when the two
 * differ, and always runs with the fields (what the rewritten graph and `verify`'s reference hold).
 * TensorRT 11 and TensorRT-RTX, strongly typed, give no scale there.
 */
#ifndef DCN_TRT_DCN_PLUGIN_QUANT_H
#define DCN_TRT_DCN_PLUGIN_QUANT_H

#include "NvInferRuntime.h"

#include "../core/dcnParams.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dcnconvert
{
namespace trt
{

//! The quantization of a node: kDCN_QUANT_NONE for a float node (the other members unused).
struct QuantAttributes
{
    int32_t quant{kDCN_QUANT_NONE}; //!< DcnQuant, from quant_type
    float xScale{0.F};               //!< x_scale
    bool hasOutputScale{false};      //!< output_scale given: the output is quantized
    float outputScale{0.F};          //!< output_scale
};

//! The element types of one configuration: x, the float inputs (offset, mask; and bias, weight of a
//! float node) and the output. A float node has one type for all three.
struct TensorTypes
{
    nvinfer1::DataType x;
    nvinfer1::DataType floating;
    nvinfer1::DataType out;
};

//! quant_type's text for a DcnQuant ("int8", "fp8e4m3"), or "none".
char const* quantTypeName(int32_t quant) noexcept;

//! The TensorRT type of x (and of a quantized output) for a DcnQuant: kINT8 or kFP8.
nvinfer1::DataType quantDataType(int32_t quant) noexcept;

//! The DcnDataType of the quantized values for a DcnQuant: kDCN_INT8 or kDCN_FP8E4M3.
int32_t quantDcnType(int32_t quant) noexcept;

//! DcnQuant of a quant_type field's text (a trailing NUL optional); throws DcnError naming the value.
int32_t parseQuantType(nvinfer1::PluginField const& field);

//! One float scale field (kFLOAT32, `count` values, each > 0 and finite); throws DcnError naming the
//! field, the index and the value.
std::vector<float> readScales(nvinfer1::PluginField const& field, int32_t count);

/*
 * The one-byte codes of a quantized node's weights from the weight field's elements (`type`,
 * `count` values at `data`): INT8 data as given, or float data (FLOAT32, FLOAT16, BF16) each of
 * whose values the quantized type holds exactly (INT8: integers in [-128, 127]; FP8: E4M3FN values,
 * |v| <= 448). Throws DcnError naming the field, the index and the first value it cannot hold.
 */
std::vector<uint8_t> quantCodes(nvinfer1::PluginFieldType type, void const* data, int64_t count, int32_t quant);

//! The E4M3FN value of an FP8 code (NaN for 0x7F/0xFF); for tests and messages.
double fp8Value(uint8_t code);

} // namespace trt
} // namespace dcnconvert

#endif // DCN_TRT_DCN_PLUGIN_QUANT_H
