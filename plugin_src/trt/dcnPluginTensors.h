/*
 * dcnconvert TensorRT glue: what the plugin accepts as tensors. Shared by the build
 * (dcnPluginBuild.cpp) and runtime (dcnPluginRuntime.cpp) capabilities: the supported types, the
 * shape checks against the attributes, and the output-size expression for getOutputShapes.
 * Internal to the plugin library (not a TensorRT interface).
 */
#ifndef DCN_TRT_DCN_PLUGIN_TENSORS_H
#define DCN_TRT_DCN_PLUGIN_TENSORS_H

#include "dcnPlugin.h"

#include <cstdint>
#include <string>
#include <utility>

namespace dcnconvert
{
namespace trt
{

constexpr int64_t kUNKNOWN_DIM{-1};

//! DcnDataType for a TensorRT type, or -1 when the plugin does not support it.
int32_t toDcnDataType(nvinfer1::DataType type) noexcept;

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

/*
 * Checks everything about the input shapes that can be checked from the known dims, throws
 * DcnError naming the input and values. Returns the computed (ho, wo), kUNKNOWN_DIM where not
 * computable. When `complete` is true every dim must be known.
 */
std::pair<int64_t, int64_t> checkShapes(ShapeView const& s, DcnAttributes const& a, bool complete);

//! Throws DcnError unless both description arrays are given, there is 1 output and 3 to 5 inputs
//! (DcnPlugin::checkInputCount says which the node takes).
void checkIoCounts(void const* in, int32_t nbInputs, void const* out, int32_t nbOutputs);

//! The types of x, offset (x when there is no offset) and the output of a configuration.
TensorTypes typesOf(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const& out) noexcept;

//! ShapeView of concrete (or -1) dims of `nbInputs` inputs.
ShapeView viewOf(nvinfer1::Dims const* dims, int32_t nbInputs);

//! One line describing the DcnParams handed to the core (logged at kVERBOSE), e.g. "... math TF32".
std::string paramsText(DcnParams const& p);

/*
 * Output size expression: floor((in + 2p - d*(k-1) - 1) / s) + 1, folded to a constant when
 * `in` and `kernel` are constants (constantValue >= 0).
 */
nvinfer1::IDimensionExpr const* outputSizeExpr(nvinfer1::IExprBuilder& b, nvinfer1::IDimensionExpr const& in,
    nvinfer1::IDimensionExpr const& kernel, int32_t stride, int32_t pad, int32_t dilation, int64_t constantValue);

} // namespace trt
} // namespace dcnconvert

#endif // DCN_TRT_DCN_PLUGIN_TENSORS_H
