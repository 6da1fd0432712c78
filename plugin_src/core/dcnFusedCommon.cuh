/*
 * dcnconvert core: pieces shared by the fused kernels (dcnFusedKernel.cuh, dcnFusedNhwc.cuh): the
 * arguments, the sampling-plan builder and the epilogue. Internal to plugin_src/core; no TensorRT
 * include.
 */
#ifndef DCN_FUSED_COMMON_CUH
#define DCN_FUSED_COMMON_CUH

#include "dcnFusedMma.cuh"
#include "dcnSimpleKernel.cuh"

#include <type_traits>

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
    int32_t splits; // K splits (channel-vectorised kernel; 1 elsewhere)
    // Channel-vectorised kernel: block x covers pixel tile x + tileBase (a launch of the last pixel
    // tiles only, split); its partial sums are stored relative to pixel pixBase (= tileBase x BN).
    int32_t tileBase, pixBase;
    // 1: no prep kernel ran before the fused kernel in this call (x came channel-last and the weights
    // prepared): the block waits for the stream's previous kernel (programmatic dependent launch)
    // before its first sampling plan reads offset and mask.
    int32_t waitFirst;
    // 1: the a.splits blocks of an output tile are one thread-block cluster along z and add up their
    // sums through distributed shared memory (sm_90; clusterReduceTile): no partial sums in global
    // memory, no reduction kernel.
    int32_t clusterReduce;
    FastDiv divCPerDg, divHoWo, divWo;
    // Quantized layers (8-bit T): out = xScale * wScale[co] * sum + bias as outType (dcnParams.h).
    float xScale, outScale;
    float const* wScale;
    int32_t outType;
    // 1: a quantized layer of 64 channels per group on a 128-channel-chunk tile (kpPairApplies): chunk
    // q holds kernel points 2q and 2q + 1, channel-last; K chunks ceil(kk / 2), the second half of
    // the last chunk zero where kk is odd.
    int32_t kpPair;
};

constexpr int kBarProducers = 1; // named barrier of the producers (sampling-plan rebuilds)

/* The output element of a kernel whose x and weights are T: T for a float layer; a quantized
 * layer (8-bit T) stores the type FusedArgs::outType names. */
template <typename T>
using OutOf = typename std::conditional<dcn::simple::kQuantized<T>, void, T>::type;

template <typename T>
__device__ __forceinline__ T ldT(T const* p)
{
    return __ldg(p);
}

/* Pairs of a 16-bit type for packed arithmetic (HFMA2); only __half2 for __half is used: two(lo, hi)
 * rounds both to T, lows/highs copy one half into both. */
template <typename T>
struct Pair;
template <>
struct Pair<__half>
{
    using type = __half2;
    static __device__ __forceinline__ type lows(type v)
    {
        return __low2half2(v);
    }
    static __device__ __forceinline__ type highs(type v)
    {
        return __high2half2(v);
    }
    static __device__ __forceinline__ type two(float lo, float hi)
    {
        return __floats2half2_rn(lo, hi);
    }
};

/* One plan entry: the corner weights (mask folded in, corners outside the plane zeroed) and the
 * element offset of the 2x2 cell of output pixel p at kernel point kp, from the sample's offsets
 * (dy, dx) and mask mk. NHWC: the offset of channel 0 of the cell in an NHWC image, else NCHW
 * (plane 0). A sample outside the plane gets zero weights and a harmless in-bounds cell. */
__device__ __forceinline__ void planCell(FusedArgs const& a, int kp, uint32_t n, int32_t r, float dy, float dx,
    float mk, bool nhwc, float4& wv, int64_t& idx)
{
    int32_t const oy = static_cast<int32_t>(a.divWo.div(static_cast<uint32_t>(r)));
    int32_t const ox = r - oy * a.wo;
    int32_t const i = kp / a.kw;
    int32_t const j = kp - i * a.kw;
    int32_t const yBase = oy * a.strideH - a.padH + i * a.dilationH;
    int32_t const xBase = ox * a.strideW - a.padW + j * a.dilationW;
    idx = static_cast<int64_t>(n) * a.xImg;
    constexpr float kFar = 1.0e9f;
    if (!(fabsf(dy) <= kFar && fabsf(dx) <= kFar))
        return;
    float const fy = floorf(dy);
    float const fx = floorf(dx);
    int64_t const y0 = static_cast<int64_t>(yBase) + static_cast<int64_t>(fy);
    int64_t const x0 = static_cast<int64_t>(xBase) + static_cast<int64_t>(fx);
    float const ly = dy - fy;
    float const lx = dx - fx;
    bool const yIn = (y0 >= 0 || (y0 == -1 && ly > 0.0f)) && y0 < a.h;
    bool const xIn = (x0 >= 0 || (x0 == -1 && lx > 0.0f)) && x0 < a.w;
    if (!(yIn && xIn))
        return;
    // Row weights (top, bottom) and column weights (left, right) of the 2x2 cell, corners outside
    // the plane zeroed, then the cell moved inside the plane.
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
    idx += nhwc ? (yc * a.w + xc) * a.c : yc * a.w + xc;
}

