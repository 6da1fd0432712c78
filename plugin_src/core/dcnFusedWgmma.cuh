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
#include <cuda_fp8.h>

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

/* 8-bit operands (quantized layers): d (64 registers per thread, the m64n128 accumulator fragment)
 * += A (64 x 32) * B (32 x 128), both K-major from shared memory as above (a k32 step is 32 bytes of
 * a 128-byte row). INT8 sums in INT32 registers (d holds their bits: exact for any K the layers
 * have). FP8 E4M3 (wgmmaE4m3): d = (accumulate ? d : 0) + A * B in the tensor cores' FP8 sums, which
 * the consumers start afresh every one to four chunks (fp8RunChunks); wgmmaE4m3N64 and
 * wgmmaE4m3N32 are its m64n64 and m64n32 forms (64 weight rows x 64 or 32 pixels: the tiles that are
 * not swapped, fp8SliceMmas). */
#ifdef DCN_WGMMA_DEVICE
template <>
__device__ __forceinline__ void wgmmaAsync<int8_t, 128>(float* d, uint64_t descA, uint64_t descB)
{
    uint32_t* const r = reinterpret_cast<uint32_t*>(d);
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p;\n\t}"
                 : "+r"(r[0]), "+r"(r[1]), "+r"(r[2]), "+r"(r[3]), "+r"(r[4]), "+r"(r[5]), "+r"(r[6]), "+r"(r[7]), "+r"(r[8]), "+r"(r[9]), "+r"(r[10]), "+r"(r[11]), "+r"(r[12]), "+r"(r[13]), "+r"(r[14]), "+r"(r[15]), "+r"(r[16]), "+r"(r[17]), "+r"(r[18]), "+r"(r[19]), "+r"(r[20]), "+r"(r[21]), "+r"(r[22]), "+r"(r[23]), "+r"(r[24]), "+r"(r[25]), "+r"(r[26]), "+r"(r[27]), "+r"(r[28]), "+r"(r[29]), "+r"(r[30]), "+r"(r[31]), "+r"(r[32]), "+r"(r[33]), "+r"(r[34]), "+r"(r[35]), "+r"(r[36]), "+r"(r[37]), "+r"(r[38]), "+r"(r[39]), "+r"(r[40]), "+r"(r[41]), "+r"(r[42]), "+r"(r[43]), "+r"(r[44]), "+r"(r[45]), "+r"(r[46]), "+r"(r[47]), "+r"(r[48]), "+r"(r[49]), "+r"(r[50]), "+r"(r[51]), "+r"(r[52]), "+r"(r[53]), "+r"(r[54]), "+r"(r[55]), "+r"(r[56]), "+r"(r[57]), "+r"(r[58]), "+r"(r[59]), "+r"(r[60]), "+r"(r[61]), "+r"(r[62]), "+r"(r[63])
                 : "l"(descA), "l"(descB), "n"(1));
}
__device__ __forceinline__ void wgmmaE4m3(float* d, uint64_t descA, uint64_t descB, int accumulate)
{
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1;\n\t}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(descA), "l"(descB), "r"(accumulate));
}
/* The same for one m64n64 slice (32 registers per thread). */
__device__ __forceinline__ void wgmmaE4m3N64(float* d, uint64_t descA, uint64_t descB, int accumulate)
{
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, "
                 "%8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, "
                 "%24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1;\n\t}"
                 : DCN_WGMMA_ACC8(0), DCN_WGMMA_ACC8(8), DCN_WGMMA_ACC8(16), DCN_WGMMA_ACC8(24)
                 : "l"(descA), "l"(descB), "r"(accumulate));
}
/* The same for one m64n32 slice (16 registers per thread). */
__device__ __forceinline__ void wgmmaE4m3N32(float* d, uint64_t descA, uint64_t descB, int accumulate)
{
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %18, 0;\n\t"
                 "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, "
                 "%8, %9, %10, %11, %12, %13, %14, %15}, "
                 "%16, %17, p, 1, 1;\n\t}"
                 : DCN_WGMMA_ACC8(0), DCN_WGMMA_ACC8(8)
                 : "l"(descA), "l"(descB), "r"(accumulate));
}
#else
template <>
__device__ __forceinline__ void wgmmaAsync<int8_t, 128>(float* d, uint64_t descA, uint64_t descB)
{
    (void)d;
    (void)descA;
    (void)descB;
    DCN_WGMMA_MISSING();
}
__device__ __forceinline__ void wgmmaE4m3(float* d, uint64_t descA, uint64_t descB, int accumulate)
{
    (void)d;
    (void)descA;
    (void)descB;
    (void)accumulate;
    DCN_WGMMA_MISSING();
}
__device__ __forceinline__ void wgmmaE4m3N64(float* d, uint64_t descA, uint64_t descB, int accumulate)
{
    (void)d;
    (void)descA;
    (void)descB;
    (void)accumulate;
    DCN_WGMMA_MISSING();
}
__device__ __forceinline__ void wgmmaE4m3N32(float* d, uint64_t descA, uint64_t descB, int accumulate)
{
    (void)d;
    (void)descA;
    (void)descB;
    (void)accumulate;
    DCN_WGMMA_MISSING();
}
#endif

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

/* The FP8 slice of a warpgroup tile's chunk (wgmmaFp8Chunk): on swapped tiles a warpgroup's 128
 * output channels, its whole share (FP8's 256-row tiles give each of two warpgroups 128 channels,
 * so that no warpgroup waits for several slices per chunk); on the 32-pixel tile its whole share
 * too (MT m64n32 MMAs per K step, MT x 16 sums per thread); else 64 weight rows x 64 pixels. fresh
 * holds FRESH_N / 2 sums per thread either way. */
