/*
 * dcnconvert: the simple (reference) DCNv2 forward kernel, an implicit GEMM on CUDA cores.
 *
 * Per group g the forward is a GEMM  out[m, p] = sum_k W[m, k] * S[k, p]  with
 *   m in [0, Cout/group)             output channel within the group,
 *   p in [0, N*Ho*Wo)                output pixel, the batch folded in,
 *   k = c*kh*kw + i*kw + j           input channel within the group and kernel point,
 *   S[k, p] = mask * bilinear0(x, sampling point)   computed on the fly (never stored).
 *
 * One block owns a BM x BN tile (channels x pixels) of one group and walks K in chunks of BK:
 * its threads fill a shared FP32 tile of sampled values and a shared FP32 tile of weights, then
 * each thread accumulates a TM x TN register block in FP32 (BM = 64, or 32 when a group has at
 * most 32 output channels). Every channel tile samples its pixels again; the fused kernels
 * (dcnFusedKernel.cuh, dcnFusedNhwc.cuh) avoid that, and this one stays simple as the reference
 * path. Bias is added in the epilogue and the result is rounded once to the output type.
 * Coordinates (integer part + FP32 fraction), bilinear weights and accumulation are FP32 for every
 * element type; every element offset into x, offset, mask, weight and out is 64-bit. A quantized
 * layer (INT8 or FP8 x and weights) interpolates in FP16 as its fused kernels do, rounds each sample
 * to its type before the product and scales the sums in the epilogue (dcnParams.h).
 *
 * The per-row bookkeeping of a K chunk (channel, kernel point, deformable group) is the same for
 * every pixel, so 16 threads compute it once per chunk into a double-buffered shared table while
 * the other threads sample the current chunk.
 */
#ifndef DCN_SIMPLE_KERNEL_CUH
#define DCN_SIMPLE_KERNEL_CUH

#include "dcnElements.cuh"
#include "dcnParams.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdint.h>

