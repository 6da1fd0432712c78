/*
 * dcnconvert benchmark baseline: DCNv2 forward as deformable im2col + cuBLAS, following the
 * algorithm of TensorRT's built-in ModulatedDeformConv2d plugin (research notes dcn_perf.md §1.1):
 *
 *   for each image n (host loop, one image at a time):
 *     1. im2col: columns[(c*kh*kw + k)][p] = mask * bilinear0(x[n, c], sampling point of (k, p)),
 *        p = oy*Wo + ox, written in the element type T (one thread per (c, p), a loop over k;
 *        512 threads per block, at most 4096 blocks, grid-stride loop);
 *     2. one GEMM per group, straight into out[n]:  out_g[Mg x P] = W_g[Mg x Kg] * cols_g[Kg x P]
 *        (row-major; cuBLAS sees the column-major transposes: C^T = cols_g^T * W_g^T);
 *   3. after all images, one bias pass over the whole output (read, add, write).
 *
 * GEMMs: FP32 cublasSgemm in CUBLAS_DEFAULT_MATH (no TF32), FP16 cublasHgemm (FP16 accumulation,
 * as TensorRT's plugin does), BF16 cublasGemmEx(CUDA_R_16BF, CUBLAS_COMPUTE_32F) (TensorRT's
 * plugin has no BF16). Unlike TensorRT's FP16 path, sampling coordinates and bilinear weights are
 * FP32 for every element type (the semantics of plugin_src/core/dcnParams.h, zero outside the
 * image); the sampled value times the mask is rounded once to T.
 *
 * Benchmark code, not part of the product. Built by bench/baseline/build.sh into
 * build/libdcn_baseline.so; called through ctypes by bench/dcn_bench.py.
 */
#include "dcnParams.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <mutex>

#define BASELINE_API extern "C" __attribute__((visibility("default")))

namespace
{

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 4096;
constexpr size_t kCublasWorkspace = size_t(32) << 20; // set explicitly so that graph capture never allocates

void setMsg(char* msg, size_t msgLen, char const* fmt, ...)
{
    if (msg == nullptr || msgLen == 0)
        return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, msgLen, fmt, args);
    va_end(args);
}

