/*
 * dcnconvert core: the pieces of the sample-sharing tile (NTile::PAIR, sm_90a): the blocks of two
 * neighbouring channel tiles of one pixel tile run as a cluster of two, and the block that samples
 * a K chunk copies the samples into the other block's stage (the copy engine, counted on that
 * block's FULL mbarrier) and loads the other block's weight tile too (multicast TMA to that block
 * alone). A shared-memory address of this block plus pairDelta() is the same byte in the other
 * block (shared::cluster addresses; each block's window is contiguous). The cluster primitives they
 * build on are in dcnFusedTma.cuh. Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_PAIR_CUH
#define DCN_FUSED_PAIR_CUH

#include "dcnFusedTma.cuh"   // cluster primitives (sm_90)
#include "dcnFusedWgmma.cuh" // DCN_WGMMA_DEVICE: sm_90a code (multicast TMA)

#include <cuda.h>
#include <stdint.h>

namespace dcn
{
namespace fused
{

/* The distance from a shared-memory address of this block to the same address in block `rank`. */
__device__ __forceinline__ uint32_t pairDelta(uint32_t local, uint32_t rank)
{
    return clusterAddr(local, rank) - local;
}

/* tmaLoad2d into the block(s) of the cluster in ctaMask: the box lands at `dst` and completes its
 * bytes on `bar`, both this block's shared-memory addresses taken in each destination block. */
__device__ __forceinline__ void tmaLoad2dTo(
    uint32_t dst, CUtensorMap const* map, int c0, int c1, uint32_t bar, uint16_t ctaMask)
{
#ifdef DCN_WGMMA_DEVICE
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(ctaMask)
        : "memory");
#endif
}

/* The sample-sharing tile's producers (dcnFusedNhwc.cuh). pairWeightTile: the box (c0, c1) of the
 * weight map into the other block at `dst` (this block's address of the same stage), announced on
 * and counted by the other block's mbarrier at `bar`. pairCopyRows, by the whole warp after each
 * lane fenced its stores of the rows: its lane 0 copies the warp's `bytes` of the sample tile at
 * `rows` into the other block, counted on that block's FULL mbarrier at `full`. */
__device__ __forceinline__ void pairWeightTile(uint32_t dst, uint32_t bar, uint32_t rank, uint32_t peer, uint32_t bytes,
    CUtensorMap const* map, int c0, int c1)
{
    mbarArriveExpectTxRemote(bar + peer, bytes);
    tmaLoad2dTo(dst, map, c0, c1, bar, static_cast<uint16_t>(1u << (rank ^ 1u)));
}
__device__ __forceinline__ void pairCopyRows(uint32_t rows, uint32_t full, uint32_t peer, uint32_t bytes, int lane)
{
    __syncwarp();
    if (lane == 0)
    {
        mbarArriveExpectTxRemote(full + peer, bytes);
        bulkCopyToCluster(rows + peer, rows, bytes, full + peer);
    }
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_PAIR_CUH
