/*
 * dcnconvert: the fused DCNv2 forward kernel, an implicit GEMM on tensor cores (sm_80+).
 *
 * Per group g:  out[m, p] = bias[m] + sum_k W[m, k] * S[k, p]  with m an output channel of the
 * group, p = (image, oy, ox) an output pixel (the batch is folded into the pixel dimension), and
 * k = c * kh*kw + kp (the weight's own layout). S[k, p] = mask * bilinear0(x[c], sampling point) is
 * never stored in device memory: each block samples its BK x BN slice straight into shared memory.
 *
 * One block owns a BM x BN tile (channels x pixels) and has two roles:
 *   - PW producer warps. At the start (and when the deformable group changes) they build the
 *     sampling plan of the tile: for every (kernel point, pixel) one FP32 bilinear weight per corner
 *     with the mask and the border test folded in, and the element offset (image included) of the
 *     top-left corner of a 2x2 cell clamped inside the plane (so all four loads are in bounds and
 *     unconditional). The plan is reused for every channel of the deformable group. Then, chunk
 *     after chunk, they copy the weight tile and sample: each producer thread owns one K row of
 *     every chunk (its channel and kernel point advance by BK rows per chunk without a division)
 *     and BN / TPR pixels; it gathers 4 corners per sample, combines them in FP32 and rounds the
 *     sample once to the operand type (FP16/BF16; FP32 for the TF32 modes) into a ring of STAGES
 *     shared-memory stages.
 *   - CW consumer warps run warp-level MMAs (m16n8k16 FP16/BF16, m16n8k8 TF32, or 3xTF32 for the
 *     accurate FP32 mode) with FP32 accumulators, and finally add the bias and store.
 * Producers and consumers hand stages over with named barriers (FULL: producers arrive, consumers
 * wait; EMPTY: the reverse). Coordinates are an exact integer part plus an FP32 fraction, as in the
 * simple kernel (dcnSimpleKernel.cuh); element offsets into x, offset, mask and out are 64-bit.
 *
 * Preconditions (checked on the host, dcnFused.cu): h >= 2, w >= 2, h*w < 2^31, n*ho*wo < 2^31,
 * and planSlots >= the number of deformable groups the chunks in flight (2 here, up to 4 in the
 * channel-vectorised kernel) can touch (the plan of deformable group d lives in slot d % planSlots).
 */
#ifndef DCN_FUSED_KERNEL_CUH
#define DCN_FUSED_KERNEL_CUH

#include "dcnFusedCommon.cuh"
#include "dcnFusedTma.cuh"

