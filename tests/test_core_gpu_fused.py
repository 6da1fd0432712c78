"""The fused tensor-core kernel on shapes that exercise its tiling (marker gpu; sm_80+).

Every tile configuration (``ALGO_FUSED_TILE + i``) runs on cases with partial channel, pixel and K
tiles, tiles that span two images, several groups, deformable groups that span fewer K rows than one
chunk (several sampling-plan slots), unaligned weight rows (scalar weight loads), 1x1 and 5x5
kernels and a 2 x 2 input; the f_nhwc cases (channels per group and per deformable group in
multiples of 32) run the channel-vectorised tiles too. Outputs are checked against the float64
reference with the fused kernel's bound (tests/test_core_gpu.py docstring), and every tile of one
kernel must give bit-identical results: its order of accumulation along K does not depend on the tile.
"""

from __future__ import annotations

import numpy as np
import pytest
from support import core, core_fused
from support.core_cases import (
    DTYPES,
    U_BF16,
    U_FP16,
    U_TF32,
    Case,
    check_close,
    device_cc,
    device_has_fused,
    ensure_core_built,
    inputs_refs,
    record_summary,
    run_core,
)

FUSED_CASES: list[Case] = [
    Case("f_basic", 2, 48, 19, 23, 80, (3, 3), padding=(1, 1), off_scale=2.0),
    Case("f_g2_dg4_nonsq", 3, 64, 17, 15, 96, (3, 3), (2, 1), (1, 2), (1, 2), group=2, dg=4, off_scale=3.0),
    Case("f_dg12_slots5", 2, 12, 20, 21, 40, (3, 3), padding=(1, 1), dg=12, bias=False, off_scale=1.5),
    Case("f_k1_dg8_cout300", 2, 16, 25, 30, 300, (1, 1), dg=8, off_scale=2.0),
    Case("f_k5_dg2", 1, 20, 31, 29, 33, (5, 5), padding=(2, 2), dilation=(2, 1), dg=2, off_scale=4.0),
    Case("f_hw2", 4, 8, 2, 2, 16, (3, 3), padding=(1, 1), off_scale=0.7),
    Case("f_c5_scalar_w", 2, 5, 33, 40, 24, (3, 3), padding=(1, 1), off_scale=2.0),
    Case("f_far", 1, 32, 24, 24, 64, (3, 3), padding=(1, 1), off_scale=12.0),
    Case("f_nhwc_g2_dg2", 2, 128, 15, 17, 72, (3, 3), (2, 1), (1, 1), (1, 2), group=2, dg=2, off_scale=2.5),
    Case("f_nhwc_k1_dg4", 2, 128, 13, 11, 40, (1, 1), dg=4, off_scale=1.5),
    Case("f_nhwc_k5", 1, 32, 21, 19, 24, (5, 5), (2, 1), (2, 2), off_scale=3.0),
    Case("f_nhwc_images", 3, 64, 9, 10, 96, (3, 3), padding=(1, 1), off_scale=4.0),
    # 16-byte prep transpose (planes of 320 pixels), a last channel tile of 32 of 64
    Case("f_nhwc_vec_c96", 3, 96, 16, 20, 64, (3, 3), padding=(1, 1), off_scale=2.0),
    # Two channel tiles of 256 (the second of 144 rows) for the sample-sharing tile, whose cluster
    # of two blocks samples every other K chunk each; plans rebuilt for 2 deformable groups.
    Case("f_nhwc_pair_m400", 2, 128, 9, 10, 400, (3, 3), padding=(1, 1), dg=2, off_scale=2.5),
    # 2 groups of 512 output channels, 9 K chunks per group (one block of the pair samples 5, the
    # other 4), non-square attributes.
    Case("f_nhwc_pair_g2", 1, 128, 11, 9, 1024, (3, 3), (1, 2), (1, 1), (2, 1), group=2, off_scale=3.0),
]

def tile_family(tile: core_fused.TileInfo) -> str:
    """The tile's K order: the NCHW kernel, the channel-vectorised kernel with 32- and with 64-channel
    K chunks, and the warpgroup-MMA tiles of each (their own order of the products within a K
    step). Their rounding differs; within a family every tile must give the same bits."""
    if tile.kernel == "nchw":
        return "nchw"
    wg = "wg" if tile.kernel == "wgmma" else ""
    return f"nhwc{tile.bk}{wg}"


@pytest.fixture(scope="module")
def lib():
    return core.load(ensure_core_built())


@pytest.fixture(scope="module")
def need_fused():
    if not device_has_fused():
        pytest.skip("the fused kernel needs compute capability 8.0+")


