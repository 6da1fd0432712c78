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

#include "dcnFusedMma.cuh"
#include "dcnSimpleKernel.cuh"

namespace dcn
{
namespace fused
{

enum class MathKind
{
    kNative, // FP16 / BF16 operands
    kTf32,   // FP32 data, 1xTF32 products (opt-in)
    k3xTf32  // FP32 data, 3xTF32 products (FP32-accurate default)
};

struct FusedArgs
{
    int64_t xImg;    // c * h * w
    int64_t hw;      // h * w
    int64_t offsetN; // offset elements per image
    int64_t maskN;   // mask elements per image
    int64_t outImg;  // cout * ho * wo
    int32_t h, w, howo, wo, pixels, cg, mg, kg, kk, kw, cout, c;
    int32_t strideH, strideW, padH, padW, dilationH, dilationW;
    int32_t deformableGroups;
    int32_t planSlots; // plan slots: at least the deformable groups the chunks in flight can touch
    int32_t withBias;
    int32_t aVec; // weight rows are 16-byte aligned: vector loads
    FastDiv divCPerDg, divHoWo, divWo;
};

constexpr int kBarProducers = 1; // producer-only barrier; FULL = 2 + s, EMPTY = 2 + STAGES + s

/* A tile configuration: BM x BN outputs (channels x pixels) per block, CW consumer warps
 * (WARPS_M along channels), PW producer warps, STAGES pipeline stages, MINB blocks per SM asked of
 * the register allocator. */
template <typename T, int BM_, int BN_, int WARPS_M_, int CW_, int PW_, int STAGES_, int MINB_>
struct Tile
{
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
    static constexpr int LDB = BN + 8;
    static constexpr int TPR = PRODUCERS / BK; // producer threads per K row
    static constexpr int PXT = BN / TPR;       // pixels per producer thread
    static constexpr int VEC = 16 / sizeof(T);
    static constexpr int A_VECS = BM * BK / VEC;
    static constexpr size_t A_BYTES = size_t(BM) * LDA * sizeof(T);
    static constexpr size_t B_BYTES = size_t(BK) * LDB * sizeof(T);
    static_assert(WTM % 16 == 0 && WTN % 16 == 0 && CW % WARPS_M == 0, "tile shape");
    static_assert(PRODUCERS % BK == 0 && BN % TPR == 0, "producer mapping");
    static_assert(STAGES >= 2 && 2 + 2 * STAGES <= 16, "named barriers");

