/*
 * dcnconvert core: the producers' bilinear sums of one 16-byte task in the channel-vectorised fused
 * kernel (dcnFusedNhwc.cuh). Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_NHWC_PARTS_CUH
#define DCN_FUSED_NHWC_PARTS_CUH

#include "dcnFusedCommon.cuh"

namespace dcn
{
namespace fused
{

/* Bilinear sum of one task in T pairs (FP16): the corner weights come rounded to T from the plan
 * (two pairs (w00, w01), (w10, w11)); one product and three fused multiply-adds per channel pair. */
template <typename T>
__device__ __forceinline__ uint4 interpPacked(uint2 w, uint4 const (&v)[4])
{
    using P2 = typename Pair<T>::type;
    P2 const top = *reinterpret_cast<P2 const*>(&w.x);
    P2 const bottom = *reinterpret_cast<P2 const*>(&w.y);
    P2 const w00 = Pair<T>::lows(top);
    P2 const w01 = Pair<T>::highs(top);
    P2 const w10 = Pair<T>::lows(bottom);
    P2 const w11 = Pair<T>::highs(bottom);
    P2 const* const c00 = reinterpret_cast<P2 const*>(&v[0]);
    P2 const* const c01 = reinterpret_cast<P2 const*>(&v[1]);
    P2 const* const c10 = reinterpret_cast<P2 const*>(&v[2]);
    P2 const* const c11 = reinterpret_cast<P2 const*>(&v[3]);
    uint4 res;
    P2* const o = reinterpret_cast<P2*>(&res);
#pragma unroll
    for (int i = 0; i < 4; ++i)
    {
        P2 sv = __hmul2(w00, c00[i]);
        sv = __hfma2(w01, c01[i], sv);
        sv = __hfma2(w10, c10[i], sv);
        o[i] = __hfma2(w11, c11[i], sv);
    }
    return res;
}

/* Bilinear sum of one task in FP32 (BF16, FP32), one rounding to T. */
template <typename T>
__device__ __forceinline__ uint4 interpFloat(float4 wv, uint4 const (&v)[4])
{
    using dcn::simple::fromFloat;
    using dcn::simple::toFloat;
    constexpr int kVec = 16 / sizeof(T);
    T const* const c00 = reinterpret_cast<T const*>(&v[0]);
    T const* const c01 = reinterpret_cast<T const*>(&v[1]);
    T const* const c10 = reinterpret_cast<T const*>(&v[2]);
    T const* const c11 = reinterpret_cast<T const*>(&v[3]);
    uint4 res;
    T* const o = reinterpret_cast<T*>(&res);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
    {
        float sv = wv.x * toFloat<T>(c00[i]);
        sv = fmaf(wv.y, toFloat<T>(c01[i]), sv);
        sv = fmaf(wv.z, toFloat<T>(c10[i]), sv);
        sv = fmaf(wv.w, toFloat<T>(c11[i]), sv);
        o[i] = fromFloat<T>(sv);
    }
    return res;
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_NHWC_PARTS_CUH
