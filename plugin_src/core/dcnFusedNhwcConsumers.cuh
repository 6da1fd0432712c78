/*
 * dcnconvert core: the consumer warps of the channel-vectorised fused kernel (dcnFusedNhwc.cuh):
 * for every K chunk they wait until the producers filled its stage (the FULL mbarrier) and, on TMA
 * tiles, until its weight tile landed (its mbarrier),
 * multiply, and hand the stage back (EMPTY); then bias and store (or FP32 partial sums when K is
 * split). Warp MMAs (chunkMma; 8-bit: m16n8k32) on every tile;
 * on warpgroup tiles (C::WG, sm_90a) asynchronous wgmma with one chunk in flight.
 * Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_NHWC_CONSUMERS_CUH
#define DCN_FUSED_NHWC_CONSUMERS_CUH

#include "dcnFusedCluster.cuh"
#include "dcnFusedCommon.cuh"
#include "dcnFusedNhwcParts.cuh"
#include "dcnFusedTma.cuh"
#include "dcnFusedWgmma.cuh"

namespace dcn
{
namespace fused
{

/* Epilogue of the channel-vectorised tiles, in two steps by the consumers. stageTile: the tile goes
 * to shared memory (sT: [BM][BN + 4] FP32 over the free stages, then the BM biases and, quantized,
 * the BM scales of the sums; both loaded before the main loop, TileConsts). storeTile:
 * FP16/BF16 output in items of 16 bytes (8 consecutive pixels of one channel), one vector store
 * where the pixels lie in one image and the destination is aligned, else one element at a time;
 * FP32 output and split-K partial sums (no bias) as rows of 32 consecutive pixels per warp.
 * Fragment (mt, nt) element q of consumer thread ctid (warp w, lane l) is
 *   swapped tiles (NTile::SWAP, flat index 4 j + q = (mt NT + nt) 4 + q): pixel 16 (w % 4) + l / 4
 *   + 8 (q / 2), channel (w / 4) BM / CWG + 8 j + 2 (l % 4) + q % 2;
 *   the others: channel wRow + mt MT_STRIDE + l / 4 + 8 (q / 2), pixel wn WTN + 8 nt + 2 (l % 4) + q % 2. */
/* The tile's biases and (quantized layers) the sums' scales, x's scale times each output channel's
 * weight scale: channel ctid + i CONSUMERS in element i. The consumers load them before their main
 * loop, where they wait for the first stage anyway; loaded in stageTile, they were global loads on
 * the path from the last MMA to the stores (H100: 0.5-0.6 us more from the last MMA to the staged
 * tile in INT8 than in FP16 on R50-c4, R50-c5 and OCD-l4, per-block timestamps). */
template <class C>
struct TileConsts
{
    static constexpr int R = (C::BM + C::CONSUMERS - 1) / C::CONSUMERS;
    float bias[R];
    float scale[R];
};

/* TileConsts of consumer thread ctid. The biases and the prepared weights' scales may be written by
 * the previous kernel (the weight preparation): read after the dependency wait. */
template <typename T, class C, typename TF>
__device__ __forceinline__ TileConsts<C> loadTileConsts(
    FusedArgs const& a, TF const* __restrict__ bias, int ctid, int m0, int g)
{
    gridDependencyWait();
    TileConsts<C> k;
    bool const withBias = (a.splits == 1 || a.clusterReduce) && a.withBias; // else the reduction kernel adds it
#pragma unroll
    for (int i = 0; i < TileConsts<C>::R; ++i)
    {
        int const c = ctid + i * C::CONSUMERS;
        bool const in = c < C::BM && m0 + c < a.mg;
        k.bias[i] = withBias && in ? dcn::simple::toFloat<TF>(ldT(bias + g * a.mg + m0 + c)) : 0.0f;
        k.scale[i] = 0.0f;
        if constexpr (dcn::simple::kQuantized<T>)
            k.scale[i] = in ? a.xScale * __ldg(a.wScale + g * a.mg + m0 + c) : 0.0f;
    }
    return k;
}

