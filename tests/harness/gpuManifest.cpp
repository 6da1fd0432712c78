/*
 * dcnconvert plugin harness, `gpu` mode: the exact input bits and the output of a case, written to
 * <out-dir>/<case>_<tensor>.bin, and its line of <out-dir>/manifest.jsonl: geometry, x's format,
 * each file's shape and element type ("float32", "float16", "bfloat16", "int8", "fp8e4m3": E4M3FN
 * bytes), and for a quantized case its quant_type, x_scale and output_scale (9 significant digits:
 * FP32 exactly; weight_scale is the file weight_scale).
 */
#include "gpuCases.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using nvinfer1::DataType;
using nvinfer1::Dims;

namespace harness
{
namespace
{

char const* dtypeText(DataType t)
{
    return t == DataType::kFLOAT ? "float32"
        : t == DataType::kHALF   ? "float16"
        : t == DataType::kINT8   ? "int8"
        : t == DataType::kFP8    ? "fp8e4m3"
                                 : "bfloat16";
}

char const* formatText(nvinfer1::TensorFormat f)
{
    using nvinfer1::TensorFormat;
    return f == TensorFormat::kLINEAR ? "linear"
        : f == TensorFormat::kHWC     ? "hwc"
        : f == TensorFormat::kHWC8    ? "hwc8"
        : f == TensorFormat::kHWC16   ? "hwc16"
                                      : "other";
}

//! A float with 9 significant digits: parsed back and rounded to FP32, the same value.
std::string exact(float v)
{
    char text[32];
    std::snprintf(text, sizeof(text), "%.9g", static_cast<double>(v));
    return text;
}

std::string jsonDims(Dims const& d)
{
    std::string s = "[";
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        s += (i ? ", " : "") + std::to_string(d.d[i]);
    }
    return s + "]";
}

bool writeFile(std::string const& path, std::vector<uint8_t> const& bytes)
{
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<char const*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return static_cast<bool>(f);
}

} // namespace

void writeCase(std::string const& outDir, std::ofstream& manifest, Case const& c, HostData const& data,
    std::vector<uint8_t> const& output, RuntimeCompare runtime, std::string const& path)
{
    char const* const names[] = {"x", "offset", "mask", "weight", "bias"};
    std::vector<Dims> const dims = c.p.inputDims();
    std::string files;
    std::string shapes;
    std::string dtypes;
    auto const add = [&](std::string const& name, std::vector<uint8_t> const& bytes, Dims const& d, char const* dtype) {
        std::string const file = c.name + "_" + name + ".bin";
        HCHECK(writeFile(outDir + "/" + file, bytes), "write " << file);
        std::string const sep = files.empty() ? "" : ", ";
        files += sep + "\"" + name + "\": \"" + file + "\"";
        shapes += sep + "\"" + name + "\": " + jsonDims(d);
        dtypes += sep + "\"" + name + "\": \"" + dtype + "\"";
    };
    for (size_t i = 0; i < dims.size(); ++i)
    {
        DataType const t = i == 0 ? c.qType() : i == 3 && c.quantized() ? fieldElementType(c.weightField) : c.type;
        add(names[i], data.inputs[i], dims[i], dtypeText(t));
    }
    std::string quant = "null";
    if (c.quantized())
    {
        std::vector<uint8_t> scales(data.weightScale.size() * sizeof(float));
        std::memcpy(scales.data(), data.weightScale.data(), scales.size());
        add("weight_scale", scales, makeDims({c.p.cout}), "float32");
        quant = std::string("{\"type\": \"") + dtypeText(c.qType()) + "\", \"x_scale\": " + exact(data.xScale)
            + ", \"output_scale\": " + (c.outputScale ? exact(data.outputScale) : "null") + "}";
    }
    add("out", output, c.p.outputDims(), dtypeText(c.outType()));
    Attrs const& a = c.p.attrs;
    manifest << "{\"name\": \"" << c.name << "\", \"dtype\": \"" << dtypeText(c.type) << "\", \"path\": \"" << path
             << "\", \"stride\": [" << a.stride[0] << ", " << a.stride[1] << "], \"padding\": [" << a.padding[0]
             << ", " << a.padding[1] << "], \"dilation\": [" << a.dilation[0] << ", " << a.dilation[1]
             << "], \"group\": " << a.group << ", \"deformable_group\": " << a.deformableGroup
             << ", \"allow_tf32\": " << a.allowTf32 << ", \"seed\": " << c.seed << ", \"x_format\": \""
             << formatText(c.xFormat) << "\", \"embedded\": " << (c.embed ? "true" : "false")
             << ", \"quant\": " << quant << ", \"shapes\": {" << shapes << "}, \"dtypes\": {" << dtypes
             << "}, \"files\": {" << files << "}, \"runtime_bitwise_identical\": "
             << (runtime == RuntimeCompare::kIDENTICAL ? "true"
                    : runtime == RuntimeCompare::kDIFFERENT ? "false"
                                                            : "null")
             << "}\n";
    manifest.flush();
}

} // namespace harness
