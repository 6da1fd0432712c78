/*
 * dcnconvert core: the consumer warps of the channel-vectorised fused kernel (dcnFusedNhwc.cuh):
 * for every K chunk they wait until the producers filled its stage (the FULL mbarrier) and, on TMA
 * tiles, until its weight tile landed (its mbarrier),
 * multiply, and hand the stage back (EMPTY); then bias and store (or FP32 partial sums when K is
 * split; dcnFusedNhwcEpilogue.cuh). Warp MMAs (chunkMma; 8-bit: m16n8k32) on every tile;
 * on warpgroup tiles (C::WG, sm_90a) asynchronous wgmma with one chunk in flight.
 * Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_NHWC_CONSUMERS_CUH
#define DCN_FUSED_NHWC_CONSUMERS_CUH

#include "dcnFusedCluster.cuh"
#include "dcnFusedCommon.cuh"
#include "dcnFusedNhwcEpilogue.cuh"
#include "dcnFusedNhwcParts.cuh"
#include "dcnFusedTma.cuh"
#include "dcnFusedWgmma.cuh"

namespace dcn
{
namespace fused
{

template <typename T, MathKind MK, class C, typename TF = T>
__device__ __forceinline__ void nhwcConsumers(FusedArgs const& a, T const* sA, T const* sB, uint32_t fullA,
    int nChunks, int tid, int64_t p0, int m0, int g, int split, TF const* __restrict__ bias, OutOf<T>* __restrict__ out,
    float* __restrict__ partial, uint32_t rank, uint32_t peer)
{
    uint32_t const fullB = fullA + C::FULL_OFF;
    uint32_t const emptyS = fullA + C::EMPTY_OFF;
    int const wid = tid >> 5;
    int const lane = tid & 31;
    int const wm = wid / C::WARPS_N;
    int const wn = wid - wm * C::WARPS_N;
    int const gq = lane >> 2;
    int const tq = lane & 3;
    float acc[C::MT][C::NT][4];
    eachAcc<C>(acc, [](float& v) { v = 0.0f; });
    TileConsts<C> const consts = loadTileConsts<T, C, TF>(a, bias, tid, m0, g);

    int wRow = wm * C::WTM; // the warp's first row in the tile
    if constexpr (C::WG)
    {
        // Warpgroup wm / 4 owns rows [(wm / 4) * BM / CWG, + BM / CWG): MT slices of 64 rows, of
        // which warp wm % 4 holds rows 16 (wm % 4) .. + 15 of each (the wgmma accumulator layout).
        int const wgRow = (wm >> 2) * (C::BM / C::CWG);
        wRow = wgRow + (wm & 3) * 16;
        uint32_t const aWg = smemAddr(sA) + static_cast<uint32_t>(wgRow * C::LDA * sizeof(T));
        uint32_t const bAll = smemAddr(sB);
        constexpr int KSTEPS = C::BK * sizeof(T) / 32; // MMA K steps of 32 bytes (k16; FP32: k8; 8-bit: k32)
        static_assert(C::SPLIT == 1 || C::SWAP, "3xTF32 warpgroup tiles: swapped");
        float tmp[C::SPLIT == 2 ? C::MT : 1][C::SPLIT == 2 ? C::NT : 1][4]; // 3xTF32: a chunk's sums
        if constexpr (C::SPLIT == 2)
            eachAcc<C>(tmp, [](float& v) { v = 0.0f; });
        constexpr bool FP8 = std::is_same<T, __nv_fp8_e4m3>::value;
        static_assert(!FP8 || !C::SWAP || C::BM / C::CWG == fp8FreshN<C>(), "FP8: one slice per warpgroup");
        float fresh[FP8 ? fp8FreshN<C>() / 2 : 1] = {}; // FP8: one slice's sums of one to four chunks
        // Stage sf may be refilled: its EMPTY arrival goes to the block that fills it (PAIR: rank sf % 2).
        auto freeStage = [&](int sf) {
            if constexpr (C::PAIR)
            {
                if (static_cast<uint32_t>(sf & 1) == rank)
                    mbarArrive(emptyS + 8 * sf);
                else
                    mbarArriveRemote(emptyS + 8 * sf + peer);
            }
            else
                mbarArrive(emptyS + 8 * sf);
        };
        for (int kc = 0; kc < nChunks; ++kc)
        {
            int const s = kc % C::STAGES;
            uint32_t const phase = static_cast<uint32_t>(kc / C::STAGES) & 1u;
            mbarWait(fullB + 8 * s, phase); // stage s is full
            mbarWait(fullA + 8 * s, phase); // and its weight tile landed
            // The producers' sample stores (generic proxy, released by their FULL arrivals and
            // acquired by the wait above) before the MMAs read the stage (async proxy): one proxy
            // fence per consumer thread instead of one per producer thread after its stores.
            fenceProxyAsync();
            uint32_t const aS = aWg + static_cast<uint32_t>(s * C::A_BYTES);
            uint32_t const bS = bAll + static_cast<uint32_t>(s * C::B_BYTES);
            if constexpr (FP8 && fp8Slices<C>() == 1)
            {
                // One fresh sum per RUN chunks: chunk kc + 1's stage fills while chunk kc's MMAs run,
                // and each chunk's stage is freed once its MMAs are done (wgmmaWait<1>).
                constexpr int RUN = fp8RunChunks<C>();
                bool const restart = kc % RUN == 0;
                bool const ends = kc % RUN == RUN - 1 || kc + 1 == nChunks;
                wgmmaFp8Issue<C>(fresh, aS, bS, restart);
                if (ends)
                    fp8AddFresh<C>(&acc[0][0][0], fresh, 0);
                else if (!restart)
                    wgmmaWait<1>();
                if (!restart && kc - 1 + C::STAGES < nChunks)
                    freeStage((kc - 1) % C::STAGES);
                if (ends && kc + C::STAGES < nChunks)
                    freeStage(s);
                continue;
            }
            else if constexpr (FP8)
            {
                // Several slices (128 x 128): one chunk per fresh sum (two spill its consumers).
                wgmmaFp8Chunk<C>(&acc[0][0][0], fresh, aS, bS);
                if (kc + C::STAGES < nChunks)
                    freeStage(s);
                continue;
            }
            else if constexpr (C::SPLIT == 2)
            {
                // 3xTF32: the chunk's products go into a fresh sum (tmp), added to acc by FP32 adds
                // once they are done, so that the tensor cores' accumulation error stays confined to
                // one chunk (as mma3xTf32 does per K step on the other tiles). The stage is then free.
                wgmmaFence();
#pragma unroll
                for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
                    for (int ns = 0; ns < C::BM / C::CWG / C::SWAP_N; ++ns)
                    {
                        float* const t = &tmp[0][0][0] + ns * C::SWAP_N / 2;
                        uint64_t const bBig = wgmmaDesc(bS + ks * 32);
                        uint64_t const aBig = wgmmaDesc(aS + ns * C::SWAP_N * 128 + ks * 32);
                        wgmmaTf32<C::SWAP_N>(t, wgmmaDesc(bS + C::B_HALF + ks * 32), aBig, ks > 0);
                        wgmmaTf32<C::SWAP_N>(t, bBig, wgmmaDesc(aS + C::A_HALF + ns * C::SWAP_N * 128 + ks * 32), 1);
                        wgmmaTf32<C::SWAP_N>(t, bBig, aBig, 1);
                    }
                wgmmaCommit();
                wgmmaWait<0>();
                eachAcc<C>(tmp, [](float& v) { wgmmaFenceOperand(v); });
                addAcc<C>(acc, tmp);
                if (kc + C::STAGES < nChunks)
                    freeStage(s);
                continue;
            }
            else
            {
                wgmmaFence();
#pragma unroll
                for (int ks = 0; ks < KSTEPS; ++ks)
                {
                    if constexpr (C::SWAP)
#pragma unroll
                        for (int ns = 0; ns < C::BM / C::CWG / C::SWAP_N; ++ns)
                            wgmmaAsync<T, C::SWAP_N>(&acc[0][0][0] + ns * C::SWAP_N / 2, wgmmaDesc(bS + ks * 32),
                                wgmmaDesc(aS + ns * C::SWAP_N * 128 + ks * 32));
                    else
#pragma unroll
                        for (int mt = 0; mt < C::MT; ++mt)
                            wgmmaAsync<T, C::BN>(
                                &acc[mt][0][0], wgmmaDesc(aS + mt * 64 * 128 + ks * 32), wgmmaDesc(bS + ks * 32));
                }
                wgmmaCommit();
                // Chunk kc's MMAs stay in flight; chunk kc - 1's are done, so its stage may be refilled.
                wgmmaWait<1>();
                if (kc > 0 && kc - 1 + C::STAGES < nChunks)
                {
                    freeStage((kc - 1) % C::STAGES);
                }
            }
        }
        // PAIR: this block arrives on the other's mbarriers no more; the wait at the end keeps both
        // blocks (their mbarriers and stages) alive until then. Relaxed: every arrival this block
        // made on the other's EMPTY barriers was for a stage that block refilled after waiting for
        // it, and these consumers waited (FULL) for each such refill before leaving the loop; this
        // block's copies into the other complete on barriers that the other's consumers wait for
        // before they arrive. Nothing this block sent is outstanding once both have arrived.
        if constexpr (C::PAIR)
            clusterArriveRelaxed();
        wgmmaWait<0>();
        eachAcc<C>(acc, [](float& v) { wgmmaFenceOperand(v); });
    }
    else
    {
        for (int kc = 0; kc < nChunks; ++kc)
        {
            int const s = kc % C::STAGES;
            uint32_t const phase = static_cast<uint32_t>(kc / C::STAGES) & 1u;
            mbarWait(fullB + 8 * s, phase); // stage s is full
            if constexpr (C::TMA_A)
                mbarWait(fullA + 8 * s, phase); // and its weight tile landed
            T const* const a_s = sA + s * (C::BM * C::LDA) + (wm * C::WTM) * C::LDA;
            T const* const b_s = sB + s * (C::BN * C::LDB) + (wn * C::WTN) * C::LDB;
            if constexpr (std::is_same<T, __nv_fp8_e4m3>::value)
            {
                // FP8: the chunk's products (128 channels) in a fresh sum, added to acc in FP32 (as above).
                float fresh[C::MT][C::NT][4];
                eachAcc<C>(fresh, [](float& v) { v = 0.0f; });
                chunkMma<T, MK, C, false>(fresh, a_s, b_s, lane, gq, tq);
                addAcc<C>(acc, fresh);
            }
            else
                chunkMma<T, MK, C, false>(acc, a_s, b_s, lane, gq, tq);
            if (kc + C::STAGES < nChunks)
                mbarArrive(emptyS + 8 * s); // stage s may be refilled
        }
    }
    if constexpr (std::is_same<T, int8_t>::value) // INT32 sums (exact), as FP32 from here on
        eachAcc<C>(acc, [](float& v) { v = static_cast<float>(__float_as_int(v)); });
    // The stages are free once every consumer warp is past its last MMA (stageTile waits for that):
    // every chunk's sample stores and weight tiles have landed.
    // The split-K reduction, or the next call's prep kernel, may be scheduled now (both wait for
    // this grid); the producer warps count as triggered once they have exited.
    gridDependencyTrigger();
    float* const sT = reinterpret_cast<float*>(const_cast<T*>(sA));
    stageTile<T, C>(acc, sT, tid, wRow, wn, consts);
    int2 rows = make_int2(0, C::BM);
    float* part = a.splits > 1 ? partial : nullptr;
    if (a.clusterReduce)
    {
        rows = clusterReduceTile<C>(a, sT, tid, m0);
        part = nullptr;
    }
    storeTile<T, C>(a, sT, tid, p0, m0, g, split, out, part, rows.x, rows.y);
    if (a.clusterReduce)
        clusterRelease();
    if constexpr (C::PAIR)
        clusterWait();
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_NHWC_CONSUMERS_CUH
