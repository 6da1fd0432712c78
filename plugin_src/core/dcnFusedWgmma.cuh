/*
 * dcnconvert core: Hopper warpgroup MMAs (wgmma, sm_90a) for the fused kernel's consumers: four
 * consumer warps issue one asynchronous m64nNk16 MMA that reads both operands from shared memory
 * (no ldmatrix, no fragments in registers) and accumulates in FP32 registers. Both operands are
 * K-major tiles of 128-byte rows (64 two-byte elements, or 32 FP32 ones read as TF32), stored with
 * the 128-byte swizzle (the weight tile by TMA, the sample tile by the producers), stages 1024-byte
 * aligned.
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

/* Register reallocation between warpgroups (sm_90a): the calling warpgroup's per-thread limit
 * drops to (Dec) or rises to (Inc) N; Inc waits until the block's pool has the registers. ptxas
 * allocates the code after each call within its N. */
template <int N>
__device__ __forceinline__ void setMaxRegsDec()
{
#ifdef DCN_WGMMA_DEVICE
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void setMaxRegsInc()
{
#ifdef DCN_WGMMA_DEVICE
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
#endif
}

/* Keeps the compiler from moving accumulator reads or writes across an asynchronous MMA. */
__device__ __forceinline__ void wgmmaFenceOperand(float& r)
{
    asm volatile("" : "+f"(r)::"memory");
}

/* d (N / 2 FP32 registers per thread, the m64nN accumulator fragment) += A (64 x 16) * B (16 x N),
 * both from shared memory. Defined for N = 64 and 128: the warpgroup tiles' pixel widths, or 128 output
 * channels on the swapped tiles. (m64n256 does not compile in a kernel launched with 96 registers per
 * thread: ptxas checks each instruction against the launch limit, not the setmaxnreg one.) */
template <typename T, int N>
__device__ __forceinline__ void wgmmaAsync(float* d, uint64_t descA, uint64_t descB);

#ifdef DCN_WGMMA_DEVICE
#define DCN_WGMMA_ACC8(i)                                                                           \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),     \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define DCN_WGMMA_M64N64K16(T, PTX_TYPE)                                                             \
    template <>                                                                                      \
    __device__ __forceinline__ void wgmmaAsync<T, 64>(float* d, uint64_t descA, uint64_t descB)      \
    {                                                                                                \
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"                              \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX_TYPE "." PTX_TYPE " "         \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, "                                             \
                     "%8, %9, %10, %11, %12, %13, %14, %15, "                                        \
                     "%16, %17, %18, %19, %20, %21, %22, %23, "                                      \
                     "%24, %25, %26, %27, %28, %29, %30, %31}, "                                     \
                     "%32, %33, p, 1, 1, 0, 0;\n\t}"                                                 \
                     : DCN_WGMMA_ACC8(0), DCN_WGMMA_ACC8(8), DCN_WGMMA_ACC8(16), DCN_WGMMA_ACC8(24)  \
                     : "l"(descA), "l"(descB), "n"(1));                                              \
    }
#define DCN_WGMMA_M64N128K16(T, PTX_TYPE)                                                              \
    template <>                                                                                        \
    __device__ __forceinline__ void wgmmaAsync<T, 128>(float* d, uint64_t descA, uint64_t descB)       \
    {                                                                                                  \
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t"                                \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX_TYPE "." PTX_TYPE " "          \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, "                                               \
                     "%8, %9, %10, %11, %12, %13, %14, %15, "                                          \
                     "%16, %17, %18, %19, %20, %21, %22, %23, "                                        \
                     "%24, %25, %26, %27, %28, %29, %30, %31, "                                        \
                     "%32, %33, %34, %35, %36, %37, %38, %39, "                                        \
                     "%40, %41, %42, %43, %44, %45, %46, %47, "                                        \
                     "%48, %49, %50, %51, %52, %53, %54, %55, "                                        \
                     "%56, %57, %58, %59, %60, %61, %62, %63}, "                                       \
                     "%64, %65, p, 1, 1, 0, 0;\n\t}"                                                   \
                     : DCN_WGMMA_ACC8(0), DCN_WGMMA_ACC8(8), DCN_WGMMA_ACC8(16), DCN_WGMMA_ACC8(24),   \
                       DCN_WGMMA_ACC8(32), DCN_WGMMA_ACC8(40), DCN_WGMMA_ACC8(48), DCN_WGMMA_ACC8(56)  \
                     : "l"(descA), "l"(descB), "n"(1));                                                \
    }
