"""CPU-side tests of the CUDA core: it compiles with nvcc, exports exactly its C API, stays free of
TensorRT, matches its ctypes mirror byte for byte, and validates every field with a message that
names it. The library links the CUDA runtime statically, so everything here except launching a
kernel runs on a machine without a GPU."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import core, core_fused
from support.core_fused import H200_DEVICE

from dcnconvert.errors import ValidationError

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


def _nvcc() -> str | None:
    return shutil.which(os.environ.get("NVCC", "nvcc"))


@pytest.fixture(scope="module")
def built_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Builds the core with `make core` into a temporary BUILD_DIR (the repo's build/ is untouched)."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH (set NVCC): the CUDA core cannot be compiled here")
    out = tmp_path_factory.mktemp("core_build")
    proc = subprocess.run(
        ["make", "-C", str(REPO / "plugin_src"), "core", f"BUILD_DIR={out}", f"NVCC={nvcc}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"make core failed:\n{proc.stdout}\n{proc.stderr}"
    lib = out / "libdcnconvert_core.so"
    assert lib.is_file()
    return lib


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


def test_tile_runs_follows_the_default_build(lib: ctypes.CDLL) -> None:
    """The default build holds sm_90a SASS and compute_90 PTX: the warpgroup tiles run on 9.x only,
    the TMA tiles from 9.0 on, the others from 8.0 on; nothing below 8.0 or outside the table."""
    for t in core_fused.tile_infos(lib):
        want = {"wgmma": {9}, "tma": set(range(9, 13))}.get(t.kernel, set(range(8, 13)))
        assert t.run_majors == want, t
        assert t.runs_on(90) and t.runs_on(t.min_cc) and not t.runs_on(75)
    assert lib.dcnFusedTileRuns(-1, 9) == 0 and lib.dcnFusedTileRuns(core_fused.fused_tile_count(lib), 9) == 0
    assert not core_fused.tile_infos(lib)[0].runs_on(70)


def test_every_built_tile_is_one_auto_picks(lib: ctypes.CDLL) -> None:
    """The family holds no kernel AUTO cannot choose: every (tile, precision) the library builds
    (dcnFusedTileInfo) is AUTO's pick for some of bench/fused_reach.py's random problems on its six
    device profiles; the NCHW tiles, reached through the fallback order, take every type.
    (test_core_gpu_fused.py forces the pairs that are not built.)"""
    sys.path.insert(0, str(REPO / "bench"))
    import fused_reach

    picks, _ = fused_reach.reach(lib, problems=20000, seed=7)
    precisions = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8e4m3")
    assert fused_reach.built_never_picked(lib, picks) == {p: [] for p in precisions}
    assert {k[0] for k in picks["int8"]} >= {"wg-128x64-q8", "wg-256x64-q8", "wg-128x128-q8"}, picks["int8"]
    # the warp-MMA 8-bit tiles: INT8 from 8.0 on, FP8 from 8.9 on (L40), never on 8.0 or 8.6
    assert ("async-128x64-q8", "8.x") in picks["int8"] and ("async-128x32-p8-q8", "8.x") in picks["fp8e4m3"]
    infos = core_fused.tile_infos(lib)
    unbuilt = [(t.name, d) for t in infos for d in ("float32", "float16", "bfloat16") if not t.takes(d)]
    assert ("wg-128x128", "float16") in unbuilt and ("async-128x64", "float32") in unbuilt
    assert all(t.takes(d) for t in infos if t.kernel == "nchw" for d in ("float32", "float16", "bfloat16"))


def test_tile_lists_take_names_and_indices(lib: ctypes.CDLL) -> None:
    # SANITIZE_FUSED_TILES and bench/core_race_one.py read tiles this way.
    infos = core_fused.tile_infos(lib)
    last = infos[-1]
    spec = f"{infos[3].name}, {last.index},{infos[0].name}"
    assert core_fused.tile_indices(spec, lib) == [3, last.index, 0]
    assert core_fused.tile_indices("", lib) == []
    with pytest.raises(KeyError, match="no fused tile named 'wg-1x1'"):
        core_fused.tile_indices("wg-1x1", lib)
    with pytest.raises(ValueError, match="outside"):
        core_fused.tile_indices(str(len(infos)), lib)


def test_split_reduce_takes_its_three_modes_only(lib: ctypes.CDLL) -> None:
    """dcnSetSplitReduce: 0 (clusters where they pay), 1 (reduction kernel), 2 (clusters or
    unsupported); anything else is an invalid argument and leaves the mode as it was."""
    lib.dcnSetSplitReduce.restype = ctypes.c_int
    try:
        for mode in (core.SPLIT_REDUCE_KERNEL, core.SPLIT_REDUCE_CLUSTER, core.SPLIT_REDUCE_AUTO):
            assert lib.dcnSetSplitReduce(ctypes.c_int32(mode)) == core.SUCCESS
        for bad in (-1, 3, 1 << 30):
            assert lib.dcnSetSplitReduce(ctypes.c_int32(bad)) == core.INVALID_ARGUMENT, bad
    finally:
        lib.dcnSetSplitReduce(ctypes.c_int32(core.SPLIT_REDUCE_AUTO))


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


def test_fused_choice_keeps_huge_weights_off_the_32_bit_offsets(lib: ctypes.CDLL) -> None:
    """The channel-vectorised kernel addresses a group's weights with 32-bit offsets: a group of
    more than 2^31 weights must go to the NCHW kernel (64-bit indexing), one just under may not."""
    nchw = {t.index for t in core_fused.tile_infos(lib) if t.kernel == "nchw"}
    assert len(nchw) == 2
    # 4096 x 65536 x 9 weights: over 2^31 - 1.
    huge = core.make_params((1, 65536, 8, 8), (4096, 65536, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    choice = core_fused.fused_choice(huge, lib=lib)
    assert choice is not None and choice[0] in nchw, choice
    # 2048 x 65536 x 9 weights: under 2^31 - 1.
    below = core.make_params((1, 65536, 8, 8), (2048, 65536, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    choice = core_fused.fused_choice(below, lib=lib)
    assert choice is not None and choice[0] not in nchw, choice


def test_fused_choice_script_prints_tile_names(built_lib: Path) -> None:
    """bench/fused_choice.py (docs/benchmarks.md's table of AUTO's choices): tile names, K splits
    and split tails as the host-only choice gives them for an H200."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "fused_choice.py"), "--lib", str(built_lib)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["layer", "fp32", "tf32", "fp16", "bf16", "int8", "fp8e4m3"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[1:]}
    assert len(rows) == 18
    assert rows["r50-c4"][2] == "wg-256x64-p16/s2"  # 66 blocks x 2 splits: one wave
    assert rows["bev-c4"][2] == "wg-256x64-p16+16/s8"  # 4 waves, then 16 tiles split 8 ways
    assert rows["r50-c3"][3] == "wg-128x128"  # BF16 keeps 8 producer warps
    # quantized layers: the 8-bit tiles, split as FP16 is; 64 channels per group: two kernel points
    # per 128-channel chunk
    assert rows["r50-c4"][4:] == ["wg-256x64-q8/s2", "wg-128x64-q8"]  # FP8: 256 rows wait on 4 slices
    assert rows["bev-c4"][4:] == ["wg-256x64-q8+16/s8"] * 2
    # 128 output channels and many pixels: the 128-pixel tile, where FP16 takes wg-128x128-p16
    assert rows["r50-c3"][4:] == ["wg-128x128-q8"] * 2 and rows["r50-c3"][2] == "wg-128x128-p16"
    assert rows["dla-ida2-node"][4:] == ["wg-128x128-q8"] * 2