namespace dcn
{
namespace simple
{

constexpr int kBMMax = 64;              // output channels per block (64, or 32 for small groups)
constexpr int kBN = 64;                 // output pixels per block
constexpr int kBK = 16;                 // K per chunk
constexpr int kThreads = 256;           // threads per block
constexpr int kTN = 4;                  // pixels per thread
constexpr int kAPad = 4;                // keeps float4 alignment of the weight tile rows
constexpr int kRowsPerPass = kThreads / kBN; // K rows sampled per pass over the pixel columns

static_assert(kBN * kBK == kThreads * (kBK / kRowsPerPass), "sampling split");
static_assert(kThreads % (kBN / kTN) == 0, "register blocking");
static_assert(kBK <= 32, "row table filled by one warp");

/* Minimum resident blocks per SM asked of the register allocator: 4 caps the kernel at 64
 * registers (no spills on sm_75..sm_90 with nvcc 13.0), i.e. 32 warps per SM to hide the latency of
 * the dependent offset -> corner loads. A tunable: -DDCN_SIMPLE_MIN_BLOCKS=n (EXTRA_NVCCFLAGS)
 * changes speed, not results; bench/gpu_check.sh times 1 and 3 and runs the GPU tests on each. */
#ifndef DCN_SIMPLE_MIN_BLOCKS
#define DCN_SIMPLE_MIN_BLOCKS 4
#endif

/* Problem description as the kernel sees it (all derived on the host, no division left to do
 * per launch). */
struct KernelArgs
{
    int64_t n, c, h, w, cout, ho, wo;
    int64_t hw;       // h * w
    int64_t howo;     // ho * wo
    int64_t pixels;   // n * ho * wo
    int64_t cg;       // input channels per group
    int64_t mg;       // output channels per group
    int64_t kg;       // cg * kh * kw
    int64_t cPerDg;   // input channels per deformable group
    int64_t offsetN;  // elements of offset per image
    int64_t maskN;    // elements of mask per image
    int32_t kh, kw, kk; // kk = kh * kw
    int32_t strideH, strideW, padH, padW, dilationH, dilationW;
    int32_t withBias;
    // Quantized layers (kQuantized<T>): out = xScale * wScale[co] * sum + bias, stored as outType.
    float xScale, outScale;
    float const* wScale;
    int32_t outType;
};

/* Bilinear sample of one input plane with zero padding, at (yBase + dy, xBase + dx).
 * The integer part of the coordinate stays an integer: y0 = yBase + floor(dy) is exact, and the
 * weight ly = dy - floor(dy) is exact in FP32 except for -0.5 < dy < 0 (for dy >= 0 the fraction of a
 * float is a float; for dy <= -0.5 the subtraction is exact by Sterbenz's lemma), where 1 + dy is
 * rounded by at most 2^-25 (possibly to 1.0f, still inside the same validity test). So the sampling
 * position does not lose precision however far from the origin it lies. The whole sample is
 * 0 unless -1 < y < H and -1 < x < W; corners outside the plane read as 0. Non-finite or huge
 * offsets give 0 and never form an index. */
template <typename T>
__device__ __forceinline__ float bilinear0(T const* plane, int64_t h, int64_t w, int32_t yBase, int32_t xBase,
    float dy, float dx)
{
    constexpr float kFar = 1.0e9f; // beyond any valid extent (validated <= 2^24)
    if (!(fabsf(dy) <= kFar && fabsf(dx) <= kFar))
    {
        return 0.0f;
    }
    float const fy = floorf(dy);
    float const fx = floorf(dx);
    int64_t const y0 = static_cast<int64_t>(yBase) + static_cast<int64_t>(fy);
    int64_t const x0 = static_cast<int64_t>(xBase) + static_cast<int64_t>(fx);
    float const ly = dy - fy;
    float const lx = dx - fx;
    // -1 < y0 + ly < h  and  -1 < x0 + lx < w, with ly, lx in [0, 1)
    bool const yIn = (y0 >= 0 || (y0 == -1 && ly > 0.0f)) && y0 < h;
    bool const xIn = (x0 >= 0 || (x0 == -1 && lx > 0.0f)) && x0 < w;
    if (!(yIn && xIn))
    {
        return 0.0f;
    }
    int64_t const y1 = y0 + 1;
    int64_t const x1 = x0 + 1;
    float const hy = 1.0f - ly;
    float const hx = 1.0f - lx;
    bool const y0In = y0 >= 0;
    bool const x0In = x0 >= 0;
    bool const y1In = y1 < h;
    bool const x1In = x1 < w;
    float v00 = 0.0f, v01 = 0.0f, v10 = 0.0f, v11 = 0.0f;
    if (y0In && x0In)
        v00 = ldf(plane + (y0 * w + x0));
    if (y0In && x1In)
        v01 = ldf(plane + (y0 * w + x1));
    if (y1In && x0In)
        v10 = ldf(plane + (y1 * w + x0));
    if (y1In && x1In)
        v11 = ldf(plane + (y1 * w + x1));
    return hy * (hx * v00 + lx * v01) + ly * (hx * v10 + lx * v11);
}

/* The quantized layers' sample (quantSample) at the position bilinear0 takes, times the mask mk:
 * the same validity test, corner weights as the fused kernels' sampling plan forms them
 * (dcnFusedCommon.cuh, planCell). */
template <typename T>
__device__ __forceinline__ float bilinearQuant(T const* plane, int64_t h, int64_t w, int32_t yBase, int32_t xBase,
    float dy, float dx, float mk)
{
    constexpr float kFar = 1.0e9f;
    if (!(fabsf(dy) <= kFar && fabsf(dx) <= kFar))
        return 0.0f;
    float const fy = floorf(dy);
    float const fx = floorf(dx);
    int64_t const y0 = static_cast<int64_t>(yBase) + static_cast<int64_t>(fy);
    int64_t const x0 = static_cast<int64_t>(xBase) + static_cast<int64_t>(fx);
    float const ly = dy - fy;
    float const lx = dx - fx;
    bool const yIn = (y0 >= 0 || (y0 == -1 && ly > 0.0f)) && y0 < h;
    bool const xIn = (x0 >= 0 || (x0 == -1 && lx > 0.0f)) && x0 < w;
    if (!(yIn && xIn))
        return 0.0f;
    bool const y0In = y0 >= 0;
    bool const x0In = x0 >= 0;
    bool const y1In = y0 + 1 < h;
    bool const x1In = x0 + 1 < w;
    float const wy0 = y0In ? (1.0f - ly) : 0.0f;
    float const wy1 = y1In ? ly : 0.0f;
    float const wx0 = x0In ? (1.0f - lx) : 0.0f;
    float const wx1 = x1In ? lx : 0.0f;
    float const wt[4] = {mk * wy0 * wx0, mk * wy0 * wx1, mk * wy1 * wx0, mk * wy1 * wx1};
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (y0In && x0In)
        v[0] = ldf(plane + (y0 * w + x0));
    if (y0In && x1In)
        v[1] = ldf(plane + (y0 * w + x0 + 1));
    if (y1In && x0In)
        v[2] = ldf(plane + ((y0 + 1) * w + x0));
    if (y1In && x1In)
        v[3] = ldf(plane + ((y0 + 1) * w + x0 + 1));
    return quantSample<T>(wt, v);
}

/* grid: x = pixel tiles, y = channel tiles within a group, z = group.
 * BM is the channel tile (32 or 64): each thread owns BM/16 channels x kTN pixels.
 * T: x and the weights; TF: offset, mask and bias (T for a float layer; a quantized layer's T is
 * INT8 or FP8, its samples are rounded to T, and out has the type a.outType). */
template <typename T, int BM, typename TF = T>
__global__ void __launch_bounds__(kThreads, DCN_SIMPLE_MIN_BLOCKS) dcnSimpleForwardKernel(KernelArgs const a,
    T const* __restrict__ x, TF const* __restrict__ offset, TF const* __restrict__ mask,
    T const* __restrict__ weight, TF const* __restrict__ bias, void* __restrict__ out)
{
    constexpr int kTM = BM / (kThreads / (kBN / kTN)); // channels per thread
    static_assert(kTM == 2 || kTM == 4, "BM must be 32 or 64");
    __shared__ __align__(16) float sW[kBK][BM + kAPad]; // weights, [k][m]
    __shared__ __align__(16) float sS[kBK][kBN];         // sampled values, [k][p]
    // Per-K-row table for the chunk being sampled (double-buffered).
    __shared__ int64_t rowX[2][kBK];  // element offset of the input channel plane within an image
    __shared__ int32_t rowOff[2][kBK]; // offset channel of dy (dx is +1); -1 when k >= kg
    __shared__ int32_t rowMask[2][kBK];
    __shared__ int32_t rowDy[2][kBK]; // i * dilationH
    __shared__ int32_t rowDx[2][kBK]; // j * dilationW

    int const tid = threadIdx.x;
    int64_t const g = blockIdx.z;
    int64_t const m0 = static_cast<int64_t>(blockIdx.y) * BM;
    int64_t const p0 = static_cast<int64_t>(blockIdx.x) * kBN;

    // Fills the row table for K rows [k0, k0 + kBK) into buffer b (threads 0..kBK-1).
    auto fillRows = [&](int64_t k0, int b) {
        if (tid < kBK)
        {
            int64_t const k = k0 + tid;
            if (k < a.kg)
            {
                int64_t const cLocal = k / a.kk;
                int32_t const kp = static_cast<int32_t>(k - cLocal * a.kk);
                int32_t const i = kp / a.kw;
                int32_t const j = kp - i * a.kw;
                int64_t const cin = g * a.cg + cLocal;
                int32_t const dg = static_cast<int32_t>(cin / a.cPerDg);
                rowX[b][tid] = cin * a.hw;
                rowOff[b][tid] = (dg * a.kk + kp) * 2;
                rowMask[b][tid] = dg * a.kk + kp;
                rowDy[b][tid] = i * a.dilationH;
                rowDx[b][tid] = j * a.dilationW;
            }
            else
            {
                rowX[b][tid] = 0;
                rowOff[b][tid] = -1;
                rowMask[b][tid] = 0;
                rowDy[b][tid] = 0;
                rowDx[b][tid] = 0;
            }
        }
    };

    // This thread's sampling pixel (fixed over K).
    int const sCol = tid % kBN;
    int const sRow0 = tid / kBN;
    int64_t const sp = p0 + sCol;
    bool const sValid = sp < a.pixels;
    T const* xImg = x;
    TF const* offPix = offset;
    TF const* maskPix = mask;
    int32_t yBase = 0;
    int32_t xBase = 0;
    if (sValid)
    {
        int64_t const n = sp / a.howo;
        int64_t const r = sp - n * a.howo;
        int64_t const oy = r / a.wo;
        int64_t const ox = r - oy * a.wo;
        xImg = x + n * a.c * a.hw;
        offPix = offset + n * a.offsetN + r;
        maskPix = mask + n * a.maskN + r;
        yBase = static_cast<int32_t>(oy * a.strideH - a.padH);
        xBase = static_cast<int32_t>(ox * a.strideW - a.padW);
    }

    // Weight tile loader mapping: k fastest so a warp reads 16 consecutive weights of 2 rows.
    int const wK = tid % kBK;
    int const wM0 = tid / kBK;
    constexpr int kWRowsPerPass = kThreads / kBK;

    // Compute mapping: thread owns channels tm*4..tm*4+3 and pixels tn + 16*q.
    int const tm = tid / (kBN / kTN);
    int const tn = tid % (kBN / kTN);

    float acc[kTM][kTN];
#pragma unroll
    for (int r = 0; r < kTM; ++r)
#pragma unroll
        for (int q = 0; q < kTN; ++q)
            acc[r][q] = 0.0f;

    fillRows(0, 0);
    __syncthreads();

    int buf = 0;
    for (int64_t k0 = 0; k0 < a.kg; k0 += kBK)
    {
        // Weights of this chunk.
#pragma unroll
        for (int s = 0; s < BM / kWRowsPerPass; ++s)
        {
            int const ml = wM0 + s * kWRowsPerPass;
            int64_t const m = m0 + ml;
            int64_t const k = k0 + wK;
            float v = 0.0f;
            if (m < a.mg && k < a.kg)
            {
                v = ldf(weight + ((g * a.mg + m) * a.kg + k));
            }
            sW[wK][ml] = v;
        }
        // Sampled values of this chunk.
#pragma unroll
        for (int s = 0; s < kBK / kRowsPerPass; ++s)
        {
            int const row = sRow0 + s * kRowsPerPass;
            int32_t const oc = rowOff[buf][row];
            float v = 0.0f;
            if (sValid && oc >= 0)
            {
                float const dy = ldf(offPix + static_cast<int64_t>(oc) * a.howo);
                float const dx = ldf(offPix + static_cast<int64_t>(oc + 1) * a.howo);
                float const mk = ldf(maskPix + static_cast<int64_t>(rowMask[buf][row]) * a.howo);
                if constexpr (kQuantized<T>)
                    v = bilinearQuant(xImg + rowX[buf][row], a.h, a.w, yBase + rowDy[buf][row], xBase + rowDx[buf][row],
                        dy, dx, mk);
                else
                    v = mk
                        * bilinear0(xImg + rowX[buf][row], a.h, a.w, yBase + rowDy[buf][row], xBase + rowDx[buf][row],
                            dy, dx);
            }
            sS[row][sCol] = v;
        }
        // Row table of the next chunk, into the other buffer (read only after two barriers).
        fillRows(k0 + kBK, buf ^ 1);
        __syncthreads();

#pragma unroll
        for (int kk = 0; kk < kBK; ++kk)
        {
            float wr[kTM];
            if constexpr (kTM == 4)
            {
                float4 const wv = *reinterpret_cast<float4 const*>(&sW[kk][tm * kTM]);
                wr[0] = wv.x;
                wr[1] = wv.y;
                wr[2] = wv.z;
                wr[3] = wv.w;
            }
            else
            {
                float2 const wv = *reinterpret_cast<float2 const*>(&sW[kk][tm * kTM]);
                wr[0] = wv.x;
                wr[1] = wv.y;
            }
            float sv[kTN];
#pragma unroll
            for (int q = 0; q < kTN; ++q)
                sv[q] = sS[kk][tn + q * (kBN / kTN)];
#pragma unroll
            for (int r = 0; r < kTM; ++r)
#pragma unroll
                for (int q = 0; q < kTN; ++q)
                    acc[r][q] = fmaf(wr[r], sv[q], acc[r][q]);
        }
        __syncthreads();
        buf ^= 1;
    }

    // Epilogue: bias in FP32, one rounding to T, coalesced along pixels.
#pragma unroll
    for (int q = 0; q < kTN; ++q)
    {
        int64_t const p = p0 + tn + q * (kBN / kTN);
        if (p >= a.pixels)
            continue;
        int64_t const n = p / a.howo;
        int64_t const r = p - n * a.howo;
#pragma unroll
        for (int rr = 0; rr < kTM; ++rr)
        {
            int64_t const m = m0 + tm * kTM + rr;
            if (m >= a.mg)
                continue;
            int64_t const co = g * a.mg + m;
            float v = acc[rr][q];
            if constexpr (kQuantized<T>)
                v *= a.xScale * __ldg(a.wScale + co);
            if (a.withBias)
                v += ldf(bias + co);
            int64_t const at = (n * a.cout + co) * a.howo + r;
            if constexpr (kQuantized<T>)
                storeAs(out, at, v, a.outType, a.outScale);
            else
                static_cast<T*>(out)[at] = fromFloat<T>(v);
        }
    }
}

} // namespace simple
} // namespace dcn

#endif // DCN_SIMPLE_KERNEL_CUH