#else
#define DCN_WGMMA_M64N64K16(T, PTX_TYPE)                                                            \
    template <>                                                                                     \
    __device__ __forceinline__ void wgmmaAsync<T, 64>(float* d, uint64_t descA, uint64_t descB)     \
    {                                                                                               \
        (void)d;                                                                                    \
        (void)descA;                                                                                \
        (void)descB;                                                                                \
        DCN_WGMMA_MISSING();                                                                        \
    }
#define DCN_WGMMA_M64N128K16(T, PTX_TYPE)                                                           \
    template <>                                                                                     \
    __device__ __forceinline__ void wgmmaAsync<T, 128>(float* d, uint64_t descA, uint64_t descB)    \
    {                                                                                               \
        (void)d;                                                                                    \
        (void)descA;                                                                                \
        (void)descB;                                                                                \
        DCN_WGMMA_MISSING();                                                                        \
    }
#endif
DCN_WGMMA_M64N64K16(__half, "f16")
DCN_WGMMA_M64N64K16(__nv_bfloat16, "bf16")
DCN_WGMMA_M64N128K16(__half, "f16")
DCN_WGMMA_M64N128K16(__nv_bfloat16, "bf16")
#undef DCN_WGMMA_M64N64K16
#undef DCN_WGMMA_M64N128K16

/* TF32 (the FP32 warpgroup tiles): d = (accumulate ? d : 0) + A (64 x 8) * B (8 x N), both K-major
 * FP32 tiles in shared memory laid out as above (a k8 step is again 32 bytes of a 128-byte row);
 * the MMA reads the TF32 bits of each element, so the operands are stored already rounded (or split
 * into TF32 parts for 3xTF32). accumulate = 0 starts a fresh sum without clearing registers. */
template <int N>
__device__ __forceinline__ void wgmmaTf32(float* d, uint64_t descA, uint64_t descB, int accumulate);

#ifdef DCN_WGMMA_DEVICE
template <>
__device__ __forceinline__ void wgmmaTf32<64>(float* d, uint64_t descA, uint64_t descB, int accumulate)
{
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, "
                 "%8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, "
                 "%24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1;\n\t}"
                 : DCN_WGMMA_ACC8(0), DCN_WGMMA_ACC8(8), DCN_WGMMA_ACC8(16), DCN_WGMMA_ACC8(24)
                 : "l"(descA), "l"(descB), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmmaTf32<128>(float* d, uint64_t descA, uint64_t descB, int accumulate)
{
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, "
                 "%8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, "
                 "%24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, "
                 "%40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, "
                 "%56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1;\n\t}"
                 : DCN_WGMMA_ACC8(0), DCN_WGMMA_ACC8(8), DCN_WGMMA_ACC8(16), DCN_WGMMA_ACC8(24),
                   DCN_WGMMA_ACC8(32), DCN_WGMMA_ACC8(40), DCN_WGMMA_ACC8(48), DCN_WGMMA_ACC8(56)
                 : "l"(descA), "l"(descB), "r"(accumulate));
}
#else
template <int N>
__device__ __forceinline__ void wgmmaTf32(float* d, uint64_t descA, uint64_t descB, int accumulate)
{
    (void)d;
    (void)descA;
    (void)descB;
    (void)accumulate;
    DCN_WGMMA_MISSING();
}
#endif
/* The FP32 tiles' TF32 product in the form the 2-byte types use (accumulating). */
template <>
__device__ __forceinline__ void wgmmaAsync<float, 64>(float* d, uint64_t descA, uint64_t descB)
{
    wgmmaTf32<64>(d, descA, descB, 1);
}
template <>
__device__ __forceinline__ void wgmmaAsync<float, 128>(float* d, uint64_t descA, uint64_t descB)
{
    wgmmaTf32<128>(d, descA, descB, 1);
}
#ifdef DCN_WGMMA_ACC8
#undef DCN_WGMMA_ACC8
#endif

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_WGMMA_CUH