template <typename T, class C>
__device__ __forceinline__ void stageTile(
    float const (&acc)[C::MT][C::NT][4], float* sT, int ctid, int wRow, int wn, TileConsts<C> const& k)
{
    constexpr int LDT = stagedLd<C>();
    int const lane = ctid & 31;
    int const gq = lane >> 2;
    int const tq = lane & 3;
    // Every consumer warp is past its last MMA (the stages are read until then).
    barSync(15, C::CONSUMERS);
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
        {
            if constexpr (C::SWAP)
            {
                int const j = mt * C::NT + nt;
                int const ch = (ctid >> 7) * (C::BM / C::CWG) + 8 * j + 2 * tq;
                int const px = ((ctid >> 5) & 3) * 16 + gq;
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    sT[(ch + (q & 1)) * LDT + px + 8 * (q >> 1)] = acc[mt][nt][q];
            }
            else
            {
                int const ch = wRow + mt * C::MT_STRIDE + gq;
                int const px = wn * C::WTN + nt * 8 + 2 * tq;
                *reinterpret_cast<float2*>(sT + ch * LDT + px) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
                *reinterpret_cast<float2*>(sT + (ch + 8) * LDT + px) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
            }
        }
    // The biases, then (quantized layers) the sums' scales.
    float* const sBias = sT + C::BM * LDT;
#pragma unroll
    for (int i = 0; i < TileConsts<C>::R; ++i)
    {
        int const c = ctid + i * C::CONSUMERS;
        if (c < C::BM)
        {
            sBias[c] = k.bias[i];
            if constexpr (dcn::simple::kQuantized<T>)
                sBias[C::BM + c] = k.scale[i];
        }
    }
}

/* Rows [r0, r1) of the staged tile to out, or as split `split`'s partial sums when partial is not
 * null. */