namespace dcn
{
namespace fused
{

/* Epilogue of the NCHW kernel: bias in FP32, one rounding to T, NCHW stores. acc is the warp's
 * MT x NT grid of m16n8 accumulator fragments: fragment (mt, nt) at channels m0 + wRow + mt *
 * MT_STRIDE, pixels p0 + wn*WTN + nt*8. */
template <typename T, class C>
__device__ __forceinline__ void storeTile(FusedArgs const& a, float const (&acc)[C::MT][C::NT][4],
    T const* __restrict__ bias, T* __restrict__ out, int64_t p0, int m0, int g, int wRow, int wn, int gq, int tq)
{
    // Per row: its output plane (-1: past the group's channels) and bias; then pixel pair by pixel
    // pair (the column offsets of all NT pairs at once would not fit beside 128 accumulators).
    int64_t rowOut[C::MT][2];
    float bv[C::MT][2];
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
        {
            int const m = m0 + wRow + mt * C::MT_STRIDE + gq + 8 * h;
            int64_t const co = static_cast<int64_t>(g) * a.mg + m;
            rowOut[mt][h] = m < a.mg ? co * a.howo : -1;
            bv[mt][h] = m < a.mg && a.withBias ? dcn::simple::toFloat<T>(ldT(bias + co)) : 0.0f;
        }
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
        {
            int64_t const p = p0 + wn * C::WTN + nt * 8 + 2 * tq + e;
            if (p >= a.pixels)
                continue;
            uint32_t const n = a.divHoWo.div(static_cast<uint32_t>(p));
            int64_t const col = n * a.outImg + (p - static_cast<int64_t>(n) * a.howo);
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                {
                    if (rowOut[mt][h] >= 0)
                        out[rowOut[mt][h] + col] = dcn::simple::fromFloat<T>(acc[mt][nt][2 * h + e] + bv[mt][h]);
                }
        }
}

/* A tile configuration: BM x BN outputs (channels x pixels) per block, CW consumer warps
 * (WARPS_M along channels), PW producer warps, STAGES pipeline stages, MINB blocks per SM asked of
 * the register allocator. */
template <typename T, int BM_, int BN_, int WARPS_M_, int CW_, int PW_, int STAGES_, int MINB_>
struct Tile
{
    static constexpr TileShape SHAPE{BM_, BN_, WARPS_M_, CW_, PW_, STAGES_, false, 32, false, false, false, 0};
    static constexpr int BM = BM_;
    static constexpr int BN = BN_;
    static constexpr int BK = 32;
    static constexpr int STAGES = STAGES_;
    static constexpr int MINB = MINB_;
    static constexpr int CW = CW_;
    static constexpr int PW = PW_;
    static constexpr int CONSUMERS = CW * 32;
    static constexpr int PRODUCERS = PW * 32;
    static constexpr int THREADS = CONSUMERS + PRODUCERS;
    static constexpr int WARPS_M = WARPS_M_;
    static constexpr int WARPS_N = CW / WARPS_M;
    static constexpr int WTM = BM / WARPS_M; // warp tile
    static constexpr int WTN = BN / WARPS_N;
    static constexpr int MT = WTM / 16;
    static constexpr int NT = WTN / 8;
    static constexpr int LDA = BK + (sizeof(T) == 4 ? 4 : 8); // padded rows: conflict-free fragments
    static constexpr bool SWZ_A = false; // A rows are padded, not swizzled (see NTile::SWZ_A)
    static constexpr int MT_STRIDE = 16; // rows between a warp's 16-row MMA tiles
    static constexpr int LDB = BN + 8;
    static constexpr int TPR = PRODUCERS / BK; // producer threads per K row
    static constexpr int PXT = BN / TPR;       // pixels per producer thread
    static constexpr int VEC = 16 / sizeof(T);
    static constexpr int A_VECS = BM * BK / VEC;
    static constexpr size_t A_BYTES = stageABytes(SHAPE, sizeof(T)); // [BM][LDA]
    static constexpr size_t B_BYTES = stageBBytes(SHAPE, sizeof(T)); // [BK][LDB]
    static_assert(A_BYTES == size_t(BM) * LDA * sizeof(T) && B_BYTES == size_t(BK) * LDB * sizeof(T), "stage layout");
    static_assert(WTM % 16 == 0 && WTN % 16 == 0 && CW % WARPS_M == 0, "tile shape");
    static_assert(PRODUCERS % BK == 0 && BN % TPR == 0, "producer mapping");
    static_assert(STAGES >= 2, "pipeline stages");
    // Stage hand-over through mbarriers after the plans (as NTile): FULL of stage s at FULL_OFF + 8 s,
    // EMPTY at EMPTY_OFF + 8 s from the first (extraBytes keeps 3 per stage).
    static constexpr uint32_t FULL_OFF = 8 * STAGES;
    static constexpr uint32_t EMPTY_OFF = 16 * STAGES;

    /* Dynamic shared memory of one block: pipeline stages and `slots` sampling plans of kk kernel
     * points (FP32 corner weights and the 64-bit element offset of the 2x2 cell in its image). */
    static __host__ __device__ size_t smemBytes(int kk, int slots)
    {
        constexpr TileShape shape = SHAPE; // a copy: the static member is not device data
        return tileSmemBytes(shape, sizeof(T), 1, kk, slots);
    }
};

template <typename T, MathKind MK, class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB) dcnFusedForwardKernel(FusedArgs const a,
    T const* __restrict__ x, T const* __restrict__ offset, T const* __restrict__ mask, T const* __restrict__ weight,
    T const* __restrict__ bias, T* __restrict__ out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) unsigned char smem[];
    T* const sA = reinterpret_cast<T*>(smem);                          // [STAGES][BM][LDA]
    T* const sB = reinterpret_cast<T*>(smem + C::STAGES * C::A_BYTES); // [STAGES][BK][LDB]
    float4* const planW = reinterpret_cast<float4*>(smem + C::STAGES * (C::A_BYTES + C::B_BYTES));
    int64_t* const planI = reinterpret_cast<int64_t*>(planW + a.planSlots * a.kk * C::BN);

