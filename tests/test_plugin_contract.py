"""Contract between the Python schema (``dcnconvert/schema.py``) and the C++ plugin.

The identity (name, version, namespace), the fields (names, types, lengths, order) and the input
order are read out of the C++ source text and compared with the schema; when the plugin can be built
(TensorRT headers and nvcc present), the library's exported symbols, its dynamic dependencies and the
fields its creator reports at run time (through the C++ harness) are checked as well.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import trt_header_dirs

from dcnconvert import schema

sys.path.insert(0, str(Path(__file__).resolve().parent / "harness"))
import plugin_build as pb

TRT_DIR = pb.PLUGIN_SRC / "trt"
HEADER = (TRT_DIR / "dcnPlugin.h").read_text()
# The glue's sources (plugin_src/trt/plugin.mk lists the same; test_plugin_harness.py checks that).
GLUE_SOURCES = (
    "dcnPlugin.cpp",
    "dcnPluginBuild.cpp",
    "dcnPluginRuntime.cpp",
    "dcnPluginFields.cpp",
    "dcnPluginTensors.cpp",
    "dcnPluginCreator.cpp",
    "dcnPluginWeights.cpp",
    "dcnPluginQuant.cpp",
    "registration.cpp",
)
EXPORTED = {"getCreators", "setLoggerFinder"}
#: nvinfer1::PluginFieldType values (NvInferRuntimePlugin.h) of the types the schema names.
PLUGIN_FIELD_TYPES = {"FLOAT32": 1, "INT32": 5, "CHAR": 6}


def _constant(name: str) -> str:
    match = re.search(rf'constexpr char const\* {name}\{{"([^"]*)"\}};', HEADER)
    assert match, f"{name} not found in dcnPlugin.h"
    return match.group(1)


def _source_field_rows() -> list[tuple[str, str, int, bool, str, str]]:
    """kDCN_FIELDS rows: name, type, length, required, minimum, maximum (as written)."""
    table = re.search(r"kDCN_FIELDS\[kDCN_NB_FIELDS\] = \{(.*?)\n\};", HEADER, re.DOTALL)
    assert table, "kDCN_FIELDS table not found in dcnPlugin.h"
    body = re.sub(r"//[^\n]*", "", table.group(1))
    rows = re.findall(
        r'\{"(\w+)", nvinfer1::PluginFieldType::k(\w+), (-?\d+), (true|false), (\w+), (\w+)\}', body
    )
    assert len(rows) == body.count("{"), f"unparsed rows in kDCN_FIELDS: {body}"
    count = re.search(r"constexpr int32_t kDCN_NB_FIELDS\{(\d+)\};", HEADER)
    assert count and int(count.group(1)) == len(rows), "kDCN_NB_FIELDS does not match the table"
    return [(name, kind, int(length), req == "true", lo, hi) for name, kind, length, req, lo, hi in rows]


def _source_fields() -> list[tuple[str, str, int, bool]]:
    return [row[:4] for row in _source_field_rows()]


def _schema_fields() -> list[tuple[str, str, int, bool]]:
    """What the creator must declare, in order: the required fields, the optional INT ones, the
    embedded weights' fields, then the quantization fields (name, type, length; -1 = variable; required)."""
    return (
        [(name, "INT32", length, True) for name, length in schema.PLUGIN_FIELDS]
        + [(name, "INT32", length, False) for name, length, _ in schema.OPTIONAL_PLUGIN_FIELDS]
        + [(name, kind, length, False) for name, kind, length in schema.WEIGHT_FIELDS]
        + [(name, kind, length, False) for name, kind, length in schema.QUANT_FIELDS]
    )