    /* Dynamic shared memory of one block: pipeline stages and `slots` sampling plans of kk kernel
     * points (FP32 corner weights and the 64-bit element offset of the 2x2 cell in its image). */
    static __host__ __device__ size_t smemBytes(int kk, int slots)
    {
        return STAGES * (A_BYTES + B_BYTES) + size_t(slots) * kk * BN * (sizeof(float4) + sizeof(int64_t));
    }
};

template <typename T>
__device__ __forceinline__ T ldT(T const* p)
{
    return __ldg(p);
}

/* Builds the plan of deformable group dg into slot `slot` (producer threads only). */
/* NHWC: the plan's element offset is that of channel 0 of the cell in an NHWC image, else NCHW
 * (plane 0). */
template <typename T, class C, bool NHWC = false>
__device__ __forceinline__ void buildPlan(FusedArgs const& a, T const* __restrict__ offset,
    T const* __restrict__ mask, int64_t p0, int dg, int slot, float4* planW, int64_t* planI, int ptid)
{
    using dcn::simple::toFloat;
    int const total = a.kk * C::BN;
    for (int e = ptid; e < total; e += C::PRODUCERS)
    {
        int const kp = e / C::BN;
        int const pl = e - kp * C::BN;
        int64_t const p = p0 + pl;
        float4 wv = make_float4(0.f, 0.f, 0.f, 0.f);
        int64_t idx = 0;
        if (p < a.pixels)
        {
            uint32_t const n = a.divHoWo.div(static_cast<uint32_t>(p));
            int32_t const r = static_cast<int32_t>(p) - static_cast<int32_t>(n) * a.howo;
            int32_t const oy = static_cast<int32_t>(a.divWo.div(static_cast<uint32_t>(r)));
            int32_t const ox = r - oy * a.wo;
            int32_t const i = kp / a.kw;
            int32_t const j = kp - i * a.kw;
            int64_t const och = static_cast<int64_t>(dg) * a.kk + kp;
            int64_t const oIdx = n * a.offsetN + och * 2 * a.howo + r;
            float const dy = toFloat<T>(ldT(offset + oIdx));
            float const dx = toFloat<T>(ldT(offset + oIdx + a.howo));
            float const mk = toFloat<T>(ldT(mask + (n * a.maskN + och * a.howo + r)));
            int32_t const yBase = oy * a.strideH - a.padH + i * a.dilationH;
            int32_t const xBase = ox * a.strideW - a.padW + j * a.dilationW;
            idx = static_cast<int64_t>(n) * a.xImg; // a harmless in-bounds cell when the sample is 0
            constexpr float kFar = 1.0e9f;
            if (fabsf(dy) <= kFar && fabsf(dx) <= kFar)
            {
                float const fy = floorf(dy);
                float const fx = floorf(dx);
                int64_t const y0 = static_cast<int64_t>(yBase) + static_cast<int64_t>(fy);
                int64_t const x0 = static_cast<int64_t>(xBase) + static_cast<int64_t>(fx);
                float const ly = dy - fy;
                float const lx = dx - fx;
                bool const yIn = (y0 >= 0 || (y0 == -1 && ly > 0.0f)) && y0 < a.h;
                bool const xIn = (x0 >= 0 || (x0 == -1 && lx > 0.0f)) && x0 < a.w;
                if (yIn && xIn)
                {
                    // Row weights (top, bottom) and column weights (left, right) of the 2x2 cell,
                    // corners outside the plane zeroed, then the cell moved inside the plane.
                    float wy0 = y0 >= 0 ? (1.0f - ly) : 0.0f;
                    float wy1 = y0 + 1 < a.h ? ly : 0.0f;
                    float wx0 = x0 >= 0 ? (1.0f - lx) : 0.0f;
                    float wx1 = x0 + 1 < a.w ? lx : 0.0f;
                    int64_t yc = y0;
                    int64_t xc = x0;
                    if (y0 < 0)
                    {
                        yc = 0; // the bottom row (y0 + 1 = 0) becomes the top row
                        wy0 = wy1;
                        wy1 = 0.0f;
                    }
                    else if (y0 > a.h - 2)
                    {
                        yc = a.h - 2; // y0 = h - 1: the top row becomes the bottom row
                        wy1 = wy0;
                        wy0 = 0.0f;
                    }
                    if (x0 < 0)
                    {
                        xc = 0;
                        wx0 = wx1;
                        wx1 = 0.0f;
                    }
                    else if (x0 > a.w - 2)
                    {
                        xc = a.w - 2;
                        wx1 = wx0;
                        wx0 = 0.0f;
                    }
                    wv = make_float4(mk * wy0 * wx0, mk * wy0 * wx1, mk * wy1 * wx0, mk * wy1 * wx1);
                    idx += NHWC ? (yc * a.w + xc) * a.c : yc * a.w + xc;
                }
            }
        }
        int const at = (slot * a.kk + kp) * C::BN + pl;
        planW[at] = wv;
        planI[at] = idx;
    }
}

/* Epilogue of both fused kernels: bias in FP32, one rounding to T, NCHW stores. acc is the warp's
 * MT x NT grid of m16n8 accumulator fragments at channels m0 + wm*WTM, pixels p0 + wn*WTN. */
template <typename T, class C>
__device__ __forceinline__ void storeTile(FusedArgs const& a, float const (&acc)[C::MT][C::NT][4],
    T const* __restrict__ bias, T* __restrict__ out, int64_t p0, int m0, int g, int wm, int wn, int gq, int tq)
{
    int64_t colOut[C::NT][2];
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
        {
            int64_t const p = p0 + wn * C::WTN + nt * 8 + 2 * tq + e;
            if (p < a.pixels)
            {
                uint32_t const n = a.divHoWo.div(static_cast<uint32_t>(p));
                colOut[nt][e] = n * a.outImg + (p - static_cast<int64_t>(n) * a.howo);
            }
            else
            {
                colOut[nt][e] = -1;
            }
        }
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
        {
            int const m = m0 + wm * C::WTM + mt * 16 + gq + 8 * h;
            if (m >= a.mg)
                continue;
            int64_t const co = static_cast<int64_t>(g) * a.mg + m;
            float const bv = a.withBias ? dcn::simple::toFloat<T>(ldT(bias + co)) : 0.0f;
            T* const outRow = out + co * a.howo;
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                {
                    if (colOut[nt][e] >= 0)
                        outRow[colOut[nt][e]] = dcn::simple::fromFloat<T>(acc[mt][nt][2 * h + e] + bv);
                }
        }
}

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
    constexpr int kAll = C::THREADS;

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
#ifdef DCN_FUSED_NO_ALOAD // experiments: the weight loads left out
                    if (m0 + m == -1)
#else
                    if ((C::A_VECS % C::PRODUCERS == 0 || vi < C::A_VECS) && m0 + m < a.mg && k0 + kv < a.kg)
#endif
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
#ifdef DCN_FUSED_NO_GATHER // experiments: the sampling loads left out
                    R.v[j][0] = R.v[j][1] = R.v[j][2] = R.v[j][3] = dcn::simple::fromFloat<T>(1.0f);
#else
                    T const* const q = plane + planI[R.e0 + C::TPR * j];
                    T const* const q2 = q + a.w;
                    R.v[j][0] = ldT(q);
                    R.v[j][1] = ldT(q + 1);
                    R.v[j][2] = ldT(q2);
                    R.v[j][3] = ldT(q2 + 1);
#endif
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
            if (kc >= C::STAGES)
            {
                barSync(2 + C::STAGES + s, kAll); // consumers are done with stage s
            }
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
            barArrive(2 + s, kAll); // stage s is full
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
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
            for (int q = 0; q < 4; ++q)
                acc[mt][nt][q] = 0.0f;

