/*
 * dcnconvert core: launch helpers of the fused kernels' host side (dcnFused.cu): the one-time
 * kernel configuration per device, cudaLaunchKernelEx with programmatic dependent launch, and the
 * launch status. Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_LAUNCH_H
#define DCN_FUSED_LAUNCH_H

#include "dcnFusedTiles.h"
#include "dcnInternal.h"

#include <cuda_runtime.h>

#include <atomic>
#include <stdint.h>

namespace dcn
{
namespace fused
{

constexpr int kMaxDevices = 64;

/* Once per kernel and device: the dynamic shared-memory limit raised to the opt-in maximum and,
 * for tiles that split registers between warpgroups (minRegs > 0), the kernel's launch register
 * count checked: the consumers' setmaxnreg.inc waits for registers the producers gave up, so a
 * block launched with fewer per thread than the split assumes would wait forever. */
template <class K>
DcnStatus configureKernel(K kernel, Device const& d, std::atomic<uint64_t>& configured, int tile, int minRegs,
    char* msg, size_t msgLen)
{
    uint64_t const bit = uint64_t{1} << (d.id % kMaxDevices);
    if ((configured.load(std::memory_order_acquire) & bit) != 0)
        return kDCN_SUCCESS;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, d.smemOptin);
    cudaFuncAttributes attr{};
    if (err == cudaSuccess && minRegs > 0)
        err = cudaFuncGetAttributes(&attr, kernel);
    if (err != cudaSuccess)
    {
        dcn::detail::setMsg(msg, msgLen, "fused kernel: configuring tile %s failed: %s (%s)", kTileNames[tile],
            cudaGetErrorName(err), cudaGetErrorString(err));
        return kDCN_CUDA_ERROR;
    }
    if (minRegs > 0 && attr.numRegs < minRegs)
    {
        dcn::detail::setMsg(msg, msgLen,
            "fused kernel: tile %s was built with %d registers per thread, its register split needs %d",
            kTileNames[tile], attr.numRegs, minRegs);
        return kDCN_UNSUPPORTED;
    }
    configured.fetch_or(bit, std::memory_order_acq_rel);
    return kDCN_SUCCESS;
}

/* The status of the launch just made: launchErr (what cudaLaunchKernelEx returned) or, for <<<>>>
 * launches, the last error; either way the last error is cleared. */
inline DcnStatus launchError(
    char const* what, DcnParams const& p, int tile, char* msg, size_t msgLen, cudaError_t launchErr = cudaSuccess)
{
    cudaError_t const last = cudaGetLastError();
    cudaError_t const err = launchErr != cudaSuccess ? launchErr : last;
    if (err == cudaSuccess)
        return kDCN_SUCCESS;
    dcn::detail::setMsg(msg, msgLen, "launch of the %s (%s, tile %s) failed: %s (%s)", what,
        dcn::detail::dtypeName(p.dtype), kTileNames[tile], cudaGetErrorName(err), cudaGetErrorString(err));
    return kDCN_CUDA_ERROR;
}

/* Launch on `stream`; with pdl, as a programmatic dependent launch (sm_90: the kernel may start
 * while the previous one finishes, and waits for it with griddepcontrol.wait where it reads its
 * outputs; dcnFusedTma.cuh). */
template <typename... KArgs, typename... Args>
cudaError_t launchEx(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
    Args... args)
{
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

/* launchEx as thread-block clusters of `cluster` blocks (sm_90; each grid dimension a multiple of
 * the cluster's). */
template <typename... KArgs, typename... Args>
cudaError_t launchClusterEx(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
    cudaStream_t stream, dim3 cluster, Args... args)
{
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster.x;
    attr[0].val.clusterDim.y = cluster.y;
    attr[0].val.clusterDim.z = cluster.z;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

/* Occupancy of `func` launched with `threads` threads and `smem` bytes on the current device (id
 * `dev`): blocks per SM, and how many clusters of clusterZ blocks along z can run at once (the
 * occupancy calculator knows the GPC granularity a cluster of one-block-per-SM blocks is placed at).
 * Asked once per kernel, size and device, then cached (dcnFused.cu). False on a query error, which is
 * cleared. Nothing touches a stream, so this is safe under capture. */
bool clusterOccupancy(void const* func, int dev, int threads, size_t smem, unsigned clusterZ, int& perSm, int& clusters);

/* Whether adding up the K splits of `blocks` blocks inside clusters of clusterZ (clusterReduceTile)
 * is expected to beat the reduction kernel. The reduction kernel spreads the sums over the whole
 * GPU; inside clusters they run on the launch's own SMs, after a cluster barrier and the copies.
 * Measured on an H200 (docs/benchmarks.md), clusters paid only with 2 splits and a launch that fills
 * most of the GPU in one wave (R50-c4, DBNet-c5, OCD-l3: 116-132 blocks, 4-9% less time per call);
 * with 3 to 8 splits, fewer blocks or more than one wave they cost up to 36% more. Part of that is
 * placement: a cluster must fit in one GPC, and an H100 holds at most 120 one-block-per-SM blocks in
 * clusters of 4 or 8 (bench/cluster_capacity.cu), so a launch of 128 runs its last clusters as a
 * second wave (2x the call; probes of commit 8bd41cf); where they fit, 3-4 splits were still
 * 4-9% slower than the reduction kernel. Hence: 2 splits,
 * one wave of single blocks covering at least three quarters of the device's block slots, and every
 * cluster running at once. `force` (kSplitReduceCluster, tests): whenever the clusters can run. */
inline bool clustersPay(void const* func, Device const& d, dim3 grid, int threads, size_t smem, unsigned clusterZ, bool force)
{
    if (!force && clusterZ != 2)
        return false;
    int perSm = 0;
    int clusters = 0;
    if (!clusterOccupancy(func, d.id, threads, smem, clusterZ, perSm, clusters) || clusters <= 0)
        return false;
    if (force)
        return true;
    int64_t const blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
    int64_t const slots = int64_t{perSm} * d.sms;
    return blocks <= slots && 4 * blocks >= 3 * slots && int64_t{clusters} * clusterZ >= blocks;
}

/* How K splits are added up (dcnSetSplitReduce, dcnForward.h): kSplitReduceAuto uses thread-block
 * clusters where they pay (clustersPay, sm_90+) and the reduction kernel elsewhere;
 * kSplitReduceKernel always the reduction kernel; kSplitReduceCluster clusters or
 * kDCN_UNSUPPORTED (tests). */
constexpr int32_t kSplitReduceAuto = 0;
constexpr int32_t kSplitReduceKernel = 1;
constexpr int32_t kSplitReduceCluster = 2;
int32_t splitReduceMode();

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_LAUNCH_H
