/*
 * dcnconvert core: the compile-time configuration of the channel-vectorised fused kernel
 * (dcnFusedNhwc.cuh): one NTile per entry of the tile table (dcnFusedTiles.h) and element type:
 * warp roles, stage layout, producer task mapping, register ring and register split.
 * Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_NHWC_TILE_CUH
#define DCN_FUSED_NHWC_TILE_CUH

#include "dcnElements.cuh"
#include "dcnFusedTiles.h"

#include <cuda_fp16.h>

#include <stddef.h>
#include <stdint.h>
#include <type_traits>

namespace dcn
{
namespace fused
{

template <typename T, int BM_, int BN_, int WARPS_M_, int CW_, int PW_, int STAGES_, int BK_, bool ASYNC_A_,
    bool TMA_A_ = false, bool WG_ = false, int PREGS_ = 0, int SPLIT_ = 1, bool PAIR_ = false>
struct NTile
{
    // The table entry these parameters come from (its shape fields: the shared-memory sizes below
    // are tileSmemBytes' terms, the host's numbers).
    static constexpr TileShape SHAPE{
        BM_, BN_, WARPS_M_, CW_, PW_, STAGES_, true, BK_, ASYNC_A_, TMA_A_, WG_, PREGS_, 0, 0, 0, 0, 0, 0, 0, 0, 0, PAIR_};
    static constexpr int ELEM_BYTES = sizeof(T);
    static constexpr int BM = BM_;
    static constexpr int BN = BN_;
    static constexpr int BK = BK_; // one block of BK channels at one kernel point
    static constexpr bool ASYNC_A = ASYNC_A_; // weight tile by cp.async (see dcnFusedTiles.h)
    // Weight tile by TMA (sm_90, dcnFusedTma.cuh): [BM][BK] rows of 128 bytes with the 128-byte
    // swizzle (SWZ_A, undone in chunkMma), full when its mbarrier's phase completes.
    static constexpr bool TMA_A = TMA_A_;
    static constexpr bool SWZ_A = TMA_A_;
    static constexpr bool REG_A = !ASYNC_A && !TMA_A; // weight tile through the producers' registers
    // Warpgroup MMAs (sm_90a, dcnFusedWgmma.cuh): each group of 4 consumer warps owns BM / CWG rows
    // (MT m64 slices) x all BN pixels; the B tile is swizzled like A (SWZ_B).
    static constexpr bool WG = WG_;
    static constexpr bool SWZ_B = WG_;
    static constexpr int CWG = CW_ / 4;
    // Swapped warpgroup tiles (64 pixels wide): wgmma m64n128k16 (SWAP_N = 128 or fewer output
    // channels) with the 64 pixels as rows (A: the sample tile) and output channels as columns (B:
    // the weight tile). Per K step a warpgroup reads the weights once and the samples once per 128
    // output channels, where the m64n64 form reads the samples once per 64. The epilogue transposes
    // through shared memory (stageTile, dcnFusedNhwcEpilogue.cuh).
    static constexpr bool SWAP = WG_ && BN_ == 64;
    static constexpr int SWAP_N = BM_ / (CW_ / 4) < 128 ? BM_ / (CW_ / 4) : 128;
    static constexpr int MT_STRIDE = WG_ ? 64 : 16;
    // The stages are handed over through mbarriers (FULL: one arrival per producer thread; EMPTY: one
    // per consumer thread): a producer warp waits for the consumers only, not for the other producer
    // warps as at a named barrier, and compute-sanitizer's racecheck follows the order (it reports
    // hazards on a bar.arrive / bar.sync hand-over). Every thread arrives (not one lane after
    // __syncwarp(), an order racecheck does not follow either).
    static constexpr int STAGES = STAGES_;
    static constexpr int CW = CW_;
    static constexpr int PW = PW_;
    static constexpr int CONSUMERS = CW * 32;
    static constexpr int PRODUCERS = PW * 32;
    static constexpr int THREADS = CONSUMERS + PRODUCERS;
    // PREGS > 0 (warpgroup tiles): the producers give registers up to PREGS per thread and the
    // consumers take them (setmaxnreg, dcnFusedWgmma.cuh), up to CREGS: what the block was launched
    // with (LAUNCH_REGS per thread, checked on the host) less the producers' share.
    static constexpr int PREGS = PREGS_;
    static constexpr int LAUNCH_REGS = (65536 / THREADS) / 8 * 8 > 255 ? 248 : (65536 / THREADS) / 8 * 8;
    static constexpr int CREGS_RAW = PREGS > 0 ? (LAUNCH_REGS * THREADS - PREGS * PRODUCERS) / CONSUMERS / 8 * 8 : 0;
    static constexpr int CREGS = CREGS_RAW > 256 ? 256 : CREGS_RAW;
    static constexpr int WARPS_M = WARPS_M_;
    static constexpr int WARPS_N = CW / WARPS_M;
    static constexpr int WTM = BM / WARPS_M;
    static constexpr int WTN = BN / WARPS_N;
    static constexpr int MT = WTM / 16;
    static constexpr int NT = WTN / 8;
    // FP16 interpolates in __half2 pairs (HFMA2): 8 channels in 16 instructions instead of 68
    // (conversions, FP32 FMAs, packing). BF16 keeps FP32 sums: summed in BF16 pairs, its error
    // reaches the im2col baseline's (5.1e-3 measured on an H200). The 8-bit types take the packed
    // plan entries too: FP8 interpolates in FP16 pairs, INT8 in fixed point where the entry allows
    // (dcnParams.h); in FP32 their producers took 1.3-2.6x as long as FP16's.
    static constexpr bool PACK16 = std::is_same<T, __half>::value || dcn::simple::kQuantized<T>;
    static constexpr int PAD = rowPad(sizeof(T)); // 16 bytes
    static constexpr int LDA = TMA_A ? BK : BK + PAD; // sA [BM][LDA]
    static constexpr int LDB = SWZ_B ? BK : BK + PAD; // sB [BN][LDB] (K contiguous)
    static constexpr int VEC = 16 / sizeof(T);
    static constexpr int TPP = BK / VEC;                 // tasks (16-byte vectors) per pixel and chunk
    // A producer thread loads and finishes its PXT tasks of a chunk in SUB units of PXU tasks and
    // holds PD units in flight (producerTasks, producerUnits, ringDepth: dcnFusedTiles.h).
    static constexpr int PXT = producerTasks(SHAPE, sizeof(T)); // tasks per producer thread and chunk
    static constexpr int SUB = producerUnits(SHAPE, sizeof(T));
    static constexpr int PXU = PXT / SUB;
    static constexpr int PD = ringDepth(SHAPE, sizeof(T));
    // Sampling-plan entries whose offset and mask loads a producer thread has in flight at once
    // (buildPlan). One entry after another, the plan took 3-4.6 us of a 10-27 us block on an H200
    // (per-block timestamps), most of it waiting on memory. 2 where ptxas reports no more spills
    // than with 1 (-Xptxas -v, sm_90a and sm_90): the FP16/BF16 tiles with a register split or 4 TMA
    // stages, and the 8-bit TMA tiles of 32 or 64 pixels (their plans are FP16 too; wg-128x128-q8
    // spills more with 2). The other tiles keep 1; FP32 was not measured with 2.
    static constexpr int PLAN_BATCH
        = (sizeof(T) == 2 && (PREGS_ > 0 || (TMA_A_ && STAGES_ >= 4))) || (sizeof(T) == 1 && TMA_A_ && BN_ <= 64) ? 2 : 1;
    static constexpr int A_VECS = BM * BK / VEC;
    // SPLIT = 2 (FP32 warpgroup tiles in 3xTF32): each stage holds every operand twice, its TF32
    // big part and then its TF32 small part (A_HALF, B_HALF bytes further), as the prep kernel
    // (weights) and the producers (samples) split them; wgmma reads both from shared memory.
    static constexpr int SPLIT = SPLIT_;
    // PAIR (TileShape::pairM): the blocks of channel tiles 2i and 2i + 1 of a pixel tile are one
    // cluster along y. Block r (its rank) samples chunks r, r + 2, ..., into its stage, copies each
    // producer warp's rows of it into the other block's stage (a bulk copy per warp and task of a
    // thread) and issues both blocks' weight tiles for that stage; with an even STAGES, stage s is
    // always filled by block s % 2. FULL counts the filling block's producer threads there and its
    // producer warps' copies in the other block; EMPTY, in the filling block, the consumers of both
    // blocks.
    static constexpr bool PAIR = PAIR_;
    // The rows of the sample tile that one producer warp writes per task of a thread (32 tasks, 32 /
    // TPP pixels of LDB elements), contiguous in the stage: what it copies to the other block, PXT
    // such runs PRODUCERS / TPP pixels apart.
    static constexpr uint32_t PAIR_ROWS_BYTES = static_cast<uint32_t>(32 / TPP * LDB * sizeof(T));
    static_assert(!PAIR || (WG && TMA_A && STAGES % 2 == 0 && SPLIT == 1 && 32 % TPP == 0),
        "sample-sharing tile");
    static constexpr size_t A_HALF = stageABytes(SHAPE, sizeof(T));
    static constexpr size_t B_HALF = stageBBytes(SHAPE, sizeof(T));
    static_assert(A_HALF == size_t(BM) * LDA * sizeof(T) && B_HALF == size_t(BN) * LDB * sizeof(T), "stage layout");
    static constexpr size_t A_BYTES = SPLIT * A_HALF;
    static constexpr size_t B_BYTES = SPLIT * B_HALF;
    static_assert(WTM % 16 == 0 && WTN % 16 == 0 && CW % WARPS_M == 0, "tile shape");
    static_assert(PXT >= 1 && BN * TPP == PXT * PRODUCERS, "producer mapping");
    static_assert(STAGES >= 2, "pipeline stages");
    static_assert(BK == 32 || (BK == 64 && sizeof(T) == 2) || (BK == 128 && sizeof(T) == 1), "chunk size");
    static_assert(!TMA_A || (BK * sizeof(T) == 128 && A_BYTES % 1024 == 0 && !ASYNC_A), "TMA weight tile");
    static_assert(!WG || (TMA_A && CW % 4 == 0 && WARPS_M == CW && (BN == 64 || BN == 128 || (BN == 32 && sizeof(T) == 1)) && BM == CWG * MT * 64
                             && B_BYTES % 1024 == 0), "warpgroup tile");
    static_assert(!SWAP || ((BM / CWG) % SWAP_N == 0 && (SWAP_N == 64 || SWAP_N == 128)), "swapped warpgroup tile");
    static_assert(BN % 8 == 0 && CONSUMERS % BN == 0
            && size_t(BM) * (BN + 4 + 1) * sizeof(float) <= STAGES * (A_BYTES + B_BYTES),
        "epilogue through shared memory (stageTile, storeTile)");
    // 8-bit tiles stage the BM weight scales after the biases.
    static_assert(sizeof(T) != 1 || size_t(BM) * (BN + 4 + 2) * sizeof(float) <= STAGES * (A_BYTES + B_BYTES),
        "quantized epilogue through shared memory");
    static_assert(PXT % SUB == 0 && (SUB == 1 || !REG_A), "producer units");
    static_assert(sizeof(T) != 1 || !REG_A, "8-bit tiles: weights by cp.async (zero-filled past the last kernel point) or TMA");
    static_assert(SPLIT == 1 || (SPLIT == 2 && WG && sizeof(T) == 4), "operands split into TF32 parts");
    static_assert(PREGS == 0 || (WG && CONSUMERS % 128 == 0 && PRODUCERS % 128 == 0 && PREGS % 8 == 0 && PREGS >= 24
                                    && CREGS >= PREGS && CREGS <= 256), "register split");
    // Split-K inside a thread-block cluster (clusterReduceTile, dcnFusedNhwcConsumers.cuh): over the
    // free stages, after the staged tile ([BM][BN + 4] FP32) and its BM biases, a receive area of
    // splits - 1 slices of SHARE rows each (the other blocks' sums of this block's rows), and at
    // the stages' last 8 bytes the mbarrier that counts their bytes. The host takes the cluster
    // path only where that fits.
    static constexpr uint32_t STAGE_BYTES = static_cast<uint32_t>(STAGES * (A_BYTES + B_BYTES));
    static constexpr uint32_t ROW_BYTES = (BN + 4) * 4;
    // The cluster's receive area follows the staged tile, its biases and (8-bit tiles) weight scales.
    static constexpr uint32_t RECV_OFF = (BM * ROW_BYTES + (sizeof(T) == 1 ? 2 : 1) * BM * 4 + 15) / 16 * 16;
    static __host__ __device__ constexpr int recvShare(int splits)
    {
        return (BM + splits - 1) / splits;
    }
    static __host__ __device__ constexpr bool clusterFits(int splits)
    {
        return splits >= 2 && splits <= 8
            && RECV_OFF + static_cast<uint32_t>(splits - 1) * recvShare(splits) * ROW_BYTES + 8 <= STAGE_BYTES - 8;
    }
    // TMA tiles: room to align the stages to 1024 bytes; every tile: per stage an mbarrier for the
    // weights (used by TMA tiles), FULL and EMPTY.
    static constexpr size_t EXTRA = extraBytes(SHAPE);
    // Byte offsets of stage 0's FULL and EMPTY mbarriers from the weights' first mbarrier, and the
    // mbarriers' bytes padded to 16. 2-byte types: the mbarriers follow the stages and the plan
    // follows them; FP32: the plan follows the stages and the mbarriers follow the plan
    // (nhwcBlock says why).
    static constexpr uint32_t FULL_OFF = 8 * STAGES;
    static constexpr uint32_t EMPTY_OFF = 16 * STAGES;
    static constexpr uint32_t BAR_BYTES = static_cast<uint32_t>(barrierBytes(SHAPE));

    static __host__ __device__ size_t smemBytes(int kk, int slots)
    {
        constexpr TileShape shape = SHAPE; // a copy: the static member is not device data
        return tileSmemBytes(shape, sizeof(T), SPLIT, kk, slots);
    }
};

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_NHWC_TILE_CUH
