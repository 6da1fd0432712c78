/*
 * dcnconvert: the channel-vectorised fused DCNv2 kernel (sm_80+), the fast path of the core.
 *
 * A prep kernel writes x as NHWC and the weights in the matching K order into the workspace:
 *   xh[n][y][x][c]                          (channels contiguous: 8 channels = one 16-byte vector)
 *   wp[m][k'] with k' = (cb * kh*kw + kp) * 32 + ci   for input channel c = cb * 32 + ci of the group.
 * The GEMM is then the same as in dcnFusedKernel.cuh with K in that order: each chunk of BK = 32
 * K rows is one block of 32 consecutive channels at one kernel point, all in one deformable group
 * (the host requires channels per group and per deformable group to be multiples of 32). A
 * producer task is one 16-byte vector (8 FP16/BF16 or 4 FP32 channels) of one pixel: one plan
 * lookup, four 16-byte corner loads, FP32 bilinear sums, one 16-byte store into the K-contiguous B
 * tile [BN][BK + pad], which the consumers read with ldmatrix (non-transposed). The 4 (FP32: 8)
 * tasks of a pixel sit in neighbouring lanes and read 64 (128) contiguous bytes per corner.
 */
#ifndef DCN_FUSED_NHWC_CUH
#define DCN_FUSED_NHWC_CUH

#include "dcnFusedKernel.cuh"

namespace dcn
{
namespace fused
{

/* Prep: x (NCHW) -> xh (NHWC) by 32 x 32 tiles, then the weights -> wp. 256 threads per block;
 * blocks [0, xBlocks) transpose, the rest permute weights (one element per thread). */
template <typename T>
__global__ void __launch_bounds__(256) dcnPrepKernel(T const* __restrict__ x, T const* __restrict__ w,
    T* __restrict__ xh, T* __restrict__ wp, int64_t n, int32_t c, int64_t hw, int64_t xBlocks, int64_t wCount,
    int32_t cg, int32_t kk)
{
    __shared__ T tile[32][33];
    int64_t const b = blockIdx.x;
    if (b < xBlocks)
    {
        int64_t const hwTiles = (hw + 31) / 32;
        int64_t const cTiles = (c + 31) / 32;
        int64_t const img = b / (hwTiles * cTiles);
        int64_t const rem = b - img * hwTiles * cTiles;
        int64_t const ct = rem / hwTiles;
        int64_t const st = rem - ct * hwTiles;
        int const tx = threadIdx.x & 31;
        int const ty = threadIdx.x >> 5;
        T const* const src = x + img * c * hw;
        T* const dst = xh + img * c * hw;
#pragma unroll
        for (int r = ty; r < 32; r += 8)
        {
            int64_t const ch = ct * 32 + r;
            int64_t const s = st * 32 + tx;
            if (ch < c && s < hw)
                tile[r][tx] = src[ch * hw + s];
        }
        __syncthreads();
#pragma unroll
        for (int r = ty; r < 32; r += 8)
        {
            int64_t const s = st * 32 + r;
            int64_t const ch = ct * 32 + tx;
            if (ch < c && s < hw)
                dst[s * c + ch] = tile[tx][r];
        }
        return;
    }
    int64_t const e = (b - xBlocks) * 256 + threadIdx.x; // index into wp
    if (e >= wCount)
        return;
    int64_t const kg = int64_t(cg) * kk;
    int64_t const m = e / kg;
    int64_t const k = e - m * kg; // k' = (cb * kk + kp) * 32 + ci
    int64_t const block = k >> 5;
    int64_t const ci = k & 31;
    int64_t const cb = block / kk;
    int64_t const kp = block - cb * kk;
    wp[e] = w[m * kg + (cb * 32 + ci) * kk + kp];
}

template <typename T, int BM_, int BN_, int WARPS_M_, int CW_, int PW_, int STAGES_>
struct NTile
{
    static constexpr int BM = BM_;
    static constexpr int BN = BN_;
    static constexpr int BK = 32; // one block of 32 channels at one kernel point
    static constexpr int STAGES = STAGES_;
    static constexpr int CW = CW_;
    static constexpr int PW = PW_;
    static constexpr int CONSUMERS = CW * 32;
    static constexpr int PRODUCERS = PW * 32;
    static constexpr int THREADS = CONSUMERS + PRODUCERS;
    static constexpr int WARPS_M = WARPS_M_;
    static constexpr int WARPS_N = CW / WARPS_M;
    static constexpr int WTM = BM / WARPS_M;
    static constexpr int WTN = BN / WARPS_N;
    static constexpr int MT = WTM / 16;
    static constexpr int NT = WTN / 8;
    static constexpr int PAD = sizeof(T) == 4 ? 4 : 8;
    static constexpr int LDA = BK + PAD; // sA [BM][LDA]
    static constexpr int LDB = BK + PAD; // sB [BN][LDB] (K contiguous)
    // Register sets (chunks in flight) per producer thread; the host's planSlots covers PD + 1.
    static constexpr int PD = sizeof(T) == 4 ? 2 : (THREADS <= 384 ? 5 : 3);
    static constexpr int VEC = 16 / sizeof(T);
    static constexpr int TPP = BK / VEC;                 // tasks (16-byte vectors) per pixel and chunk
    static constexpr int PXT = BN * TPP / PRODUCERS;      // tasks per producer thread and chunk
    static constexpr int A_VECS = BM * BK / VEC;
    static constexpr size_t A_BYTES = size_t(BM) * LDA * sizeof(T);
    static constexpr size_t B_BYTES = size_t(BN) * LDB * sizeof(T);
    static_assert(WTM % 16 == 0 && WTN % 16 == 0 && CW % WARPS_M == 0, "tile shape");
    static_assert(PXT >= 1 && BN * TPP == PXT * PRODUCERS, "producer mapping");
    static_assert(STAGES >= 2 && 2 + 2 * STAGES <= 16, "named barriers");

