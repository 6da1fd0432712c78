/*
 * dcnconvert, TensorRT-RTX build only (DCN_RUNTIME_TENSORRT_RTX): lets TensorRT-RTX's ONNX parser find
 * libtensorrt_rtx.so (rtxParserLink.cpp). The TensorRT builds compile none of it.
 */
#ifndef DCN_TRT_RTX_PARSER_LINK_H
#define DCN_TRT_RTX_PARSER_LINK_H

#if defined(DCN_RUNTIME_TENSORRT_RTX)

namespace dcnconvert
{
namespace trt
{

//! The forwarding object's file name; it lies in this library's folder (trt/plugin.mk installs it there).
constexpr char const kRTX_FORWARD_FILE[] = "libdcnconvert_rtx_forward.so";

//! Where libtensorrt_rtx.so.1 is loaded and no libtensorrt_rtx.so is, loads the forwarding object beside
//! this library (RTLD_NOW | RTLD_LOCAL, never unloaded). When it cannot, one line on stderr says so and
//! what else to do; it never throws.
void linkRtxForParser() noexcept;

} // namespace trt
} // namespace dcnconvert

#endif // DCN_RUNTIME_TENSORRT_RTX

#endif // DCN_TRT_RTX_PARSER_LINK_H
