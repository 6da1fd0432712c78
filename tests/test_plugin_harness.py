"""The TensorRT plugin driven the way TensorRT drives it (tests/harness/, C++), for every set of
TensorRT headers found (``TENSORRT_INCLUDE_DIR``, os.pathsep-separated, then the usual folders).

* CPU (marker ``trt_headers``): the glue compiles warning-free against each header set; ``make
  plugin`` without headers says what is missing; the harness's build/runtime/bad-field checks and the
  registration scenarios pass; the library loads with ctypes where no TensorRT is loaded.
* GPU (markers ``trt_headers`` and ``gpu``): enqueue on device buffers for a grid of problems and
  dtypes; the outputs are compared here with the float64 NumPy reference
  (``support.reference.modulated_deform_conv2d``) on exactly the input bits the GPU consumed.
  Cases with ``allow_tf32 = 1``: FP32 ones are held to the TF32 bound (:func:`check_tf32`), FP16/BF16
  ones must be bit-identical to the same case without it (those types ignore the field).
  Quantized cases (int8, fp8e4m3) are compared with the float64 model of the quantized math
  (``support.harness_files.check_quantized_case``). Without a device, the harness's ``gpu-inputs``
  mode runs every case's calls but enqueue, and that comparison is tried on the quantized cases'
  files (marker ``trt_headers``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import trt_header_dirs
from support import harness_files
from support.reference import modulated_deform_conv2d

sys.path.insert(0, str(Path(__file__).resolve().parent / "harness"))
import plugin_build as pb

HEADER_DIRS = trt_header_dirs()


def _header_id(path: Path | None) -> str:
    return "no-headers" if path is None else f"trt{pb.header_version(path)}"


@pytest.fixture(scope="module", params=HEADER_DIRS or [None], ids=_header_id)
def built(request: pytest.FixtureRequest):
    """The plugin and harness built against one header folder."""
    include_dir = request.param
    if include_dir is None:
        pytest.skip("trt_headers: TensorRT headers (NvInfer.h) not found; set TENSORRT_INCLUDE_DIR")
    if pb.nvcc() is None:
        pytest.skip("nvcc not found on PATH (set NVCC): the plugin cannot be compiled here")
    try:
        return pb.build(include_dir)
    except pb.BuildError as exc:
        pytest.fail(str(exc))


def test_make_plugin_without_headers_says_what_is_missing(tmp_path: Path) -> None:
    empty = tmp_path / "include"
    empty.mkdir()
    install = tmp_path / "install"
    proc = pb.make(
        "plugin",
        f"TENSORRT_INCLUDE_DIR={empty}",
        f"BUILD_DIR={tmp_path / 'build'}",
        f"PLUGIN_INSTALL_DIR={install}",
        timeout=120,
    )
    assert proc.returncode != 0
    err = proc.stderr
    assert "TensorRT headers not found: no NvInfer.h in" in err, err
    assert f"TENSORRT_INCLUDE_DIR={empty}" in err, err
    assert "make plugin TENSORRT_INCLUDE_DIR=/path/to/TensorRT/include" in err, err
    assert not install.exists(), "a failed build must not install anything"
    assert not (tmp_path / "build" / "plugin" / "libdcnconvert_plugin.so").exists()


def _make_list(variable: str, name_pattern: str) -> list[str]:
    """File names matching ``name_pattern`` in ``variable := ...`` of plugin_src/trt/plugin.mk."""
    text = (pb.PLUGIN_SRC / "trt" / "plugin.mk").read_text().replace("\\\n", " ")
    match = re.search(rf"^{variable} :=(.*)$", text, re.MULTILINE)
    assert match, f"{variable} not found in plugin.mk"
    assert "wildcard" not in match.group(1), f"{variable} must list its files explicitly"
    return re.findall(name_pattern, match.group(1))


@pytest.mark.parametrize(
    ("variable", "name_pattern", "folder", "glob"),
    [
        ("TRT_SRCS", r"\btrt/(\w+\.cpp)\b", pb.PLUGIN_SRC / "trt", "*.cpp"),
        ("TRT_HDRS", r"\btrt/(\w+\.h)\b", pb.PLUGIN_SRC / "trt", "*.h"),
        ("RTX_FORWARD_SRCS", r"\btrt/(\w+\.c)\b", pb.PLUGIN_SRC / "trt", "*.c"),
        ("HARNESS_SRCS", r"[\s,](\w+\.cpp)\b", pb.REPO / "tests" / "harness", "*.cpp"),
        ("HARNESS_HDRS", r"[\s,](\w+\.h)\b", pb.REPO / "tests" / "harness", "*.h"),
    ],
)
def test_make_lists_every_source(variable: str, name_pattern: str, folder: Path, glob: str) -> None:
    """plugin.mk names its sources explicitly: every file of the folder once, and nothing else."""
    listed = _make_list(variable, name_pattern)
    assert len(listed) == len(set(listed)), f"{variable} lists a file twice: {listed}"
    assert sorted(listed) == sorted(p.name for p in folder.glob(glob))


@pytest.mark.trt_headers
@pytest.mark.parametrize("include_dir", HEADER_DIRS or [None], ids=_header_id)
def test_glue_compiles_warning_free(include_dir: Path | None, tmp_path: Path) -> None:
    """Each trt/ source compiles with -Wall -Wextra -Werror (headers as system headers)."""
    if include_dir is None:
        pytest.skip("no TensorRT headers")
    compiler = pb.nvcc()
    if compiler is None:
        pytest.skip("nvcc not found on PATH (set NVCC)")
    sources = sorted((pb.PLUGIN_SRC / "trt").glob("*.cpp"))
    assert {s.name for s in sources} >= {
        "dcnPlugin.cpp", "dcnPluginBuild.cpp", "dcnPluginRuntime.cpp", "dcnPluginFields.cpp",
        "dcnPluginTensors.cpp", "dcnPluginCreator.cpp", "registration.cpp",
    }
    for source in sources:
        proc = subprocess.run(
            [compiler, "-std=c++17", "-Xcompiler", "-Wall,-Wextra,-Werror", "-isystem", str(include_dir),
             "-c", str(source), "-o", str(tmp_path / (source.stem + ".o"))],
            capture_output=True, text=True, timeout=300, check=False,
        )
        assert proc.returncode == 0, f"{source.name} vs {include_dir}:\n{proc.stdout}{proc.stderr}"


@pytest.mark.trt_headers
class TestHarnessCpu:
    def test_build_and_runtime_calls(self, built) -> None:
        proc = pb.run_harness(built, "cpu")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-6000:]
        summary = [line for line in out.splitlines() if line.startswith("harness cpu")]
        assert summary and summary[-1].endswith(" 0 failed"), out[-3000:]
        total = int(summary[-1].split(":")[1].split()[0])
        assert total >= 200, f"only {total} checks ran"
        assert "FAIL" not in out

    @pytest.mark.parametrize(
        ("env", "expect_auto", "stderr_part"),
        [
            ({}, 1, ""),
            ({"DCNCONVERT_PLUGIN_NO_AUTO_REGISTER": "1"}, 0, ""),
            ({"DCN_FAKE_NO_REGISTRY": "1"}, 0, ""),
            ({"DCN_FAKE_TRT_MAJOR": "9"}, 0, "loaded in this process is major version 9"),
        ],
        ids=["auto", "auto-off", "no-registry", "other-major"],
    )
    def test_registration(self, built, env: dict, expect_auto: int, stderr_part: str) -> None:
        proc = pb.run_harness(built, "registration", str(expect_auto), env=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert "FAIL" not in proc.stdout
        assert stderr_part in proc.stderr, proc.stderr
        if not stderr_part:
            assert proc.stderr == "", proc.stderr

    def test_ctypes_load_without_tensorrt(self, built) -> None:
        """ctypes.CDLL (Polygraphy --plugins) works where no TensorRT is loaded: nothing to register
        with, nothing logged, and getCreators still answers (for loadLibrary)."""
        code = (
            "import ctypes, sys\n"
            f"lib = ctypes.CDLL({str(built.lib)!r})\n"
            "lib.getCreators.restype = ctypes.c_void_p\n"
            "lib.getCreators.argtypes = [ctypes.POINTER(ctypes.c_int32)]\n"
            "n = ctypes.c_int32(-1)\n"
            "ptr = lib.getCreators(ctypes.byref(n))\n"
            "first = ctypes.cast(ptr, ctypes.POINTER(ctypes.c_void_p))[0]\n"
            "print(n.value, bool(ptr), bool(first))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["1", "True", "True"], proc.stdout
        assert proc.stderr == ""


    @pytest.mark.parametrize(
        ("env", "found", "stderr_part"),
        [({}, "1 0", ""), ({"DCN_FAKE_TRT_MAJOR": "9"}, "0 0", "loaded in this process is major version 9")],
        ids=["same-major", "other-major"],
    )
    def test_ctypes_load_finds_a_local_libnvinfer(
        self, built, env: dict, found: str, stderr_part: str
    ) -> None:
        """`import tensorrt` loads libnvinfer RTLD_LOCAL (outside the global scope); a later
        ctypes.CDLL of the plugin (what dcnconvert and Polygraphy --plugins do) must still register
        in namespace 'dcnconvert' by finding that libnvinfer through its soname."""
        fake = pb.build_fake_nvinfer(built)
        code = (
            "import ctypes\n"
            f"fake = ctypes.CDLL({str(fake)!r})\n"  # RTLD_LOCAL, as the tensorrt module loads it
            "print(hasattr(ctypes.CDLL(None), 'getPluginRegistry'))\n"
            f"ctypes.CDLL({str(built.lib)!r})\n"
            "find = fake.dcnFakeRegistryFind\n"
            "find.restype = ctypes.c_int32\n"
            "name = b'ModulatedDeformConv2d'\n"
            "print(find(name, b'1', b'dcnconvert'), find(name, b'1', b''))\n"
        )
        full_env = {k: v for k, v in os.environ.items() if k != "DCNCONVERT_PLUGIN_NO_AUTO_REGISTER"}
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
            env={**full_env, **env},
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == ["False", found], proc.stdout + proc.stderr
        assert stderr_part in proc.stderr, proc.stderr
        if not stderr_part:
            assert proc.stderr == "", proc.stderr


#: Per-operand relative error of a TF32 operand: 2^-11 when rounded to nearest, 2^-10 when the lower
#: mantissa bits are dropped; the bound takes the larger.
TF32_OPERAND = 2.0**-10
#: FP32 accumulation of the products (K <= a few hundred terms here), with room to spare.
TF32_ACCUMULATION = 2.0**-14


def check_tf32(got: np.ndarray, ref: np.ndarray, ref_abs: np.ndarray) -> dict:
    """Asserts the TF32 bound elementwise and returns the error numbers.

    Each product weight * (mask * bilinear(x)) has both operands rounded to TF32, so its relative error
    is at most (1 + 2^-10)^2 - 1 < 2^-9 + 2^-19; summed over the products, the error of an output is at
    most that times ``ref_abs`` = the same convolution of |x|, |mask| and |weight| without bias (an
    upper bound of the sum of |products|), plus FP32 accumulation.
    """
    err = np.abs(got - ref)
    allowed = (2 * TF32_OPERAND + TF32_OPERAND**2 + TF32_ACCUMULATION) * ref_abs + 2.0**-24
    worst = float((err / allowed).max())
    assert worst <= 1.0, f"elementwise error exceeds the TF32 bound by x{worst:.3f}"
    ref_max = float(np.abs(ref).max())
    assert ref_max > 0, "degenerate reference (all zeros): the case tests nothing"
    rel_l2 = float(np.linalg.norm(got - ref)) / float(np.linalg.norm(ref))
    return {"rel_l2": rel_l2, "max_abs_over_max_ref": float(err.max()) / ref_max, "worst_over_bound": worst}


def _manifest(folder: Path) -> list[dict]:
    lines = (folder / "manifest.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def gpu_run(built, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """``dcn_harness gpu`` once per header set: the process and its output folder."""
    folder = tmp_path_factory.mktemp(f"gpu-trt{built.version}")
    return pb.run_harness(built, "gpu", str(folder), timeout=600), folder


#: What the quantized cases cover (tests/harness/gpuQuantCases.cpp).
QUANT_COVERAGE = {
    "type": {"int8", "fp8e4m3"},
    "offset": {"float32", "float16"},
    "x_format": {"linear", "hwc16"},
    "out": {"float32", "float16", "int8", "fp8e4m3"},
    "weight": {"int8", "float32", "float16", "bfloat16"},
}


def _quant_coverage(cases: list[dict]) -> dict[str, set[str]]:
    return {
        "type": {c["quant"]["type"] for c in cases},
        "offset": {c["dtype"] for c in cases},
        "x_format": {c["x_format"] for c in cases},
        "out": {c["dtypes"]["out"] for c in cases},
        "weight": {c["dtypes"]["weight"] for c in cases},
    }


@pytest.mark.trt_headers
def test_gpu_cases_without_a_device(built, tmp_path: Path) -> None:
    """``gpu-inputs``: every GPU case's calls but enqueue (build phase, clone, deserialization) pass
    without a device; the quantized cases' files read back with x and weights on the 8-bit grid, and
    the comparison refuses the all-zero output written there and takes the kernels' math."""
    proc = pb.run_harness(built, "gpu-inputs", str(tmp_path))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "FAIL" not in out, out[-6000:]
    manifest = _manifest(tmp_path)
    cases = [case for case in manifest if case["quant"] is not None]
    assert len(cases) >= 20 and len(manifest) - len(cases) >= 18, [c["name"] for c in manifest]
    assert {c["path"] for c in manifest} == {"inputs-only"}
    assert _quant_coverage(cases) == QUANT_COVERAGE
    for case in cases:
        with pytest.raises(AssertionError):
            harness_files.check_quantized_case(case, tmp_path)
        arrays = harness_files.read_arrays(case, tmp_path)
        refs = harness_files.model_outputs(case, harness_files.quantized_inputs(case, arrays))
        expected = harness_files.expected_output(case, refs)
        (tmp_path / case["files"]["out"]).write_bytes(harness_files.to_bits(expected, case["dtypes"]["out"]))
        harness_files.check_quantized_case(case, tmp_path)


