"""CPU-side tests of the CUDA core: it compiles with nvcc, exports exactly its C API, stays free of
TensorRT, matches its ctypes mirror byte for byte, and validates every field with a message that
names it (the host-side choices of the fused kernel: test_core_choice.py). The library links the
CUDA runtime statically, so everything here except launching a kernel runs on a machine without a
GPU."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
from support import core, core_fused

REPO = Path(__file__).resolve().parents[1]
CORE_DIR = REPO / "plugin_src" / "core"
EXPORTED = {
    "dcnOutputSize",
    "dcnValidate",
    "dcnWorkspaceSize",
    "dcnForward",
    "dcnFusedTileCount",
    "dcnFusedChoice",
    "dcnFusedSplitTail",
    "dcnFusedTileInfo",
    "dcnFusedTileRuns",
    "dcnPreparedWeightsSize",
    "dcnPrepareWeights",
    "dcnConvertElements",
    "dcnSetSplitReduce",
    "dcnQuantScalesOffset",
    "dcnQuantWeightBytes",
}


@pytest.fixture(scope="module")
def lib(built_lib: Path) -> ctypes.CDLL:
    return core.load(built_lib)


def test_core_has_no_tensorrt_reference() -> None:
    offenders = []
    for path in sorted(CORE_DIR.rglob("*")):
        if path.is_file() and "nvinfer" in path.read_text(errors="replace").lower():
            offenders.append(str(path.relative_to(REPO)))
    assert list(CORE_DIR.glob("*.cu")), "plugin_src/core has no CUDA source"
    assert not offenders, f"plugin_src/core must not mention TensorRT (NvInfer): {offenders}"


def test_make_core_builds_and_exports_exactly_the_c_api(built_lib: Path) -> None:
    if shutil.which("nm") is None:
        pytest.skip("nm not found")
    proc = subprocess.run(
        ["nm", "-D", "--defined-only", str(built_lib)], capture_output=True, text=True, check=True
    )
    names = {line.split()[-1] for line in proc.stdout.splitlines() if line.strip()}
    ours = {n for n in names if not n.startswith("_")}
    assert ours == EXPORTED, f"unexpected exported symbols: {sorted(ours ^ EXPORTED)}"


def test_make_core_embeds_every_architecture(built_lib: Path) -> None:
    tool = shutil.which("cuobjdump")
    if tool is None:
        pytest.skip("cuobjdump not found")
    proc = subprocess.run(
        [tool, "--list-elf", "--list-ptx", str(built_lib)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    for arch in ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90a"):  # sm_90 is built as sm_90a
        assert f".{arch}." in proc.stdout, f"no {arch} code in the core:\n{proc.stdout}"
    assert "sm_90.ptx" in proc.stdout or "compute_90" in proc.stdout, proc.stdout


def test_ctypes_mirror_matches_the_c_layout(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to read the C layout")
    fields = [name for name, _ in core.DcnParams._fields_]
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "dcnParams.h"', "int main(void) {"]
    lines.append('printf("sizeof %zu\\n", sizeof(DcnParams));')
    for name in fields:
        lines.append(
            f'printf("{name} %zu %zu\\n", offsetof(DcnParams, {name}), sizeof(((DcnParams*)0)->{name}));'
        )
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c99", "-I", str(CORE_DIR), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == f"sizeof {ctypes.sizeof(core.DcnParams)}"
    for line, name in zip(out[1:], fields, strict=False):
        _, offset, size = line.split()
        field = getattr(core.DcnParams, name)
        assert (int(offset), int(size)) == (field.offset, field.size), name


def _valid(**over: int) -> core.DcnParams:
    p = core.make_params(
        (2, 8, 9, 11),
        (6, 4, 3, 3),
        stride=(1, 2),
        padding=(1, 0),
        dilation=(2, 1),
        group=2,
        deformable_group=4,
        with_bias=True,
        dtype=core.FLOAT16,
    )
    for key, value in over.items():
        setattr(p, key, value)
    return p


def test_valid_params_pass(lib: ctypes.CDLL) -> None:
    p = _valid()
    assert (p.ho, p.wo) == (7, 5)
    assert core.validate(p, lib) == (core.SUCCESS, "")
    assert core.workspace_size(p, lib) == 0
    assert core.validate(_valid(n=0), lib)[0] == core.SUCCESS  # empty batch is allowed


@pytest.mark.parametrize(
    "args",
    [
        (10, 3, 1, 1, 1),
        (1, 1, 1, 0, 1),
        (7, 3, 2, 0, 1),
        (7, 3, 3, 2, 2),
        (5, 5, 1, 0, 2),
        (1, 3, 1, 0, 1),
        (0, 1, 1, 0, 1),
        (5, 1, 0, 0, 1),
    ],
)
def test_output_size_matches_python(lib: ctypes.CDLL, args: tuple) -> None:
    assert lib.dcnOutputSize(*args) == core.output_size(*args)


@pytest.mark.parametrize(
    "field, value, status",
    [
        ("n", -1, core.INVALID_ARGUMENT),
        ("c", 0, core.INVALID_ARGUMENT),
        ("c", 6, core.INVALID_ARGUMENT),  # not divisible by deformableGroup 4
        ("h", 0, core.INVALID_ARGUMENT),
        ("w", -3, core.INVALID_ARGUMENT),
        ("h", 1 << 25, core.INVALID_ARGUMENT),
        ("cout", 0, core.INVALID_ARGUMENT),
        ("cout", 7, core.INVALID_ARGUMENT),  # not divisible by group 2
        ("ho", 8, core.INVALID_ARGUMENT),
        ("wo", 4, core.INVALID_ARGUMENT),
        ("kh", 0, core.INVALID_ARGUMENT),
        ("kw", -1, core.INVALID_ARGUMENT),
        ("strideH", 0, core.INVALID_ARGUMENT),
        ("strideW", -2, core.INVALID_ARGUMENT),
        ("padH", -1, core.INVALID_ARGUMENT),
        ("padW", -5, core.INVALID_ARGUMENT),
        ("dilationH", 0, core.INVALID_ARGUMENT),
        ("dilationW", -1, core.INVALID_ARGUMENT),
        ("group", 0, core.INVALID_ARGUMENT),
        ("group", 3, core.INVALID_ARGUMENT),
        ("deformableGroup", 0, core.INVALID_ARGUMENT),
        ("deformableGroup", 3, core.INVALID_ARGUMENT),
        ("withBias", 2, core.INVALID_ARGUMENT),
        ("dtype", 3, core.INVALID_ARGUMENT),
        ("dtype", -1, core.INVALID_ARGUMENT),
        ("algo", 7, core.INVALID_ARGUMENT),
        ("math", 2, core.INVALID_ARGUMENT),
        ("math", -1, core.INVALID_ARGUMENT),
        ("algo", 99, core.INVALID_ARGUMENT),
        ("algo", 3, core.INVALID_ARGUMENT),
        ("algo", 199, core.INVALID_ARGUMENT),  # tile 99 does not exist
        ("algo", 1199, core.INVALID_ARGUMENT),  # tile 99, 2 splits
        ("algo", 8100, core.INVALID_ARGUMENT),  # 9 splits
        ("algo", 11100, core.INVALID_ARGUMENT),  # 2 splits and a split tail of 2
        ("algo", 80100, core.INVALID_ARGUMENT),  # a split tail of 9
        ("algo", 999, core.INVALID_ARGUMENT),
    ],
)
def test_every_field_is_validated_and_named(lib: ctypes.CDLL, field: str, value: int, status: int) -> None:
    got, msg = core.validate(_valid(**{field: value}), lib)
    assert got == status, msg
    assert f"{field} = {value}" in msg, msg


def test_split_algo_codes_validate(lib: ctypes.CDLL) -> None:
    for algo in (
        core_fused.fused_algo(0),
        core_fused.fused_algo(3, 2),
        core_fused.fused_algo(0, core.MAX_SPLITS),
        core_fused.fused_algo(20, 1, 2),
        core_fused.fused_algo(core_fused.fused_tile_count(lib) - 1, 1, core.MAX_SPLITS),
    ):
        assert core.validate(_valid(algo=algo), lib) == (core.SUCCESS, ""), algo


@pytest.mark.parametrize(
    ("c", "cout", "group", "dtype"),
    [
        (512, 512, 1, core.FLOAT16),
        (256, 256, 1, core.FLOAT32),
        (512, 256, 2, core.BFLOAT16),
        (128, 64, 1, core.FLOAT16),
    ],
)
def test_workspace_grows_with_every_dimension(
    lib: ctypes.CDLL, c: int, cout: int, group: int, dtype: int
) -> None:
    """A plugin sizes the workspace for a profile's largest shape: every smaller batch or plane must
    fit in it, although small shapes split K (FP32 partial sums) and large ones do not."""
    sizes = {}
    for n in (1, 2, 3):
        for hw in (4, 8, 12, 16, 24, 32, 48, 64, 96):
            p = core.make_params(
                (n, c, hw, hw + 3), (cout, c // group, 3, 3), padding=(1, 1), group=group, dtype=dtype
            )
            sizes[(n, hw)] = core.workspace_size(p, lib)
    assert any(v > 0 for v in sizes.values())
    for (n, hw), size in sizes.items():
        for (n2, hw2), size2 in sizes.items():
            if n2 >= n and hw2 >= hw:
                assert size2 >= size, (
                    f"workspace for n={n2}, {hw2}x{hw2 + 3} ({size2}) < n={n}, {hw}x{hw + 3} ({size})"
                )


def _align256(v: int) -> int:
    return (v + 255) // 256 * 256


@pytest.mark.parametrize("quant", [1, 2], ids=["int8", "fp8e4m3"])
@pytest.mark.parametrize(
    "cin, group, dg, k_order",
    [
        (256, 1, 1, True),  # 128-channel chunks
        (64, 1, 1, True),  # 64 channels: two kernel points per chunk, the 64-channel K order
        (128, 2, 2, True),  # two groups of 64 in their own deformable groups
        (256, 1, 4, False),  # 64 per deformable group in a group of 256: the simple kernel only
        (96, 1, 1, False),
    ],
)
def test_quantized_prepared_weights_hold_the_8bit_tiles_k_order(
    lib: ctypes.CDLL, quant: int, cin: int, group: int, dg: int, k_order: bool
) -> None:
    """dcnPreparedWeightsSize of a quantized layer: its weight buffer (1-byte values, then one FP32
    scale per output channel), and one copy of the values in the K order of the 8-bit tiles where
    one takes the layer; each part aligned to 256 bytes."""
    cout, kk = 48, 9
    p = core.make_params(
        (1, cin, 16, 16), (cout, cin // group, 3, 3), padding=(1, 1), group=group, deformable_group=dg,
        dtype=core.FLOAT16,
    )
    p.quant, p.xScale, p.outType = quant, 0.05, core.FLOAT16
    scales_at, buffer = core.quant_weight_layout(p, lib)
    values = cout * (cin // group) * kk
    assert scales_at == (values + 15) // 16 * 16 and buffer == scales_at + 4 * cout
    want = _align256(buffer) + (_align256(values) if k_order else 0)
    assert core.prepared_weights_size(p, lib) == want


def test_kernel_larger_than_padded_input_is_rejected(lib: ctypes.CDLL) -> None:
    p = core.make_params((1, 4, 3, 20), (4, 4, 5, 3), padding=(0, 1))
    p.ho, p.wo = 1, 20  # whatever: the height check fires first
    status, msg = core.validate(p, lib)
    assert status == core.INVALID_ARGUMENT
    assert "DcnParams.h = 3" in msg and "5" in msg, msg


def test_forward_rejects_null_pointers_and_small_workspace(lib: ctypes.CDLL) -> None:
    p = _valid()
    buf = ctypes.create_string_buffer(512)
    fake = ctypes.c_void_p(0x1000)  # never dereferenced: the checks fire before any launch
    args = [fake, fake, fake, fake, fake, fake]
    for idx, name in enumerate(("x", "offset", "mask", "weight")):
        call = list(args)
        call[idx] = None
        status = lib.dcnForward(ctypes.byref(p), *call, None, 0, None, buf, 512)
        assert status == core.INVALID_ARGUMENT and f"'{name}'" in buf.value.decode(), buf.value
    call = list(args)
    call[5] = None
    assert lib.dcnForward(ctypes.byref(p), *call, None, 0, None, buf, 512) == core.INVALID_ARGUMENT
    assert b"'out'" in buf.value
    call = list(args)
    call[4] = None
    assert lib.dcnForward(ctypes.byref(p), *call, None, 0, None, buf, 512) == core.INVALID_ARGUMENT
    assert b"withBias" in buf.value
    bad = _valid(group=0)
    assert lib.dcnForward(ctypes.byref(bad), *args, None, 0, None, buf, 512) == core.INVALID_ARGUMENT
    assert b"group = 0" in buf.value
    assert lib.dcnValidate(None, buf, 512) == core.INVALID_ARGUMENT
    # msg may be NULL / zero length without harm
    assert lib.dcnValidate(ctypes.byref(bad), None, 0) == core.INVALID_ARGUMENT


def _gpu_present() -> bool:
    """A CUDA device is usable through CuPy, or an NVIDIA device node exists (CuPy or not)."""
    from conftest import gpu_available

    return gpu_available() is None or any(Path("/dev").glob("nvidia[0-9]*"))


def test_forward_without_gpu_reports_a_cuda_error(lib: ctypes.CDLL) -> None:
    # On a GPU machine the launch below would run on fake pointers (an illegal address that poisons
    # the context), so it must be skipped there even when CuPy is missing.
    if _gpu_present():
        pytest.skip("a GPU is present; the no-GPU error path is not reachable here")
    fake = ctypes.c_void_p(0x1000)
    # AUTO asks the device for its properties first (to pick the fused kernel); SIMPLE launches.
    cases = ((core.ALGO_AUTO, b"querying the current device"), (core.ALGO_SIMPLE, b"dcnSimpleForwardKernel"))
    for algo, expected in cases:
        p = _valid(algo=algo)
        buf = ctypes.create_string_buffer(512)
        status = lib.dcnForward(ctypes.byref(p), fake, fake, fake, fake, fake, fake, None, 0, None, buf, 512)
        assert status == core.CUDA_ERROR, buf.value
        assert expected in buf.value, buf.value
