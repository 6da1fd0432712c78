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

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_LAUNCH_H
