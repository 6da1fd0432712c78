/*
 * dcnconvert: the block of the channel-vectorised fused DCNv2 kernel (sm_80+), the fast path of the
 * core; its entry and launch are in dcnFusedLaunchTile.cuh.
 *
 * x comes NHWC (xh[n][y][x][c]) and the weights in the matching K order, wp[m][k'] with k' = (cb *
 * kh*kw + kp) * BK + ci for input channel c = cb * BK + ci of the group (the prep kernel writes both
 * into the workspace unless the engine path gives them). A K chunk is BK (32, 64; 8-bit: 128)
 * channels at one kernel point in one deformable group (quantized layers of 64 channels per group:
 * two kernel points, FusedArgs::kpPair). A producer task is one 16-byte vector of one pixel: a plan
 * lookup, four 16-byte corner loads, the bilinear sums (dcnFusedNhwcParts.cuh) and a
 * 16-byte store into the B tile; the consumers multiply with mma.sync from padded stages, or on sm_90
 * with wgmma from swizzled stages whose weight tiles TMA loads (dcnFusedNhwcConsumers.cuh).
 */
#ifndef DCN_FUSED_NHWC_CUH
#define DCN_FUSED_NHWC_CUH

#include "dcnFusedKernel.cuh"
#include "dcnFusedNhwcConsumers.cuh"
#include "dcnFusedNhwcParts.cuh"
#include "dcnFusedNhwcTile.cuh"
#include "dcnFusedPair.cuh"
#include "dcnFusedTma.cuh"

