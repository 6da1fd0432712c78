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

/* Workspace bytes of the channel-vectorised kernel for p (validated): the NHWC copies and the
 * partial sums of the most K splits p may use; 0 when the kernel does not apply. */
size_t workspaceBytes(DcnParams const& p);

/* The (tile, splits) forward would choose for p (validated) on a device with the given SM count,
 * opt-in shared memory per block and compute capability cc (splitCc: the major, or 10 x major +
 * minor), with `workspaceSize` bytes of workspace; kDCN_UNSUPPORTED (msg says why) when no fused
 * tile applies. No CUDA call. */
DcnStatus chooseFor(DcnParams const& p, int32_t sms, int32_t smemOptin, int32_t cc, size_t workspaceSize,
    int32_t& tile, int32_t& splits, int32_t& tailTiles, int32_t& tailSplits, char* msg, size_t msgLen);

/* Runs a fused kernel on p (already validated) with tile configuration `tile` and `splits` K
 * splits (with tailSplits > 1: no split on the first half of the pixel tiles, tailSplits on the
 * rest), or the preferred supported choice when tile < 0. Returns kDCN_UNSUPPORTED (msg says why)
 * when the problem, the tile, the split count, the workspace or the device is outside what the
 * kernels handle; the caller may then use the simple kernel. */
DcnStatus forward(DcnParams const& p, int32_t tile, int32_t splits, int32_t tailSplits, void const* x,
    void const* offset, void const* mask, void const* weight, void const* bias, void* out, void* workspace, size_t workspaceSize,
    cudaStream_t stream, char* msg, size_t msgLen);

/* dcnSetSplitReduce (dcnForward.h): kSplitReduceAuto, kSplitReduceKernel or kSplitReduceCluster
 * (dcnFusedLaunch.h). */
void setSplitReduceMode(int32_t mode);

/* x (channel-last, [n][h][w][c]) as NCHW into dst (n * c * h * w elements), on `stream`. */
DcnStatus toNchw(DcnParams const& p, void const* x, void* dst, cudaStream_t stream, char* msg, size_t msgLen);

/* The prepared weights of p (dcnPrepareWeights, dcnForward.h): their size, and their preparation
 * from the OIHW weights `weight` on `stream`. */
size_t preparedWeightsBytes(DcnParams const& p);
DcnStatus prepareWeights(DcnParams const& p, void const* weight, void* prepared, size_t size, cudaStream_t stream,
    char* msg, size_t msgLen);

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_H
