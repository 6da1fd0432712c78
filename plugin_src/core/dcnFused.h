/*
 * dcnconvert core: host side of the fused tensor-core kernel (dcnFused.cu), used by dcnForward.cu.
 * Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_H
#define DCN_FUSED_H

#include "dcnParams.h"

#include <cuda_runtime_api.h>

#include <stddef.h>
#include <stdint.h>

namespace dcn
{
namespace fused
{

/* Number of tile configurations (kDCN_ALGO_FUSED_TILE + i). */
int32_t tileCount();

/* Runs the fused kernel on p (already validated) with tile configuration `tile`, or the one the
 * cost model picks when tile < 0. Returns kDCN_UNSUPPORTED (msg says why) when the problem, the
 * tile or the device is outside what the kernel handles; the caller may then use the simple kernel. */
DcnStatus forward(DcnParams const& p, int32_t tile, void const* x, void const* offset, void const* mask,
    void const* weight, void const* bias, void* out, cudaStream_t stream, char* msg, size_t msgLen);

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_H
