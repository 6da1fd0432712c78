/*
 * dcnconvert core: parts of the channel-vectorised fused kernel (dcnFusedNhwc.cuh): the producers'
 * bilinear sums of one 16-byte task, the reads and stores of the staged output tile, and the L2
 * hints of the first sampling plan. Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_NHWC_PARTS_CUH
#define DCN_FUSED_NHWC_PARTS_CUH

#include "dcnFusedCommon.cuh"
#include "dcnFusedTma.cuh"

namespace dcn
{
namespace fused
{

/* The corner weights of a packed plan entry (two T pairs (w00, w01), (w10, w11)), each broadcast to
 * both halves of a pair, and the bilinear sum of one channel pair: one product and three fused
 * multiply-adds, in corner order. */
template <typename T>
struct CornerPairs
{
    using P2 = typename Pair<T>::type;
    P2 w00, w01, w10, w11;
    __device__ __forceinline__ explicit CornerPairs(uint2 w)
    {
        P2 const top = *reinterpret_cast<P2 const*>(&w.x);
        P2 const bottom = *reinterpret_cast<P2 const*>(&w.y);
        w00 = Pair<T>::lows(top);
        w01 = Pair<T>::highs(top);
        w10 = Pair<T>::lows(bottom);
        w11 = Pair<T>::highs(bottom);
    }
    __device__ __forceinline__ P2 sum(P2 c00, P2 c01, P2 c10, P2 c11) const
    {
        P2 const s = __hfma2(w01, c01, __hmul2(w00, c00));
        return __hfma2(w11, c11, __hfma2(w10, c10, s));
    }
};

/* Bilinear sum of one task in T pairs (FP16): the corner weights come rounded to T from the plan. */
template <typename T>
__device__ __forceinline__ uint4 interpPacked(uint2 w, uint4 const (&v)[4])
{
    using P2 = typename Pair<T>::type;
    CornerPairs<T> const cw(w);
    P2 const* const c00 = reinterpret_cast<P2 const*>(&v[0]);
    P2 const* const c01 = reinterpret_cast<P2 const*>(&v[1]);
    P2 const* const c10 = reinterpret_cast<P2 const*>(&v[2]);
    P2 const* const c11 = reinterpret_cast<P2 const*>(&v[3]);
    uint4 res;
    P2* const o = reinterpret_cast<P2*>(&res);
#pragma unroll
    for (int i = 0; i < 4; ++i)
        o[i] = cw.sum(c00[i], c01[i], c10[i], c11[i]);
    return res;
}

/* Bilinear sum of one task in FP32 (BF16, FP32), one rounding to T. */
template <typename T>
__device__ __forceinline__ uint4 interpFloat(float4 wv, uint4 const (&v)[4])
{
    using dcn::simple::fromFloat;
    using dcn::simple::toFloat;
    constexpr int kVec = 16 / sizeof(T);
    T const* const c00 = reinterpret_cast<T const*>(&v[0]);
    T const* const c01 = reinterpret_cast<T const*>(&v[1]);
    T const* const c10 = reinterpret_cast<T const*>(&v[2]);
    T const* const c11 = reinterpret_cast<T const*>(&v[3]);
    uint4 res;
    T* const o = reinterpret_cast<T*>(&res);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
    {
        float sv = wv.x * toFloat<T>(c00[i]);
        sv = fmaf(wv.y, toFloat<T>(c01[i]), sv);
        sv = fmaf(wv.z, toFloat<T>(c10[i]), sv);
        sv = fmaf(wv.w, toFloat<T>(c11[i]), sv);
        o[i] = fromFloat<T>(sv);
    }
    return res;
}

/* Bilinear sum of one task of 16 quantized channels (FP8 E4M3; INT8 where interpFixed does not take
 * it) in FP16 pairs, rounded to T:
 * the corners become FP16 pairs (exact: dcnElements.cuh, halfPairs), the corner weights come
 * rounded to FP16 from the plan, and each pair takes one product and three fused multiply-adds, as
 * the FP16 layers' tasks do (interpPacked) and in the order the simple kernel uses (quantSample). */
