/*
 * dcnconvert core: the arithmetic of the channel-vectorised fused kernel (dcnFusedNhwc.cuh): the
 * producers' bilinear sums of one 16-byte task and the consumers' MMAs over one K chunk. Internal
 * to plugin_src/core; no TensorRT include.
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

/* Bilinear sum of one task in FP32 (BF16, FP32; FP16 with DCN_FUSED_INTERP_F32), one rounding to T. */
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

/* acc += the warp's A rows x B columns of one K chunk: a_s and b_s point at the warp's first row of
 * the A stage [BM][LDA] and of the K-contiguous B stage [BN][LDB]. */
template <typename T, MathKind MK, class C>
__device__ __forceinline__ void nhwcChunkMma(
    float (&acc)[C::MT][C::NT][4], T const* a_s, T const* b_s, int lane, int gq, int tq)
{
    if constexpr (MK == MathKind::kNative)
    {
#pragma unroll
        for (int ks = 0; ks < C::BK / 16; ++ks)
        {
            uint32_t af[C::MT][4];
            uint32_t bf[C::NT][2];
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt)
                ldmatrixX4(af[mt], a_s + (mt * 16 + (lane & 15)) * C::LDA + ks * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < C::NT / 2; ++np)
            {
                uint32_t rr[4];
                ldmatrixX4(rr,
                    b_s + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * C::LDB + ks * 16 + ((lane >> 3) & 1) * 8);
                bf[2 * np][0] = rr[0];
                bf[2 * np][1] = rr[1];
                bf[2 * np + 1][0] = rr[2];
                bf[2 * np + 1][1] = rr[3];
            }
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < C::NT; ++nt)
                    mmaK16<T>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
        }
    }
    else
    {
        float const* const fa = reinterpret_cast<float const*>(a_s);
        float const* const fb = reinterpret_cast<float const*>(b_s);
#pragma unroll
        for (int ks = 0; ks < C::BK / 8; ++ks)
        {
            uint32_t aBig[C::MT][4];
            uint32_t aSmall[C::MT][4];
            uint32_t bBig[C::NT][2];
            uint32_t bSmall[C::NT][2];
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt)
            {
                float const* const r0 = fa + (mt * 16 + gq) * C::LDA + ks * 8 + tq;
                float const av[4] = {r0[0], r0[8 * C::LDA], r0[4], r0[8 * C::LDA + 4]};
#pragma unroll
                for (int q = 0; q < 4; ++q)
                {
                    if constexpr (MK == MathKind::k3xTf32)
                        splitTf32(av[q], aBig[mt][q], aSmall[mt][q]);
                    else
                        aBig[mt][q] = toTf32(av[q]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt)
            {
                float const* const c0 = fb + (nt * 8 + gq) * C::LDB + ks * 8 + tq;
                float const bv[2] = {c0[0], c0[4]};
#pragma unroll
                for (int q = 0; q < 2; ++q)
                {
                    if constexpr (MK == MathKind::k3xTf32)
                        splitTf32(bv[q], bBig[nt][q], bSmall[nt][q]);
                    else
                        bBig[nt][q] = toTf32(bv[q]);
                }
            }
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < C::NT; ++nt)
                {
                    if constexpr (MK == MathKind::k3xTf32)
                        mma3xTf32(acc[mt][nt], aBig[mt], aSmall[mt], bBig[nt], bSmall[nt]);
                    else
                        mmaTf32(acc[mt][nt], aBig[mt], bBig[nt][0], bBig[nt][1]);
                }
        }
    }
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_NHWC_PARTS_CUH
