/*
 * dcnconvert plugin harness, `gpu` mode: the quantized cases (quant_type "int8" and "fp8e4m3") and
 * their inputs.
 *
 * A quantized node carries its weights (INT8 values, or E4M3 values as FLOAT16/FLOAT32/BF16) with
 * one scale per output channel and takes x quantized, in kLINEAR or, where the channels allow it,
 * kHWC16; offset and mask are FP32 or FP16; the output has the offset's type, or the quantized type
 * with output_scale. tests/test_plugin_harness.py compares each output with the float64 model of
 * the quantized math (tests/support/quant.py).
 */
#include "gpuCases.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::PluginFieldType;
using nvinfer1::TensorFormat;

namespace harness
{
namespace
{

//! The value of an E4M3FN code (CUDA's conversion: an implementation independent of the plugin's).
float e4m3(uint8_t code)
{
    __nv_fp8_e4m3 v;
    v.__x = code;
    return static_cast<float>(v);
}

struct Variant
{
    Quant quant;
    DataType floating; //!< offset, mask, bias (and a float output)
    TensorFormat xFormat;
    bool outputScale;
    bool int8AsFloat{false}; //!< INT8 weights as FLOAT32 integers (the creator takes those too)
};

std::string variantName(Variant const& v)
{
    return std::string(v.quant == Quant::kINT8 ? "q_int8" : "q_fp8") + (v.floating == DataType::kFLOAT ? "_fp32" : "_fp16")
        + (v.xFormat == TensorFormat::kLINEAR ? "_linear" : "_hwc16") + (v.outputScale ? "_qout" : "_fout");
}

} // namespace

std::vector<Case> quantCases()
{
    // 128 channels per group and per deformable group, or 64 per group within one deformable group
    // (two kernel points per chunk): on compute capability 9.x with sm_90a code AUTO runs the 8-bit
    // warpgroup tiles (dcnFusedChoice.cu: a quantized layer has no other channel-vectorised tile, and
    // needs an input of at least 2 x 2; `wide`, 384 output channels and 3200 pixels, may take the
    // 256-row one); elsewhere, and for the other channel counts, the simple kernel.
    Problem nonSquare; // non-square stride, padding and dilation
    nonSquare.n = 2;
    nonSquare.c = 128;
    nonSquare.h = 13;
    nonSquare.w = 17;
    nonSquare.cout = 64;
    nonSquare.attrs = Attrs{{2, 1}, {1, 2}, {1, 2}, 1, 1};
    Problem grouped; // 2 groups and 2 deformable groups of 128 channels
    grouped.n = 1;
    grouped.c = 256;
    grouped.h = 12;
    grouped.w = 10;
    grouped.cout = 128;
    grouped.attrs = Attrs{{1, 1}, {1, 1}, {1, 1}, 2, 2};
    Problem wide; // 384 output channels
    wide.n = 2;
    wide.c = 128;
    wide.h = 40;
    wide.w = 40;
    wide.cout = 384;
    wide.attrs = Attrs{{1, 1}, {1, 1}, {1, 1}, 1, 1};
    Problem far; // far offsets (offset scale 8: many samples outside), stride 2, no bias
    far.n = 2;
    far.c = 128;
    far.h = 9;
    far.w = 11;
    far.cout = 96;
    far.bias = false;
    far.attrs = Attrs{{2, 2}, {1, 1}, {1, 1}, 1, 1};
    Problem channelLast64; // kHWC16 (64 channels, 2 deformable groups of 32) on the simple kernel
    channelLast64.n = 2;
    channelLast64.c = 64;
    channelLast64.h = 10;
    channelLast64.w = 8;
    channelLast64.cout = 24;
    channelLast64.attrs = Attrs{{1, 1}, {1, 1}, {1, 1}, 1, 2};
    Problem pairs64; // 64 channels, one deformable group: kernel points in pairs, the last alone
    pairs64.n = 2;
    pairs64.c = 64;
    pairs64.h = 11;
    pairs64.w = 9;
    pairs64.cout = 40;
    pairs64.attrs = Attrs{{1, 2}, {2, 1}, {2, 1}, 1, 1};
    Problem small; // the simple kernel: 12 channels, 3 groups, 2 deformable groups, 1x3 kernel
    small.n = 2;
    small.c = 12;
    small.h = 7;
    small.w = 9;
    small.cout = 6;
    small.kh = 1;
    small.kw = 3;
    small.attrs = Attrs{{1, 1}, {0, 1}, {1, 2}, 3, 2};

    DataType const f32 = DataType::kFLOAT;
    DataType const f16 = DataType::kHALF;
    TensorFormat const lin = TensorFormat::kLINEAR;
    TensorFormat const hwc = TensorFormat::kHWC16;
    Quant const i8 = Quant::kINT8;
    Quant const f8 = Quant::kFP8;
    struct Group
    {
        char const* name;
        Problem p;
        float offsetScale;
        std::vector<Variant> variants;
    };
    std::vector<Group> const groups = {
        {"c128_nonsquare", nonSquare, 2.F,
            {{i8, f16, hwc, false}, {f8, f32, hwc, false}, {i8, f32, lin, true}, {f8, f16, lin, true}}},
        {"c256_g2_dg2", grouped, 2.F,
            {{i8, f32, hwc, true}, {f8, f16, hwc, true}, {i8, f16, lin, false, true}, {f8, f32, lin, false}}},
        {"c128_cout384", wide, 2.F,
            {{i8, f16, hwc, false}, {f8, f32, hwc, true}, {i8, f32, lin, true}, {f8, f16, lin, false}}},
        {"c128_far", far, 8.F, {{i8, f16, hwc, false}, {f8, f16, hwc, false}, {f8, f32, lin, true}, {i8, f32, hwc, true}}},
        {"c64_dg2", channelLast64, 2.F, {{i8, f16, hwc, false}, {f8, f32, hwc, true}, {f8, f16, lin, false}}},
        {"c64_pairs", pairs64, 2.F, {{i8, f16, hwc, false}, {f8, f16, hwc, true}, {i8, f32, lin, true}, {f8, f32, hwc, false}}},
        {"c12_g3_dg2_k1x3", small, 2.F, {{i8, f32, lin, false}, {i8, f16, lin, true}, {f8, f16, lin, false}, {f8, f32, lin, true}}},
    };
    // E4M3 weights as each float field type in turn; INT8 weights as INT8, once as FLOAT32 integers.
    PluginFieldType const fp8Fields[] = {PluginFieldType::kFLOAT16, PluginFieldType::kFLOAT32, PluginFieldType::kBF16};
    std::vector<Case> cases;
    int32_t fp8Count = 0;
    for (Group const& g : groups)
    {
        for (Variant const& v : g.variants)
        {
            Case c;
            c.name = variantName(v) + "_" + g.name;
            c.p = g.p;
            c.type = v.floating;
            c.offsetScale = g.offsetScale;
            c.seed = 500 + static_cast<uint32_t>(cases.size());
            c.xFormat = v.xFormat;
            c.embed = true;
            c.quant = v.quant;
            c.outputScale = v.outputScale;
            c.weightField = v.quant == Quant::kFP8 ? fp8Fields[fp8Count++ % 3]
                : v.int8AsFloat                     ? PluginFieldType::kFLOAT32
                                                    : PluginFieldType::kINT8;
            cases.push_back(c);
        }
    }
    return cases;
}

void makeQuantInputs(Case const& c, std::mt19937& rng, HostData& data)
{
    bool const fp8 = c.quant == Quant::kFP8;
    std::uniform_int_distribution<int32_t> level(-127, 127);
    std::uniform_int_distribution<int32_t> code(0, 253); // the E4M3FN codes but the NaNs 0x7F and 0xFF
    std::uniform_real_distribution<float> factor(0.5F, 1.5F);
    auto draw = [&](float& value) {
        uint8_t bits = 0;
        if (fp8)
        {
            int32_t const k = code(rng);
            bits = static_cast<uint8_t>(k < 0x7F ? k : k + 1);
            value = e4m3(bits);
        }
        else
        {
            int32_t const v = level(rng);
            bits = static_cast<uint8_t>(static_cast<int8_t>(v));
            value = static_cast<float>(v);
        }
        return bits;
    };
    std::vector<Dims> const dims = c.p.inputDims();
    size_t const xCount = static_cast<size_t>(volume(dims[0]));
    std::vector<uint8_t>& x = data.inputs[0];
    x.resize(xCount);
    double xSquares = 0.0;
    for (size_t i = 0; i < xCount; ++i)
    {
        float v = 0.F;
        x[i] = draw(v);
        xSquares += static_cast<double>(v) * v;
    }
    // Scales that keep the outputs near 1: x_scale * rms(x) and w_scale[o] * rms(w[o]) * sqrt(K)
    // in [0.5, 1.5), so that a quantized output with range +-2.5 saturates rarely.
    data.xScale = factor(rng) / static_cast<float>(std::max(std::sqrt(xSquares / static_cast<double>(xCount)), 1e-3));
    int64_t const perOut = volume(dims[3]) / c.p.cout;
    std::vector<float> values(static_cast<size_t>(volume(dims[3])));
    std::vector<uint8_t> codes(values.size());
    data.weightScale.assign(static_cast<size_t>(c.p.cout), 0.F);
    for (int64_t o = 0; o < c.p.cout; ++o)
    {
        double squares = 0.0;
        for (int64_t k = 0; k < perOut; ++k)
        {
            size_t const i = static_cast<size_t>(o * perOut + k);
            codes[i] = draw(values[i]);
            squares += static_cast<double>(values[i]) * values[i];
        }
        double const rms = std::max(std::sqrt(squares / static_cast<double>(perOut)), 1e-3);
        data.weightScale[static_cast<size_t>(o)]
            = factor(rng) / static_cast<float>(rms * std::sqrt(static_cast<double>(perOut)));
    }
    data.inputs[3] = c.weightField == PluginFieldType::kINT8 ? codes : encode(values, fieldElementType(c.weightField));
    data.outputScale = c.outputScale ? 2.5F / (fp8 ? 448.F : 127.F) : 0.F;
}

} // namespace harness
