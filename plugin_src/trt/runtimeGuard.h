/*
 * dcnconvert: which TensorRT runtime this library was built for, and finding that runtime's plugin
 * registry in the process (runtimeGuard.cpp).
 *
 * A library is built for one runtime: TensorRT of the headers' major version, or, compiled with
 * DCN_RUNTIME_TENSORRT_RTX against TensorRT 11's headers, TensorRT-RTX 1.5 and newer 1.x (whose plugin
 * registry, ILogger and ILoggerFinder have TensorRT 11's layout; TensorRT-RTX 1.4 had TensorRT 10's).
 * The objects a runtime hands to a plugin library are called through the headers' virtual tables,
 * so the library never calls through those of a runtime it was not built for.
 */
#ifndef DCN_TRT_RUNTIME_GUARD_H
#define DCN_TRT_RUNTIME_GUARD_H

#include "NvInferRuntime.h"

namespace dcnconvert
{
namespace trt
{

//! The plugin registry of a loaded runtime this library was built for, or null when none is loaded.
nvinfer1::IPluginRegistry* findPluginRegistry();

//! True when TensorRT-family runtimes are loaded but none this library was built for; the first time,
//! one line on stderr says which library was built for what, what is loaded, and how to get the right
//! library. False when a matching runtime is loaded, or none at all (a test harness).
bool refuseForeignRuntime();

} // namespace trt
} // namespace dcnconvert

#endif // DCN_TRT_RUNTIME_GUARD_H