def test_fused_choice_on_an_h200(lib: ctypes.CDLL) -> None:
    """dcnFusedChoice (host only): what AUTO runs on an H200 (132 SMs, 227 KiB, sm_90)."""
    infos = core_fused.tile_infos(lib)
    name = {t.name: t.index for t in infos}
    # warpgroup MMAs (compute capability 9.x), FP16/BF16 and FP32 (TF32 MMAs); TMA weight tiles (sm_90+)
    wgmma = {t.index for t in infos if t.kernel == "wgmma" and "float32" not in t.dtypes}
    fp32_wgmma = {t.index for t in infos if t.kernel == "wgmma" and "float32" in t.dtypes}
    tma = {t.index for t in infos if t.min_cc >= 90}
    fp16_only = {t.index for t in infos if "float32" not in t.dtypes}  # 64-channel K chunks
    nchw = {t.index for t in infos if t.kernel == "nchw"}
    assert wgmma and fp32_wgmma and tma and fp16_only and len(nchw) == 2
    wg256 = name["wg-256x64-p16"]
    r50c4 = core.make_params((1, 256, 50, 84), (256, 256, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    # 66 blocks of 256 x 64 (16 producer warps), K split in two: one wave of 132 blocks on the H200
    # (measured times: CHANGELOG.md)
    assert core_fused.fused_choice(r50c4, lib=lib) == (wg256, 2)
    a100 = (108, 166912, 8)
    tile, splits = core_fused.fused_choice(r50c4, device=a100, lib=lib)
    assert tile not in tma | nchw, (tile, splits)
    assert core_fused.fused_split_tail(r50c4, lib=lib) == (wg256, 2, 0, 1)  # split K: no split tail
    bev = core.make_params((6, 256, 58, 100), (256, 256, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    assert core_fused.fused_choice(bev, lib=lib) == (wg256, 1)  # 256 x 64, warpgroup MMAs: 9.x only
    # 544 blocks: 4 waves of 132 and 16 blocks, whose 16 pixel tiles run with K split 8 ways (128
    # blocks) as a second launch (BEVFormer-c4 FP16 167.3 -> 152.5 us on the H200).
    assert core_fused.fused_split_tail(bev, lib=lib) == (wg256, 1, 16, 8)
    # 4 full waves: no split tail
    assert core_fused.fused_split_tail(bev, device=(136, 232448, 9), lib=lib) == (wg256, 1, 0, 1)
    tile, splits = core_fused.fused_choice(bev, device=(148, 232448, 10), lib=lib)
    assert tile in tma and tile not in wgmma, (tile, splits)
    r50c3 = core.make_params((1, 128, 100, 168), (128, 128, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    assert core_fused.fused_choice(r50c3, lib=lib) == (name["wg-128x128-p16"], 1)  # 132 blocks
    r50c3.dtype = core.BFLOAT16
    assert core_fused.fused_choice(r50c3, lib=lib) == (name["wg-128x128"], 1)  # -p16 spills BF16's FP32 sums
    dla = core.make_params(
        (1, 512, 16, 16), (256, 512, 3, 3), padding=(1, 1), with_bias=True, dtype=core.FLOAT16
    )
    tile, splits = core_fused.fused_choice(dla, lib=lib)
    assert splits > 1, (tile, splits)  # 8 blocks of 128 x 64 without a split
    r50c4.dtype = core.FLOAT32
    tile, splits = core_fused.fused_choice(r50c4, lib=lib)
    assert tile not in fp16_only | nchw, tile
    # FP32 on warpgroup MMAs (3xTF32; R50-c4 times in CHANGELOG.md and docs/benchmarks.md); in TF32
    # mode the 256 x 64 tile with K split in two
    assert (tile, splits) == (name["wg-128x64-tf32"], 1)
    r50c4.math = core.MATH_TF32
    assert core_fused.fused_choice(r50c4, lib=lib) == (name["wg-256x64-tf32"], 2)
    tile, splits = core_fused.fused_choice(r50c4, device=a100, lib=lib)
    assert tile not in tma | nchw, (tile, splits)
    r50c3.dtype = core.FLOAT32
    r50c3.math = core.MATH_TF32
    assert core_fused.fused_choice(r50c3, lib=lib)[0] == name["wg-128x64-tf32"]  # 256x64 would be half empty
    odd = core.make_params((2, 48, 20, 20), (40, 48, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    tile, splits = core_fused.fused_choice(odd, lib=lib)
    assert tile in nchw and splits == 1, (tile, splits)  # 48 channels: not a multiple of 32
    assert core_fused.fused_choice(dla, device=(80, 65536, 7), lib=lib) is None  # sm_75: the simple kernel
    # Quantized layers (INT8, FP8): the 128-channel-chunk tiles where channels per group
    # and per deformable group divide by 128, or a group holds exactly 64 channels within one
    # deformable group (two kernel points per chunk), else the simple kernel (never an NCHW tile).
    q8 = {t.index for t in infos if t.name.endswith("-q8")}
    assert len(q8) == 6
    warp_q8 = {name["async-128x64-q8"], name["async-128x32-p8-q8"]}  # mma.sync: 8.x, and sm_120's PTX
    for quant in (1, 2):
        layers = (
            (256, 256, 1, 1, q8),
            (128, 64, 1, 1, q8),
            (64, 64, 1, 1, q8),
            (64, 128, 1, 1, q8),
            (128, 64, 2, 2, q8),  # 64 channels per group and per deformable group
            (256, 128, 2, 2, q8),  # 128 per group and per deformable group
            (256, 128, 1, 4, None),  # 64 per deformable group, 256 per group: a chunk spans two
            (128, 128, 1, 2, None),  # 128 per group across two deformable groups
            (192, 64, 1, 1, None),
            (64, 64, 2, 1, None),  # 32 per group
        )
        for cin, cout, group, dg, want in layers:
            layer = core.make_params(
                (1, cin, 32, 32),
                (cout, cin // group, 3, 3),
                padding=(1, 1),
                group=group,
                deformable_group=dg,
                dtype=core.FLOAT16,
            )
            layer.quant, layer.xScale, layer.outType = quant, 0.05, core.FLOAT16
            choice = core_fused.fused_choice(layer, lib=lib)
            if want is None:
                assert choice is None, (quant, cin, dg, choice)
            else:
                assert choice is not None and choice[0] in want, (quant, cin, choice)
            # 8.x: the warp-MMA 8-bit tiles; FP8 from 8.9 on (A100 8.0: the simple kernel; L40 8.9)
            a100 = core_fused.fused_choice(layer, device=(108, 166912, 8), lib=lib)
            l40 = core_fused.fused_choice(layer, device=(142, 101376, 89), lib=lib)
            if want is None or quant == 2:
                assert a100 is None, (quant, cin, a100)
            else:
                assert a100 is not None and a100[0] in warp_q8, (quant, cin, a100)
            if want is None:
                assert l40 is None, (quant, cin, l40)
            else:
                assert l40 is not None and l40[0] in warp_q8, (quant, cin, l40)
    dla.ho = 99
    with pytest.raises(ValidationError, match="ho"):
        core_fused.fused_choice(dla, lib=lib)


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


def _build_variant(tmp_path: Path, archs: str, ptx: str) -> ctypes.CDLL:
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH (set NVCC): the CUDA core cannot be compiled here")
    proc = subprocess.run(
        ["make", "-C", str(REPO / "plugin_src"), "core", f"BUILD_DIR={tmp_path}", f"NVCC={nvcc}"]
        + [f"CUDA_ARCHS={archs}", f"PTX_ARCH={ptx}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"make core failed:\n{proc.stdout}\n{proc.stderr}"
    return core.load(tmp_path / "libdcnconvert_core.so")


@pytest.mark.parametrize(
    ("ptx", "tma_on_h200"), [("compute_90", True), ("compute_80", False)], ids=["ptx90", "ptx80"]
)
def test_fused_choice_follows_the_built_architectures(tmp_path: Path, ptx: str, tma_on_h200: bool) -> None:
    """A core without sm_90 SASS offers an H200 the TMA tiles only through PTX of compute_90 or newer
    (run there by the driver's JIT), and never the warpgroup-MMA tile, which needs sm_90a SASS; a
    core without either would run empty TMA code (plugin_src/Makefile, builtSm90For)."""
    lib = _build_variant(tmp_path, "sm_80", ptx)
    infos = core_fused.tile_infos(lib)
    for t in infos:  # dcnFusedTileRuns: what this build can run on each compute capability major
        if t.kernel == "wgmma":
            assert t.run_majors == frozenset(), t
        elif t.min_cc >= 90:
            assert t.run_majors == (frozenset(range(9, 13)) if tma_on_h200 else frozenset()), t
        else:
            assert t.run_majors == frozenset(range(8, 13)), t
    tma = {t.index for t in infos if t.min_cc >= 90 and "float32" not in t.dtypes}
    wgmma = {t.index for t in infos if t.kernel == "wgmma"}
    r50c4 = core.make_params((1, 256, 50, 84), (256, 256, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    bev = core.make_params((6, 256, 58, 100), (256, 256, 3, 3), padding=(1, 1), dtype=core.FLOAT16)
    for device in (H200_DEVICE, (148, 232448, 10)):
        tile, _ = core_fused.fused_choice(r50c4, device=device, lib=lib)
        assert (tile in tma) == tma_on_h200, (device, tile)
        tile, _ = core_fused.fused_choice(bev, device=device, lib=lib)
        assert tile not in wgmma, (device, tile)  # no sm_90a SASS in this build