/* Builds the plan of deformable group dg into slot `slot` (producer threads only): entry
 * (kp, pixel) of every kernel point and pixel of the tile, see planCell. PACK16 (FP16 and the 8-bit
 * types): the four corner weights are stored rounded to FP16, as two pairs (w00, w01), (w10, w11) in
 * the first 8 bytes of the entry, for the packed interpolation of dcnFusedNhwc.cuh; FIXED16 (INT8)
 * adds their 16-bit fixed-point form (fixedWeights, dcnElements.cuh) in the last 8. Each thread loads the
 * offsets and masks of kPlanBatch entries before it computes any of them: the plan is on the
 * critical path of every block (the first gathers wait for it), and one entry after another costs
 * a round trip to memory per entry (NTile::PLAN_BATCH says where more than one is used). */
template <typename T, class C, bool NHWC = false, bool PACK16 = false, int kPlanBatch = 1, bool FIXED16 = false>
__device__ __forceinline__ void buildPlan(FusedArgs const& a, T const* __restrict__ offset,
    T const* __restrict__ mask, int64_t p0, int dg, int slot, float4* planW, int64_t* planI, int ptid)
{
    using dcn::simple::toFloat;
    int const total = a.kk * C::BN;
    for (int e0 = ptid; e0 < total; e0 += kPlanBatch * C::PRODUCERS)
    {
        T dy[kPlanBatch];
        T dx[kPlanBatch];
        T mk[kPlanBatch];
#pragma unroll
        for (int b = 0; b < kPlanBatch; ++b)
        {
            int const e = e0 + b * C::PRODUCERS;
            int const kp = e / C::BN;
            int64_t const p = p0 + (e - kp * C::BN);
            if (e < total && p < a.pixels)
            {
                uint32_t const n = a.divHoWo.div(static_cast<uint32_t>(p));
                int32_t const r = static_cast<int32_t>(p) - static_cast<int32_t>(n) * a.howo;
                int64_t const och = static_cast<int64_t>(dg) * a.kk + kp;
                int64_t const oIdx = n * a.offsetN + och * 2 * a.howo + r;
                dy[b] = ldT(offset + oIdx);
                dx[b] = ldT(offset + oIdx + a.howo);
                mk[b] = ldT(mask + (n * a.maskN + och * a.howo + r));
            }
        }
#pragma unroll
        for (int b = 0; b < kPlanBatch; ++b)
        {
            int const e = e0 + b * C::PRODUCERS;
            if (e >= total)
                break;
            int const kp = e / C::BN;
            int const pl = e - kp * C::BN;
            int64_t const p = p0 + pl;
            float4 wv = make_float4(0.f, 0.f, 0.f, 0.f);
            int64_t idx = 0;
            if (p < a.pixels)
            {
                uint32_t const n = a.divHoWo.div(static_cast<uint32_t>(p));
                int32_t const r = static_cast<int32_t>(p) - static_cast<int32_t>(n) * a.howo;
                planCell(a, kp, n, r, toFloat<T>(dy[b]), toFloat<T>(dx[b]), toFloat<T>(mk[b]), NHWC, wv, idx);
            }
            int const at = (slot * a.kk + kp) * C::BN + pl;
            if constexpr (PACK16)
            {
                using P2 = typename Pair<__half>::type;
                P2 const top = Pair<__half>::two(wv.x, wv.y);
                P2 const bottom = Pair<__half>::two(wv.z, wv.w);
                uint2 bits;
                bits.x = *reinterpret_cast<uint32_t const*>(&top);
                bits.y = *reinterpret_cast<uint32_t const*>(&bottom);
                *reinterpret_cast<uint2*>(planW + at) = bits;
                if constexpr (FIXED16)
                    reinterpret_cast<uint2*>(planW + at)[1] = dcn::simple::fixedWeights(wv);
            }
            else
                planW[at] = wv;
            planI[at] = idx;
        }
    }
}

/* f(v) for every accumulator v of a warp's MT x NT grid of m16n8 fragments (both fused kernels). */
template <class C, class F>
__device__ __forceinline__ void eachAcc(float (&acc)[C::MT][C::NT][4], F f)
{
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
            for (int q = 0; q < 4; ++q)
                f(acc[mt][nt][q]);
}

