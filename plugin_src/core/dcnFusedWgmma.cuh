/*
 * dcnconvert core: Hopper warpgroup MMAs (wgmma, sm_90a) for the fused kernel's consumers: four
 * consumer warps issue one asynchronous m64nNk16 MMA that reads both operands from shared memory
 * (no ldmatrix, no fragments in registers) and accumulates in FP32 registers. Both operands are
 * K-major tiles of 64 two-byte elements per 128-byte row, stored with the 128-byte swizzle (the
 * weight tile by TMA, the sample tile by the producers), stages 1024-byte aligned.
 * Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_WGMMA_CUH
#define DCN_FUSED_WGMMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdint.h>

namespace dcn
{
namespace fused
{

/* wgmma exists only in sm_90a code. An sm_90 device that runs code built without it (PTX JIT of
 * compute_90) traps instead of returning wrong sums; the host offers the wgmma tiles on compute
 * capability 9.x only, where the library's sm_90a SASS is what runs (plugin_src/Makefile). */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DCN_WGMMA_DEVICE 1
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DCN_WGMMA_MISSING() __trap()
#else
#define DCN_WGMMA_MISSING() ((void)0)
#endif

/* Shared-memory matrix descriptor of a K-major tile with the 128-byte swizzle: start address,
 * leading byte offset 16 (unused by this layout), stride 1024 bytes between 8-row groups. The
 * k-th 16-element step inside a row adds 32 bytes to the start. */
__device__ __forceinline__ uint64_t wgmmaDesc(uint32_t smemByteAddr)
{
    return static_cast<uint64_t>((smemByteAddr & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32)
        | (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmmaFence()
{
#ifdef DCN_WGMMA_DEVICE
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmmaCommit()
{
#ifdef DCN_WGMMA_DEVICE
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
/* Waits until at most N of the warpgroup's committed MMA groups are pending. */
template <int N>
__device__ __forceinline__ void wgmmaWait()
{
#ifdef DCN_WGMMA_DEVICE
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

/* Keeps the compiler from moving accumulator reads or writes across an asynchronous MMA. */
__device__ __forceinline__ void wgmmaFenceOperand(float& r)
{
    asm volatile("" : "+f"(r)::"memory");
}

/* d (N / 2 FP32 registers per thread, the m64nN accumulator fragment) += A (64 x 16) * B (16 x N),
 * both from shared memory. Defined for N = 64 (the warpgroup tile is 64 pixels wide). */
template <typename T, int N>
__device__ __forceinline__ void wgmmaAsync(float* d, uint64_t descA, uint64_t descB);

#ifdef DCN_WGMMA_DEVICE
#define DCN_WGMMA_M64N64K16(T, PTX_TYPE)                                                                \
    template <>                                                                                         \
    __device__ __forceinline__ void wgmmaAsync<T, 64>(float* d, uint64_t descA, uint64_t descB)         \
    {                                                                                                   \
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"                                 \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX_TYPE "." PTX_TYPE " "            \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, "                                                \
                     "%8, %9, %10, %11, %12, %13, %14, %15, "                                           \
                     "%16, %17, %18, %19, %20, %21, %22, %23, "                                         \
                     "%24, %25, %26, %27, %28, %29, %30, %31}, "                                        \
                     "%32, %33, p, 1, 1, 0, 0;\n\t}"                                                    \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),                                  \
                       "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),                                  \
                       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),                                \
                       "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),                              \
                       "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),                              \
                       "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),                              \
                       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),                              \
                       "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                               \
                     : "l"(descA), "l"(descB), "n"(1));                                                 \
    }
#else
#define DCN_WGMMA_M64N64K16(T, PTX_TYPE)                                                                \
    template <>                                                                                         \
    __device__ __forceinline__ void wgmmaAsync<T, 64>(float* d, uint64_t descA, uint64_t descB)         \
    {                                                                                                   \
        (void)d;                                                                                        \
        (void)descA;                                                                                    \
        (void)descB;                                                                                    \
        DCN_WGMMA_MISSING();                                                                            \
    }
#endif
DCN_WGMMA_M64N64K16(__half, "f16")
DCN_WGMMA_M64N64K16(__nv_bfloat16, "bf16")
#undef DCN_WGMMA_M64N64K16

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_WGMMA_CUH