template <class C>
__device__ __forceinline__ constexpr bool fp8Narrow()
{
    return !C::SWAP && C::BN == 32;
}
template <class C>
__device__ __forceinline__ constexpr int fp8FreshN()
{
    return C::SWAP ? 128 : fp8Narrow<C>() ? C::MT * 32 : 64;
}

/* Non-swapped slices per m64 slice of the warpgroup's rows: 64-pixel halves of the tile (one on
 * the 32-pixel tile, whose slice is the whole tile). */
template <class C>
__device__ __forceinline__ constexpr int fp8Halves()
{
    return C::BN >= 64 ? C::BN / 64 : 1;
}

/* Chunks per fresh sum of a one-slice tile (fp8Slices<C>() == 1; the consumers free each chunk's
 * stage once its MMAs are done, and wait for all of them only where a fresh sum ends). Four on the
 * 64-pixel tiles: against two, FP8 took 0.5-3% off R50-c5, DBNet-c4/c5, BEV-c4 and OCD-l4 (H100);
 * two on the 32-pixel tile, whose small split layers took 2-3% longer with four. */
template <class C>
__device__ __forceinline__ constexpr int fp8RunChunks()
{
    return fp8Narrow<C>() ? 2 : 4;
}

/* Slices per chunk of wgmmaFp8Chunk: one where a slice holds the warpgroup's whole tile. */
template <class C>
__device__ __forceinline__ constexpr int fp8Slices()
{
    return C::SWAP ? C::BM / C::CWG / fp8FreshN<C>() : fp8Narrow<C>() ? 1 : C::MT * (C::BN / 64);
}

/* The MMAs of slice ns of one FP8 chunk (the stage's weight rows of this warpgroup at aS, its sample
 * tile at bS) into fresh: from zero where `restart`, else added to what fresh holds. */
template <class C>
__device__ __forceinline__ void fp8SliceMmas(float (&fresh)[fp8FreshN<C>() / 2], int ns, uint32_t aS, uint32_t bS, bool restart)
{
    constexpr int FRESH_N = fp8FreshN<C>();
    constexpr int HALVES = fp8Halves<C>(); // non-swapped: slice ns = (m64 slice, 64 pixels)
    int const mt = ns / HALVES;
#pragma unroll
    for (int ks = 0; ks < C::BK / 32; ++ks)
    {
        int const accumulate = !restart || ks > 0;
        uint64_t const samples = wgmmaDesc(bS + (C::SWAP ? 0 : (ns % HALVES) * 64 * 128) + ks * 32);
        if constexpr (fp8Narrow<C>()) // every m64 slice of the warpgroup, 32 pixels each
        {
#pragma unroll
            for (int m = 0; m < C::MT; ++m)
                wgmmaE4m3N32(fresh + m * 16, wgmmaDesc(aS + m * 64 * 128 + ks * 32), samples, accumulate);
        }
        else if constexpr (C::SWAP) // the warpgroup's 128 output channels (fp8FreshN)
            wgmmaE4m3(fresh, samples, wgmmaDesc(aS + ns * FRESH_N * 128 + ks * 32), accumulate);
        else
            wgmmaE4m3N64(fresh, wgmmaDesc(aS + mt * 64 * 128 + ks * 32), samples, accumulate);
    }
}

/* Slice ns of acc (the warpgroup's accumulators) += fresh, once the MMAs committed into it are done. */
template <class C>
__device__ __forceinline__ void fp8AddFresh(float* acc, float (&fresh)[fp8FreshN<C>() / 2], int ns)
{
    constexpr int FRESH_N = fp8FreshN<C>();
    constexpr int HALVES = fp8Halves<C>();
    wgmmaWait<0>();
    float* const sum = acc
        + (C::SWAP || fp8Narrow<C>() ? ns * FRESH_N / 2 : ((ns / HALVES) * C::NT + (ns % HALVES) * 8) * 4);
#pragma unroll
    for (int i = 0; i < FRESH_N / 2; ++i)
    {
        wgmmaFenceOperand(fresh[i]);
        sum[i] += fresh[i];
    }
}

/* One-slice tiles (fp8Slices<C>() == 1): the MMAs of one FP8 chunk into fresh, from zero where
 * `restart`, else added to what fresh holds; committed and left in flight (the caller adds fresh to
 * its accumulators, fp8AddFresh, after the chunk that ends the fresh sum). */
template <class C>
__device__ __forceinline__ void wgmmaFp8Issue(float (&fresh)[fp8FreshN<C>() / 2], uint32_t aS, uint32_t bS, bool restart)
{
    static_assert(fp8Slices<C>() == 1, "one-slice FP8 tile");
    wgmmaFence();
    fp8SliceMmas<C>(fresh, 0, aS, bS, restart);
    wgmmaCommit();
}

/* acc += one FP8 E4M3 chunk of 128 channels (aS, bS as in fp8SliceMmas) on a tile of several
 * slices. The tensor cores sum FP8 products with fewer bits than FP32 (DeepSeek-V3 report, section
 * 3.3.2: about 14), so the chunk's products go into a fresh sum, one slice at a time, added to acc
 * by FP32 adds once the slice's MMAs are done. */
template <class C>
__device__ __forceinline__ void wgmmaFp8Chunk(float* acc, float (&fresh)[fp8FreshN<C>() / 2], uint32_t aS, uint32_t bS)
{
#pragma unroll
    for (int ns = 0; ns < fp8Slices<C>(); ++ns)
    {
        wgmmaFence();
        fp8SliceMmas<C>(fresh, ns, aS, bS, true);
        wgmmaCommit();
        fp8AddFresh<C>(acc, fresh, ns);
    }
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_WGMMA_CUH