template <typename T>
__device__ __forceinline__ uint4 interpPackedQuant(uint2 w, uint4 const (&v)[4])
{
    using dcn::simple::bytesOfHalfPairs;
    using dcn::simple::halfPairs;
    CornerPairs<__half> const cw(w);
    uint32_t const* const c00 = reinterpret_cast<uint32_t const*>(&v[0]);
    uint32_t const* const c01 = reinterpret_cast<uint32_t const*>(&v[1]);
    uint32_t const* const c10 = reinterpret_cast<uint32_t const*>(&v[2]);
    uint32_t const* const c11 = reinterpret_cast<uint32_t const*>(&v[3]);
    T const* const tag = nullptr;
    uint4 res;
    uint32_t* const o = reinterpret_cast<uint32_t*>(&res);
#pragma unroll
    for (int i = 0; i < 4; ++i)
    {
        __half2 a[2], b[2], c[2], d[2], sv[2];
        halfPairs(c00[i], a, tag);
        halfPairs(c01[i], b, tag);
        halfPairs(c10[i], c, tag);
        halfPairs(c11[i], d, tag);
#pragma unroll
        for (int k = 0; k < 2; ++k)
            sv[k] = cw.sum(a[k], b[k], c[k], d[k]);
        o[i] = bytesOfHalfPairs(sv, tag);
    }
    return res;
}

/* Bilinear sums of one INT8 task of 16 channels in fixed point from the plan entry's 16-bit weights
 * fw (fixedWeights, not kFixedOff; dcnElements.cuh, fixedSum): per 4 channels a 4x4 byte transpose
 * puts each channel's corners in one word. */
__device__ __forceinline__ uint4 interpFixed(uint2 fw, uint4 const (&v)[4])
{
    uint32_t const* const c00 = reinterpret_cast<uint32_t const*>(&v[0]);
    uint32_t const* const c01 = reinterpret_cast<uint32_t const*>(&v[1]);
    uint32_t const* const c10 = reinterpret_cast<uint32_t const*>(&v[2]);
    uint32_t const* const c11 = reinterpret_cast<uint32_t const*>(&v[3]);
    uint4 res;
    uint32_t* const o = reinterpret_cast<uint32_t*>(&res);
#pragma unroll
    for (int i = 0; i < 4; ++i)
    {
        uint32_t const top01 = __byte_perm(c00[i], c01[i], 0x5140u); // channels 0, 1: (c00, c01) each
        uint32_t const top23 = __byte_perm(c00[i], c01[i], 0x7362u);
        uint32_t const bot01 = __byte_perm(c10[i], c11[i], 0x5140u);
        uint32_t const bot23 = __byte_perm(c10[i], c11[i], 0x7362u);
        int32_t const s0 = dcn::simple::fixedSum(fw, __byte_perm(top01, bot01, 0x5410u));
        int32_t const s1 = dcn::simple::fixedSum(fw, __byte_perm(top01, bot01, 0x7632u));
        int32_t const s2 = dcn::simple::fixedSum(fw, __byte_perm(top23, bot23, 0x5410u));
        int32_t const s3 = dcn::simple::fixedSum(fw, __byte_perm(top23, bot23, 0x7632u));
        o[i] = __byte_perm(__byte_perm(s0, s1, 0x0062u), __byte_perm(s2, s3, 0x0062u), 0x5410u);
    }
    return res;
}

/* The mbarriers of every stage of a channel-vectorised block, by thread 0 (fullA: the weight
 * tiles' of TMA tiles; FULL and EMPTY at C::FULL_OFF and C::EMPTY_OFF from it), then a barrier of the
 * block, or of the cluster on PAIR tiles, so that nobody arrives on one before it is initialised.
 * PAIR: FULL of a stage the other block fills counts that block's producer warps' copies
 * (pairCopyRows, one per warp and task of a thread), EMPTY the consumers of both blocks. */
template <class C>
__device__ __forceinline__ void initStages(uint32_t fullA, uint32_t rank, int tid)
{
    if (tid == 0)
    {
        for (int s = 0; s < C::STAGES; ++s)
        {
            if constexpr (C::TMA_A)
                mbarInit(fullA + 8 * s, 1);
            mbarInit(fullA + C::FULL_OFF + 8 * s, C::PAIR && static_cast<uint32_t>(s & 1) != rank ? C::PW * C::PXT : C::PRODUCERS);
            mbarInit(fullA + C::EMPTY_OFF + 8 * s, C::PAIR ? 2 * C::CONSUMERS : C::CONSUMERS);
        }
        mbarInitFence();
    }
    if constexpr (C::PAIR)
    {
        // The initialisations are ordered by their own fence (mbarInitFence), so the arrival is
        // relaxed: a release arrival costs every warp a GPU-wide memory barrier (MEMBAR.ALL.GPU).
        clusterArriveRelaxed();
        clusterWait();
    }
    else
        __syncthreads();
}

/* The bilinear sums of one quantized producer task (nhwcBlock's finish): w, the weights read with
 * its corners (INT8: the fixed-point ones); entry, the shared-memory address of its plan entry,
 * whose FP16 pairs INT8 reads only where it has no fixed-point weights. */
