/*
 * dcnconvert core: the Hopper (sm_90) pieces of the fused kernel's weight path: the tensor memory
 * accelerator (TMA) copies one weight tile per K chunk from global into shared memory and signals
 * an mbarrier with the bytes it wrote; the consumers wait on that mbarrier, and the producers of
 * these tiles only sample. The tile lands with the 128-byte swizzle (rows of 128 bytes; the
 * 16-byte unit u of row r sits at unit u ^ (r % 8)), which chunkMma undoes in its ldmatrix
 * addresses. Also the primitives of thread-block clusters (sm_90), which the split-K clusters and
 * the sample-sharing tile use. Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_TMA_CUH
#define DCN_FUSED_TMA_CUH

#include <cuda.h> // CUtensorMap (a plain 128-byte struct; no driver call is made from device code)
#include <stdint.h>

namespace dcn
{
namespace fused
{

/* The TMA helpers are empty below sm_90; the host never launches a TMA tile there
 * (unsupportedReason in dcnFusedChoice.cu). The mbarrier helpers (init, arrive, wait) are real from
 * sm_80 on: every channel-vectorised tile hands its stages over through mbarriers. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DCN_TMA_DEVICE 1
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DCN_MBAR_DEVICE 1
#endif

__device__ __forceinline__ void mbarInit(uint32_t bar, uint32_t count)
{
#ifdef DCN_MBAR_DEVICE
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#endif
}

/* Makes the initialised mbarriers visible to the async proxy (the TMA unit) before first use; the
 * block barrier after it orders them for the other threads (sm_80: that barrier alone). */
__device__ __forceinline__ void mbarInitFence()
{
#ifdef DCN_TMA_DEVICE
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* Orders this thread's earlier generic-proxy shared-memory accesses (the barrier that it passed
 * made the consumers' ldmatrix reads of the stage visible to it) before later TMA writes. */
__device__ __forceinline__ void fenceProxyAsync()
{
#ifdef DCN_TMA_DEVICE
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

/* This thread's arrival on `bar`, announcing `bytes` that an asynchronous copy will complete. */
__device__ __forceinline__ void mbarArriveExpectTx(uint32_t bar, uint32_t bytes)
{
#ifdef DCN_TMA_DEVICE
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

/* This thread's arrival on `bar` (release at CTA scope: its earlier memory accesses are visible to
 * a thread whose wait sees the phase complete). */
__device__ __forceinline__ void mbarArrive(uint32_t bar)
{
#ifdef DCN_MBAR_DEVICE
    asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.shared.b64 state, [%0];\n\t}" ::"r"(bar) : "memory");
#endif
}

/* Blocks until the phase of `bar` with the given parity has completed (acquire at CTA scope). sm_90
 * waits in try_wait (the hardware suspends the thread for a while); sm_80 polls test_wait. */
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity)
{
#if defined(DCN_TMA_DEVICE)
    asm volatile(
        "{\n\t"
        ".reg .pred done;\n"
        "DCN_MBAR_WAIT:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
        "@!done bra DCN_MBAR_WAIT;\n\t"
        "}" ::"r"(bar),
        "r"(parity)
        : "memory");
#elif defined(DCN_MBAR_DEVICE)
    asm volatile(
        "{\n\t"
        ".reg .pred done;\n"
        "DCN_MBAR_POLL:\n\t"
        "mbarrier.test_wait.parity.shared.b64 done, [%0], %1;\n\t"
        "@!done bra DCN_MBAR_POLL;\n\t"
        "}" ::"r"(bar),
        "r"(parity)
        : "memory");
#endif
}

/* The box of `map` at (c0 innermost, c1) into shared memory at `dst` (1024-byte aligned for the
 * 128-byte swizzle); completes `bytes` (the whole box, zero-filled past the tensor's end) on `bar`.
 * `map` is the address of a __grid_constant__ kernel parameter. */
__device__ __forceinline__ void tmaLoad2d(uint32_t dst, CUtensorMap const* map, int c0, int c1, uint32_t bar)
{
#ifdef DCN_TMA_DEVICE
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
#endif
}

/* An L2 hint (sm_90; no effect on results, a no-op below): the 128-byte line at p. L2 is the point
 * of coherence of global memory, so a line fetched while another kernel still writes it is never
 * stale. */
__device__ __forceinline__ void prefetchLineL2(void const* p)
{
#ifdef DCN_TMA_DEVICE
    asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<uint64_t>(p)));