namespace dcn
{
namespace fused
{

/* out = bias + wp * S over the NHWC input xh (see the file comment). With a.splits > 1, block z
 * = g * splits + split walks only its share of the K chunks and stores FP32 partial sums (no bias)
 * to partial[split][g * mg + m][pixel - pixBase]; dcnSplitReduceKernel adds them up. tmA: the tensor map of
 * wp (C::TMA_A only; rows g * mg + m, columns k'), see launchTile in dcnFused.cu. */
template <typename T, MathKind MK, class C, typename TF = T>
__device__ __forceinline__ void nhwcBlock(FusedArgs const& a, T const* __restrict__ xh, TF const* __restrict__ offset,
    TF const* __restrict__ mask, T const* __restrict__ wp, TF const* __restrict__ bias, OutOf<T>* __restrict__ out,
    float* __restrict__ partial, CUtensorMap const& tmA)
{
    extern __shared__ __align__(16) unsigned char smemRaw[];
    // TMA tiles: the stages start at the next 1024-byte boundary (the swizzle's period).
    // PLAN32 (2-byte and 8-bit types): the mbarriers follow the stages (BAR_BYTES), then the plan's
    // weights and cell offsets, all reached through 32-bit shared-memory addresses, which spares
    // ptxas rebuilding the window's address before every plan read and hand-over. FP32 keeps generic
    // pointers and the barriers behind the plan (its 3xTF32 producers spill with the 32-bit form).
    constexpr bool PLAN32 = sizeof(T) <= 2;
    constexpr bool FIXED = std::is_same<T, int8_t>::value; // INT8: fixed-point weights in the plan
    uint32_t const rawAddr = smemAddr(smemRaw);
    uint32_t const pad = C::TMA_A ? (1024u - (rawAddr & 1023u)) & 1023u : 0u;
    unsigned char* const smem = smemRaw + pad;
    T* const sA = reinterpret_cast<T*>(smem);                          // [STAGES][BM][LDA]
    T* const sB = reinterpret_cast<T*>(smem + C::STAGES * C::A_BYTES); // [STAGES][BN][LDB]
    float4* const planW = reinterpret_cast<float4*>(smem + C::STAGE_BYTES + (PLAN32 ? C::BAR_BYTES : 0u));
    int64_t* const planI = reinterpret_cast<int64_t*>(planW + a.planSlots * a.kk * C::BN);
    uint32_t const sAAddr = rawAddr + pad;
    uint32_t const sBAddr = sAAddr + static_cast<uint32_t>(C::STAGES * C::A_BYTES);
    uint32_t const planWAddr = sAAddr + C::STAGE_BYTES + C::BAR_BYTES;
    uint32_t const planIAddr = planWAddr + static_cast<uint32_t>(a.planSlots * a.kk * C::BN) * 16u;
    // Stage s: the weight tile's mbarrier at fullA + 8 s (TMA tiles), FULL at fullB + 8 s, EMPTY at
    // emptyS + 8 s.
    uint32_t const fullA = PLAN32 ? sAAddr + C::STAGE_BYTES : smemAddr(planI + a.planSlots * a.kk * C::BN);
    uint32_t const fullB = fullA + C::FULL_OFF;
    uint32_t const emptyS = fullA + C::EMPTY_OFF;
    // PAIR: the rank in the cluster, and the distance to the same shared address in the other block.
    uint32_t const rank = C::PAIR ? clusterRank() : 0u;
    uint32_t const peer = C::PAIR ? pairDelta(sAAddr, rank ^ 1u) : 0u;

    int const tid = threadIdx.x;
    // The grid's dependents (the split-K reduction, the split tail, the next call's prep kernel) are
    // released by the consumers after their main loop (nhwcConsumers), not here: released at the
    // start, the next prep's blocks would sit on the SMs during the whole main loop.
    int const g = static_cast<int>(blockIdx.z) / a.splits;
    int const split = static_cast<int>(blockIdx.z) - g * a.splits;
    int64_t const p0 = (static_cast<int64_t>(blockIdx.x) + a.tileBase) * C::BN;
    int const m0 = blockIdx.y * C::BM;
    // kpPair (quantized layers of 64 channels per group): two kernel points per chunk.
    bool const kp2 = dcn::simple::kQuantized<T> && a.kpPair != 0;
    int const allChunks = kp2 ? (a.kk + 1) / 2 : a.kg / C::BK; // else kg is a multiple of BK here
    int const kc0 = static_cast<int>(static_cast<int64_t>(split) * allChunks / a.splits);
    int const nChunks = static_cast<int>(static_cast<int64_t>(split + 1) * allChunks / a.splits) - kc0;
    initStages<C>(fullA, rank, tid);

    if (tid >= C::CONSUMERS)
    {
        // ------------------------------------------------------------------ producers
        // Everything that does not change from chunk to chunk is computed here once: the weight
        // rows this thread copies (rows past mg read row mg - 1; the consumers' results for them
        // are never stored), the shared-memory slots it writes, its pixel and lane in the B tile.
        int const ptid = tid - C::CONSUMERS;
        if constexpr (C::PREGS > 0)
            setMaxRegsDec<C::PREGS>();
        constexpr int AIT = (C::A_VECS + C::PRODUCERS - 1) / C::PRODUCERS;
        constexpr int VPR = C::BK / C::VEC;
        constexpr bool kAllA = C::A_VECS % C::PRODUCERS == 0;
        // Weight tile: 32-bit element offsets from the group's first weight of this split (the host
        // keeps a group's weights under 2^31 elements here) and shared-memory byte addresses in
        // stage 0; stage s adds s * A_BYTES.
        T const* const wBase = wp + static_cast<int64_t>(g) * a.mg * a.kg + static_cast<int64_t>(kc0) * C::BK;
        uint32_t aOff[AIT];
        uint32_t aDst[AIT];
        uint32_t aZero = 0u; // 8-bit cp.async tiles: bit it set where vector it lies past mg (zero-filled)
#pragma unroll
        for (int it = 0; it < AIT; ++it)
        {
            int const vi = ptid + it * C::PRODUCERS;
            int const m = vi / VPR;
            int const kv = (vi - m * VPR) * C::VEC;
            int const row = min(m0 + m, a.mg - 1);
            aZero |= m0 + m >= a.mg ? 1u << it : 0u;
            aOff[it] = static_cast<uint32_t>(row) * static_cast<uint32_t>(a.kg) + static_cast<uint32_t>(kv);
            aDst[it] = PLAN32 ? sAAddr + static_cast<uint32_t>((m * C::LDA + kv) * sizeof(T)) : smemAddr(sA + m * C::LDA + kv);
        }
        T const* aPtr = wBase; // register path: the next chunk's weights
        // Sampling tasks: pixel and lane in the B tile (byte address in stage 0), and a pointer to
        // this lane's channels of the current channel block (advanced by BK per block).
        // Pixel of task j: bPix[0] + j * PIX_STEP; its plan entries at pwLane / piLane + j * PIX_STEP
        // entries, plus the chunk's first entry.
        constexpr int PIX_STEP = C::PRODUCERS / C::TPP;
        static_assert(C::PRODUCERS % C::TPP == 0, "tasks of a pixel in one producer pass");
        int bPix[C::PXT];
        uint32_t bDst[C::PXT];
        T const* xLane[C::PXT];
        // PAIR: this block samples chunks first, first + 2, ... of the split; the other block the rest.
        constexpr int KSTEP = C::PAIR ? 2 : 1;
        int const first = C::PAIR ? static_cast<int>(rank) : 0;
        // kp2: one channel block; chunk q samples kernel point 2q (lanes of bytes 0-63) and 2q + 1
        // (bytes 64-127, kpOff = 1), zeros past the last kernel point.
        int cb = kp2 ? 0 : (kc0 + first) / a.kk;
        int kp = kp2 ? 2 * (kc0 + first) : (kc0 + first) - cb * a.kk;
        int cIn = g * a.cg + cb * C::BK; // first input channel of the next chunk to prepare
        int const kpOff = kp2 && (ptid % C::TPP) * C::VEC >= 64 ? 1 : 0; // every task of a thread has its lane
#pragma unroll
        for (int j = 0; j < C::PXT; ++j)
        {
            int const task = ptid + j * C::PRODUCERS;
            bPix[j] = task / C::TPP;
            int const lane = (task - bPix[j] * C::TPP) * C::VEC;
            // SWZ_B: 16-byte unit u of pixel row r at unit u ^ (r % 8), as the wgmma descriptor reads it.
            int const col = C::SWZ_B ? ((lane / C::VEC) ^ (bPix[j] & 7)) * C::VEC : lane;
            bDst[j] = PLAN32 ? sBAddr + static_cast<uint32_t>((bPix[j] * C::LDB + col) * sizeof(T)) : smemAddr(sB + bPix[j] * C::LDB + col);
            xLane[j] = xh + cIn + (kp2 ? lane % 64 : lane);
        }
        uint32_t const pwLane = planWAddr + static_cast<uint32_t>(bPix[0]) * 16u;
        uint32_t const piLane = planIAddr + static_cast<uint32_t>(bPix[0]) * 8u;
        int64_t const rowStride = static_cast<int64_t>(a.w) * a.c;
        int64_t const colStride = a.c;
        int planned = -1; // deformable group whose plan is in `slot`
        int slot = 0;
        int slotBase = 0; // plan entry of kernel point 0, pixel 0 in that slot
        // Plan entries (cell offsets) of this thread's pixels for the next chunk, read one chunk
        // ahead so that the gather addresses do not wait on shared memory; read again after a
        // plan rebuild.
        int64_t nextIdx[C::PXT];
        // This thread's kernel point in the next chunk (kp2: kp or kp + 1, kept in the plan past the last).
        auto taskKp = [&]() { return kp2 ? min(kp + kpOff, a.kk - 1) : kp; };
        auto readNextIdx = [&]() {
            int const kt = taskKp();
            uint32_t const at = piLane + static_cast<uint32_t>(slotBase + kt * C::BN) * 8u;
#pragma unroll
            for (int j = 0; j < C::PXT; ++j)
            {
                if constexpr (PLAN32)
                    nextIdx[j] = ldSharedI64(at + static_cast<uint32_t>(j * PIX_STEP * 8));
                else
                    nextIdx[j] = planI[slotBase + kt * C::BN + bPix[j]];
            }
        };
        struct Regs // one unit: PXU tasks of a chunk
        {
            uint4 v[C::PXU][4];
            uint4 av[C::REG_A ? AIT : 1]; // weight vectors (register path only)
            uint2 w[C::PACK16 ? C::PXU : 1]; // PACK16: the corner weights, two T pairs (FIXED: fixed point)
            int e0; // plan entry of this chunk's kernel point, pixel 0 (FP32, INT8 in FP16: weights read late)
        };
        // The sampling plan of the next chunk's deformable group (built when that group changes).
        auto ensurePlan = [&]() {
            // kp == 0, or below KSTEP: the first chunk of a channel block that this block samples.
            if (planned < 0 || ((KSTEP == 1 ? kp == 0 : kp < KSTEP) && a.deformableGroups > 1))
            {
                int const dg = a.deformableGroups > 1 ? static_cast<int>(a.divCPerDg.div(cIn)) : 0;
                if (dg != planned)
                {
                    slot = planned < 0 ? dg % a.planSlots : (slot + 1 == a.planSlots ? 0 : slot + 1);
                    barSync(kBarProducers, C::PRODUCERS); // nobody still reads the slot replaced
                    buildPlan<TF, C, true, C::PACK16, C::PLAN_BATCH, FIXED>(a, offset, mask, p0, dg, slot, planW, planI, ptid);
                    planned = dg;
                    slotBase = slot * a.kk * C::BN;
                    barSync(kBarProducers, C::PRODUCERS);
                    readNextIdx();
                }
            }
        };
        // Unit h (0 .. SUB - 1) of the next chunk: tasks h * PXU .. + PXU - 1. Units are prepared
        // in order; the last one moves on to the next chunk.
        auto prepare = [&](Regs& R, int h) {
            if (h == 0)
                ensurePlan();
            if constexpr (C::REG_A)
            {
#pragma unroll
                for (int it = 0; it < AIT; ++it)
                {
                    if (kAllA || ptid + it * C::PRODUCERS < C::A_VECS)
                        R.av[it] = __ldg(reinterpret_cast<uint4 const*>(aPtr + aOff[it]));
                }
                aPtr += C::BK;
            }
            int const e0 = slotBase + taskKp() * C::BN;
#pragma unroll
            for (int u = 0; u < C::PXU; ++u)
            {
                int const j = h * C::PXU + u;
                T const* const q = xLane[j] + nextIdx[j];
                R.v[u][0] = __ldg(reinterpret_cast<uint4 const*>(q));
                R.v[u][1] = __ldg(reinterpret_cast<uint4 const*>(q + colStride));
                R.v[u][2] = __ldg(reinterpret_cast<uint4 const*>(q + rowStride));
                R.v[u][3] = __ldg(reinterpret_cast<uint4 const*>(q + rowStride + colStride));
                if constexpr (C::PACK16)
                    R.w[u] = ldShared8(pwLane + static_cast<uint32_t>(e0 * 16 + j * PIX_STEP * 16 + (FIXED ? 8 : 0)));
            }
            R.e0 = e0;
            if (h + 1 < C::SUB)
                return;
#pragma unroll
            for (int step = 0; step < KSTEP; ++step)
            {
                if (kp2)
                    kp += 2; // one channel block: never wraps before the last chunk
                else if (++kp == a.kk)
                {
                    kp = 0;
                    cIn += C::BK;
#pragma unroll
                    for (int j = 0; j < C::PXT; ++j)
                        xLane[j] += C::BK;
                }
            }
            // The next chunk's cell offsets (stale only if that chunk rebuilds the plan, see above).
            readNextIdx();
        };
        auto finish = [&](int kc, int h, Regs const& R) {
            int const s = kc % C::STAGES;
            if (h == 0 && kc >= C::STAGES)
            {
                // Consumers are done with stage s (its previous use, kc - STAGES); PAIR: those of both
                // blocks, which this block fills.
                mbarWait(emptyS + 8 * s, static_cast<uint32_t>(kc / C::STAGES - 1) & 1u);
            }
            uint32_t const aStage = static_cast<uint32_t>(s) * static_cast<uint32_t>(C::A_BYTES);
            if constexpr (C::TMA_A)
            {
                if (h == 0 && ptid == 0)
                {
                    // The barrier above ordered the consumers' reads of stage s before this thread.
                    fenceProxyAsync();
                    mbarArriveExpectTx(fullA + 8 * s, static_cast<uint32_t>(C::A_BYTES));
                    tmaLoad2d((PLAN32 ? sAAddr : smemAddr(sA)) + aStage, &tmA, (kc0 + kc) * C::BK, g * a.mg + m0, fullA + 8 * s);
                    if constexpr (C::SPLIT == 2) // the weights' small TF32 parts: rows cout .. 2 cout - 1
                        tmaLoad2d((PLAN32 ? sAAddr : smemAddr(sA)) + aStage + static_cast<uint32_t>(C::A_HALF), &tmA, (kc0 + kc) * C::BK,
                            a.cout + g * a.mg + m0, fullA + 8 * s);
                    if constexpr (C::PAIR) // the other block's weight tile of this chunk, into its stage s
                        pairWeightTile(sAAddr + aStage, fullA + 8 * s, rank, peer, static_cast<uint32_t>(C::A_BYTES),
                            &tmA, (kc0 + kc) * C::BK, g * a.mg + m0 + (rank == 0u ? C::BM : -C::BM));
                }
            }
            else if constexpr (C::ASYNC_A)
            {
                T const* const src = wBase + static_cast<int64_t>(kc) * C::BK;
                // 8-bit: zeros for rows past mg (not copies of row mg - 1), and with kp2 for the second
                // half of a chunk past the last kernel point (not the next row's first weights, whose
                // codes may be FP8 NaNs); TMA zero-fills both alike.
                bool const pastHalf = kp2 && 2 * (kc0 + kc) + 1 >= a.kk;
#pragma unroll
                for (int it = 0; it < AIT; ++it)
                {
                    if (!(kAllA || ptid + it * C::PRODUCERS < C::A_VECS))
                        continue;
                    if constexpr (dcn::simple::kQuantized<T>)
                        cpAsync16Zero(aDst[it] + aStage, src + aOff[it],
                            ((aZero >> it) & 1u) != 0u || (pastHalf && ((ptid + it * C::PRODUCERS) % VPR) * C::VEC >= 64));
                    else
                        cpAsync16(aDst[it] + aStage, src + aOff[it]);
                }
                cpAsyncCommit();
            }
            else
            {
#pragma unroll
                for (int it = 0; it < AIT; ++it)
                {
                    if (kAllA || ptid + it * C::PRODUCERS < C::A_VECS)
                        stShared16(aDst[it] + aStage, R.av[it]);
                }
            }
            uint32_t const bStage = static_cast<uint32_t>(s) * static_cast<uint32_t>(C::B_BYTES);
#pragma unroll
            for (int u = 0; u < C::PXU; ++u)
            {
                int const j = h * C::PXU + u;
                uint4 res;
                if constexpr (C::PACK16 && dcn::simple::kQuantized<T>)
                {
                    res = quantTaskSums<T>(R.w[u], R.v[u], pwLane + static_cast<uint32_t>(R.e0 * 16 + j * PIX_STEP * 16));
                    if (kp2 && 2 * (kc0 + kc) + kpOff >= a.kk) // past the last kernel point: zeros
                        res = make_uint4(0u, 0u, 0u, 0u);
                }
                else if constexpr (C::PACK16)
                    res = interpPacked<T>(R.w[u], R.v[u]);
                else if constexpr (PLAN32)
                    res = interpFloat<T>(ldSharedF4(pwLane + static_cast<uint32_t>(R.e0 * 16 + j * PIX_STEP * 16)), R.v[u]);
                else
                    res = interpFloat<T>(planW[R.e0 + bPix[j]], R.v[u]);
                if constexpr (C::WG && sizeof(T) == 4 && C::SPLIT == 2)
                {
                    uint4 small;
                    res = tf32SplitVec(res, small);
                    stShared16(bDst[j] + bStage + static_cast<uint32_t>(C::B_HALF), small);
                }
                else if constexpr (C::WG && sizeof(T) == 4)
                    res = tf32Vec(res);
                stShared16(bDst[j] + bStage, res);
            }
            if (h + 1 < C::SUB)
                return; // the stage is full after the chunk's last unit
            if constexpr (C::ASYNC_A)
            {
                // Stage kc - 1 is full once its weight copy has landed: publishing lags by one
                // chunk, so that the copy issued above overlaps this chunk's sampling.
                if (kc > 0)
                {
                    cpAsyncWait<1>();
                    mbarArrive(fullB + 8 * ((kc - 1) % C::STAGES));
                }
            }
            else
            {
                // Warpgroup tiles: the consumers order these generic-proxy B stores before their
                // MMAs' async-proxy reads (nhwcConsumers), after this release and their acquire.
                if constexpr (C::PAIR)
                    fenceProxyAsync(); // the copy engine reads these stores below
                mbarArrive(fullB + 8 * s); // stage s is full once every producer thread arrived
                if constexpr (C::PAIR) // the warp's rows of the sample tile into the other block's stage s
#pragma unroll
                    for (int j = 0; j < C::PXT; ++j)
                        pairCopyRows(sBAddr + bStage + static_cast<uint32_t>(ptid / 32) * C::PAIR_ROWS_BYTES
                                + static_cast<uint32_t>(j * PIX_STEP * C::LDB * sizeof(T)),
                            fullB + 8 * s, peer, C::PAIR_ROWS_BYTES, ptid & 31);
            }
        };
        // The first plan reads only offset and mask: under programmatic dependent launch (sm_90) it
        // overlaps the prep kernel, whose outputs (xh, wp) are read only after this wait. Without a
        // prep kernel (a.waitFirst) the previous kernel may still be writing offset and mask.
        if (a.waitFirst)
            gridDependencyWait();
        if (nChunks > 0)
            ensurePlan();
        if (!a.waitFirst)
            gridDependencyWait();
        // A ring of PD register sets: unit i + PD - 1 is loading while unit i is finished (unit i
        // = part i % SUB of chunk i / SUB).
        int const nUnits = (nChunks - first + KSTEP - 1) / KSTEP * C::SUB; // this block's chunks
        Regs ring[C::PD];
#pragma unroll
        for (int i = 0; i < C::PD - 1; ++i)
        {
            if (i < nUnits)
                prepare(ring[i], i % C::SUB);
        }
        // Steps of a multiple of PD and SUB, so that ring slots and unit parts are known at
        // compile time in the unrolled loop.
        constexpr int STEP = C::PD % C::SUB == 0 ? C::PD : C::PD * C::SUB;
        for (int i0 = 0; i0 < nUnits; i0 += STEP)
        {
#pragma unroll
            for (int r = 0; r < STEP; ++r)
            {
                int const i = i0 + r;
                if (i >= nUnits)
                    break;
                if (i + C::PD - 1 < nUnits)
                    prepare(ring[(r + C::PD - 1) % C::PD], (r + C::PD - 1) % C::SUB);
                finish(first + KSTEP * (i / C::SUB), r % C::SUB, ring[r % C::PD]);
            }
        }
        if constexpr (C::ASYNC_A)
        {
            if (nChunks > 0)
            {
                cpAsyncWait<0>();
                mbarArrive(fullB + 8 * ((nChunks - 1) % C::STAGES));
            }
        }
        return;
    }

    // ---------------------------------------------------------------------- consumers
    // The offset and mask rows of the first plan into L2 while the producers wait (engine path; not
    // for FP32, whose tiles spill with it).
    if constexpr (sizeof(T) <= 2)
    {
        if (a.waitFirst)
        {
            int const dg0 = a.deformableGroups > 1 ? static_cast<int>(a.divCPerDg.div(g * a.cg + (kc0 / a.kk) * C::BK)) : 0;
            prefetchPlanRows<TF, C>(a, offset, mask, p0, dg0, tid, C::CONSUMERS);
        }
    }
    if constexpr (C::PREGS > 0)
        setMaxRegsInc<C::CREGS>();
    nhwcConsumers<T, MK, C, TF>(a, sA, sB, fullA, nChunks, tid, p0, m0, g, split, bias, out, partial, rank, peer);
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_NHWC_CUH
