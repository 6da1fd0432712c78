/*
 * dcnconvert core: the element types of the kernels: conversions to and from FP32, loads, the
 * quantized types' rounding (dcnParams.h), their FP16-pair forms and the quantized layers' sample,
 * and the typed output store. Shared by the simple kernel (dcnSimpleKernel.cuh) and the fused
 * kernels. Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_ELEMENTS_CUH
#define DCN_ELEMENTS_CUH

#include "dcnParams.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <type_traits>

namespace dcn
{
namespace simple
{

template <typename T>
__device__ __forceinline__ float toFloat(T v);
template <>
__device__ __forceinline__ float toFloat<float>(float v)
{
    return v;
}
template <>
__device__ __forceinline__ float toFloat<__half>(__half v)
{
    return __half2float(v);
}
template <>
__device__ __forceinline__ float toFloat<__nv_bfloat16>(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <>
__device__ __forceinline__ float toFloat<int8_t>(int8_t v)
{
    return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float toFloat<__nv_fp8_e4m3>(__nv_fp8_e4m3 v)
{
    return static_cast<float>(v);
}

/* Quantized element types (DcnQuant): x and the weights of a quantized layer. */
template <typename T>
constexpr bool kQuantized = sizeof(T) == 1;

template <typename T>
__device__ __forceinline__ T fromFloat(float v);
template <>
__device__ __forceinline__ float fromFloat<float>(float v)
{
    return v;
}
template <>
__device__ __forceinline__ __half fromFloat<__half>(float v)
{
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* INT8: to nearest even, saturated to [-128, 127]; FP8 E4M3: to nearest even, saturated to +-448
 * (the quantized layers' rounding, dcnParams.h). */
template <>
__device__ __forceinline__ int8_t fromFloat<int8_t>(float v)
{
    return static_cast<int8_t>(__float2int_rn(fminf(fmaxf(v, -128.0f), 127.0f)));
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 fromFloat<__nv_fp8_e4m3>(float v)
{
    __nv_fp8_e4m3 r;
    r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    return r;
}

template <typename T>
__device__ __forceinline__ float ldf(T const* p)
{
    return toFloat<T>(__ldg(p));
}
template <>
__device__ __forceinline__ float ldf<__nv_fp8_e4m3>(__nv_fp8_e4m3 const* p)
{
    __nv_fp8_e4m3 v;
    v.__x = __ldg(reinterpret_cast<unsigned char const*>(p));
    return toFloat<__nv_fp8_e4m3>(v);
}

/* v rounded to the grid of quantized type T, as a float. */
template <typename T>
__device__ __forceinline__ float toGrid(float v)
{
    return toFloat<T>(fromFloat<T>(v));
}

/* Four 8-bit values (one 32-bit word, value k in byte k) as two exact FP16 pairs (0, 1) and (2, 3),
 * and back: FP16 pairs rounded to the 8-bit type (dcnParams.h), packed the same way. INT8 without
 * the conversion unit: byte b + 128 in the low byte of the FP16 pattern 0x64xx is 1024 + b + 128,
 * exact, less 1152; back, values clamped to [-128, 127] plus 1536 (one unit per step there) leave
 * the value rounded to nearest even, as two's complement, in each pattern's low byte. */
__device__ __forceinline__ void halfPairs(uint32_t word, __half2 (&h)[2], int8_t const*)
{
    uint32_t const u = word ^ 0x80808080u;
    uint32_t const lo = __byte_perm(u, 0x64646464u, 0x4140u);
    uint32_t const hi = __byte_perm(u, 0x64646464u, 0x4342u);
    __half2 const bias = __half2half2(__ushort_as_half(0x6480u)); // 1152
    h[0] = __hsub2(*reinterpret_cast<__half2 const*>(&lo), bias);
    h[1] = __hsub2(*reinterpret_cast<__half2 const*>(&hi), bias);
}
__device__ __forceinline__ void halfPairs(uint32_t word, __half2 (&h)[2], __nv_fp8_e4m3 const*)
{
    // Compute capability 8.9+ only: FP8 producers are built nowhere else (dcnFusedLaunchTile.cuh).
    // The word's halves as the conversion's operands: ptxas reads the upper one in place (operand
    // .H1), where the intrinsic on `word >> 16` costs every pair a shift (16 per producer task).
    uint32_t lo, hi;
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\t"
        "cvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}"
        : "=r"(lo), "=r"(hi)
        : "r"(word));
    h[0] = *reinterpret_cast<__half2 const*>(&lo);
    h[1] = *reinterpret_cast<__half2 const*>(&hi);
}
__device__ __forceinline__ uint32_t bytesOfHalfPairs(__half2 const (&h)[2], int8_t const*)
{
    __half2 const lo = __half2half2(__ushort_as_half(0xD800u)); // -128
    __half2 const hi = __half2half2(__ushort_as_half(0x57F0u)); // 127
    __half2 const magic = __half2half2(__ushort_as_half(0x6600u)); // 1536
    __half2 const a = __hadd2(__hmax2(__hmin2(h[0], hi), lo), magic);
    __half2 const b = __hadd2(__hmax2(__hmin2(h[1], hi), lo), magic);
    return __byte_perm(*reinterpret_cast<uint32_t const*>(&a), *reinterpret_cast<uint32_t const*>(&b), 0x6420u);
}
__device__ __forceinline__ uint32_t bytesOfHalfPairs(__half2 const (&h)[2], __nv_fp8_e4m3 const*)
{
    uint32_t const a = __nv_cvt_halfraw2_to_fp8x2(*reinterpret_cast<__half2_raw const*>(&h[0]), __NV_SATFINITE, __NV_E4M3);
    uint32_t const b = __nv_cvt_halfraw2_to_fp8x2(*reinterpret_cast<__half2_raw const*>(&h[1]), __NV_SATFINITE, __NV_E4M3);
    return a | (b << 16);
}

/* INT8 samples in fixed point (dcnParams.h): where the four FP32 corner weights are at least 0 and
 * sum to at most kFixedSumMax (masks in [0, 1]), each becomes the unsigned 16-bit weight
 * min(round(65536 w), 65535), and the sample of corner bytes x_q is floor((sum w16 x_q + 32768) /
 * 65536): integer sums, exact, rounded half up, always within [-128, 127] (the weights sum to at most
 * about 65543). Other weights keep the FP16 sample (quantSample). kFixedOff marks those in a plan
 * entry: two weights of 65535 never come from weights of sum at most kFixedSumMax. */
constexpr float kFixedSumMax = 1.0001f;
constexpr uint32_t kFixedOff = 0xFFFFFFFFu;

/* The 16-bit weights of corner weights w (w00, w01, w10, w11) as (w00 | w01 << 16, w10 | w11 << 16),
 * or kFixedOff twice where they are not all at least 0 or sum to more than kFixedSumMax. */
__device__ __forceinline__ uint2 fixedWeights(float4 w)
{
    if (!(w.x >= 0.0f && w.y >= 0.0f && w.z >= 0.0f && w.w >= 0.0f && ((w.x + w.y) + w.z) + w.w <= kFixedSumMax))
        return make_uint2(kFixedOff, kFixedOff);
    auto q = [](float v) { return min(__float2uint_rn(v * 65536.0f), 65535u); };
    return make_uint2(q(w.x) | (q(w.y) << 16), q(w.z) | (q(w.w) << 16));
}

/* sum w16 x_q + 32768 of one channel, its corners' bytes in `corners` (top left in byte 0, top
 * right, bottom left, bottom right): the sample is byte 2 (two's complement). */
__device__ __forceinline__ int32_t fixedSum(uint2 w, uint32_t corners)
{
    int32_t s;
    asm("dp2a.lo.u32.s32 %0, %1, %2, %3;" : "=r"(s) : "r"(w.x), "r"(corners), "r"(32768));
    asm("dp2a.hi.u32.s32 %0, %1, %2, %0;" : "+r"(s) : "r"(w.y), "r"(corners));
    return s;
}

/* The modulated sample of a quantized layer (dcnParams.h) from the corner weights wt (mask times
 * row weight times column weight, in FP32, corners outside the plane 0) and values v: INT8 in fixed
 * point where fixedWeights takes the weights; else (and FP8) the weights rounded to FP16, the corner
 * values (exact in FP16) summed as one product and three fused multiply-adds in FP16, in corner
 * order (top left, top right, bottom left, bottom right), then rounded to T. The fused kernels'
 * producers compute exactly this (dcnFusedNhwcParts.cuh, interpFixed and interpPackedQuant). */
template <typename T>
__device__ __forceinline__ float quantSample(float const (&wt)[4], float const (&v)[4])
{
    if constexpr (std::is_same<T, int8_t>::value)
    {
        uint2 const w = fixedWeights(make_float4(wt[0], wt[1], wt[2], wt[3]));
        if (w.x != kFixedOff)
        {
            uint32_t corners = 0;
#pragma unroll
            for (int i = 0; i < 4; ++i)
                corners |= (static_cast<uint32_t>(static_cast<int32_t>(v[i])) & 0xFFu) << (8 * i);
            return static_cast<float>(static_cast<int8_t>(static_cast<uint32_t>(fixedSum(w, corners)) >> 16));
        }
    }
    __half s = __hmul(__float2half_rn(wt[0]), __float2half_rn(v[0]));
#pragma unroll
    for (int i = 1; i < 4; ++i)
        s = __hfma(__float2half_rn(wt[i]), __float2half_rn(v[i]), s);
    return toGrid<T>(__half2float(s));
}

/* out[i] = v converted to DcnDataType `type`; a quantized type takes v / outScale (QuantizeLinear). */
__device__ __forceinline__ void storeAs(void* out, int64_t i, float v, int32_t type, float outScale)
{
    switch (type)
    {
    case kDCN_FLOAT32: static_cast<float*>(out)[i] = v; break;
    case kDCN_FLOAT16: static_cast<__half*>(out)[i] = fromFloat<__half>(v); break;
    case kDCN_BFLOAT16: static_cast<__nv_bfloat16*>(out)[i] = fromFloat<__nv_bfloat16>(v); break;
    case kDCN_INT8: static_cast<int8_t*>(out)[i] = fromFloat<int8_t>(v / outScale); break;
    default: static_cast<__nv_fp8_e4m3*>(out)[i] = fromFloat<__nv_fp8_e4m3>(v / outScale); break;
    }
}

} // namespace simple
} // namespace dcn

#endif // DCN_ELEMENTS_CUH