class TestSource:
    def test_identity_matches_schema(self) -> None:
        assert _constant("kDCN_PLUGIN_NAME") == schema.PLUGIN_NAME
        assert _constant("kDCN_PLUGIN_VERSION") == schema.PLUGIN_VERSION
        assert _constant("kDCN_PLUGIN_NAMESPACE") == schema.PLUGIN_NAMESPACE
        assert schema.TARGET_DCNCONVERT.plugin_version == _constant("kDCN_PLUGIN_VERSION")
        assert schema.TARGET_DCNCONVERT.plugin_namespace == _constant("kDCN_PLUGIN_NAMESPACE")

    def test_fields_match_schema(self) -> None:
        assert _source_fields() == _schema_fields()
        assert len(_schema_fields()) == 13

    def test_quant_fields(self) -> None:
        """quant_type (CHAR), x_scale (FLOAT32 x1), weight_scale (FLOAT32, variable) and output_scale
        (FLOAT32 x1), optional, last and in the schema's order, each with its kFIELD_ index; the
        quant_type texts are the schema's QUANT_TYPES, mapped to the same DcnQuant codes."""
        rows = _source_field_rows()
        names = [row[0] for row in rows]
        assert names[names.index(schema.ATTR_BIAS) + 1:] == [name for name, _k, _n in schema.QUANT_FIELDS]
        assert [name for name, _k, _n in schema.QUANT_FIELDS] == [
            schema.ATTR_QUANT_TYPE, schema.ATTR_X_SCALE, schema.ATTR_WEIGHT_SCALE, schema.ATTR_OUTPUT_SCALE]
        by_name = {row[0]: row for row in rows}
        for name, kind, length in schema.QUANT_FIELDS:
            assert by_name[name] == (name, kind, length, False, "0", "0"), name
        indices = dict(re.findall(r"constexpr int32_t kFIELD_(\w+)\{(\d+)\};", HEADER))
        for name, _k, _n in schema.QUANT_FIELDS:
            assert int(indices[name.upper()]) == names.index(name), name
        quant = (TRT_DIR / "dcnPluginQuant.cpp").read_text()
        body = quant[quant.index("char const* quantTypeName(int32_t quant) noexcept"):]
        body = body[: body.index("\n}\n")]
        texts = dict(re.findall(r'quant == (kDCN_QUANT_\w+) \? "(\w+)"', body))
        core = (pb.PLUGIN_SRC / "core" / "dcnParams.h").read_text()
        codes = {name: int(value) for name, value in re.findall(r"(kDCN_QUANT_\w+) = (\d+)", core)}
        assert {text: codes[name] for name, text in texts.items()} == schema.QUANT_TYPES
        # The weight types the schema writes per quant_type are the field types the creator takes
        # (ONNX INT8 -> kINT8, FLOAT16 -> kFLOAT16).
        assert schema.QUANT_WEIGHT_DTYPES == {"int8": 3, "fp8e4m3": 10}
        assert "type == PluginFieldType::kINT8" in quant and "PluginFieldType::kFLOAT16" in quant

    def test_weight_fields(self) -> None:
        """weight (FLOAT32, variable length), weight_shape (INT32 x4, dims >= 1) and bias (FLOAT32,
        variable length), optional, after allow_tf32; only the dcnconvert target's plugin has them."""
        rows = _source_field_rows()
        names = [row[0] for row in rows]
        assert names[names.index(schema.ATTR_ALLOW_TF32) + 1:names.index(schema.ATTR_BIAS) + 1] == [
            schema.ATTR_WEIGHT, schema.ATTR_WEIGHT_SHAPE, schema.ATTR_BIAS]
        by_name = {row[0]: row for row in rows}
        assert by_name[schema.ATTR_WEIGHT] == (schema.ATTR_WEIGHT, "FLOAT32", -1, False, "0", "0")
        shape_row = (schema.ATTR_WEIGHT_SHAPE, "INT32", 4, False, "1", "INT32_MAX")
        assert by_name[schema.ATTR_WEIGHT_SHAPE] == shape_row
        assert by_name[schema.ATTR_BIAS] == (schema.ATTR_BIAS, "FLOAT32", -1, False, "0", "0")
        assert schema.EMBEDDED_INPUT_NAMES == ("x", "offset", "mask")
        assert schema.TARGET_DCNCONVERT.has_embedded_weights
        assert not schema.TARGET_TRT_BUILTIN.has_embedded_weights

    def test_allow_tf32_field(self) -> None:
        """The optional allow_tf32: INT32 x1, values 0..1, the C++ default equal to the schema's; only
        the dcnconvert target's plugin has it."""
        rows = {row[0]: row for row in _source_field_rows()}
        assert rows[schema.ATTR_ALLOW_TF32] == (schema.ATTR_ALLOW_TF32, "INT32", 1, False, "0", "1")
        ((name, _, default),) = schema.OPTIONAL_PLUGIN_FIELDS
        assert name == schema.ATTR_ALLOW_TF32
        attributes = re.search(r"struct DcnAttributes\n\{(.*?)\n\};", HEADER, re.DOTALL)
        assert attributes, "struct DcnAttributes not found in dcnPlugin.h"
        assert re.search(rf"int32_t allowTf32\{{{default}\}};", attributes.group(1))
        assert schema.TARGET_DCNCONVERT.has_allow_tf32 and not schema.TARGET_TRT_BUILTIN.has_allow_tf32
        # The required fields' ranges: stride/dilation/group/dg >= 1, padding >= 0, no upper bound.
        ranges = {name: row[4:] for name, row in rows.items() if row[3]}
        assert ranges == {"stride": ("1", "INT32_MAX"), "padding": ("0", "INT32_MAX"),
                          "dilation": ("1", "INT32_MAX"), "group": ("1", "INT32_MAX"),
                          "deformable_group": ("1", "INT32_MAX")}

    def test_params_math_comes_from_the_attribute(self) -> None:
        """Wherever the glue fills DcnParams (enqueue/onShapeChange and getWorkspaceSize), math is
        mathOf(mAttrs), never a constant; mathOf maps allow_tf32 1 to kDCN_MATH_TF32."""
        for name in ("dcnPluginRuntime.cpp", "dcnPluginBuild.cpp"):
            code = (TRT_DIR / name).read_text()
            assert code.count("p.math = mathOf(mAttrs);") == 1, name
            assert code.count("DcnParams p{};") == 1, name
            assert not re.search(r"\.math\s*=\s*kDCN_MATH", code), name
        fields = (TRT_DIR / "dcnPluginFields.cpp").read_text()
        body = fields[fields.index("int32_t mathOf(DcnAttributes const& a) noexcept") :]
        body = body[: body.index("\n}\n")]
        assert "a.allowTf32 != 0 ? kDCN_MATH_TF32 : kDCN_MATH_ACCURATE" in body

    def test_inputs_match_schema(self) -> None:
        match = re.search(r"kINPUT_NAMES\[kMAX_INPUTS\] = \{([^}]*)\};", HEADER)
        assert match, "kINPUT_NAMES not found in dcnPlugin.h"
        assert tuple(re.findall(r'"(\w+)"', match.group(1))) == schema.INPUT_NAMES
        embedded = re.search(r"constexpr int32_t kEMBEDDED_INPUTS\{(\d+)\};", HEADER)
        assert embedded and int(embedded.group(1)) == len(schema.EMBEDDED_INPUT_NAMES)
        indices = dict(re.findall(r"constexpr int32_t kIN_(\w+)\{(\d+)\};", HEADER))
        assert [int(indices[n.upper()]) for n in schema.INPUT_NAMES] == list(range(len(schema.INPUT_NAMES)))

    def test_serialized_fields_use_the_declared_table(self) -> None:
        """getFieldsToSerialize writes the names, and for the integer fields the types and lengths, that
        createPlugin accepts; the embedded weight and bias in the type and count they came in."""
        source = (TRT_DIR / "dcnPluginFields.cpp").read_text()
        body = source[source.index("void DcnPlugin::buildSerializationFields()"):]
        body = body[: body.index("\n}\n")]
        assert "mSerialFields.emplace_back(kDCN_FIELDS[i].name, data[i], type, length);" in body
        assert "for (int32_t i = 0; i < kDCN_NB_FIELDS; ++i)" in body  # every field, optional ones too
        assert ": kDCN_FIELDS[i].type;" in body and ": kDCN_FIELDS[i].length;" in body
        assert "i == kFIELD_WEIGHT ? e->weight.type" in body and "i == kFIELD_BIAS" in body
        data = re.search(r"void const\* const data\[kDCN_NB_FIELDS\] = \{(.*?)\};", body, re.DOTALL)
        assert data, "the serialized data table is not found"
        members = [" ".join(m.split()).lstrip("&") for m in data.group(1).split(",")]
        assert len(members) == len(_schema_fields())
        assert members[:6] == ["mAttrs.stride", "mAttrs.padding", "mAttrs.dilation", "mAttrs.group",
                               "mAttrs.deformableGroup", "mAttrs.allowTf32"]
        assert "e->weight.bytes.data()" in members[6] and "e->shape" in members[7]
        assert "e->bias.bytes.data()" in members[8]
        assert "quantType" in members[9] and "q.xScale" in members[10]
        assert "e->weightScale.data()" in members[11] and "q.outputScale" in members[12]
        indices = dict(re.findall(r"constexpr int32_t kFIELD_(\w+)\{(\d+)\};", HEADER))
        names = [name for name, *_ in _schema_fields()]
        assert {k: int(v) for k, v in indices.items()} == {
            "WEIGHT": names.index(schema.ATTR_WEIGHT), "WEIGHT_SHAPE": names.index(schema.ATTR_WEIGHT_SHAPE),
            "BIAS": names.index(schema.ATTR_BIAS), "QUANT_TYPE": names.index(schema.ATTR_QUANT_TYPE),
            "X_SCALE": names.index(schema.ATTR_X_SCALE),
            "WEIGHT_SCALE": names.index(schema.ATTR_WEIGHT_SCALE),
            "OUTPUT_SCALE": names.index(schema.ATTR_OUTPUT_SCALE)}

    def test_registration_uses_the_namespace_and_exports_two_entry_points(self) -> None:
        source = (TRT_DIR / "registration.cpp").read_text()
        assert "registerCreator(creatorInterface(), kDCN_PLUGIN_NAMESPACE)" in source
        exported = set(re.findall(r"^DCN_EXPORT [^\n(]*?\b(\w+)\(", source, re.MULTILINE))
        assert exported == EXPORTED
        mapped = (TRT_DIR / "exports.map").read_text()
        globals_ = re.search(r"global:(.*?)local:", mapped, re.DOTALL)
        assert globals_ and set(re.findall(r"(\w+);", globals_.group(1))) == EXPORTED
        assert re.search(r"local:\s*\*;", mapped)

    def test_no_abort_exit_or_assert_in_the_glue_or_core(self) -> None:
        paths = sorted(TRT_DIR.glob("*.[ch]*")) + sorted((pb.PLUGIN_SRC / "core").glob("*.[ch]*"))
        assert len(paths) >= 10, paths
        for path in paths:
            code = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.DOTALL)
            for word in ("abort", "exit", "assert", "terminate"):
                assert not re.search(rf"\b(?:std::)?{word}\s*\(", code), f"{path.name} calls {word}"

    def test_every_noexcept_function_catches(self) -> None:
        """Each noexcept function body is a try/catch (preceded by no call), or calls nothing at all."""
        call = re.compile(r"\b(?!(?:if|for|while|switch|return|sizeof)\b)[A-Za-z_]\w*\s*\(")
        # Calls only noexcept IErrorRecorder methods (incRefCount/decRefCount); calls only cudaFree, a C
        # function that cannot throw.
        allowed = {"DcnPlugin::setErrorRecorder", "freeQuietly"}
        checked = []
        offenders = []
        sources = sorted(path.name for path in TRT_DIR.glob("*.cpp"))
        assert set(sources) >= set(GLUE_SOURCES), f"missing glue sources: {set(GLUE_SOURCES) - set(sources)}"
        function_re = re.compile(r"\n(\S[^;{}]*?\)\s*(?:const\s*)?noexcept)\n\{\n(.*?)\n\}\n", re.DOTALL)
        for name in sources:
            code = (TRT_DIR / name).read_text()
            for match in function_re.finditer(code):
                signature, body = match.group(1), match.group(2)
                function = signature.split("(")[0].split()[-1]
                checked.append(function)
                lines = [line.strip() for line in body.splitlines() if line.strip()]
                # Whatever runs before the try (or the whole body without one) must call nothing.
                before_try = lines[: lines.index("try")] if "try" in lines else lines
                code_only = re.sub(r'"(?:\\.|[^"\\])*"', '""', "\n".join(before_try))  # drop string literals
                if function in allowed or not call.search(code_only):
                    continue
                offenders.append(f"{name}: {function}")
        assert len(checked) >= 20, f"the pattern found only {checked}"
        assert not offenders, f"noexcept functions whose body is not a try/catch: {offenders}"


