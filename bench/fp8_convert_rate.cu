/*
 * Throughput of the FP8 sample path's conversions on the GPU, against HFMA2: the packed E4M3 ->
 * FP16 conversion (cvt.rn.f16x2.e4m3x2, two codes), an integer-operation decode of four codes into
 * two FP16 pairs of value / 256 (the form tried in commits 78aa732 and 35b709d), and the packed
 * FP16 -> E4M3 conversion back (cvt.rn.satfinite.e4m3x2.f16x2). Every thread runs 8 independent
 * chains; rates are thread instructions (decode: words of four codes) per SM per clock at the
 * device's maximum clock, and relative to HFMA2 measured in the same run (docs/benchmarks.md,
 * "What limits them").
 *
 *   nvcc -O3 -arch=sm_90 -o /tmp/fp8_convert_rate bench/fp8_convert_rate.cu && /tmp/fp8_convert_rate
 */
#include <cstdint>
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace
{

constexpr int kChains = 8;
constexpr int kIters = 4096;

__device__ __forceinline__ uint32_t cvtUp(uint16_t v)
{
    uint32_t r;
    asm volatile("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(v));
    return r;
}

__device__ __forceinline__ uint16_t cvtDown(uint32_t v)
{
    uint16_t r;
    asm volatile("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(r) : "r"(v));
    return r;
}

// Different starting words per thread and chain.
__device__ __forceinline__ void seedChains(uint32_t (&a)[kChains], uint32_t seed)
{
    for (int i = 0; i < kChains; ++i)
        a[i] = seed * (threadIdx.x + 1) + i;
}

// The results feed a store no thread takes, so that nothing is optimised away.
__device__ __forceinline__ void keep(uint32_t const (&a)[kChains], uint32_t* out)
{
    uint32_t s = 0;
    for (int i = 0; i < kChains; ++i)
        s ^= a[i];
    if (s == 0x12345u)
        out[0] = s;
}

// One chain step of each timed operation (the kernel below runs kChains independent chains).
struct ConvertUp
{
    static __device__ __forceinline__ uint32_t step(uint32_t a)
    {
        return cvtUp(static_cast<uint16_t>(a)) ^ cvtUp(static_cast<uint16_t>(a >> 16));
    }
};

// Codes 0-3 of a word: bytes 0 and 2 and bytes 1 and 3 as FP16 pairs of value / 256 (sign to bit 15,
// exponent and mantissa shifted into the FP16 fields).
struct DecodeInteger
{
    static __device__ __forceinline__ uint32_t step(uint32_t w)
    {
        uint32_t const even = ((w << 8) & 0x80008000u) | ((w << 7) & 0x3F803F80u);
        uint32_t const odd = (w & 0x80008000u) | ((w >> 1) & 0x3F803F80u);
        return even ^ odd;
    }
};

struct ConvertDown
{
    static __device__ __forceinline__ uint32_t step(uint32_t a)
    {
        return (a + cvtDown(a)) | 0x3C00u;
    }
};

template <class Step>
__global__ void chains(uint32_t* out, uint32_t seed)
{
    uint32_t a[kChains];
    seedChains(a, seed);
    for (int it = 0; it < kIters; ++it)
#pragma unroll
        for (int i = 0; i < kChains; ++i)
            a[i] = Step::step(a[i]);
    keep(a, out);
}

__global__ void hfma2(uint32_t* out, uint32_t seed)
{
    __half2 h[kChains];
    for (int i = 0; i < kChains; ++i)
        h[i] = __halves2half2(__ushort_as_half(static_cast<unsigned short>(seed + i)),
            __ushort_as_half(static_cast<unsigned short>(threadIdx.x)));
    __half2 const b = __float2half2_rn(0.999f);
    __half2 const c = __float2half2_rn(0.001f);
    for (int it = 0; it < kIters; ++it)
#pragma unroll
        for (int i = 0; i < kChains; ++i)
            h[i] = __hfma2(h[i], b, c);
    uint32_t a[kChains];
    for (int i = 0; i < kChains; ++i)
        a[i] = *reinterpret_cast<uint32_t*>(&h[i]);
    keep(a, out);
}

struct Rate
{
    char const* name;
    void (*kernel)(uint32_t*, uint32_t);
    int perChain; // instructions of interest per chain step
};

bool check(cudaError_t e, char const* what)
{
    if (e != cudaSuccess)
        std::fprintf(stderr, "fp8_convert_rate: %s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess;
}

} // namespace

int main()
{
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
    {
        std::fprintf(stderr, "fp8_convert_rate: no CUDA device\n");
        return 4;
    }
    int clockKhz = 0;
    uint32_t* out = nullptr;
    cudaEvent_t e0, e1;
    if (!check(cudaDeviceGetAttribute(&clockKhz, cudaDevAttrClockRate, 0), "clock rate")
        || !check(cudaMalloc(&out, sizeof(uint32_t)), "cudaMalloc") || !check(cudaEventCreate(&e0), "event")
        || !check(cudaEventCreate(&e1), "event"))
        return 1;
    int const sms = prop.multiProcessorCount;
    int const blocks = sms * 8, threads = 256, reps = 5;
    std::printf("%s, %d SMs, %d MHz maximum clock\n", prop.name, sms, clockKhz / 1000);
    std::printf("%-36s %9s %14s %10s\n", "operation", "ms", "per SM-clock", "x HFMA2");
    Rate const rates[] = {{"hfma2 (instructions)", hfma2, 1},
        {"cvt e4m3x2 -> f16x2 (instructions)", chains<ConvertUp>, 2},
        {"integer decode (words of 4 codes)", chains<DecodeInteger>, 1},
        {"cvt f16x2 -> e4m3x2 (instructions)", chains<ConvertDown>, 1}};
    double hfmaRate = 0.0;
    for (Rate const& r : rates)
    {
        r.kernel<<<blocks, threads>>>(out, 1); // warm-up
        if (!check(cudaGetLastError(), r.name) || !check(cudaDeviceSynchronize(), r.name)
            || !check(cudaEventRecord(e0), "event"))
            return 1;
        for (int i = 0; i < reps; ++i)
            r.kernel<<<blocks, threads>>>(out, static_cast<uint32_t>(i + 2));
        float ms = 0.0f;
        if (!check(cudaGetLastError(), r.name) || !check(cudaEventRecord(e1), "event")
            || !check(cudaEventSynchronize(e1), "event") || !check(cudaEventElapsedTime(&ms, e0, e1), "event"))
            return 1;
        double const count = double(reps) * blocks * threads * double(kIters) * kChains * r.perChain;
        double const rate = count / (ms * 1e-3) / sms / (clockKhz * 1e3);
        if (hfmaRate == 0.0)
            hfmaRate = rate;
        std::printf("%-36s %9.3f %14.1f %10.2f\n", r.name, ms, rate, rate / hfmaRate);
    }
    return 0;
}
