/*
 * dcnconvert core: the producers' bilinear sums of one 16-byte task in the channel-vectorised fused
 * kernel (dcnFusedNhwc.cuh). Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_NHWC_PARTS_CUH
#define DCN_FUSED_NHWC_PARTS_CUH

#include "dcnFusedCommon.cuh"
#include "dcnFusedTma.cuh"

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

/* An L2 hint for the input a block reads (producer threads, sm_90): the NHWC rows of every image its
 * pixel tile [p0, p0 + BN) touches, from the rows of its kernel window less kRowMargin rows to the
 * bottom row of its cells plus kRowMargin (offsets are small in trained models; samples further
 * away only miss the hint), channels [cLo, cLo + cCount) of each pixel: whole rows in one piece
 * per image where that is every channel, else one piece per pixel. Results do not depend on it. */
template <typename T, class C>
__device__ __forceinline__ void prefetchInput(FusedArgs const& a, T const* xh, int64_t p0, int cLo, int cCount, int ptid)
{
    constexpr int kRowMargin = 2;
    constexpr int64_t kPiece = 32768; // bytes per bulk prefetch of whole rows
    int64_t const pLast = min(p0 + C::BN, static_cast<int64_t>(a.pixels)) - 1;
    if (pLast < p0)
        return;
    int const n0 = static_cast<int>(a.divHoWo.div(static_cast<uint32_t>(p0)));
    int const n1 = static_cast<int>(a.divHoWo.div(static_cast<uint32_t>(pLast)));
    int const oy0 = static_cast<int>(a.divWo.div(static_cast<uint32_t>(p0 - static_cast<int64_t>(n0) * a.howo)));
    int const oy1 = static_cast<int>(a.divWo.div(static_cast<uint32_t>(pLast - static_cast<int64_t>(n1) * a.howo)));
    int const ho = a.howo / a.wo;
    int const kh = a.kk / a.kw;
    int const all = cCount == a.c;
    int64_t const pixelBytes = static_cast<int64_t>(a.c) * static_cast<int64_t>(sizeof(T));
    int item = 0; // pieces handed out so far, round robin over the producer threads
    for (int n = n0; n <= n1; ++n)
    {
        int const oyA = n == n0 ? oy0 : 0;
        int const oyB = n == n1 ? oy1 : ho - 1;
        int const yLo = max(0, oyA * a.strideH - a.padH - kRowMargin);
        int const yHi = min(a.h - 1, oyB * a.strideH - a.padH + (kh - 1) * a.dilationH + 1 + kRowMargin);
        if (yHi < yLo)
            continue;
        char const* const rows = reinterpret_cast<char const*>(xh + (static_cast<int64_t>(n) * a.h + yLo) * a.w * a.c);
        if (all)
        {
            int64_t const bytes = static_cast<int64_t>(yHi - yLo + 1) * a.w * pixelBytes;
            for (int64_t off = 0; off < bytes; off += kPiece, ++item)
            {
                if (item % C::PRODUCERS == ptid)
                    prefetchL2(rows + off, static_cast<uint32_t>(min(kPiece, bytes - off)));
            }
        }
        else
        {
            int const count = (yHi - yLo + 1) * a.w;
            int const first = ((ptid - item) % C::PRODUCERS + C::PRODUCERS) % C::PRODUCERS;
            for (int i = first; i < count; i += C::PRODUCERS)
                prefetchL2(rows + i * pixelBytes + static_cast<int64_t>(cLo) * static_cast<int64_t>(sizeof(T)),
                    static_cast<uint32_t>(cCount * static_cast<int>(sizeof(T))));
            item += count;
        }
    }
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_NHWC_PARTS_CUH
