/*
 * dcnconvert plugin harness, `gpu` mode: the exact input bits and the output of a case, written to
 * <out-dir>/<case>_<tensor>.bin, and its line of <out-dir>/manifest.jsonl.
 */
#include "gpuCases.h"

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
    return t == DataType::kFLOAT ? "float32" : t == DataType::kHALF ? "float16" : "bfloat16";
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
    for (size_t i = 0; i < dims.size(); ++i)
    {
        std::string const file = c.name + "_" + names[i] + ".bin";
        HCHECK(writeFile(outDir + "/" + file, data.inputs[i]), "write " << file);
        files += std::string(i ? ", " : "") + "\"" + names[i] + "\": \"" + file + "\"";
        shapes += std::string(i ? ", " : "") + "\"" + names[i] + "\": " + jsonDims(dims[i]);
    }
    std::string const outFile = c.name + "_out.bin";
    HCHECK(writeFile(outDir + "/" + outFile, output), "write " << outFile);
    Attrs const& a = c.p.attrs;
    manifest << "{\"name\": \"" << c.name << "\", \"dtype\": \"" << dtypeText(c.type) << "\", \"path\": \"" << path
             << "\", \"stride\": [" << a.stride[0] << ", " << a.stride[1] << "], \"padding\": [" << a.padding[0]
             << ", " << a.padding[1] << "], \"dilation\": [" << a.dilation[0] << ", " << a.dilation[1]
             << "], \"group\": " << a.group << ", \"deformable_group\": " << a.deformableGroup
             << ", \"allow_tf32\": " << a.allowTf32 << ", \"seed\": " << c.seed << ", \"shapes\": {"
             << shapes << ", \"out\": " << jsonDims(c.p.outputDims()) << "}, \"files\": {" << files
             << ", \"out\": \"" << outFile << "\"}, \"runtime_bitwise_identical\": "
             << (runtime == RuntimeCompare::kIDENTICAL ? "true"
                    : runtime == RuntimeCompare::kDIFFERENT ? "false"
                                                            : "null")
             << "}\n";
    manifest.flush();
}

} // namespace harness