def tile_count(lib) -> int:
    count = core_fused.fused_tile_count(lib)
    assert count >= 1
    return count


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [*DTYPES, "tf32"])
@pytest.mark.parametrize("case", FUSED_CASES, ids=[c.name for c in FUSED_CASES])
def test_every_tile_matches_reference_and_each_other(lib, need_fused, case: Case, dtype: str) -> None:
    data_type = "float32" if dtype == "tf32" else dtype
    math = core.MATH_TF32 if dtype == "tf32" else core.MATH_ACCURATE
    inputs, ref, absref = inputs_refs(case, data_type)
    from dcnconvert.errors import UnsupportedNodeError

    first: dict[str, np.ndarray] = {}
    ran = 0
    for tile in core_fused.tile_infos(lib):
        try:
            out = run_core(lib, case, data_type, inputs, core.ALGO_FUSED_TILE + tile.index, math=math)
        except UnsupportedNodeError as exc:  # plans too large, channels not in multiples of 32/64, FP32
            reasons = (
                "shared memory",
                "divisible by 32",
                "divisible by 64",
                "FP16/BF16 only",
                "capability 9.",  # TMA and warpgroup-MMA tiles
                "FP32 only",  # 32-channel TMA tiles
                "not built for",  # (tile, precision) pairs AUTO never chooses
                "channel tiles in pairs",  # the sample-sharing tiles: an odd number of channel tiles
                "quantized (INT8, FP8) layers only",  # the 8-bit tiles (tests/test_core_gpu_quant.py)
            )
            assert any(r in str(exc) for r in reasons), str(exc)
            continue
        ran += 1
        assert tile.takes(data_type, math) and tile.runs_on(device_cc()), (
            f"tile {tile.name} ran {dtype} on compute capability {device_cc()}, "
            "which dcnFusedTileInfo excludes"
        )
        if dtype == "tf32":
            numbers = check_close(out, ref, "float32", absref, u_operand=2 * U_TF32 + U_TF32**2)
        elif dtype == "float32":
            numbers = check_close(out, ref, "float32")
        elif tile.kernel == "nchw":  # FP32 sums, one rounding to the operand type
            u_once = {"float16": U_FP16, "bfloat16": U_BF16}[dtype]
            numbers = check_close(out, ref, dtype, absref, u_operand=u_once)
        else:
            numbers = check_close(out, ref, dtype, absref)
        record_summary(
            {"test": "fused_tile", "case": case.name, "dtype": dtype, "tile": tile.name, **numbers}
        )
        family = tile_family(tile)
        if family not in first:
            first[family] = out
        else:
            assert np.array_equal(out, first[family]), (
                f"tile {tile.name} differs from the first tile of its family "
                "(the K order may not depend on the tile)"
            )
    assert ran >= 2, f"only {ran} tile configurations took the case"


@pytest.mark.gpu
def test_auto_picks_fused_and_matches_forced_fused(lib, need_fused) -> None:
    case = FUSED_CASES[0]
    for dtype in DTYPES:
        inputs, _, _ = inputs_refs(case, dtype)
        auto = run_core(lib, case, dtype, inputs, core.ALGO_AUTO)
        fused = run_core(lib, case, dtype, inputs, core.ALGO_FUSED)
        simple = run_core(lib, case, dtype, inputs, core.ALGO_SIMPLE)
        assert np.array_equal(auto, fused), f"{dtype}: AUTO did not run the fused kernel"
        if dtype != "float32":
            assert not np.array_equal(auto, simple), (
                f"{dtype}: fused and simple agree bit for bit (same kernel?)"
            )


@pytest.mark.gpu
def test_tiles_not_built_for_a_precision_refuse_it(lib, need_fused) -> None:
    """A (tile, precision) pair AUTO never chooses has no kernel: forcing it fails with a message
    that says so, on any compute capability the fused kernel runs on. An 8-bit tile forced on a
    float layer is refused for its element type."""
    from dcnconvert.errors import UnsupportedNodeError

    case = next(c for c in FUSED_CASES if c.name == "f_nhwc_images")  # 64 channels: every tile applies
    refused = eight_bit = 0
    for tile in core_fused.tile_infos(lib):
        for dtype in DTYPES:
            fp32 = dtype == "float32"
            inputs, _, _ = inputs_refs(case, dtype)
            if tile.bk == 128:  # an 8-bit tile: refused for the element type before the channel count
                with pytest.raises(UnsupportedNodeError, match=r"take quantized \(INT8, FP8\) layers only"):
                    run_core(lib, case, dtype, inputs, core.ALGO_FUSED_TILE + tile.index)
                eight_bit += 1
                continue
            cannot = (fp32 and tile.bk > 32) or (not fp32 and tile.min_cc >= 90 and tile.bk == 32)
            if tile.takes(dtype) or cannot:
                continue  # built, or what its kernel cannot take (64-channel chunks, 128-byte TMA rows)
            with pytest.raises(UnsupportedNodeError, match="not built for"):
                run_core(lib, case, dtype, inputs, core.ALGO_FUSED_TILE + tile.index)
            refused += 1
    # async-* and regs-128x64 in 3xTF32, wg-256x64-tf32 in 3xTF32, wg-128x128 in FP16, -p16 in BF16
    assert refused >= 7, refused
    assert eight_bit >= 3 * len(DTYPES), eight_bit


@pytest.mark.gpu
def test_fused_reports_unsupported_for_a_1x1_plane(lib, need_fused) -> None:
    from dcnconvert.errors import UnsupportedNodeError

    case = Case("one_pixel", 1, 4, 1, 1, 4, (1, 1))
    inputs, _, _ = inputs_refs(case, "float32")
    with pytest.raises(UnsupportedNodeError, match="at least 2 x 2"):
        run_core(lib, case, "float32", inputs, core.ALGO_FUSED)


@pytest.mark.gpu
def test_unknown_tile_is_rejected(lib) -> None:
    from dcnconvert.errors import ValidationError

    case = FUSED_CASES[0]
    p = core.make_params(
        (case.n, case.c, case.h, case.w),
        (case.cout, case.c, 3, 3),
        padding=(1, 1),
        algo=core.ALGO_FUSED_TILE + tile_count(lib),
    )
    status, msg = core.validate(p, lib)
    assert status == core.INVALID_ARGUMENT and "algo" in msg
    with pytest.raises(ValidationError):
        import cupy

        z = cupy.ones((1,), cupy.float32)
        core.forward(p, z, z, z, z, None, z, lib=lib, check=False)