template <typename T>
__device__ __forceinline__ float toF(T v);
template <>
__device__ __forceinline__ float toF<float>(float v)
{
    return v;
}
template <>
__device__ __forceinline__ float toF<__half>(__half v)
{
    return __half2float(v);
}
template <>
__device__ __forceinline__ float toF<__nv_bfloat16>(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T fromF(float v);
template <>
__device__ __forceinline__ float fromF<float>(float v)
{
    return v;
}
template <>
__device__ __forceinline__ __half fromF<__half>(float v)
{
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromF<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* Bilinear value of one H x W plane at (y, x) in FP32; the whole sample is 0 unless -1 < y < H and
 * -1 < x < W (NaN fails the test too), corners outside the plane count as 0. */
template <typename T>
__device__ __forceinline__ float sampleZero(T const* plane, int h, int w, float y, float x)
{
    if (!(y > -1.0f && y < static_cast<float>(h) && x > -1.0f && x < static_cast<float>(w)))
        return 0.0f;
    float const yf = floorf(y);
    float const xf = floorf(x);
    int const y0 = static_cast<int>(yf);
    int const x0 = static_cast<int>(xf);
    float const ly = y - yf;
    float const lx = x - xf;
    float const hy = 1.0f - ly;
    float const hx = 1.0f - lx;
    bool const top = y0 >= 0;
    bool const bottom = y0 + 1 < h;
    bool const left = x0 >= 0;
    bool const right = x0 + 1 < w;
    float a = 0.0f, b = 0.0f, c = 0.0f, d = 0.0f;
    if (top && left)
        a = toF(plane[static_cast<int64_t>(y0) * w + x0]);
    if (top && right)
        b = toF(plane[static_cast<int64_t>(y0) * w + x0 + 1]);
    if (bottom && left)
        c = toF(plane[static_cast<int64_t>(y0 + 1) * w + x0]);
    if (bottom && right)
        d = toF(plane[static_cast<int64_t>(y0 + 1) * w + x0 + 1]);
    return hy * hx * a + hy * lx * b + ly * hx * c + ly * lx * d;
}

struct Im2colArgs
{
    int c, h, w, ho, wo, kh, kw;
    int strideH, strideW, padH, padW, dilationH, dilationW;
    int cPerDg;
};

/* One image: x [C][H][W], offset [dg*2*kk][P], mask [dg*kk][P] -> columns [C*kk][P]. */
template <typename T>
__global__ void __launch_bounds__(kThreads) deformIm2col(Im2colArgs const a, T const* __restrict__ x,
    T const* __restrict__ offset, T const* __restrict__ mask, T* __restrict__ columns)
{
    int64_t const pixels = static_cast<int64_t>(a.ho) * a.wo;
    int64_t const total = static_cast<int64_t>(a.c) * pixels;
    int const kk = a.kh * a.kw;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    {
        int64_t const p = idx % pixels;
        int const ch = static_cast<int>(idx / pixels);
        int const oy = static_cast<int>(p / a.wo);
        int const ox = static_cast<int>(p - static_cast<int64_t>(oy) * a.wo);
        int const dg = ch / a.cPerDg;
        T const* plane = x + static_cast<int64_t>(ch) * a.h * a.w;
        T const* off = offset + static_cast<int64_t>(dg) * 2 * kk * pixels + p;
        T const* msk = mask + static_cast<int64_t>(dg) * kk * pixels + p;
        T* col = columns + static_cast<int64_t>(ch) * kk * pixels + p;
        for (int i = 0; i < a.kh; ++i)
        {
            for (int j = 0; j < a.kw; ++j)
            {
                int const k = i * a.kw + j;
                float const dy = toF(off[(2 * k) * pixels]);
                float const dx = toF(off[(2 * k + 1) * pixels]);
                float const m = toF(msk[k * pixels]);
                float const y = static_cast<float>(oy * a.strideH - a.padH + i * a.dilationH) + dy;
                float const xx = static_cast<float>(ox * a.strideW - a.padW + j * a.dilationW) + dx;
                col[k * pixels] = fromF<T>(sampleZero(plane, a.h, a.w, y, xx) * m);
            }
        }
    }
}

/* out[n][o][p] += bias[o] over the whole output. */
template <typename T>
__global__ void __launch_bounds__(kThreads) addBias(T* __restrict__ out, T const* __restrict__ bias,
    int64_t total, int64_t pixels, int64_t cout)
{
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    {
        int64_t const o = (idx / pixels) % cout;
        out[idx] = fromF<T>(toF(out[idx]) + toF(bias[o]));
    }
}

unsigned blocksFor(int64_t total)
{
    int64_t const b = (total + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < kMaxBlocks ? (b < 1 ? 1 : b) : kMaxBlocks);
}

/* The process-wide cuBLAS handle and its workspace (created on first use). */
std::mutex gMutex;
cublasHandle_t gHandle = nullptr;
void* gCublasWorkspace = nullptr;

char const* cublasName(cublasStatus_t s)
{
    return cublasGetStatusString(s);
}

int getHandle(cublasHandle_t* out, char* msg, size_t msgLen)
{
    std::lock_guard<std::mutex> lock(gMutex);
    if (gHandle == nullptr)
    {
        cublasStatus_t const st = cublasCreate(&gHandle);
        if (st != CUBLAS_STATUS_SUCCESS)
        {
            gHandle = nullptr;
            setMsg(msg, msgLen, "cublasCreate: %s", cublasName(st));
            return kDCN_CUDA_ERROR;
        }
        cublasStatus_t const mm = cublasSetMathMode(gHandle, CUBLAS_DEFAULT_MATH);
        if (mm != CUBLAS_STATUS_SUCCESS)
        {
            setMsg(msg, msgLen, "cublasSetMathMode(CUBLAS_DEFAULT_MATH): %s", cublasName(mm));
            return kDCN_CUDA_ERROR;
        }
        cudaError_t const e = cudaMalloc(&gCublasWorkspace, kCublasWorkspace);
        if (e != cudaSuccess)
        {
            gCublasWorkspace = nullptr;
            setMsg(msg, msgLen, "cudaMalloc of the cuBLAS workspace (%zu bytes): %s", kCublasWorkspace,
                cudaGetErrorString(e));
            return kDCN_CUDA_ERROR;
        }
    }
    *out = gHandle;
    return kDCN_SUCCESS;
}

size_t elementSize(int32_t dtype)
{
    return dtype == kDCN_FLOAT32 ? 4 : 2;
}

int checkParams(DcnParams const* p, char* msg, size_t msgLen)
{
    if (p == nullptr)
    {
        setMsg(msg, msgLen, "params is NULL");
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->dtype != kDCN_FLOAT32 && p->dtype != kDCN_FLOAT16 && p->dtype != kDCN_BFLOAT16)
    {
        setMsg(msg, msgLen, "dtype %d is not FLOAT32/FLOAT16/BFLOAT16", p->dtype);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->n < 1 || p->c < 1 || p->h < 1 || p->w < 1 || p->cout < 1 || p->ho < 1 || p->wo < 1 || p->kh < 1
        || p->kw < 1 || p->strideH < 1 || p->strideW < 1 || p->padH < 0 || p->padW < 0 || p->dilationH < 1
        || p->dilationW < 1 || p->group < 1 || p->deformableGroup < 1)
    {
        setMsg(msg, msgLen, "a size or attribute is out of range (n=%lld c=%lld h=%lld w=%lld cout=%lld ho=%lld wo=%lld)",
            (long long) p->n, (long long) p->c, (long long) p->h, (long long) p->w, (long long) p->cout,
            (long long) p->ho, (long long) p->wo);
        return kDCN_INVALID_ARGUMENT;
    }
    int64_t const hoExp = (p->h + 2 * p->padH - (int64_t) p->dilationH * (p->kh - 1) - 1) / p->strideH + 1;
    int64_t const woExp = (p->w + 2 * p->padW - (int64_t) p->dilationW * (p->kw - 1) - 1) / p->strideW + 1;
    if (p->ho != hoExp || p->wo != woExp)
    {
        setMsg(msg, msgLen, "ho x wo = %lld x %lld, expected %lld x %lld", (long long) p->ho, (long long) p->wo,
            (long long) hoExp, (long long) woExp);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->c % p->group || p->cout % p->group || p->c % p->deformableGroup)
    {
        setMsg(msg, msgLen, "c=%lld and cout=%lld must divide by group=%d, c by deformableGroup=%d", (long long) p->c,
            (long long) p->cout, p->group, p->deformableGroup);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->withBias != 0 && p->withBias != 1)
    {
        setMsg(msg, msgLen, "withBias must be 0 or 1, got %d", p->withBias);
        return kDCN_INVALID_ARGUMENT;
    }
    if (p->dtype == kDCN_FLOAT32 && p->math != kDCN_MATH_ACCURATE)
    {
        setMsg(msg, msgLen, "the baseline has no TF32 mode (TensorRT's plugin uses plain Sgemm): math must be 0");
        return kDCN_UNSUPPORTED;
    }
    int64_t const pixels = p->ho * p->wo;
    int64_t const kg = p->c / p->group * p->kh * p->kw;
    if (pixels > INT_MAX || kg > INT_MAX || p->cout > INT_MAX || p->c * pixels > INT_MAX || p->h > INT_MAX
        || p->w > INT_MAX)
    {
        setMsg(msg, msgLen, "a dimension exceeds the 32-bit cuBLAS/indexing range of this baseline");
        return kDCN_UNSUPPORTED;
    }
    return kDCN_SUCCESS;
}

#define CUDA_TRY(call)                                                                                             \
    do                                                                                                             \
    {                                                                                                              \
        cudaError_t const e_ = (call);                                                                             \
        if (e_ != cudaSuccess)                                                                                     \
        {                                                                                                          \
            setMsg(msg, msgLen, "%s: %s (%s)", #call, cudaGetErrorName(e_), cudaGetErrorString(e_));               \
            return kDCN_CUDA_ERROR;                                                                                \
        }                                                                                                          \
    } while (0)

#define CUBLAS_TRY(call)                                                                                           \
    do                                                                                                             \
    {                                                                                                              \
        cublasStatus_t const s_ = (call);                                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                           \
        {                                                                                                          \
            setMsg(msg, msgLen, "%s: %s", #call, cublasName(s_));                                                  \
            return kDCN_CUDA_ERROR;                                                                                \
        }                                                                                                          \
    } while (0)

/* out_g (row-major Mg x P) = W_g (Mg x Kg) * cols_g (Kg x P): column-major C^T = cols^T * W^T. */
int gemm(cublasHandle_t handle, int32_t dtype, int m, int n, int k, void const* cols, void const* w, void* out,
    char* msg, size_t msgLen)
{
    if (dtype == kDCN_FLOAT32)
    {
        float const one = 1.0f, zero = 0.0f;
        CUBLAS_TRY(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, static_cast<float const*>(cols), m,
            static_cast<float const*>(w), k, &zero, static_cast<float*>(out), m));
    }
    else if (dtype == kDCN_FLOAT16)
    {
        __half const one = __float2half(1.0f), zero = __float2half(0.0f);
        CUBLAS_TRY(cublasHgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, static_cast<__half const*>(cols), m,
            static_cast<__half const*>(w), k, &zero, static_cast<__half*>(out), m));
    }
    else
    {
        float const one = 1.0f, zero = 0.0f;
        CUBLAS_TRY(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, cols, CUDA_R_16BF, m, w,
            CUDA_R_16BF, k, &zero, out, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return kDCN_SUCCESS;
}

template <typename T>
int forwardT(DcnParams const* p, void const* xv, void const* offv, void const* maskv, void const* wv, void const* bv,
    void* outv, void* workspace, cudaStream_t stream, cublasHandle_t handle, char* msg, size_t msgLen)
{
    T const* x = static_cast<T const*>(xv);
    T const* offset = static_cast<T const*>(offv);
    T const* mask = static_cast<T const*>(maskv);
    T const* weight = static_cast<T const*>(wv);
    T* out = static_cast<T*>(outv);
    T* columns = static_cast<T*>(workspace);
    int const kk = p->kh * p->kw;
    int64_t const pixels = p->ho * p->wo;
    int64_t const mg = p->cout / p->group;
    int64_t const cg = p->c / p->group;
    int64_t const kg = cg * kk;
    Im2colArgs a{};
    a.c = static_cast<int>(p->c);
    a.h = static_cast<int>(p->h);
    a.w = static_cast<int>(p->w);
    a.ho = static_cast<int>(p->ho);
    a.wo = static_cast<int>(p->wo);
    a.kh = p->kh;
    a.kw = p->kw;
    a.strideH = p->strideH;
    a.strideW = p->strideW;
    a.padH = p->padH;
    a.padW = p->padW;
    a.dilationH = p->dilationH;
    a.dilationW = p->dilationW;
    a.cPerDg = static_cast<int>(p->c / p->deformableGroup);
    unsigned const im2colBlocks = blocksFor(p->c * pixels);
    for (int64_t n = 0; n < p->n; ++n)
    {
        deformIm2col<T><<<im2colBlocks, kThreads, 0, stream>>>(a, x + n * p->c * p->h * p->w,
            offset + n * 2 * p->deformableGroup * kk * pixels, mask + n * p->deformableGroup * kk * pixels, columns);
        CUDA_TRY(cudaGetLastError());
        for (int64_t g = 0; g < p->group; ++g)
        {
            int const rc = gemm(handle, p->dtype, static_cast<int>(pixels), static_cast<int>(mg), static_cast<int>(kg),
                columns + g * kg * pixels, weight + g * mg * kg, out + (n * p->cout + g * mg) * pixels, msg, msgLen);
            if (rc != kDCN_SUCCESS)
                return rc;
        }
    }
    if (p->withBias)
    {
        int64_t const total = p->n * p->cout * pixels;
        addBias<T><<<blocksFor(total), kThreads, 0, stream>>>(out, static_cast<T const*>(bv), total, pixels, p->cout);
        CUDA_TRY(cudaGetLastError());
    }
    return kDCN_SUCCESS;
}

} // namespace

/* Bytes of workspace (one image's columns, 16-byte aligned) for p. Returns 0 or a DcnStatus. */
BASELINE_API int baselineWorkspaceSize(DcnParams const* p, size_t* bytes)
{
    if (p == nullptr || bytes == nullptr)
        return kDCN_INVALID_ARGUMENT;
    int const rc = checkParams(p, nullptr, 0);
    if (rc != kDCN_SUCCESS)
        return rc;
    size_t const raw = static_cast<size_t>(p->c) * p->kh * p->kw * p->ho * p->wo * elementSize(p->dtype);
    *bytes = (raw + 15) / 16 * 16;
    return kDCN_SUCCESS;
}

/* cuBLAS version as cublasGetVersion reports it (e.g. 130100), or a negative value on failure. */
BASELINE_API int baselineCublasVersion(void)
{
    cublasHandle_t h = nullptr;
    if (getHandle(&h, nullptr, 0) != kDCN_SUCCESS)
        return -1;
    int v = 0;
    return cublasGetVersion(h, &v) == CUBLAS_STATUS_SUCCESS ? v : -2;
}

/* The forward on `stream` (device pointers; bias may be NULL when withBias == 0). No allocation
 * after the first call (which creates the cuBLAS handle and its workspace). Returns 0 on success,
 * else a DcnStatus with msg filled. */
BASELINE_API int baselineForward(DcnParams const* p, void const* x, void const* offset, void const* mask,
    void const* weight, void const* bias, void* out, void* workspace, size_t workspaceSize, cudaStream_t stream,
    char* msg, size_t msgLen)
{
    int rc = checkParams(p, msg, msgLen);
    if (rc != kDCN_SUCCESS)
        return rc;
    size_t need = 0;
    baselineWorkspaceSize(p, &need);
    if (workspace == nullptr || workspaceSize < need)
    {
        setMsg(msg, msgLen, "workspace of %zu bytes given, %zu needed", workspace ? workspaceSize : 0, need);
        return kDCN_INVALID_ARGUMENT;
    }
    if (!x || !offset || !mask || !weight || !out || (p->withBias && !bias))
    {
        setMsg(msg, msgLen, "a required device pointer is NULL");
        return kDCN_INVALID_ARGUMENT;
    }
    cublasHandle_t handle = nullptr;
    rc = getHandle(&handle, msg, msgLen);
    if (rc != kDCN_SUCCESS)
        return rc;
    std::lock_guard<std::mutex> lock(gMutex); // the handle's stream and workspace are per call
    CUBLAS_TRY(cublasSetStream(handle, stream));
    CUBLAS_TRY(cublasSetWorkspace(handle, gCublasWorkspace, kCublasWorkspace)); // setStream resets it
    switch (p->dtype)
    {
    case kDCN_FLOAT32:
        return forwardT<float>(p, x, offset, mask, weight, bias, out, workspace, stream, handle, msg, msgLen);
    case kDCN_FLOAT16:
        return forwardT<__half>(p, x, offset, mask, weight, bias, out, workspace, stream, handle, msg, msgLen);
    default:
        return forwardT<__nv_bfloat16>(p, x, offset, mask, weight, bias, out, workspace, stream, handle, msg, msgLen);
    }
}