@pytest.mark.trt_headers
@pytest.mark.gpu
def test_enqueue_matches_reference(built, gpu_run) -> None:
    """Every harness output against the float64 reference on the exact input bits the GPU read.

    The plugin runs the same core as tests/test_core_gpu.py, so the same per-dtype bounds apply
    (``check_close`` of tests/support/core_cases.py: FP32 relative L2 <= 1e-5 and max error
    <= 2e-5 * max|ref|; FP16/BF16 elementwise |err| <= u*|ref| + uo*absref + 1e-5*max|ref| + 2^-24
    with the unit roundoff u of the dtype and absref the reference on |x|, |mask|, |weight|: the
    fused kernel's rounding of each sampled value to the operand type (uo = u, or (1 + u)^5 - 1 for
    FP16, whose channel-vectorised kernel sums the corners in FP16), FP32 accumulation, one rounding
    of the output). A deserialized
    plugin's output must be bit-identical to the build plugin's; the dynamic-shape cases have no
    deserialized run (null in the manifest) and are checked for repeatability by the harness itself.
    """
    from support.core_cases import check_close

    proc, folder = gpu_run
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "FAIL" not in out
    manifest = [case for case in _manifest(folder) if case["quant"] is None]
    assert len(manifest) >= 18, f"only {len(manifest)} cases ran"
    by_name = {case["name"]: case for case in manifest}
    rows = []
    failures = []
    for case in manifest:
        dtype = case["dtype"]
        arrays = harness_files.read_arrays(case, folder)
        got = arrays.pop("out")
        geometry = {"stride": case["stride"], "padding": case["padding"], "dilation": case["dilation"],
                    "group": case["group"], "deformable_group": case["deformable_group"]}
        ref = modulated_deform_conv2d(
            arrays["x"], arrays["offset"], arrays["mask"], arrays["weight"], arrays.get("bias"), **geometry
        )
        assert got.shape == ref.shape, case["name"]
        runtime = case["runtime_bitwise_identical"]
        tf32 = case["allow_tf32"] == 1
        row = (f"{case['name']:<24} {dtype:<9} tf32 {int(tf32)} out {case['shapes']['out']!s:<18} "
               f"bitwise-runtime {runtime}")
        try:
            if tf32 and dtype == "float32":
                ref_abs = modulated_deform_conv2d(
                    np.abs(arrays["x"]), arrays["offset"], np.abs(arrays["mask"]), np.abs(arrays["weight"]),
                    None, **geometry,
                )
                numbers = check_tf32(got, ref, ref_abs)
            elif dtype != "float32":  # the fused kernel rounds each sample to the operand type once
                ref_abs = modulated_deform_conv2d(
                    np.abs(arrays["x"]), arrays["offset"], np.abs(arrays["mask"]), np.abs(arrays["weight"]),
                    None, **geometry,
                )
                numbers = check_close(got, ref, dtype, ref_abs)
            else:
                numbers = check_close(got, ref, dtype)
            rel_l2, max_rel = numbers["rel_l2"], numbers["max_abs_over_max_ref"]
            row += f"  rel L2 {rel_l2:.3e}  max|err|/max|ref| {max_rel:.3e}"
        except AssertionError as exc:
            failures.append(f"{row}: {exc}")
        if tf32 and dtype != "float32":  # FP16/BF16 ignore allow_tf32: same bits as without it
            twin = by_name.get(case["name"].removesuffix("_tf32"))
            bits = [(folder / c["files"]["out"]).read_bytes() for c in (twin, case) if c is not None]
            same = twin is not None and twin["allow_tf32"] == 0 and twin["seed"] == case["seed"] and (
                bits[0] == bits[1])
            row += f"  same bits as without allow_tf32 {same}"
            if not same:
                failures.append(f"{row}: a {dtype} output changed with allow_tf32 = 1")
        expected_runtime = True if case["path"] == "build+runtime" else None
        if runtime is not expected_runtime:
            failures.append(f"{row}: runtime_bitwise_identical is {runtime}, expected {expected_runtime}")
        rows.append(row)
    print(f"\nTensorRT {built.version} headers, {len(rows)} cases:\n" + "\n".join(rows))
    assert not failures, "\n".join(failures)
    assert {c["dtype"] for c in manifest} == {"float32", "float16", "bfloat16"}
    assert {c["dtype"] for c in manifest if c["allow_tf32"] == 1} == {"float32", "float16", "bfloat16"}
    assert {c["path"] for c in manifest} == {"build+runtime", "dynamic"}


