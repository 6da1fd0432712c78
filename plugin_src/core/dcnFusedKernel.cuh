/*
 * dcnconvert: the fused DCNv2 forward kernel, an implicit GEMM on tensor cores (sm_80+).
 *
 * Per group g:  out[m, p] = bias[m] + sum_k W[m, k] * S[k, p]  with m an output channel of the
 * group, p = (image, oy, ox) an output pixel (the batch is folded into the pixel dimension), and
 * k = c * kh*kw + kp (the weight's own layout). S[k, p] = mask * bilinear0(x[c], sampling point) is
 * never stored in device memory: each block samples its BK x BN slice straight into shared memory.
 *
 * One block owns a BM x BN tile (channels x pixels) and has two roles:
 *   - 8 producer warps. At the start (and when the deformable group changes) they build the
 *     sampling plan of the tile: for every (kernel point, pixel) one FP32 bilinear weight per corner
 *     with the mask and the border test folded in, and the index of the top-left corner of a 2x2
 *     cell clamped inside the plane (so all four loads are in bounds and unconditional). The plan
 *     is reused for every channel of the deformable group. Then, chunk after chunk, they copy the
 *     weight tile and gather 4 corners per sample, combine them in FP32 and round the sample
 *     once to the operand type (FP16/BF16; FP32 for the TF32 modes) into a ring of STAGES
 *     shared-memory stages.
 *   - 8 consumer warps run warp-level MMAs (m16n8k16 FP16/BF16, m16n8k8 TF32, or 3xTF32 for the
 *     accurate FP32 mode) with FP32 accumulators, and finally add the bias and store.
 * Producers and consumers hand stages over with named barriers (FULL: producers arrive, consumers
 * wait; EMPTY: the reverse). Coordinates are an exact integer part plus an FP32 fraction, as in the
 * simple kernel (dcnSimpleKernel.cuh); element offsets into x, offset, mask and out are 64-bit.
 *
 * Preconditions (checked on the host, dcnFused.cu): h >= 2, w >= 2, h*w < 2^31, n*ho*wo < 2^31,
 * and planSlots >= the number of deformable groups one chunk of BK rows of K can touch (the plan
 * of deformable group d lives in slot d % planSlots).
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
    int32_t h, w, howo, wo, pixels, cg, mg, kg, kk, kw, cout;
    int32_t strideH, strideW, padH, padW, dilationH, dilationW;
    int32_t planSlots; // plan slots: at least the deformable groups one chunk of BK rows can touch
    int32_t withBias;
    int32_t aVec; // weight rows are 16-byte aligned: vector loads
    // Input staging: each block copies, per input channel, the rows its samples can reach (its
    // output rows widened by the kernel extent and a margin) into a ring of shared-memory slots,
    // and gathers from there; samples outside that window read global memory.
    int64_t xTotal;     // elements of x (the copies never read past its end)
    int32_t stageSlots; // channel slots of the ring (0: no staging)
    int32_t slotElems;  // elements per slot (16-byte multiple, alignment slack included)
    int32_t winBefore;  // window rows: [oyFirst*strideH - winBefore, oyLast*strideH + winAfter)
    int32_t winAfter;
    FastDiv divKK, divCPerDg, divHoWo, divWo;
};

constexpr int kProducerWarps = 8;
constexpr int kConsumerWarps = 8;
constexpr int kProducers = kProducerWarps * 32;
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kThreads = kProducers + kConsumers;
constexpr int kBarProducers = 1; // producer-only barrier; FULL = 2 + s, EMPTY = 2 + STAGES + s

template <typename T, int BM_, int BN_, int WARPS_M_, int STAGES_>
struct Tile
{
    static constexpr int BM = BM_;
    static constexpr int BN = BN_;
    static constexpr int BK = 32;
    static constexpr int STAGES = STAGES_;
    static constexpr int WARPS_M = WARPS_M_;
    static constexpr int WARPS_N = kConsumerWarps / WARPS_M;
    static constexpr int WTM = BM / WARPS_M; // warp tile
    static constexpr int WTN = BN / WARPS_N;
    static constexpr int MT = WTM / 16;
    static constexpr int NT = WTN / 8;
    static constexpr int LDA = BK + (sizeof(T) == 4 ? 4 : 8); // padded rows: conflict-free fragments
    static constexpr int LDB = BN + 8;
    static constexpr int PX = BN / 32;                // pixels per producer lane
    static constexpr int ROWS = BK / kProducerWarps;  // K rows per producer warp and chunk
    static constexpr size_t A_BYTES = size_t(BM) * LDA * sizeof(T);
    static constexpr size_t B_BYTES = size_t(BK) * LDB * sizeof(T);
    static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BN % 32 == 0, "tile shape");
    static_assert(STAGES >= 2 && 2 + 2 * STAGES <= 16, "named barriers");

    /* Dynamic shared memory of one block: pipeline stages, `slots` sampling plans of kk kernel
     * points (weights, global index, window index), `ring` staged channels of slotElems. */
    static __host__ __device__ size_t smemBytes(int kk, int slots, int ring, int slotElems)
    {
        return STAGES * (A_BYTES + B_BYTES) + size_t(slots) * kk * BN * (sizeof(float4) + 2 * sizeof(int32_t))
            + size_t(ring) * slotElems * sizeof(T);
    }
};

