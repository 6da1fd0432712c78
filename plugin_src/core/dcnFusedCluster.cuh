/*
 * dcnconvert core: split-K inside a thread-block cluster for the channel-vectorised fused kernel
 * (sm_90): the blocks of one output tile exchange their FP32 sums through distributed shared memory
 * instead of writing partial sums for the reduction kernel. The host side (when it is used) is in
 * dcnFusedLaunch.h and dcnFusedCluster.cu. Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_CLUSTER_CUH
#define DCN_FUSED_CLUSTER_CUH

#include "dcnFusedCommon.cuh" // FusedArgs
#include "dcnFusedMma.cuh"
#include "dcnFusedTma.cuh"

#include <stdint.h>

namespace dcn
{
namespace fused
{

/* Split-K inside a thread-block cluster (sm_90, a.clusterReduce; the host checks C::clusterFits): the
 * a.splits blocks of one output tile are one cluster along z, block rank r = split r, and each has
 * staged its FP32 sums in sT (stageTile, with the biases). Block r owns rows [r * share, (r + 1) *
 * share) of the tile. Each block copies its sums of every other block's rows into that block's
 * receive area (C::RECV_OFF) with one bulk asynchronous copy per destination (the copy engine moves
 * the bytes and counts them on the destination's mbarrier), waits until its own receive area is
 * complete, and adds up its rows in split order into the same rows of its sT, which no other block
 * reads (float layers: the bits of dcnSplitReduceKernel; quantized layers add the sums before their
 * scale, which storeTile applies once, where the reduction kernel adds scaled partial sums).
 * Returns the rows this block stores; clusterRelease then waits until no copy reads this block's
 * shared memory any more. The cluster barriers count
 * the threads that have not exited (the producer warps exit after their last chunk). Copying each
 * slice in one piece keeps the threads out of the transfer: loads of remote shared memory, one item
 * after another, cost more than the reduction kernel. */
template <class C>
__device__ __forceinline__ int2 clusterReduceTile(FusedArgs const& a, float* sT, int tid, int m0)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int QUADS = C::BN / 4;
    constexpr uint32_t ROW = C::ROW_BYTES;
    int const splits = a.splits;
    int const share = C::recvShare(splits);
    int const me = static_cast<int>(clusterRank());
    uint32_t const base = smemAddr(sT);
    uint32_t const recv = base + C::RECV_OFF;
    uint32_t const bar = base + C::STAGE_BYTES - 8;
    auto rowsOf = [&](int r) { return max(0, min(C::BM, (r + 1) * share) - r * share); };
    if (tid == 0)
    {
        mbarInit(bar, 1);
        mbarInitFence();
    }
    fenceProxyAsync(); // this thread's sT stores, before the copy engine reads them
    clusterSync();
    if (tid == 0)
    {
        mbarArriveExpectTx(bar, static_cast<uint32_t>((splits - 1) * rowsOf(me)) * ROW);
        for (int d = 0; d < splits; ++d)
        {
            int const n = rowsOf(d);
            if (d == me || n == 0)
                continue;
            int const slot = me < d ? me : me - 1;
            uint32_t const peer = static_cast<uint32_t>(d);
            bulkCopyToCluster(clusterAddr(recv + static_cast<uint32_t>(slot * share) * ROW, peer),
                base + static_cast<uint32_t>(d * share) * ROW, static_cast<uint32_t>(n) * ROW, clusterAddr(bar, peer));
        }
    }
    mbarWait(bar, 0);
    int const c0 = me * share;
    int const rows = min(a.mg - m0, C::BM);
    int const c1 = min(rows, c0 + share);
    float const* const slots = reinterpret_cast<float const*>(reinterpret_cast<char const*>(sT) + C::RECV_OFF);
    // kItems float4s per thread at a time, their loads before their adds: one after another, each
    // add waited for its shared-memory loads (H200: 1.9 us for a 2-split 256x64 FP16 tile; H100:
    // 1.85 us for the INT8 one against FP16's 1.2 when INT8 had 1). FP32 tiles keep 1: with 4, ptxas
    // spills in the 3xTF32 warpgroup tile, which had no spills.
    constexpr int kItems = C::ELEM_BYTES <= 2 ? 4 : 1;
    int const items = (c1 - c0) * QUADS;
    for (int it0 = tid; it0 < items; it0 += kItems * C::CONSUMERS)
    {
        int off[kItems];
        float4 sum[kItems];
#pragma unroll
        for (int u = 0; u < kItems; ++u)
        {
            int const it = it0 + u * C::CONSUMERS;
            off[u] = (it / QUADS) * (ROW / 4) + (it - (it / QUADS) * QUADS) * 4;
            sum[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (it < items)
                sum[u] = me == 0 ? *reinterpret_cast<float4 const*>(sT + c0 * (ROW / 4) + off[u])
                                 : *reinterpret_cast<float4 const*>(slots + off[u]);
        }
        for (int s = 1; s < splits; ++s)
        {
            float const* const src = s == me ? sT + c0 * (ROW / 4) : slots + (s < me ? s : s - 1) * share * (ROW / 4);
            float4 v[kItems];
#pragma unroll
            for (int u = 0; u < kItems; ++u)
                v[u] = it0 + u * C::CONSUMERS < items ? *reinterpret_cast<float4 const*>(src + off[u])
                                                      : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int u = 0; u < kItems; ++u)
            {
                sum[u].x += v[u].x;
                sum[u].y += v[u].y;
                sum[u].z += v[u].z;
                sum[u].w += v[u].w;
            }
        }
#pragma unroll
        for (int u = 0; u < kItems; ++u)
        {
            if (it0 + u * C::CONSUMERS < items)
                *reinterpret_cast<float4*>(sT + c0 * (ROW / 4) + off[u]) = sum[u];
        }
    }
    return make_int2(c0, c1 > c0 ? c1 : c0);
#else
    (void) a, (void) sT, (void) tid, (void) m0;
    return make_int2(0, 0);
#endif
}

/* The end of a cluster reduction: every block has received its slices (so every copy out of this
 * block's shared memory is complete) before any block exits. */
__device__ __forceinline__ void clusterRelease()
{
    clusterSync();
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_CLUSTER_CUH
