/*
 * dcnconvert core: the consumer warps of the channel-vectorised fused kernel (dcnFusedNhwc.cuh):
 * for every K chunk they wait until the producers filled its stage (named barrier FULL) and, on
 * TMA tiles, until its weight tile landed (mbarrier), multiply, and hand the stage back (EMPTY);
 * then bias and store (or FP32 partial sums when K is split). Warp MMAs (chunkMma) on every tile;
 * on warpgroup tiles (C::WG, sm_90a) asynchronous wgmma with one chunk in flight.
 * Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_NHWC_CONSUMERS_CUH
#define DCN_FUSED_NHWC_CONSUMERS_CUH

#include "dcnFusedCommon.cuh"
#include "dcnFusedTma.cuh"
#include "dcnFusedWgmma.cuh"

namespace dcn
{
namespace fused
{

template <typename T, MathKind MK, class C>
__device__ __forceinline__ void nhwcConsumers(FusedArgs const& a, T const* sA, T const* sB, uint32_t fullA,
    int nChunks, int tid, int64_t p0, int m0, int g, int split, T const* __restrict__ bias, T* __restrict__ out,
    float* __restrict__ partial)
{
    constexpr int kAll = C::THREADS;
    int const wid = tid >> 5;
    int const lane = tid & 31;
    int const wm = wid / C::WARPS_N;
    int const wn = wid - wm * C::WARPS_N;
    int const gq = lane >> 2;
    int const tq = lane & 3;
    float acc[C::MT][C::NT][4];
    eachAcc<C>(acc, [](float& v) { v = 0.0f; });

    int wRow = wm * C::WTM; // the warp's first row in the tile
    if constexpr (C::WG)
    {
        // Warpgroup wm / 4 owns rows [(wm / 4) * BM / CWG, + BM / CWG): MT slices of 64 rows, of
        // which warp wm % 4 holds rows 16 (wm % 4) .. + 15 of each (the wgmma accumulator layout).
        int const wgRow = (wm >> 2) * (C::BM / C::CWG);
        wRow = wgRow + (wm & 3) * 16;
        uint32_t const aWg = smemAddr(sA) + static_cast<uint32_t>(wgRow * C::LDA * sizeof(T));
        uint32_t const bAll = smemAddr(sB);
        for (int kc = 0; kc < nChunks; ++kc)
        {
            int const s = kc % C::STAGES;
            barSync(2 + s, kAll); // stage s is full
            mbarWait(fullA + 8 * s, static_cast<uint32_t>(kc / C::STAGES) & 1u); // and its weight tile landed
            uint32_t const aS = aWg + static_cast<uint32_t>(s * C::A_BYTES);
            uint32_t const bS = bAll + static_cast<uint32_t>(s * C::B_BYTES);
#ifndef DCN_FUSED_NO_MMA // experiments: consumers only hand stages back (results are wrong)
            wgmmaFence();
#pragma unroll
            for (int ks = 0; ks < C::BK / 16; ++ks)
#pragma unroll
                for (int mt = 0; mt < C::MT; ++mt)
                    wgmmaAsync<T, C::BN>(&acc[mt][0][0], wgmmaDesc(aS + mt * 64 * 128 + ks * 32), wgmmaDesc(bS + ks * 32));
            wgmmaCommit();
#else
            (void)aS;
            (void)bS;
#endif
            // Chunk kc's MMAs stay in flight; chunk kc - 1's are done, so its stage may be refilled.
            wgmmaWait<1>();
            if (kc > 0 && kc - 1 + C::STAGES < nChunks)
                barArrive(2 + C::STAGES + (kc - 1) % C::STAGES, kAll);
        }
        wgmmaWait<0>();
        eachAcc<C>(acc, [](float& v) { wgmmaFenceOperand(v); });
    }
    else
    {
        for (int kc = 0; kc < nChunks; ++kc)
        {
            int const s = kc % C::STAGES;
            barSync(2 + s, kAll); // stage s is full
            if constexpr (C::TMA_A)
                mbarWait(fullA + 8 * s, static_cast<uint32_t>(kc / C::STAGES) & 1u); // and its weight tile landed
            T const* const a_s = sA + s * (C::BM * C::LDA) + (wm * C::WTM) * C::LDA;
            T const* const b_s = sB + s * (C::BN * C::LDB) + (wn * C::WTN) * C::LDB;
#ifndef DCN_FUSED_NO_MMA // experiments: consumers only hand stages back (results are wrong)
            chunkMma<T, MK, C, false>(acc, a_s, b_s, lane, gq, tq);
#endif
            if (kc + C::STAGES < nChunks)
            {
                barArrive(2 + C::STAGES + s, kAll); // stage s may be refilled
            }
        }
    }
    if (a.splits > 1)
        storePartial<C>(a, acc, partial + static_cast<int64_t>(split) * a.cout * a.pixels, p0, m0, g, wRow, wn, gq, tq);
    else
        storeTile<T, C>(a, acc, bias, out, p0, m0, g, wRow, wn, gq, tq);
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_NHWC_CONSUMERS_CUH