template <typename T>
__device__ __forceinline__ T ldT(T const* p)
{
    return __ldg(p);
}

/* Builds the plan of deformable group dg into slot `slot` (producer threads only). */
struct Window
{
    uint32_t n0; // image of the block's first pixel (pixels of another image are not staged)
    int32_t y0;  // first and one-past-last staged input row
    int32_t y1;
};

template <typename T, class C>
__device__ __forceinline__ void buildPlan(FusedArgs const& a, T const* __restrict__ offset,
    T const* __restrict__ mask, int64_t p0, int dg, int slot, float4* planW, int32_t* planI, int32_t* planS,
    Window const& win, int ptid)
{
    using dcn::simple::toFloat;
    int const total = a.kk * C::BN;
    for (int e = ptid; e < total; e += kProducers)
    {
        int const kp = e / C::BN;
        int const pl = e - kp * C::BN;
        int64_t const p = p0 + pl;
        float4 wv = make_float4(0.f, 0.f, 0.f, 0.f);
        int32_t idx = 0;
        int32_t sIdx = -1;
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
                    idx = static_cast<int32_t>(yc * a.w + xc);
                    if (a.stageSlots > 0 && n == win.n0 && yc >= win.y0 && yc + 1 < win.y1)
                    {
                        sIdx = static_cast<int32_t>((yc - win.y0) * a.w + xc);
                    }
                }
            }
        }
        int const at = (slot * a.kk + kp) * C::BN + pl;
        planW[at] = wv;
        planI[at] = idx;
        planS[at] = sIdx;
    }
}

/* Copies the windows of input channels [cFrom, cTo] into their ring slots (cp.async, not waited). */
template <typename T, class C>
__device__ __forceinline__ void stageChannels(FusedArgs const& a, T const* __restrict__ x, T* sWin, Window const& win,
    int cFrom, int cTo, int ptid)
{
    constexpr int VEC = 16 / sizeof(T);
    int const winElems = (win.y1 - win.y0) * a.w;
    if (cTo < cFrom || winElems <= 0)
        return;
    int64_t const rowStart = static_cast<int64_t>(win.n0) * a.xImg + static_cast<int64_t>(win.y0) * a.w;
    // The shift of each channel's window inside its slot is at most VEC - 1 elements.
    int const perChannel = (winElems + VEC - 1 + VEC - 1) / VEC;
    int const total = (cTo - cFrom + 1) * perChannel;
    for (int t = ptid; t < total; t += kProducers)
    {
        int const ci = t / perChannel;
        int const v = t - ci * perChannel;
        int const c = cFrom + ci;
        int64_t const start = rowStart + static_cast<int64_t>(c) * a.hw;
        int64_t const aligned = start - (start & (VEC - 1));
        if (v * VEC >= winElems + static_cast<int>(start - aligned))
            continue;
        int64_t const src = aligned + static_cast<int64_t>(v) * VEC;
        int64_t const left = a.xTotal - src;
        int const bytes = left >= VEC ? 16 : (left > 0 ? static_cast<int>(left) * static_cast<int>(sizeof(T)) : 0);
        cpAsync16(sWin + (c % a.stageSlots) * a.slotElems + v * VEC, bytes > 0 ? x + src : x, bytes);
    }
}

