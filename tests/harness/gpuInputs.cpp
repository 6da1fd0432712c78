/*
 * dcnconvert plugin harness, `gpu` mode: the input data of a case, as the element type's bits (the
 * quantized x and weights of a quantized case: gpuQuantCases.cpp).
 */
#include "gpuCases.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;

namespace harness
{

std::vector<uint8_t> encode(std::vector<float> const& v, DataType t)
{
    std::vector<uint8_t> out(v.size() * elementSize(t));
    for (size_t i = 0; i < v.size(); ++i)
    {
        if (t == DataType::kFLOAT)
        {
            std::memcpy(out.data() + 4 * i, &v[i], 4);
        }
        else if (t == DataType::kHALF)
        {
            __half const h = __float2half_rn(v[i]);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
        else
        {
            __nv_bfloat16 const b = __float2bfloat16_rn(v[i]);
            std::memcpy(out.data() + 2 * i, &b, 2);
        }
    }
    return out;
}

size_t elementSize(DataType t)
{
    return t == DataType::kFLOAT ? 4 : t == DataType::kINT8 || t == DataType::kFP8 ? 1 : 2;
}

DataType fieldElementType(nvinfer1::PluginFieldType t)
{
    using nvinfer1::PluginFieldType;
    return t == PluginFieldType::kFLOAT32 ? DataType::kFLOAT
        : t == PluginFieldType::kFLOAT16  ? DataType::kHALF
        : t == PluginFieldType::kBF16     ? DataType::kBF16
                                          : DataType::kINT8;
}

int64_t volume(Dims const& d)
{
    int64_t v = 1;
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        v *= d.d[i];
    }
    return v;
}

HostData makeInputs(Case const& c)
{
    std::mt19937 rng(1000003U * (c.seed + 1));
    std::uniform_real_distribution<float> unit(-1.F, 1.F);
    std::uniform_real_distribution<float> positive(0.F, 1.F);
    std::normal_distribution<float> offsetDist(0.F, c.offsetScale);
    std::bernoulli_distribution far(0.05);
    std::vector<Dims> const dims = c.p.inputDims();
    double const fanIn = static_cast<double>(c.p.c / c.p.attrs.group * c.p.kh * c.p.kw);
    HostData data;
    for (size_t i = 0; i < dims.size(); ++i)
    {
        if (c.quantized() && (i == 0 || i == 3))
        {
            data.inputs.emplace_back(); // x and weight on the 8-bit grid: makeQuantInputs below
            continue;
        }
        std::vector<float> v(static_cast<size_t>(volume(dims[i])));
        for (float& x : v)
        {
            switch (i)
            {
            case 0: x = unit(rng); break;
            case 1: x = far(rng) ? 12.F * unit(rng) : offsetDist(rng); break; // some samples far outside
            case 2: x = positive(rng); break;
            case 3: x = unit(rng) / static_cast<float>(std::sqrt(fanIn)); break;
            default: x = unit(rng); break;
            }
        }
        data.inputs.push_back(encode(v, c.type));
    }
    if (c.quantized())
    {
        makeQuantInputs(c, rng, data);
    }
    return data;
}

} // namespace harness