/* acc += add for every accumulator (a chunk's fresh sums into the running ones). */
template <class C>
__device__ __forceinline__ void addAcc(float (&acc)[C::MT][C::NT][4], float const (&add)[C::MT][C::NT][4])
{
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
            for (int q = 0; q < 4; ++q)
                acc[mt][nt][q] += add[mt][nt][q];
}

/* acc += the warp's A rows x B columns of one K chunk (both fused kernels). a_s points at the warp's
 * first row of the A stage [BM][LDA]; b_s at the warp's first column of the B stage, which is
 * [BK][LDB] with K_ROWS (NCHW kernel: b_s = stage + first column) or K-contiguous [BN][LDB]
 * without (channel-vectorised kernel: b_s = stage + first pixel row). */
template <typename T, MathKind MK, class C, bool K_ROWS>
__device__ __forceinline__ void chunkMma(
    float (&acc)[C::MT][C::NT][4], T const* a_s, T const* b_s, int lane, int gq, int tq)
{
    if constexpr (MK == MathKind::kNative)
    {
        // 8-bit T: the same byte layout as 16-bit elements (mmaK32), addressed in 16-bit units here.
        using E = std::conditional_t<sizeof(T) == 1, __half, T>;
        constexpr int LDA = C::LDA * static_cast<int>(sizeof(T)) / static_cast<int>(sizeof(E));
        constexpr int LDB = C::LDB * static_cast<int>(sizeof(T)) / static_cast<int>(sizeof(E));
        E const* const ea = reinterpret_cast<E const*>(a_s);
        E const* const eb = reinterpret_cast<E const*>(b_s);
#pragma unroll
        for (int ks = 0; ks < C::BK * static_cast<int>(sizeof(T)) / 32; ++ks)
        {
            uint32_t af[C::MT][4];
            uint32_t bf[C::NT][2];
            // Swizzled A (TMA tiles): 16-byte unit u of row r at u ^ (r % 8); r % 8 = lane % 8 here.
            int const aCol = C::SWZ_A ? ((ks * 2 + (lane >> 4)) ^ (lane & 7)) * 8 : ks * 16 + (lane >> 4) * 8;
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt)
                ldmatrixX4(af[mt], ea + (mt * 16 + (lane & 15)) * LDA + aCol);
#pragma unroll
            for (int np = 0; np < C::NT / 2; ++np)
            {
                uint32_t rr[4];
                if constexpr (K_ROWS)
                    ldmatrixX4Trans(
                        rr, eb + (ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LDB + np * 16 + (lane >> 4) * 8);
                else
                    ldmatrixX4(
                        rr, eb + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * LDB + ks * 16 + ((lane >> 3) & 1) * 8);
                bf[2 * np][0] = rr[0];
                bf[2 * np][1] = rr[1];
                bf[2 * np + 1][0] = rr[2];
                bf[2 * np + 1][1] = rr[3];
            }
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < C::NT; ++nt)
                {
                    if constexpr (sizeof(T) == 1)
                        mmaK32<T>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
                    else
                        mmaK16<T>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
                }
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
            // Swizzled A (TMA tiles): unit (4 floats) u of row r at u ^ (r % 8); r % 8 = gq here.
            int const c0 = C::SWZ_A ? ((2 * ks) ^ gq) * 4 + tq : ks * 8 + tq;
            int const c1 = C::SWZ_A ? ((2 * ks + 1) ^ gq) * 4 + tq : ks * 8 + tq + 4;
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt)
            {
                float const* const r0 = fa + (mt * 16 + gq) * C::LDA;
                float const av[4] = {r0[c0], r0[8 * C::LDA + c0], r0[c1], r0[8 * C::LDA + c1]};
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
                float bv[2];
                if constexpr (K_ROWS)
                {
                    float const* const c0 = fb + (ks * 8 + tq) * C::LDB + nt * 8 + gq;
                    bv[0] = c0[0];
                    bv[1] = c0[4 * C::LDB];
                }
                else
                {
                    float const* const c0 = fb + (nt * 8 + gq) * C::LDB + ks * 8 + tq;
                    bv[0] = c0[0];
                    bv[1] = c0[4];
                }
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
                        mma3xTf32(acc[mt][nt], aBig[mt], aSmall[mt], bBig[nt], bSmall[nt]);
                    else
                        mmaTf32(acc[mt][nt], aBig[mt], bBig[nt][0], bBig[nt][1]);
                }
        }
    }
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_COMMON_CUH
