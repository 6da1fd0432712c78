/*
 * dcnconvert core API: no TensorRT include. Used by the IPluginV3 glue (plugin_src/trt), by the
 * tests and benchmarks through ctypes (dcnconvert/_core_ctypes.py): these functions are the C entry point.
 */
#ifndef DCN_FORWARD_H
#define DCN_FORWARD_H

#include "dcnParams.h"

#include <cuda_runtime_api.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Output spatial size from the input size and attributes; -1 when the result would be < 1. */
int64_t dcnOutputSize(int64_t in, int32_t kernel, int32_t stride, int32_t pad, int32_t dilation);

/* Checks every field of p (ranges, divisibility, ho/wo against the computed size).
 * On failure writes a message naming the field and value into msg (if msg && msgLen > 0). */
DcnStatus dcnValidate(DcnParams const* p, char* msg, size_t msgLen);

/* Workspace bytes forward needs for p (and for any problem no larger in any dimension). */
size_t dcnWorkspaceSize(DcnParams const* p);

/* Number of tile configurations of the fused kernel (kDCN_ALGO_FUSED_TILE + i, i < this). */
int32_t dcnFusedTileCount(void);

/* The fused tile and K split count kDCN_ALGO_AUTO runs for p (validated here) on a device with
 * `sms` multiprocessors, `smemOptin` bytes of opt-in shared memory per block and compute capability
 * major `ccMajor`, with a workspace of dcnWorkspaceSize(p) bytes. Host only (no CUDA call): for
 * tuning and tests. kDCN_UNSUPPORTED (msg says why) when no fused tile takes p there; AUTO then
 * runs the simple kernel. */
DcnStatus dcnFusedChoice(DcnParams const* p, int32_t sms, int32_t smemOptin, int32_t ccMajor, int32_t* tile,
    int32_t* splits, char* msg, size_t msgLen);

/* dcnFusedChoice with the split tail: where the choice has no K split and its blocks leave the
 * last wave partial, AUTO runs the last *tailTiles pixel tiles as a second launch with K split
 * *tailSplits ways (0 and 1: no split tail). */
DcnStatus dcnFusedSplitTail(DcnParams const* p, int32_t sms, int32_t smemOptin, int32_t ccMajor, int32_t* tile,
    int32_t* splits, int32_t* tailTiles, int32_t* tailSplits, char* msg, size_t msgLen);

/* Runs the forward on `stream`. Device pointers; bias may be NULL when withBias == 0.
 * No host synchronisation, no allocation. Returns kDCN_SUCCESS or an error with msg filled. */
DcnStatus dcnForward(DcnParams const* p, void const* x, void const* offset, void const* mask,
    void const* weight, void const* bias, void* out, void* workspace, size_t workspaceSize,
    cudaStream_t stream, char* msg, size_t msgLen);

#ifdef __cplusplus
}
#endif

#endif /* DCN_FORWARD_H */
