/*
 * dcnconvert: the kernels around the channel-vectorised fused kernel (dcnFusedNhwc.cuh): the prep
 * pass that writes x as NHWC and the weights in its K order into the workspace, and the split-K
 * reduction that adds the FP32 partial sums of the K splits, adds the bias and writes NCHW output.
 */
#ifndef DCN_FUSED_AUX_CUH
#define DCN_FUSED_AUX_CUH

#include "dcnFusedNhwc.cuh"

#include <type_traits>

namespace dcn
{
namespace fused
{

constexpr int kPrepTile = 64;       // x transpose: 64 channels x 64 pixels per block
constexpr int kPrepSegment = 4096; // weight elements one prep block permutes through shared memory

// Weight modes (kWeightCopy, kWeightTf32, kWeightSplit): dcnFusedTiles.h.

template <typename T>
__device__ __forceinline__ void putWeight(T* dst, int64_t j, T v, int32_t wMode, int64_t wLo)
{
    if constexpr (sizeof(T) == 4)
    {
        if (wMode == kWeightTf32)
            v = __uint_as_float(toTf32(v));
        else if (wMode == kWeightSplit)
        {
            uint32_t big = 0;
            uint32_t small = 0;
            splitTf32(v, big, small);
            v = __uint_as_float(big);
            dst[wLo + j] = __uint_as_float(small);
        }
    }
    dst[j] = v;
}

template <typename T>
__device__ __forceinline__ void putWeights(T* dst, int64_t j, uint4 v, int32_t wMode, int64_t wLo)
{
    if constexpr (sizeof(T) == 4)
    {
        if (wMode == kWeightTf32)
            v = tf32Vec(v);
        else if (wMode == kWeightSplit)
        {
            uint4 small;
            v = tf32SplitVec(v, small);
            *reinterpret_cast<uint4*>(dst + wLo + j) = small;
        }
    }
    *reinterpret_cast<uint4*>(dst + j) = v;
}

/* Prep: x (NCHW) -> xh (NHWC) by 64 x 64 tiles (16 elements per thread, all loads in flight
 * before the block synchronises; with xVec, two-byte T whose planes are 16-byte aligned (hw % 8 ==
 * 0): two 16-byte loads of 8 pixels and two 16-byte stores of 8 channels per thread), then the
 * weights -> wp. 256 threads per block; blocks
 * [0, xBlocks) transpose, the rest permute `segsPerBlock` consecutive (output channel, channel
 * block) segments of BK * kk weights each: read in the weight's order (c, kp) and written in the K
 * order (kp, c), both coalesced through shared memory, in 16-byte vectors when w is 16-byte aligned
 * (wVec; a segment longer than kPrepSegment element by element), in weight mode wMode (above). */
template <typename T>
__global__ void __launch_bounds__(256) dcnPrepKernel(T const* __restrict__ x, T const* __restrict__ w,
    T* __restrict__ xh, T* __restrict__ wp, int64_t n, int32_t c, int64_t hw, int64_t xBlocks, int64_t segments,
    int32_t segsPerBlock, int32_t kk, int32_t bkShift, int32_t wVec, int32_t xVec, int32_t wMode, int64_t wLo)
{
    __shared__ T tile[kPrepTile][kPrepTile + 1];
    __shared__ __align__(16) T seg[kPrepSegment];
    // Launched as a programmatic dependent (sm_90): the stream's previous kernel is complete and its
    // writes visible after this wait. Only then may the fused kernel start its sampling plans, which
    // read offset and mask before their own wait (dcnFused.cu).
    gridDependencyWait();
    gridDependencyTrigger();
    int64_t const b = blockIdx.x;
    if (b < xBlocks)
    {
        int64_t const hwTiles = (hw + kPrepTile - 1) / kPrepTile;
        int64_t const cTiles = (c + kPrepTile - 1) / kPrepTile;
        int64_t const img = b / (hwTiles * cTiles);
        int64_t const rem = b - img * hwTiles * cTiles;
        int64_t const c0 = rem / hwTiles * kPrepTile;
        int64_t const p0 = (rem - rem / hwTiles * hwTiles) * kPrepTile;
        int const lo = threadIdx.x & (kPrepTile - 1);
        int const hi = threadIdx.x / kPrepTile; // 0..3
        T const* const src = x + img * c * hw;
        T* const dst = xh + img * c * hw;
        if constexpr (sizeof(T) == 2)
        {
            if (xVec)
            {
                // Vector u of this thread: channel row ch, pixels pv .. pv + 7 (loads), and pixel
                // px, channels cv .. cv + 7 (stores); c is a multiple of 8 here.
                uint4 in[2];
#pragma unroll
                for (int u = 0; u < 2; ++u)
                {
                    int const v = threadIdx.x + 256 * u;
                    int64_t const ch = c0 + (v >> 3);
                    int64_t const px = p0 + (v & 7) * 8;
                    in[u] = ch < c && px < hw ? *reinterpret_cast<uint4 const*>(src + ch * hw + px)
                                              : make_uint4(0u, 0u, 0u, 0u);
                }
#pragma unroll
                for (int u = 0; u < 2; ++u)
                {
                    int const v = threadIdx.x + 256 * u;
                    T const* const e = reinterpret_cast<T const*>(&in[u]);
#pragma unroll
                    for (int i = 0; i < 8; ++i)
                        tile[v >> 3][(v & 7) * 8 + i] = e[i];
                }
                __syncthreads();
#pragma unroll
                for (int u = 0; u < 2; ++u)
                {
                    int const v = threadIdx.x + 256 * u;
                    int const cv = (v & 7) * 8;
                    int64_t const px = p0 + (v >> 3);
                    if (px < hw && c0 + cv < c)
                    {
                        uint4 out;
                        T* const e = reinterpret_cast<T*>(&out);
#pragma unroll
                        for (int i = 0; i < 8; ++i)
                            e[i] = tile[cv + i][v >> 3];
                        *reinterpret_cast<uint4*>(dst + px * c + c0 + cv) = out;
                    }
                }
                return;
            }
        }
        constexpr int kRows = kPrepTile / 4;
        T v[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) // channel c0 + hi + 4i, pixel p0 + lo
        {
            int64_t const ch = c0 + hi + 4 * i;
            v[i] = (ch < c && p0 + lo < hw) ? src[ch * hw + p0 + lo] : T();
        }
#pragma unroll
        for (int i = 0; i < kRows; ++i)
            tile[hi + 4 * i][lo] = v[i];
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kRows; ++i) // pixel p0 + hi + 4i, channel c0 + lo
        {
            int64_t const px = p0 + hi + 4 * i;
            if (px < hw && c0 + lo < c)
                dst[px * c + c0 + lo] = tile[lo][hi + 4 * i];
        }
        return;
    }
    // Segment (m, cb) = m * (cg / BK) + cb: w[m][cb * BK + ci][kp] -> wp[m][(cb * kk + kp) * BK + ci].
    int const bk = 1 << bkShift;
    int const len = bk * kk;
    int64_t const first = (b - xBlocks) * segsPerBlock;
    int64_t const count = segments - first < segsPerBlock ? segments - first : segsPerBlock;
    T const* const src = w + first * len;
    T* const dst = wp + first * len;
    int64_t const total = count * len;
    if (total <= kPrepSegment && wVec)
    {
        // 16-byte loads and stores (w is 16-byte aligned and every segment is a multiple of 32
        // elements); each thread writes 16 bytes of consecutive channels at one kernel point.
        constexpr int kVec = 16 / sizeof(T);
        constexpr int kPer = kPrepSegment / (256 * kVec);
        uint4 v[kPer]; // every load in flight before the first shared-memory store
#pragma unroll
        for (int u = 0; u < kPer; ++u)
        {
            int const i = (threadIdx.x + u * 256) * kVec;
            v[u] = i < total ? *reinterpret_cast<uint4 const*>(src + i) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < kPer; ++u)
        {
            int const i = (threadIdx.x + u * 256) * kVec;
            if (i < total)
                *reinterpret_cast<uint4*>(seg + i) = v[u];
        }
        __syncthreads();
        for (int j = threadIdx.x * kVec; j < total; j += 256 * kVec)
        {
            int const sgm = j / len;
            int const r = j - sgm * len;
            T const* const sp = seg + sgm * len + (r & (bk - 1)) * kk + (r >> bkShift);
            uint4 o;
            T* const op = reinterpret_cast<T*>(&o);
#pragma unroll
            for (int q = 0; q < kVec; ++q)
                op[q] = sp[q * kk];
            putWeights<T>(dst, j, o, wMode, wLo);
        }
    }
    else if (total <= kPrepSegment)
    {
        constexpr int kPer = kPrepSegment / 256;
        T v[kPer]; // every load in flight before the first shared-memory store
#pragma unroll
        for (int u = 0; u < kPer; ++u)
        {
            int const i = threadIdx.x + u * 256;
            v[u] = i < total ? src[i] : T();
        }
#pragma unroll
        for (int u = 0; u < kPer; ++u)
        {
            int const i = threadIdx.x + u * 256;
            if (i < total)
                seg[i] = v[u];
        }
        __syncthreads();
        for (int j = threadIdx.x; j < total; j += 256)
        {
            int const sgm = j / len;
            int const r = j - sgm * len;
            putWeight<T>(dst, j, seg[sgm * len + (r & (bk - 1)) * kk + (r >> bkShift)], wMode, wLo);
        }
    }
    else
    {
        for (int64_t j = threadIdx.x; j < total; j += 256)
        {
            int64_t const sgm = j / len;
            int const r = static_cast<int>(j - sgm * len);
            putWeight<T>(dst, j, src[sgm * len + (r & (bk - 1)) * kk + (r >> bkShift)], wMode, wLo);
        }
    }
}

/* Split-K epilogue: out[n][co][r] = bias[co] + sum over s of partial[s][co][p - pixBase] for the
 * pixels p = n * howo + r >= a.pixBase, the splits added in order (deterministic). QOUT: a quantized
 * layer's quantized output (a.outType, a.outScale); its float output is T's. One thread per
 * 4 consecutive pixels of one output channel, with all its loads in flight at once (16-byte loads
 * when the rows of partial sums are 16-byte aligned, (pixels - pixBase) % 4 == 0), so that a
 * typical layer's reduction is about one wave of blocks. Grid: ceil(cout * ceil((pixels - pixBase) / 4) / 256) blocks of 256. */
template <typename T, bool QOUT = false>
__global__ void __launch_bounds__(256) dcnSplitReduceKernel(FusedArgs const a, float const* __restrict__ partial,
    T const* __restrict__ bias, void* __restrict__ outV)
{
    T* const out = static_cast<T*>(outV);
    gridDependencyWait(); // the partial sums are complete (programmatic dependent launch, sm_90)
    // After a call without a prep pass (a.waitFirst: x channel-last, weights prepared) the stream's
    // next kernel may be scheduled now; it still waits for this grid before it reads anything. On
    // an H200 with back-to-back calls this took 8-11% off the engine path of the 4-8-split CenterNet
    // layers and 1.6-3.9% off R50-c5 and OCD-l4. After a prep pass the release waits for the
    // stores (below): released here, the next call's prep pass made the NCHW path up to 10% slower.
    if (a.waitFirst)
        gridDependencyTrigger();
    int64_t const len = static_cast<int64_t>(a.pixels) - a.pixBase; // pixels of a row of partial sums
    int64_t const quads = (len + 3) / 4;
    int64_t const q = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
    int64_t const items = quads * a.cout;
    if (q >= items)
        return;
    // The loads' addresses wait on this division: 32-bit where the items allow, a much shorter
    // instruction sequence than a 64-bit one.
    int64_t co;
    if (items <= static_cast<int64_t>(UINT32_MAX))
        co = static_cast<uint32_t>(q) / static_cast<uint32_t>(quads);
    else
        co = q / quads;
    int64_t const i0 = (q - co * quads) * 4; // in the row
    int64_t const plane = static_cast<int64_t>(a.cout) * len;
    float const* const src = partial + co * len + i0;
    float4 v[kDCN_MAX_SPLITS];
    if (len % 4 == 0)
    {
#pragma unroll
        for (int s = 0; s < kDCN_MAX_SPLITS; ++s)
            v[s] = s < a.splits ? *reinterpret_cast<float4 const*>(src + s * plane) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    else
    {
#pragma unroll
        for (int s = 0; s < kDCN_MAX_SPLITS; ++s)
        {
            float e[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
                e[j] = s < a.splits && i0 + j < len ? src[s * plane + j] : 0.0f;
            v[s] = make_float4(e[0], e[1], e[2], e[3]);
        }
    }
    float4 sum = v[0];
#pragma unroll
    for (int s = 1; s < kDCN_MAX_SPLITS; ++s)
    {
        if (s < a.splits)
        {
            sum.x += v[s].x;
            sum.y += v[s].y;
            sum.z += v[s].z;
            sum.w += v[s].w;
        }
    }
    float const b = a.withBias ? dcn::simple::toFloat<T>(ldT(bias + co)) : 0.0f;
    float const r[4] = {sum.x, sum.y, sum.z, sum.w};
    // The 4 outputs in one store where they are consecutive in one image and the address allows it.
    using Vec = typename std::conditional<sizeof(T) == 2, uint2, uint4>::type;
    int64_t const pf = a.pixBase + i0;
    uint32_t const nf = a.divHoWo.div(static_cast<uint32_t>(pf));
    int64_t const rf = pf - static_cast<int64_t>(nf) * a.howo;
    T* const dst = out + nf * a.outImg + co * a.howo + rf;
    if (QOUT) // a quantized output (the partial sums were scaled, dcnFusedNhwcEpilogue.cuh)
    {
#pragma unroll
        for (int j = 0; j < 4; ++j)
        {
            int64_t const p = pf + j;
            if (p < a.pixels)
            {
                uint32_t const n = a.divHoWo.div(static_cast<uint32_t>(p));
                dcn::simple::storeAs(outV, n * a.outImg + co * a.howo + (p - static_cast<int64_t>(n) * a.howo), r[j] + b,
                    a.outType, a.outScale);
            }
        }
    }
    else if (pf + 3 < a.pixels && rf + 3 < a.howo && reinterpret_cast<uintptr_t>(dst) % sizeof(Vec) == 0)
    {
        alignas(16) T e[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            e[j] = dcn::simple::fromFloat<T>(r[j] + b);
        *reinterpret_cast<Vec*>(dst) = *reinterpret_cast<Vec const*>(e);
    }
    else
    {
#pragma unroll
        for (int j = 0; j < 4; ++j)
        {
            int64_t const p = pf + j;
            if (p < a.pixels)
            {
                uint32_t const n = a.divHoWo.div(static_cast<uint32_t>(p));
                out[n * a.outImg + co * a.howo + (p - static_cast<int64_t>(n) * a.howo)]
                    = dcn::simple::fromFloat<T>(r[j] + b);
            }
        }
    }
    if (!a.waitFirst)
        gridDependencyTrigger(); // while this grid drains (FP32 dla-ida1-proj NCHW path 18.7 us; at the wait 20.6)
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_AUX_CUH
