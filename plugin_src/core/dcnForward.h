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

/* A quantized layer's weight buffer (DcnParams.quant): the OIHW quantized weights, one byte each,
 * then cout FP32 weight scales from byte dcnQuantScalesOffset(p) (a multiple of 16);
 * dcnQuantWeightBytes(p) bytes in all. 0 for a float layer or invalid params. */
size_t dcnQuantScalesOffset(DcnParams const* p);
size_t dcnQuantWeightBytes(DcnParams const* p);

/* Workspace bytes forward needs for p (and for any problem no larger in any dimension). */
size_t dcnWorkspaceSize(DcnParams const* p);

/* Number of tile configurations of the fused kernel (kDCN_ALGO_FUSED_TILE + i, i < this). */
int32_t dcnFusedTileCount(void);

/* Kernels of the fused tile configurations (DcnTileInfo.kernel). */
typedef enum DcnTileKernel
{
    kDCN_TILE_NCHW = 0,  /* the NCHW kernel: any channel count */
    kDCN_TILE_REGS = 1,  /* channel-vectorised, weights through the producers' registers */
    kDCN_TILE_ASYNC = 2, /* channel-vectorised, weights by cp.async */
    kDCN_TILE_TMA = 3,   /* channel-vectorised, weights by the tensor memory accelerator (sm_90+) */
    kDCN_TILE_WGMMA = 4  /* channel-vectorised, warpgroup MMAs (sm_90a) */
} DcnTileKernel;

/* One tile configuration, for tests, benchmarks and tuning (dcnFusedTileInfo). */
typedef struct DcnTileInfo
{
    char name[32];        /* e.g. "tma-128x64-k64" */
    int32_t bm, bn, bk;   /* output channels x pixels per block; K chunk in channels */
    int32_t kernel;       /* DcnTileKernel */
    int32_t consumerWarps, producerWarps, stages;
    int32_t dtypes;       /* bit 1 << DcnDataType for each element type the tile takes */
    int32_t fp32Math;     /* bit 1 << DcnMath for each FP32 math mode it takes (0 without FP32) */
    int32_t minComputeCapability; /* 80 or 90 (x 10 + minor); the warpgroup tiles need 9.x exactly */
    int32_t splitsK;      /* 1: the tile may split K (kDCN_ALGO_SPLIT_STEP, split tails) */
} DcnTileInfo;

/* Fills *info for tile configuration `tile`; kDCN_INVALID_ARGUMENT outside [0, dcnFusedTileCount()). */
DcnStatus dcnFusedTileInfo(int32_t tile, DcnTileInfo* info);

/* 1 when this library can run fused tile configuration `tile` on a device of compute capability
 * major `ccMajor`: the tile's architecture (8.0+; the TMA tiles 9.0+, the warpgroup tiles 9.x
 * only) and the code this build holds for that device (the TMA tiles need its sm_90 SASS or PTX of
 * compute_90 or newer, the warpgroup tiles its sm_90a SASS); else 0. Host only, for tests and tools. */
int32_t dcnFusedTileRuns(int32_t tile, int32_t ccMajor);

/* The fused tile and K split count kDCN_ALGO_AUTO runs for p (validated here) on a device with
 * `sms` multiprocessors, `smemOptin` bytes of opt-in shared memory per block and compute capability
 * `cc`: its major alone (8 .. 12, minor 0) or 10 x major + minor (86, 89, 90, 120; FP8 layers on
 * warp MMAs need 8.9), with a workspace of dcnWorkspaceSize(p) bytes. Host only (no CUDA call): for
 * tuning and tests. kDCN_UNSUPPORTED (msg says why) when no fused tile takes p there; AUTO then
 * runs the simple kernel. */
DcnStatus dcnFusedChoice(DcnParams const* p, int32_t sms, int32_t smemOptin, int32_t cc, int32_t* tile,
    int32_t* splits, char* msg, size_t msgLen);

/* dcnFusedChoice with the split tail: where the choice has no K split and its blocks leave the
 * last wave partial, AUTO runs the last *tailTiles pixel tiles as a second launch with K split
 * *tailSplits ways (0 and 1: no split tail). */
DcnStatus dcnFusedSplitTail(DcnParams const* p, int32_t sms, int32_t smemOptin, int32_t cc, int32_t* tile,
    int32_t* splits, int32_t* tailTiles, int32_t* tailSplits, char* msg, size_t msgLen);

/* How the fused kernel adds up its K splits, for the whole process (tests and benchmarks): 0 (the
 * default) inside thread-block clusters where they fit (sm_90+: the tile's free shared memory holds
 * the slices it receives, and the device runs the clusters in no more waves than single blocks),
 * else by a reduction kernel; 1 always by the reduction kernel; 2 in clusters, and a split launch
 * that cannot use them fails with kDCN_UNSUPPORTED. kDCN_INVALID_ARGUMENT for other values. */
DcnStatus dcnSetSplitReduce(int32_t mode);

/* Bytes of the prepared weights of p (0 for invalid params): the weights in every layout the
 * kernels read for p's shapes, element type and math, made once by dcnPrepareWeights. A forward
 * with DcnParams.weightLayout = kDCN_WEIGHT_PREPARED takes that buffer as its weight pointer and
 * skips the per-call permutation (with xLayout = kDCN_LAYOUT_NHWC too, the whole prep pass). Any
 * batch and spatial size of the same layer shares one buffer. */
size_t dcnPreparedWeightsSize(DcnParams const* p);

/* Writes the prepared weights of p (weightLayout ignored) from the OIHW device weights `weight`
 * into `prepared` (size >= dcnPreparedWeightsSize(p) bytes) on `stream`. No host synchronisation. */
DcnStatus dcnPrepareWeights(DcnParams const* p, void const* weight, void* prepared, size_t size, cudaStream_t stream,
    char* msg, size_t msgLen);

/* dst[i] = src[i] for i < count, converted from DcnDataType srcType to dstType (round to nearest
 * even), on `stream`: device pointers. For weights held elsewhere in another type. */
DcnStatus dcnConvertElements(void const* src, int32_t srcType, void* dst, int32_t dstType, int64_t count,
    cudaStream_t stream, char* msg, size_t msgLen);

/* Runs the forward on `stream`. Device pointers; bias may be NULL when withBias == 0.
 * No host synchronisation, no allocation. Returns kDCN_SUCCESS or an error with msg filled. */
DcnStatus dcnForward(DcnParams const* p, void const* x, void const* offset, void const* mask,
    void const* weight, void const* bias, void* out, void* workspace, size_t workspaceSize,
    cudaStream_t stream, char* msg, size_t msgLen);

#ifdef __cplusplus
}
#endif

#endif /* DCN_FORWARD_H */