    for (int kc = 0; kc < nChunks; ++kc)
    {
        int const s = kc % C::STAGES;
        barSync(2 + s, kAll); // stage s is full
        T const* const a_s = sA + s * (C::BM * C::LDA) + (wm * C::WTM) * C::LDA;
        T const* const b_s = sB + s * (C::BK * C::LDB) + wn * C::WTN;
        if constexpr (MK == MathKind::kNative)
        {
#pragma unroll
            for (int ks = 0; ks < C::BK / 16; ++ks)
            {
                uint32_t af[C::MT][4];
                uint32_t bf[C::NT][2];
#pragma unroll
                for (int mt = 0; mt < C::MT; ++mt)
                {
                    ldmatrixX4(af[mt], a_s + (mt * 16 + (lane & 15)) * C::LDA + ks * 16 + (lane >> 4) * 8);
                }
#pragma unroll
                for (int np = 0; np < C::NT / 2; ++np)
                {
                    uint32_t rr[4];
                    ldmatrixX4Trans(
                        rr, b_s + (ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * C::LDB + np * 16 + (lane >> 4) * 8);
                    bf[2 * np][0] = rr[0];
                    bf[2 * np][1] = rr[1];
                    bf[2 * np + 1][0] = rr[2];
                    bf[2 * np + 1][1] = rr[3];
                }
#pragma unroll
                for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < C::NT; ++nt)
                        mmaK16<T>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
            }
        }
        else
        {
            float const* const fa = reinterpret_cast<float const*>(a_s);
            float const* const fb = reinterpret_cast<float const*>(b_s);
#pragma unroll
            for (int ks = 0; ks < C::BK / 8; ++ks)
            {
                uint32_t aBig[C::MT][4];
                uint32_t aSmall[C::MT][4];
                uint32_t bBig[C::NT][2];
                uint32_t bSmall[C::NT][2];
#pragma unroll
                for (int mt = 0; mt < C::MT; ++mt)
                {
                    float const* const r0 = fa + (mt * 16 + gq) * C::LDA + ks * 8 + tq;
                    float const av[4] = {r0[0], r0[8 * C::LDA], r0[4], r0[8 * C::LDA + 4]};
#pragma unroll
                    for (int q = 0; q < 4; ++q)
                    {
                        if constexpr (MK == MathKind::k3xTf32)
                            splitTf32(av[q], aBig[mt][q], aSmall[mt][q]);
                        else
                            aBig[mt][q] = toTf32(av[q]);
                    }
                }
#pragma unroll
                for (int nt = 0; nt < C::NT; ++nt)
                {
                    float const* const c0 = fb + (ks * 8 + tq) * C::LDB + nt * 8 + gq;
                    float const bv[2] = {c0[0], c0[4 * C::LDB]};
#pragma unroll
                    for (int q = 0; q < 2; ++q)
                    {
                        if constexpr (MK == MathKind::k3xTf32)
                            splitTf32(bv[q], bBig[nt][q], bSmall[nt][q]);
                        else
                            bBig[nt][q] = toTf32(bv[q]);
                    }
                }
#pragma unroll
                for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < C::NT; ++nt)
                    {
                        if constexpr (MK == MathKind::k3xTf32)
                        {
                            mmaTf32(acc[mt][nt], aSmall[mt], bBig[nt][0], bBig[nt][1]);
                            mmaTf32(acc[mt][nt], aBig[mt], bSmall[nt][0], bSmall[nt][1]);
                        }
                        mmaTf32(acc[mt][nt], aBig[mt], bBig[nt][0], bBig[nt][1]);
                    }
            }
        }
        if (kc + C::STAGES < nChunks)
        {
            barArrive(2 + C::STAGES + s, kAll); // stage s may be refilled
        }
    }

    storeTile<T, C>(a, acc, bias, out, p0, m0, g, wm, wn, gq, tq);
#endif
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_KERNEL_CUH