template <typename T, class C>
__device__ __forceinline__ void storeTile(FusedArgs const& a, float const* sT, int tid, int64_t p0, int m0, int g,
    int split, OutOf<T>* __restrict__ out, float* __restrict__ partial, int r0, int r1)
{
    constexpr int LDT = stagedLd<C>();
    float const* const sBias = sT + C::BM * LDT;
    barSync(15, C::CONSUMERS); // the staged tile is complete
    int const rows = min(min(a.mg - m0, C::BM), r1); // rows of the tile that exist, up to r1
    int64_t const pixLeft = a.pixels - p0;
    if constexpr (dcn::simple::kQuantized<T>) // 16-byte items where the output allows (storeQuantAligned)
    {
        if (partial == nullptr && storeQuantAligned<C>(a, sT, tid, p0, m0, g, out, r0, r1))
            return;
    }
    if (dcn::simple::kQuantized<T> || partial != nullptr || sizeof(T) == 4)
    {
        // 4-byte destinations (FP32 partial sums or output), and the quantized outputs that
        // storeQuantAligned leaves: each warp stores 32 consecutive pixels of one channel, 128 bytes
        // per instruction for 4-byte types (H200: 16-byte items of 4 pixels are no faster, and 8-pixel
        // items stored as two 16-byte halves make the split layers about 10 us slower).
        constexpr int CSTEP = C::CONSUMERS / C::BN;
        int const px = tid % C::BN;
        int const c0 = tid / C::BN;
        if (px >= pixLeft)
            return;
        int64_t const p = p0 + px;
        if (partial != nullptr)
        {
            int64_t const rowLen = static_cast<int64_t>(a.pixels) - a.pixBase; // pixels of the launch's tiles
            float* dst = partial + static_cast<int64_t>(split) * a.cout * rowLen
                + (static_cast<int64_t>(g) * a.mg + m0 + c0) * rowLen + (p - a.pixBase);
            int64_t const step = static_cast<int64_t>(CSTEP) * rowLen;
            // kBatch rows at a time, their shared-memory reads before their stores (rows past `rows`
            // read staged values that are not stored).
            constexpr int ROWS = C::BM / CSTEP;
            constexpr int kBatch = ROWS % 8 == 0 ? 8 : 1;
            for (int i0 = 0; i0 < ROWS; i0 += kBatch, dst += kBatch * step)
            {
                float v[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u)
                {
                    int const c = c0 + (i0 + u) * CSTEP; // quantized layers: the sums times their scales
                    v[u] = dcn::simple::kQuantized<T> ? sT[c * LDT + px] * sBias[C::BM + c] : sT[c * LDT + px];
                }
#pragma unroll
                for (int u = 0; u < kBatch; ++u)
                {
                    int const c = c0 + (i0 + u) * CSTEP;
                    if (c >= r0 && c < rows)
                        dst[u * step] = v[u];
                }
            }
            return;
        }
        // Quantized layers (8-bit T): the sums times their scales, plus bias, as a.outType.
        uint32_t const n = a.divHoWo.div(static_cast<uint32_t>(p));
        int64_t at = n * a.outImg + (p - static_cast<int64_t>(n) * a.howo)
            + (static_cast<int64_t>(g) * a.mg + m0 + c0) * a.howo;
        int64_t const step = static_cast<int64_t>(CSTEP) * a.howo;
#pragma unroll 8
        for (int i = 0; i < C::BM / CSTEP; ++i, at += step)
        {
            int const c = c0 + i * CSTEP;
            if (c < r0 || c >= rows)
                continue;
            if constexpr (dcn::simple::kQuantized<T>)
            {
                float const scale = sBias[C::BM + c]; // staged after the biases (stageTile)
                dcn::simple::storeAs(out, at, sT[c * LDT + px] * scale + sBias[c], a.outType, a.outScale);
            }
            else
                out[at] = dcn::simple::fromFloat<T>(sT[c * LDT + px] + sBias[c]);
        }
        return;
    }
    // 2-byte outputs (FP16/BF16; FP32 output is stored above): an item is 16 bytes (8 pixels) of one
    // channel, so that a warp's store covers whole 32-byte sectors. In aligned images of a multiple
    // of 8 pixels (p0 is a multiple of BN) each item is one vector store, with one image lookup per
    // thread (storeAligned; H200: 0.93-0.98x the time per call of the loop below on the FP16 layers
    // that store through it, commit 94ae378); else the loop below stores the items
    // element by element and finds the image of each.
    if constexpr (sizeof(T) == 2)
    {
        if (alignedStore(a, out))
        {
            storeAligned<T, C, C::CONSUMERS, 4>(a, sT, tid, p0, m0, g, out, r0, r1);
            return;
        }
        constexpr int VE = 16 / sizeof(T);
        constexpr int GROUPS = C::BN / VE;
        // kItems items per thread at a time, their shared-memory reads before their stores: one item
        // after another, each waited for its reads (only the consumer warps are left to hide that).
        constexpr int kItems = 4;
        int const items = (rows - r0) * GROUPS;
        for (int it0 = tid; it0 < items; it0 += kItems * C::CONSUMERS)
        {
            float v[kItems][VE];
    #pragma unroll
            for (int u = 0; u < kItems; ++u)
            {
                int const it = it0 + u * C::CONSUMERS;
                int const c = r0 + it / GROUPS;
                int const px = (it - (c - r0) * GROUPS) * VE;
                if (it < items && px < pixLeft)
                    readStaged<C, VE>(sT, c, px, sBias[c], v[u]);
            }
    #pragma unroll
            for (int u = 0; u < kItems; ++u)
            {
                int const it = it0 + u * C::CONSUMERS;
                int const c = r0 + it / GROUPS;
                int const px = (it - (c - r0) * GROUPS) * VE;
                if (it >= items || px >= pixLeft)
                    continue;
                int const count = pixLeft - px < VE ? static_cast<int>(pixLeft - px) : VE;
                int64_t const chan = static_cast<int64_t>(g) * a.mg + m0 + c;
                int64_t const p = p0 + px;
                uint32_t const n = a.divHoWo.div(static_cast<uint32_t>(p));
                int64_t const r = p - static_cast<int64_t>(n) * a.howo;
                if (r + count <= a.howo)
                {
                    storeItem<T, VE>(out + n * a.outImg + chan * a.howo + r, v[u], false, count);
                    continue;
                }
    #pragma unroll
                for (int i = 0; i < VE; ++i) // the item crosses an image boundary
                {
                    if (i >= count)
                        break;
                    uint32_t const ni = a.divHoWo.div(static_cast<uint32_t>(p + i));
                    out[ni * a.outImg + chan * a.howo + (p + i - static_cast<int64_t>(ni) * a.howo)]
                        = dcn::simple::fromFloat<T>(v[u][i]);
                }
            }
        }
    }
}

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
        float fresh[FP8 ? fp8FreshN<C>() / 2 : 1] = {}; // FP8: one slice's sums of a chunk (wgmmaFp8Chunk)
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
            if constexpr (FP8)
            {
                wgmmaFp8Chunk<C>(&acc[0][0][0], fresh, aS, bS);
                if (kc + C::STAGES < nChunks)
                    mbarArrive(emptyS + 8 * s);
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
                    mbarArrive(emptyS + 8 * s);
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
                    int const sf = (kc - 1) % C::STAGES;
                    if constexpr (C::PAIR) // on the block that fills stage sf (rank sf % 2)
                    {
                        if (static_cast<uint32_t>(sf & 1) == rank)
                            mbarArrive(emptyS + 8 * sf);
                        else
                            mbarArriveRemote(emptyS + 8 * sf + peer);
                    }
                    else
                        mbarArrive(emptyS + 8 * sf);
                }
            }
        }
        // PAIR: this block arrives on the other's mbarriers no more; the wait at the end keeps both
        // blocks (their mbarriers and stages) alive until then.
        if constexpr (C::PAIR)
            clusterArrive();
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