template <typename T>
__device__ __forceinline__ uint4 quantTaskSums(uint2 w, uint4 const (&v)[4], uint32_t entry)
{
    if constexpr (std::is_same<T, int8_t>::value)
    {
        if (w.x != dcn::simple::kFixedOff)
            return interpFixed(w, v);
        return interpPackedQuant<T>(ldShared8(entry), v);
    }
    else
        return interpPackedQuant<T>(w, v);
}

template <class C>
__device__ __forceinline__ constexpr int stagedLd()
{
    return C::BN + 4; // swapped: 2 LDT = 8 banks, a warp's 8 pixels x 4 channel pairs hit 32 banks
}

/* Item (c, px) of the staged tile: VE consecutive pixels of channel c from px, read as float4s (rows
 * of LDT floats, LDT and px multiples of 4, sT 16-byte aligned), with `add` added; SCALED (quantized
 * layers): each times `mul` first, as one fused multiply-add. */
template <class C, int VE, bool SCALED = false>
__device__ __forceinline__ void readStaged(float const* sT, int c, int px, float add, float (&v)[VE], float mul = 1.0f)
{
#pragma unroll
    for (int i = 0; i < VE; i += 4)
    {
        float4 const f = *reinterpret_cast<float4 const*>(sT + c * stagedLd<C>() + px + i);
        float const e[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
            v[i + j] = SCALED ? fmaf(e[j], mul, add) : e[j] + add;
    }
}

/* VE values of type V (16 bytes) to dst: as one 16-byte store when vec, else one by one, the first
 * `count` only. */
template <typename V, int VE>
__device__ __forceinline__ void storeItem(V* dst, float const (&v)[VE], bool vec, int count)
{
    static_assert(VE * sizeof(V) == 16, "16-byte items");
    V o[VE];
#pragma unroll
    for (int i = 0; i < VE; ++i)
        o[i] = dcn::simple::fromFloat<V>(v[i]);
    if (vec)
    {
        uint4 u;
        memcpy(&u, o, 16);
        *reinterpret_cast<uint4*>(dst) = u;
        return;
    }
#pragma unroll
    for (int i = 0; i < VE; ++i)
    {
        if (i < count)
            dst[i] = o[i];
    }
}

/* Rows [r0, r1) of the staged tile (stageTile) of a 2-byte or 1-byte output whose images hold a
 * multiple of an item's VE pixels and start 16-byte aligned (alignedStore), by thread t of NT: an
 * item is VE = 16 / sizeof(T) pixels of one channel, one 16-byte store. With NT a multiple of the
 * BN / VE items of a channel, a thread's items all start at the same pixel px = VE (t % (BN / VE))
 * (so in one image, found once) and step NT / (BN / VE) channels: one pointer step per item, ITEMS
 * items read before they are stored. QUANT (quantized layers): each sum times its scale (staged
 * after the biases) plus bias, as storeAs computes it, divided by a.outScale for a 1-byte output. */
template <typename T, class C, int NT, int ITEMS, bool QUANT = false>
__device__ __forceinline__ void storeAligned(
    FusedArgs const& a, float const* sT, int t, int64_t p0, int m0, int g, T* __restrict__ out, int r0, int r1)
{
    constexpr int VE = 16 / sizeof(T);
    constexpr int GROUPS = C::BN / VE;
    static_assert(sizeof(T) <= 2 && NT % GROUPS == 0, "2-byte or 1-byte items, whole channel rows per pass");
    constexpr int CSTEP = NT / GROUPS;
    float const* const sBias = sT + C::BM * stagedLd<C>();
    int const rows = min(min(a.mg - m0, C::BM), r1);
    int const px = (t % GROUPS) * VE;
    if (px >= a.pixels - p0)
        return; // a multiple of 8 pixels is left: items are whole
    int64_t const p = p0 + px;
    uint32_t const n = a.divHoWo.div(static_cast<uint32_t>(p));
    int c = r0 + t / GROUPS;
    T* dst = out + n * a.outImg + (static_cast<int64_t>(g) * a.mg + m0 + c) * a.howo
        + (p - static_cast<int64_t>(n) * a.howo);
    int64_t const step = static_cast<int64_t>(CSTEP) * a.howo;
    for (; c < rows; c += ITEMS * CSTEP, dst += ITEMS * step)
    {
        float v[ITEMS][VE];
#pragma unroll
        for (int u = 0; u < ITEMS; ++u)
        {
            int const cu = c + u * CSTEP;
            if (cu >= rows)
                continue;
            readStaged<C, VE, QUANT>(sT, cu, px, sBias[cu], v[u], QUANT ? sBias[C::BM + cu] : 1.0f);
            if constexpr (QUANT && sizeof(T) == 1)
            {
#pragma unroll
                for (int i = 0; i < VE; ++i)
                    v[u][i] = v[u][i] / a.outScale;
            }
        }
#pragma unroll
        for (int u = 0; u < ITEMS; ++u)
        {
            if (c + u * CSTEP < rows)
                storeItem<T, VE>(dst + u * step, v[u], true, VE);
        }
    }
}

/* Whether storeAligned takes the tile: a 2-byte or 1-byte output in images of a multiple of 16 /
 * sizeof(T) pixels that start 16-byte aligned. */
template <typename T>
__device__ __forceinline__ bool alignedStore(FusedArgs const& a, T const* out)
{
    return sizeof(T) <= 2 && a.howo % (16 / sizeof(T)) == 0 && (reinterpret_cast<uintptr_t>(out) & 15) == 0;
}

/* A quantized layer's output tile (rows [r0, r1)) through storeAligned where its type (a.outType:
 * FP16, BF16, INT8, FP8 E4M3) and images allow, by consumer thread t; false where they do not (the
 * caller then stores element by element). */
template <class C>
__device__ __forceinline__ bool storeQuantAligned(
    FusedArgs const& a, float const* sT, int t, int64_t p0, int m0, int g, void* out, int r0, int r1)
{
    auto store = [&](auto* typed) {
        if (!alignedStore(a, typed))
            return false;
        storeAligned<std::remove_pointer_t<decltype(typed)>, C, C::CONSUMERS, 4, true>(a, sT, t, p0, m0, g, typed, r0, r1);
        return true;
    };
    switch (a.outType)
    {
    case kDCN_FLOAT16: return store(static_cast<__half*>(out));
    case kDCN_BFLOAT16: return store(static_cast<__nv_bfloat16*>(out));
    case kDCN_INT8: return store(static_cast<int8_t*>(out));
    case kDCN_FP8E4M3: return store(static_cast<__nv_fp8_e4m3*>(out));
    default: return false; // FP32
    }
}

/* L2 hints for the first sampling plan of a block on the engine path (no prep pass: the plan's
 * loads come right after the dependency wait), issued by its consumer threads t = 0 .. nt - 1
 * while the producers wait for the previous kernel: the 128-byte lines of the offset and mask rows
 * of deformable group dg, every kernel point, pixels [p0, p0 + BN) (one or two images). */
template <typename T, class C>
__device__ __forceinline__ void prefetchPlanRows(
    FusedArgs const& a, T const* offset, T const* mask, int64_t p0, int dg, int t, int nt)
{
    constexpr int kLine = 128;
    constexpr int kLines = (C::BN * static_cast<int>(sizeof(T)) + kLine - 1) / kLine + 1; // per row and image
    int64_t const pLast = min(p0 + C::BN, static_cast<int64_t>(a.pixels)) - 1;
    if (pLast < p0)
        return;
    uint32_t const n0 = a.divHoWo.div(static_cast<uint32_t>(p0));
    uint32_t const n1 = a.divHoWo.div(static_cast<uint32_t>(pLast));
    // Task: (kernel point, dy | dx | mask) x (image n0 | n1) x line.
    int const tasks = a.kk * 3 * 2 * kLines;
    for (int task = t; task < tasks; task += nt)
    {
        int const li = task % kLines;
        int const side = (task / kLines) % 2;
        int const row = task / (2 * kLines);
        if (side == 1 && n1 == n0)
            continue;
        uint32_t const n = side == 0 ? n0 : n1;
        int64_t const first = side == 0 ? p0 - static_cast<int64_t>(n0) * a.howo : 0;
        int64_t const last = side == 1 ? pLast - static_cast<int64_t>(n1) * a.howo
            : n1 == n0                 ? pLast - static_cast<int64_t>(n0) * a.howo
                                       : a.howo - 1;
        int const kp = row / 3;
        int const which = row - kp * 3;
        int64_t const och = static_cast<int64_t>(dg) * a.kk + kp;
        T const* const base
            = which < 2 ? offset + n * a.offsetN + (och * 2 + which) * a.howo : mask + n * a.maskN + och * a.howo;
        uintptr_t const lo = reinterpret_cast<uintptr_t>(base + first) / kLine;
        uintptr_t const hi = reinterpret_cast<uintptr_t>(base + last) / kLine;
        if (lo + li <= hi)
            prefetchLineL2(reinterpret_cast<void const*>((lo + li) * kLine));
    }
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_NHWC_PARTS_CUH