    int const tid = threadIdx.x;
    int const g = blockIdx.z;
    int64_t const p0 = static_cast<int64_t>(blockIdx.x) * C::BN;
    int const m0 = blockIdx.y * C::BM;
    int const nChunks = (a.kg + C::BK - 1) / C::BK;
    uint32_t const bars = smemAddr(planI + a.planSlots * a.kk * C::BN);
    uint32_t const fullB = bars + C::FULL_OFF;
    uint32_t const emptyS = bars + C::EMPTY_OFF;
    if (tid == 0)
    {
        for (int s = 0; s < C::STAGES; ++s)
        {
            mbarInit(fullB + 8 * s, C::PRODUCERS);
            mbarInit(emptyS + 8 * s, C::CONSUMERS);
        }
        mbarInitFence();
    }
    __syncthreads();

    if (tid >= C::CONSUMERS)
    {
        // ------------------------------------------------------------------ producers
        // Software-pipelined: the loads of chunk kc + 1 (weights, gathers) are issued before chunk
        // kc is combined and stored, so one memory round trip overlaps the next chunk's work.
        int const ptid = tid - C::CONSUMERS;
        int const r = ptid / C::TPR; // this thread's K row within every chunk
        int const t = ptid - r * C::TPR;
        // (channel, kernel point) of row r, advanced by BK rows per chunk without dividing.
        int c = r / a.kk;
        int kp = r - c * a.kk;
        int const dC = C::BK / a.kk;
        int const dKp = C::BK - dC * a.kk;
        int planned = -1; // highest deformable group planned so far
        T const* const wGroup = weight + static_cast<int64_t>(g) * a.mg * a.kg;
        constexpr int AIT = (C::A_VECS + C::PRODUCERS - 1) / C::PRODUCERS;
        constexpr int VPR = C::BK / C::VEC;
        struct Regs
        {
            T v[C::PXT][4];
            uint4 av[AIT];
            int e0; // plan entry of pixel t (-1: row beyond K)
        };
        // Issues every load of chunk kc into R (plans built first when a new deformable group starts).
        auto prepare = [&](int kc, Regs& R) {
            int const k0 = kc * C::BK;
            // Deformable groups only grow along K: the slots hold groups planned - slots + 1 ..
            // planned, and the host sizes planSlots for two consecutive chunks, so the chunk being
            // finished keeps its plans while this one's are built (a uniform decision).
            int dgFirst = 0;
            int dgLast = 0;
            if (a.deformableGroups > 1)
            {
                dgFirst = static_cast<int>(a.divCPerDg.div(g * a.cg + k0 / a.kk));
                dgLast = static_cast<int>(a.divCPerDg.div(g * a.cg + (min(k0 + C::BK, a.kg) - 1) / a.kk));
            }
            if (dgLast > planned)
            {
                barSync(kBarProducers, C::PRODUCERS); // nobody still samples from a slot being replaced
                for (int d = max(planned + 1, dgFirst); d <= dgLast; ++d)
                {
                    buildPlan<T, C>(a, offset, mask, p0, d, d % a.planSlots, planW, planI, ptid);
                }
                planned = dgLast;
                barSync(kBarProducers, C::PRODUCERS);
            }
            if (a.aVec)
            {
#pragma unroll
                for (int it = 0; it < AIT; ++it)
                {
                    int const vi = ptid + it * C::PRODUCERS;
                    int const m = vi / VPR;
                    int const kv = (vi - m * VPR) * C::VEC;
                    R.av[it] = make_uint4(0u, 0u, 0u, 0u);
                    if ((C::A_VECS % C::PRODUCERS == 0 || vi < C::A_VECS) && m0 + m < a.mg && k0 + kv < a.kg)
                    {
                        R.av[it] = __ldg(
                            reinterpret_cast<uint4 const*>(wGroup + (static_cast<int64_t>(m0 + m) * a.kg + k0 + kv)));
                    }
                }
            }
            R.e0 = -1;
            if (k0 + r < a.kg)
            {
                int const cIn = g * a.cg + c;
                int const slot = a.planSlots > 1 ? static_cast<int>(a.divCPerDg.div(cIn)) % a.planSlots : 0;
                R.e0 = (slot * a.kk + kp) * C::BN + t;
                T const* const plane = x + static_cast<int64_t>(cIn) * a.hw;
#pragma unroll
                for (int j = 0; j < C::PXT; ++j)
                {
                    T const* const q = plane + planI[R.e0 + C::TPR * j];
                    T const* const q2 = q + a.w;
                    R.v[j][0] = ldT(q);
                    R.v[j][1] = ldT(q + 1);
                    R.v[j][2] = ldT(q2);
                    R.v[j][3] = ldT(q2 + 1);
                }
            }
            c += dC;
            kp += dKp;
            if (kp >= a.kk)
            {
                kp -= a.kk;
                ++c;
            }
        };
        // Combines chunk kc from R into pipeline stage kc % STAGES and hands it to the consumers.
        auto finish = [&](int kc, Regs const& R) {
            int const s = kc % C::STAGES;
            int const k0 = kc * C::BK;
            if (kc >= C::STAGES) // consumers are done with stage s (its previous use, kc - STAGES)
                mbarWait(emptyS + 8 * s, static_cast<uint32_t>(kc / C::STAGES - 1) & 1u);
            T* const a_s = sA + s * (C::BM * C::LDA);
            if (a.aVec)
            {
#pragma unroll
                for (int it = 0; it < AIT; ++it)
                {
                    int const vi = ptid + it * C::PRODUCERS;
                    if (C::A_VECS % C::PRODUCERS == 0 || vi < C::A_VECS)
                    {
                        int const m = vi / VPR;
                        *reinterpret_cast<uint4*>(a_s + m * C::LDA + (vi - m * VPR) * C::VEC) = R.av[it];
                    }
                }
            }
            else
            {
                for (int e = ptid; e < C::BM * C::BK; e += C::PRODUCERS)
                {
                    int const m = e / C::BK;
                    int const kk = e - m * C::BK;
                    T val = dcn::simple::fromFloat<T>(0.0f);
                    if (m0 + m < a.mg && k0 + kk < a.kg)
                    {
                        val = ldT(wGroup + (static_cast<int64_t>(m0 + m) * a.kg + k0 + kk));
                    }
                    a_s[m * C::LDA + kk] = val;
                }
            }
            T* const row = sB + s * (C::BK * C::LDB) + r * C::LDB;
#pragma unroll
            for (int j = 0; j < C::PXT; ++j)
            {
                float sv = 0.0f;
                if (R.e0 >= 0)
                {
                    using dcn::simple::toFloat;
                    float4 const wv = planW[R.e0 + C::TPR * j];
                    sv = wv.x * toFloat<T>(R.v[j][0]);
                    sv = fmaf(wv.y, toFloat<T>(R.v[j][1]), sv);
                    sv = fmaf(wv.z, toFloat<T>(R.v[j][2]), sv);
                    sv = fmaf(wv.w, toFloat<T>(R.v[j][3]), sv);
                }
                row[t + C::TPR * j] = dcn::simple::fromFloat<T>(sv);
            }
            mbarArrive(fullB + 8 * s); // stage s is full once every producer thread arrived
        };
        Regs r0;
        Regs r1;
        prepare(0, r0);
        for (int kc = 0; kc < nChunks; kc += 2)
        {
            if (kc + 1 < nChunks)
                prepare(kc + 1, r1);
            finish(kc, r0);
            if (kc + 1 >= nChunks)
                break;
            if (kc + 2 < nChunks)
                prepare(kc + 2, r0);
            finish(kc + 1, r1);
        }
        return;
    }

    // ---------------------------------------------------------------------- consumers
    int const wid = tid >> 5;
    int const lane = tid & 31;
    int const wm = wid / C::WARPS_N;
    int const wn = wid - wm * C::WARPS_N;
    int const gq = lane >> 2; // "groupID" of the MMA fragment layouts
    int const tq = lane & 3;
    float acc[C::MT][C::NT][4];
    eachAcc<C>(acc, [](float& v) { v = 0.0f; });

    for (int kc = 0; kc < nChunks; ++kc)
    {
        int const s = kc % C::STAGES;
        mbarWait(fullB + 8 * s, static_cast<uint32_t>(kc / C::STAGES) & 1u); // stage s is full
        T const* const a_s = sA + s * (C::BM * C::LDA) + (wm * C::WTM) * C::LDA;
        T const* const b_s = sB + s * (C::BK * C::LDB) + wn * C::WTN;
        chunkMma<T, MK, C, true>(acc, a_s, b_s, lane, gq, tq);
        if (kc + C::STAGES < nChunks)
            mbarArrive(emptyS + 8 * s); // stage s may be refilled
    }

    storeTile<T, C>(a, acc, bias, out, p0, m0, g, wm * C::WTM, wn, gq, tq);
#endif
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_KERNEL_CUH