template <typename T, MathKind MK, class C>
__global__ void __launch_bounds__(kThreads, 1) dcnFusedForwardKernel(FusedArgs const a, T const* __restrict__ x,
    T const* __restrict__ offset, T const* __restrict__ mask, T const* __restrict__ weight,
    T const* __restrict__ bias, T* __restrict__ out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) unsigned char smem[];
    T* const sA = reinterpret_cast<T*>(smem);                                 // [STAGES][BM][LDA]
    T* const sB = reinterpret_cast<T*>(smem + C::STAGES * C::A_BYTES);        // [STAGES][BK][LDB]
    float4* const planW = reinterpret_cast<float4*>(smem + C::STAGES * (C::A_BYTES + C::B_BYTES));
    int32_t* const planI = reinterpret_cast<int32_t*>(planW + a.planSlots * a.kk * C::BN);
    int32_t* const planS = planI + a.planSlots * a.kk * C::BN;
    T* const sWin = reinterpret_cast<T*>(planS + a.planSlots * a.kk * C::BN);

    int const tid = threadIdx.x;
    int const g = blockIdx.z;
    int64_t const p0 = static_cast<int64_t>(blockIdx.x) * C::BN;
    int const m0 = blockIdx.y * C::BM;
    int const nChunks = (a.kg + C::BK - 1) / C::BK;
    constexpr int kAll = kThreads;

    if (tid >= kConsumers)
    {
        // ------------------------------------------------------------------ producers
        int const ptid = tid - kConsumers;
        int const pw = ptid >> 5;
        int const lane = ptid & 31;
        int64_t imgOff[C::PX];
#pragma unroll
        for (int j = 0; j < C::PX; ++j)
        {
            int64_t const p = p0 + lane + 32 * j;
            imgOff[j] = p < a.pixels ? static_cast<int64_t>(a.divHoWo.div(static_cast<uint32_t>(p))) * a.xImg : 0;
        }
        int planned = -1; // highest deformable group planned so far
        Window win{0u, 0, 0};
        int staged = g * a.cg - 1; // highest input channel staged so far
        if (a.stageSlots > 0)
        {
            win.n0 = a.divHoWo.div(static_cast<uint32_t>(p0));
            int64_t const imgEnd = static_cast<int64_t>(win.n0 + 1) * a.howo;
            int64_t const pLast = min(min(p0 + C::BN, imgEnd), static_cast<int64_t>(a.pixels)) - 1;
            int32_t const rA = static_cast<int32_t>(p0 - static_cast<int64_t>(win.n0) * a.howo);
            int32_t const rB = static_cast<int32_t>(pLast - static_cast<int64_t>(win.n0) * a.howo);
            int32_t const oyA = static_cast<int32_t>(a.divWo.div(static_cast<uint32_t>(rA)));
            int32_t const oyB = static_cast<int32_t>(a.divWo.div(static_cast<uint32_t>(rB)));
            win.y0 = max(0, oyA * a.strideH - a.winBefore);
            win.y1 = max(win.y0, min(a.h, oyB * a.strideH + a.winAfter));
            int const cLast0 = g * a.cg + static_cast<int>(a.divKK.div(min(C::BK, a.kg) - 1));
            stageChannels<T, C>(a, x, sWin, win, staged + 1, cLast0, ptid);
            staged = cLast0;
            cpAsyncCommit();
            cpAsyncWaitAll();
            barSync(kBarProducers, kProducers);
        }
        T const* const wGroup = weight + static_cast<int64_t>(g) * a.mg * a.kg;
        for (int kc = 0; kc < nChunks; ++kc)
        {
            int const s = kc % C::STAGES;
            int const k0 = kc * C::BK;
            // Plans of the deformable groups this chunk touches (a uniform decision). Deformable
            // groups only grow along K, so the slots hold groups planned - slots + 1 .. planned,
            // and dgLast - dgFirst < slots (host precondition) keeps this chunk's groups resident.
            int const dgFirst
                = static_cast<int>(a.divCPerDg.div(g * a.cg + static_cast<int>(a.divKK.div(k0))));
            int const dgLast = static_cast<int>(
                a.divCPerDg.div(g * a.cg + static_cast<int>(a.divKK.div(min(k0 + C::BK, a.kg) - 1))));
            if (dgLast > planned)
            {
                barSync(kBarProducers, kProducers); // nobody still samples from a slot being replaced
                for (int d = max(planned + 1, dgFirst); d <= dgLast; ++d)
                {
                    buildPlan<T, C>(a, offset, mask, p0, d, d % a.planSlots, planW, planI, planS, win, ptid);
                }
                planned = dgLast;
                barSync(kBarProducers, kProducers);
            }
            if (kc >= C::STAGES)
            {
                barSync(2 + C::STAGES + s, kAll); // consumers are done with stage s
            }
            // Weight tile [BM][BK] of this chunk.
            T* const a_s = sA + s * (C::BM * C::LDA);
            if (a.aVec)
            {
                constexpr int VEC = 16 / sizeof(T);
                constexpr int VPR = C::BK / VEC;
#pragma unroll
                for (int v = ptid; v < C::BM * VPR; v += kProducers)
                {
                    int const m = v / VPR;
                    int const kv = (v - m * VPR) * VEC;
                    uint4 val = make_uint4(0u, 0u, 0u, 0u);
                    if (m0 + m < a.mg && k0 + kv < a.kg)
                    {
                        val = __ldg(reinterpret_cast<uint4 const*>(
                            wGroup + (static_cast<int64_t>(m0 + m) * a.kg + k0 + kv)));
                    }
                    *reinterpret_cast<uint4*>(a_s + m * C::LDA + kv) = val;
                }
            }
            else
            {
                for (int e = ptid; e < C::BM * C::BK; e += kProducers)
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
            // Start copying the windows of the next chunk's new channels (waited for after sampling).
            if (a.stageSlots > 0 && kc + 1 < nChunks)
            {
                int const cNext = g * a.cg + static_cast<int>(a.divKK.div(min(k0 + 2 * C::BK, a.kg) - 1));
                stageChannels<T, C>(a, x, sWin, win, staged + 1, cNext, ptid);
                staged = cNext;
                cpAsyncCommit();
            }
            // Sampled tile [BK][BN]: this warp's ROWS rows, this lane's PX pixels.
            T* const b_s = sB + s * (C::BK * C::LDB);
            T v[C::ROWS][C::PX][4];
            int planRow[C::ROWS];
            bool rowOk[C::ROWS];
#pragma unroll
            for (int i = 0; i < C::ROWS; ++i)
            {
                int const k = k0 + pw * C::ROWS + i;
                rowOk[i] = k < a.kg;
                int const c = static_cast<int>(a.divKK.div(rowOk[i] ? k : 0));
                int const kp = (rowOk[i] ? k : 0) - c * a.kk;
                int const cIn = g * a.cg + c;
                int const dg = static_cast<int>(a.divCPerDg.div(cIn));
                planRow[i] = ((dg % a.planSlots) * a.kk + kp) * C::BN;
                T const* const plane = x + static_cast<int64_t>(cIn) * a.hw;
                constexpr int VEC = 16 / sizeof(T);
                int64_t const wStart = static_cast<int64_t>(win.n0) * a.xImg + static_cast<int64_t>(cIn) * a.hw
                    + static_cast<int64_t>(win.y0) * a.w;
                T const* const wPlane
                    = sWin + (a.stageSlots > 0 ? (cIn % a.stageSlots) * a.slotElems + (wStart & (VEC - 1)) : 0);
#pragma unroll
                for (int j = 0; j < C::PX; ++j)
                {
                    if (rowOk[i])
                    {
                        int const e = planRow[i] + lane + 32 * j;
                        int const sIdx = planS[e];
#ifdef DCN_FUSED_NO_GATHER // experiments: the sampling loads left out
                        v[i][j][0] = v[i][j][1] = v[i][j][2] = v[i][j][3] = dcn::simple::fromFloat<T>(sIdx * 1e-3f);
#else
                        if (sIdx >= 0)
                        {
                            T const* const q = wPlane + sIdx;
                            v[i][j][0] = q[0];
                            v[i][j][1] = q[1];
                            v[i][j][2] = q[a.w];
                            v[i][j][3] = q[a.w + 1];
                        }
                        else
                        {
                            T const* const q = plane + imgOff[j] + planI[e];
                            v[i][j][0] = ldT(q);
                            v[i][j][1] = ldT(q + 1);
                            v[i][j][2] = ldT(q + a.w);
                            v[i][j][3] = ldT(q + a.w + 1);
                        }
#endif
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < C::ROWS; ++i)
            {
                T* const row = b_s + (pw * C::ROWS + i) * C::LDB;
#pragma unroll
                for (int j = 0; j < C::PX; ++j)
                {
                    float sv = 0.0f;
                    if (rowOk[i])
                    {
                        using dcn::simple::toFloat;
                        float4 const wv = planW[planRow[i] + lane + 32 * j];
                        sv = wv.x * toFloat<T>(v[i][j][0]);
                        sv = fmaf(wv.y, toFloat<T>(v[i][j][1]), sv);
                        sv = fmaf(wv.z, toFloat<T>(v[i][j][2]), sv);
                        sv = fmaf(wv.w, toFloat<T>(v[i][j][3]), sv);
                    }
                    row[lane + 32 * j] = dcn::simple::fromFloat<T>(sv);
                }
            }
            barArrive(2 + s, kAll); // stage s is full
            if (a.stageSlots > 0)
            {
                cpAsyncWaitAll();                   // the next chunk's windows have landed
                barSync(kBarProducers, kProducers); // for every producer, and this chunk's are free
            }
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
                    uint32_t r[4];
                    ldmatrixX4Trans(
                        r, b_s + (ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * C::LDB + np * 16 + (lane >> 4) * 8);
                    bf[2 * np][0] = r[0];
                    bf[2 * np][1] = r[1];
                    bf[2 * np + 1][0] = r[2];
                    bf[2 * np + 1][1] = r[3];
                }
#pragma unroll
#ifndef DCN_FUSED_NO_MMA // experiments: the tensor-core work left out
                for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < C::NT; ++nt)
                        mmaK16<T>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
#else
                acc[0][0][0] += __uint_as_float(af[0][0] ^ bf[0][0]);
#endif
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

    // Epilogue: bias in FP32, one rounding to T.
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
#endif
}

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_KERNEL_CUH