@pytest.fixture(scope="module")
def built():
    dirs = trt_header_dirs()
    if not dirs:
        pytest.skip("trt_headers: TensorRT headers (NvInfer.h) not found; set TENSORRT_INCLUDE_DIR")
    if pb.nvcc() is None:
        pytest.skip("nvcc not found on PATH (set NVCC)")
    try:
        return pb.build(dirs[0])
    except pb.BuildError as exc:
        pytest.fail(str(exc))


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not found")
    return path


def _libraries(built) -> list[Path]:
    libs = [built.lib]
    installed = pb.REPO / "dcnconvert" / "_lib" / "libdcnconvert_plugin.so"
    if installed.is_file():
        libs.append(installed)
    return libs


@pytest.mark.trt_headers
class TestLibrary:
    def test_exports_only_the_loadlibrary_entry_points(self, built) -> None:
        nm = _tool("nm")
        for lib in _libraries(built):
            out = subprocess.run(
                [nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True
            )
            names = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
            assert names == EXPORTED, f"{lib}: unexpected exports {sorted(names ^ EXPORTED)}"

    def test_needs_neither_libnvinfer_nor_libcudart(self, built) -> None:
        nm = _tool("nm")
        objdump = _tool("objdump")
        for lib in _libraries(built):
            undefined = subprocess.run(
                [nm, "-D", "--undefined-only", str(lib)], capture_output=True, text=True, check=True
            ).stdout
            for word in ("nvinfer1", "getPluginRegistry", "cuda"):
                assert word not in undefined, f"{lib} needs {word} from another library:\n{undefined}"
            headers = subprocess.run(
                [objdump, "-p", str(lib)], capture_output=True, text=True, check=True
            ).stdout
            needed = re.findall(r"NEEDED\s+(\S+)", headers)
            assert needed and not [n for n in needed if "nvinfer" in n or "cudart" in n], needed

    def test_linked_nodelete(self, built) -> None:
        """-z nodelete: a registry never points into an unloaded library (dlclose keeps it mapped)."""
        readelf = _tool("readelf")
        for lib in _libraries(built):
            dynamic = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True)
            assert re.search(r"FLAGS_1\)?\s+Flags:.*\bNODELETE\b", dynamic.stdout), dynamic.stdout

    def test_runtime_fields_match_schema(self, built) -> None:
        proc = pb.run_harness(built, "info")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = proc.stdout.splitlines()
        info = dict(line.split(" ", 1) for line in lines if not line.startswith("field "))
        assert info["name"] == schema.PLUGIN_NAME
        assert info["version"] == schema.PLUGIN_VERSION
        assert info["namespace"] == schema.PLUGIN_NAMESPACE
        assert info["creators"] == "1"
        assert info["interface"] == "PLUGIN CREATOR_V3ONE 1 0"
        fields = [line.split()[1:] for line in lines if line.startswith("field ")]
        # getFieldNames reports length 0 for the tensor fields (-1 in the table): the node's data decides.
        expected = [[name, str(PLUGIN_FIELD_TYPES[kind]), str(max(length, 0))]
                    for name, kind, length, _ in _schema_fields()]
        assert fields == expected