    static __host__ __device__ size_t smemBytes(int kk, int slots)
    {
        return STAGES * (A_BYTES + B_BYTES) + size_t(slots) * kk * BN * (sizeof(float4) + sizeof(int64_t));
    }
};

/* out = bias + wp * S over the NHWC input xh (see the file comment). */
template <typename T, MathKind MK, class C>
__global__ void __launch_bounds__(C::THREADS, 1) dcnFusedNhwcKernel(FusedArgs const a, T const* __restrict__ xh,
    T const* __restrict__ offset, T const* __restrict__ mask, T const* __restrict__ wp, T const* __restrict__ bias,
    T* __restrict__ out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) unsigned char smem[];
    T* const sA = reinterpret_cast<T*>(smem);                          // [STAGES][BM][LDA]
    T* const sB = reinterpret_cast<T*>(smem + C::STAGES * C::A_BYTES); // [STAGES][BN][LDB]
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
        int const ptid = tid - C::CONSUMERS;
        int cb = 0; // (channel block, kernel point) of the chunk being prepared
        int kp = 0;
        int planned = -1;
        int64_t const rowStride = static_cast<int64_t>(a.w) * a.c;
        T const* const wGroup = wp + static_cast<int64_t>(g) * a.mg * a.kg;
        constexpr int AIT = (C::A_VECS + C::PRODUCERS - 1) / C::PRODUCERS;
        constexpr int VPR = C::BK / C::VEC;
        struct Regs
        {
            uint4 v[C::PXT][4];
            uint4 av[AIT];
            int e0; // plan entry of kernel point kp, pixel 0 (-1: chunk beyond K)
        };
        auto prepare = [&](int kc, Regs& R) {
            int const k0 = kc * C::BK;
            int const cIn = g * a.cg + cb * 32;
            int const dg = a.deformableGroups > 1 ? static_cast<int>(a.divCPerDg.div(cIn)) : 0;
            if (dg > planned)
            {
                barSync(kBarProducers, C::PRODUCERS); // nobody still samples from a slot being replaced
                buildPlan<T, C, true>(a, offset, mask, p0, dg, dg % a.planSlots, planW, planI, ptid);
                planned = dg;
                barSync(kBarProducers, C::PRODUCERS);
            }
#pragma unroll
            for (int it = 0; it < AIT; ++it)
            {
                int const vi = ptid + it * C::PRODUCERS;
                int const m = vi / VPR;
                int const kv = (vi - m * VPR) * C::VEC;
                R.av[it] = make_uint4(0u, 0u, 0u, 0u);
                if ((C::A_VECS % C::PRODUCERS == 0 || vi < C::A_VECS) && m0 + m < a.mg)
                {
                    R.av[it] = __ldg(
                        reinterpret_cast<uint4 const*>(wGroup + (static_cast<int64_t>(m0 + m) * a.kg + k0 + kv)));
                }
            }
            R.e0 = ((dg % a.planSlots) * a.kk + kp) * C::BN;
            T const* const base = xh + cIn;
#pragma unroll
            for (int j = 0; j < C::PXT; ++j)
            {
                int const task = ptid + j * C::PRODUCERS;
                int const pl = task / C::TPP;
                T const* const q = base + planI[R.e0 + pl] + (task - pl * C::TPP) * C::VEC;
                R.v[j][0] = __ldg(reinterpret_cast<uint4 const*>(q));
                R.v[j][1] = __ldg(reinterpret_cast<uint4 const*>(q + a.c));
                R.v[j][2] = __ldg(reinterpret_cast<uint4 const*>(q + rowStride));
                R.v[j][3] = __ldg(reinterpret_cast<uint4 const*>(q + rowStride + a.c));
            }
            if (++kp == a.kk)
            {
                kp = 0;
                ++cb;
            }
        };
        auto finish = [&](int kc, Regs const& R) {
            int const s = kc % C::STAGES;
            if (kc >= C::STAGES)
            {
                barSync(2 + C::STAGES + s, kAll); // consumers are done with stage s
            }
            T* const a_s = sA + s * (C::BM * C::LDA);
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
            T* const b_s = sB + s * (C::BN * C::LDB);
#pragma unroll
            for (int j = 0; j < C::PXT; ++j)
            {
                using dcn::simple::fromFloat;
                using dcn::simple::toFloat;
                int const task = ptid + j * C::PRODUCERS;
                int const pl = task / C::TPP;
                float4 const wv = planW[R.e0 + pl];
                T const* const c00 = reinterpret_cast<T const*>(&R.v[j][0]);
                T const* const c01 = reinterpret_cast<T const*>(&R.v[j][1]);
                T const* const c10 = reinterpret_cast<T const*>(&R.v[j][2]);
                T const* const c11 = reinterpret_cast<T const*>(&R.v[j][3]);
                uint4 res;
                T* const o = reinterpret_cast<T*>(&res);
#pragma unroll
                for (int i = 0; i < C::VEC; ++i)
                {
                    float sv = wv.x * toFloat<T>(c00[i]);
                    sv = fmaf(wv.y, toFloat<T>(c01[i]), sv);
                    sv = fmaf(wv.z, toFloat<T>(c10[i]), sv);
                    sv = fmaf(wv.w, toFloat<T>(c11[i]), sv);
                    o[i] = fromFloat<T>(sv);
                }
                *reinterpret_cast<uint4*>(b_s + pl * C::LDB + (task - pl * C::TPP) * C::VEC) = res;
            }
            barArrive(2 + s, kAll); // stage s is full
        };
        // A ring of PD register sets: chunk kc + PD - 1 is loading while chunk kc is finished.
        Regs ring[C::PD];
#pragma unroll
        for (int i = 0; i < C::PD - 1; ++i)
        {
            if (i < nChunks)
                prepare(i, ring[i]);
        }
        for (int kc = 0; kc < nChunks; kc += C::PD)
        {
#pragma unroll
            for (int u = 0; u < C::PD; ++u)
            {
                int const k = kc + u;
                if (k >= nChunks)
                    break;
                if (k + C::PD - 1 < nChunks)
                    prepare(k + C::PD - 1, ring[(u + C::PD - 1) % C::PD]);
                finish(k, ring[u]);
            }
        }
        return;
    }

    // ---------------------------------------------------------------------- consumers
    int const wid = tid >> 5;
    int const lane = tid & 31;
    int const wm = wid / C::WARPS_N;
    int const wn = wid - wm * C::WARPS_N;
    int const gq = lane >> 2;
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
        T const* const b_s = sB + s * (C::BN * C::LDB) + (wn * C::WTN) * C::LDB;
        if constexpr (MK == MathKind::kNative)
        {
#pragma unroll
            for (int ks = 0; ks < C::BK / 16; ++ks)
            {
                uint32_t af[C::MT][4];
                uint32_t bf[C::NT][2];
#pragma unroll
                for (int mt = 0; mt < C::MT; ++mt)
                    ldmatrixX4(af[mt], a_s + (mt * 16 + (lane & 15)) * C::LDA + ks * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int np = 0; np < C::NT / 2; ++np)
                {
                    uint32_t rr[4];
                    ldmatrixX4(rr,
                        b_s + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * C::LDB + ks * 16 + ((lane >> 3) & 1) * 8);
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
                    float const* const c0 = fb + (nt * 8 + gq) * C::LDB + ks * 8 + tq;
                    float const bv[2] = {c0[0], c0[4]};
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

#endif // DCN_FUSED_NHWC_CUH
