/*
 * dcnconvert core: tensor-core primitives of the fused kernel (sm_80+): fast division, warp-level
 * MMA wrappers (FP16, BF16, TF32 with FP32 accumulation; INT8 with INT32, FP8 E4M3 with FP32),
 * ldmatrix, named barriers.
 * Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_MMA_CUH
#define DCN_FUSED_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdint.h>

namespace dcn
{
namespace fused
{

/* n / d for 32-bit unsigned n with one 64-bit multiply-high (exact for every n < 2^32 and
 * 1 <= d < 2^32: the multiplier is ceil(2^64 / d); d == 1 is special-cased, its multiplier
 * would be 2^64). */
struct FastDiv
{
    uint64_t mul;
    uint32_t d;

    __host__ void init(uint32_t divisor)
    {
        d = divisor;
        mul = divisor > 1 ? (~uint64_t{0}) / divisor + 1 : 0;
    }
    __device__ __forceinline__ uint32_t div(uint32_t n) const
    {
        return d == 1 ? n : static_cast<uint32_t>(__umul64hi(mul, static_cast<uint64_t>(n)));
    }
};

/* Named barriers (id 0 is __syncthreads). `count` threads, a multiple of 32, take part. */
__device__ __forceinline__ void barSync(int id, int count)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ uint32_t smemAddr(void const* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* 16-byte asynchronous copy global -> shared (byte address) that bypasses L1 (cp.async.cg, sm_80+), its group
 * commit, and the wait until at most N of this thread's groups are still in flight. cpAsync16Zero: the
 * same, or with `zero` 16 zero bytes and no global read. */
__device__ __forceinline__ void cpAsync16(uint32_t smem, void const* gmem)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
#endif
}
__device__ __forceinline__ void cpAsync16Zero(uint32_t smem, void const* gmem, bool zero)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem), "r"(zero ? 0 : 16) : "memory");
#endif
}

/* 16-byte store to a shared-memory byte address (the producers' stage writes). */
__device__ __forceinline__ void stShared16(uint32_t smem, uint4 v)
{
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(smem), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

/* Loads from a shared-memory byte address (the producers' plan reads). Volatile: they stay after the
 * named barrier that publishes a rebuilt plan. */
__device__ __forceinline__ uint2 ldShared8(uint32_t smem)
{
    uint2 v;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(smem));
    return v;
}
__device__ __forceinline__ int64_t ldSharedI64(uint32_t smem)
{
    int64_t v;
    asm volatile("ld.shared.b64 %0, [%1];" : "=l"(v) : "r"(smem));
    return v;
}
__device__ __forceinline__ float4 ldSharedF4(uint32_t smem)
{
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(smem));
    return v;
}

__device__ __forceinline__ void cpAsyncCommit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cpAsyncWait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], void const* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smemAddr(p)));
}

__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4], void const* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smemAddr(p)));
}

/* D += A * B for one m16n8k16 tile: A row-major (4 regs), B column-major (2 regs), FP32 C. */
template <typename T>
__device__ __forceinline__ void mmaK16(float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mmaK16<__half>(float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <>
__device__ __forceinline__ void mmaK16<__nv_bfloat16>(
    float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* c += A * B for one m16n8k32 tile of 8-bit operands (quantized layers). The fragments hold the
 * same bytes as an m16n8k16 tile of 16-bit ones (A row-major, 4 registers of 4 values; B
 * column-major, 2 registers), so ldmatrix loads them alike. INT8 (sm_80+): c holds INT32 sums
 * (their bits; exact for any K the layers have). FP8 E4M3 (sm_89+): FP32 c, in the tensor cores'
 * FP8 sums (fewer bits than FP32), which the consumers start afresh every chunk (the warpgroup
 * tiles every one to four chunks, fp8RunChunks). Only the host's choice keeps FP8 off
 * code built for older architectures (builtFp8MmaFor), where this traps. */
template <typename T>
__device__ __forceinline__ void mmaK32(float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mmaK32<int8_t>(float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t* const r = reinterpret_cast<uint32_t*>(c);
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(r[0]), "+r"(r[1]), "+r"(r[2]), "+r"(r[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <>
__device__ __forceinline__ void mmaK32<__nv_fp8_e4m3>(
    float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__)
    (void)c;
    (void)a;
    (void)b0;
    (void)b1;
    __trap();
#endif
}

/* D += A * B for one m16n8k8 TF32 tile (operands already TF32 bit patterns). */
__device__ __forceinline__ void mmaTf32(float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* D = A * B for one m16n8k8 TF32 tile with a zero C operand (no registers to clear). */
__device__ __forceinline__ void mmaTf32Zero(float (&d)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
#endif
}

/* acc += A * B in 3xTF32 for one m16n8k8 step: big*small, small*big and big*big go into a zeroed
 * fragment, which is then added to acc by FP32 adds (round to nearest). Chaining all three products
 * of every step straight into acc would let the tensor cores' accumulation error build up along K
 * (measured: 3e-5 of max|ref| at K = 2304, against 3e-6 for the SIMT kernel); with the fresh
 * fragment it is confined to three products. */
__device__ __forceinline__ void mma3xTf32(float (&acc)[4], uint32_t const (&aBig)[4], uint32_t const (&aSmall)[4],
    uint32_t const (&bBig)[2], uint32_t const (&bSmall)[2])
{
    float t[4];
    mmaTf32Zero(t, aSmall, bBig[0], bBig[1]);
    mmaTf32(t, aBig, bSmall[0], bSmall[1]);
    mmaTf32(t, aBig, bBig[0], bBig[1]);
#pragma unroll
    for (int q = 0; q < 4; ++q)
        acc[q] += t[q];
}

/* FP32 -> TF32 with round-to-nearest (ties away), as a 32-bit pattern. */
__device__ __forceinline__ uint32_t toTf32(float v)
{
    uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
#else
    r = __float_as_uint(v);
#endif
    return r;
}

/* v = big + small with both parts TF32 (3xTF32: big*big + big*small + small*big keeps ~FP32
 * accuracy; the dropped small*small term is below 2^-22 of the product). */
__device__ __forceinline__ void splitTf32(float v, uint32_t& big, uint32_t& small)
{
    big = toTf32(v);
    small = toTf32(v - __uint_as_float(big));
}

/* Four FP32 values (a 16-byte sample vector of the FP32 warpgroup tiles) as the TF32 MMAs read them
 * from shared memory: rounded to TF32 (TF32 mode), or split into big and small TF32 parts (3xTF32). */
__device__ __forceinline__ uint4 tf32Vec(uint4 v)
{
    return make_uint4(toTf32(__uint_as_float(v.x)), toTf32(__uint_as_float(v.y)), toTf32(__uint_as_float(v.z)),
        toTf32(__uint_as_float(v.w)));
}
__device__ __forceinline__ uint4 tf32SplitVec(uint4 v, uint4& small)
{
    uint4 big;
    splitTf32(__uint_as_float(v.x), big.x, small.x);
    splitTf32(__uint_as_float(v.y), big.y, small.y);
    splitTf32(__uint_as_float(v.z), big.z, small.z);
    splitTf32(__uint_as_float(v.w), big.w, small.w);
    return big;
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_MMA_CUH