@pytest.mark.trt_headers
@pytest.mark.gpu
def test_enqueue_quantized_matches_model(built, gpu_run) -> None:
    """Every quantized case (int8, fp8e4m3) against the float64 model of the quantized math on the
    exact bits the GPU read (``support.harness_files.check_quantized_case``: the Q/DQ model's bound
    with sample rounding, and at least 99% of the outputs equal to the kernels' math within FP32's
    bound, or exactly for a quantized output); the deserialized plugin's output is bit-identical."""
    proc, folder = gpu_run
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "FAIL" not in out, out[-6000:]
    cases = [case for case in _manifest(folder) if case["quant"] is not None]
    assert len(cases) >= 20, f"only {len(cases)} quantized cases ran"
    assert _quant_coverage(cases) == QUANT_COVERAGE
    rows = []
    failures = []
    for case in cases:
        row = (f"{case['name']:<40} x {case['x_format']:<6} out {case['dtypes']['out']:<8} "
               f"bitwise-runtime {case['runtime_bitwise_identical']}")
        try:
            numbers = harness_files.check_quantized_case(case, folder)
            row += "  " + "  ".join(f"{k} {v:.3e}" for k, v in numbers.items())
        except AssertionError as exc:
            failures.append(f"{row}: {exc}")
        if case["runtime_bitwise_identical"] is not True:
            failures.append(f"{row}: the deserialized plugin's output differs from the build plugin's")
        rows.append(row)
    print(f"\nTensorRT {built.version} headers, {len(rows)} quantized cases:\n" + "\n".join(rows))
    assert not failures, "\n".join(failures)