#endif
}

/* Programmatic dependent launch (sm_90): the dependent kernel may start before this one ends
 * (trigger), and waits for it to complete and flush its memory where it reads its outputs (wait).
 * Both are no-ops when the launch did not ask for it, and below sm_90. */
__device__ __forceinline__ void gridDependencyTrigger()
{
#ifdef DCN_TMA_DEVICE
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void gridDependencyWait()
{
#ifdef DCN_TMA_DEVICE
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Thread-block clusters (sm_90): ranks, addresses in another block's shared memory, arrivals and
 * bulk copies there, and the cluster barrier. */
/* This block's rank in its cluster. */
__device__ __forceinline__ uint32_t clusterRank()
{
    uint32_t r = 0;
#ifdef DCN_TMA_DEVICE
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
    return r;
}

/* The shared::cluster address of this block's shared-memory address `local` in block `rank`. */
__device__ __forceinline__ uint32_t clusterAddr(uint32_t local, uint32_t rank)
{
    uint32_t remote = local;
#ifdef DCN_TMA_DEVICE
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
#endif
    return remote;
}

/* An arrival on an mbarrier of a block of the cluster (a shared::cluster address), with
 * mbarArrive's CTA-scope release: it orders this thread's reads of a stage (completed asynchronous
 * MMAs) before the other block's copies into it, as CUTLASS's cluster pipelines rely on. */
__device__ __forceinline__ void mbarArriveRemote(uint32_t addr)
{
#ifdef DCN_TMA_DEVICE
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(addr) : "memory");
#endif
}

/* mbarArriveExpectTx on an mbarrier of a block of the cluster. */
__device__ __forceinline__ void mbarArriveExpectTxRemote(uint32_t addr, uint32_t bytes)
{
#ifdef DCN_TMA_DEVICE
    asm volatile("mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%0], %1;" ::"r"(addr), "r"(bytes) : "memory");
#endif
}

/* `bytes` (a multiple of 16, both addresses 16-byte aligned) of this block's shared memory at `src`
 * into a block of the cluster at `dst` by the copy engine, completing them on that block's mbarrier
 * `bar` (shared::cluster addresses). The copy engine reads `src` through the async proxy: the
 * threads that wrote it fence their stores first (fenceProxyAsync). */
__device__ __forceinline__ void bulkCopyToCluster(uint32_t dst, uint32_t src, uint32_t bytes, uint32_t bar)
{
#ifdef DCN_TMA_DEVICE
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     dst),
        "r"(src), "r"(bytes), "r"(bar)
        : "memory");
#endif
}

/* Split cluster barrier (release / acquire) of the threads that have not exited (sm_90: the split-K
 * clusters, dcnFusedCluster.cuh, and the sample-sharing tile, dcnFusedPair.cuh). */
__device__ __forceinline__ void clusterArrive()
{
#ifdef DCN_TMA_DEVICE
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
#endif
}
/* The same arrival without ordering this thread's earlier memory accesses, for where no block reads
 * after its wait what this thread wrote before (mbarrier initialisation has its own fence,
 * mbarInitFence): it spares the GPU-wide memory barrier a release arrival costs each warp. */
__device__ __forceinline__ void clusterArriveRelaxed()
{
#ifdef DCN_TMA_DEVICE
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
#endif
}
__device__ __forceinline__ void clusterWait()
{
#ifdef DCN_TMA_DEVICE
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
#endif
}
__device__ __forceinline__ void clusterSync()
{
    clusterArrive();
    clusterWait();
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_TMA_CUH
