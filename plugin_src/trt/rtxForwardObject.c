/*
 * dcnconvert: libdcnconvert_rtx_forward.so, the forwarding object that ships beside the TensorRT-RTX
 * plugin library (built by trt/plugin.mk for PLUGIN_RUNTIME=tensorrt-rtx only).
 *
 * Its code is nothing; what matters is its dynamic section: soname libtensorrt_rtx.so and a DT_NEEDED
 * entry libtensorrt_rtx.so.1. The plugin library loads it (trt/rtxParserLink.cpp) into a process whose
 * libtensorrt_rtx.so.1 is loaded. From then on the dynamic loader answers TensorRT-RTX's ONNX parser,
 * which asks for the unversioned libtensorrt_rtx.so, with this object (a loaded object whose soname
 * matches), and a symbol looked up through that handle is searched in its dependencies too, which is the
 * real libtensorrt_rtx.so.1 already in the process. It is linked against a stub with that soname, so the
 * build needs no TensorRT-RTX.
 */

/* What this file is, for `strings`; also keeps the translation unit non-empty. */
__attribute__((visibility("default"))) char const dcnconvert_rtx_forward[] =
    "dcnconvert forwarding object: soname libtensorrt_rtx.so, needs libtensorrt_rtx.so.1";
