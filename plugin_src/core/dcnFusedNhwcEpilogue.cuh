/*
 * dcnconvert core: the epilogue of the channel-vectorised fused kernel's consumers
 * (dcnFusedNhwcConsumers.cuh): the biases and weight scales loaded before the main loop, the tile
 * staged in shared memory, and its stores (output, or FP32 partial sums when K is split).
 * Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_NHWC_EPILOGUE_CUH
#define DCN_FUSED_NHWC_EPILOGUE_CUH

#include "dcnFusedCommon.cuh"
#include "dcnFusedNhwcParts.cuh"
#include "dcnFusedTma.cuh"

namespace dcn
{
namespace fused
{

/* The tile's biases and (quantized layers) the sums' scales, x's scale times each output channel's
 * weight scale: channel ctid + i CONSUMERS in element i. The consumers load them before their main
 * loop, where they wait for the first stage anyway; loaded in stageTile, they were global loads on
 * the path from the last MMA to the stores (H100: 0.5-0.7 us more from the last MMA to the staged
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

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_NHWC_EPILOGUE_CUH
