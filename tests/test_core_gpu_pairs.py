"""The sample-sharing tiles (names ending in ``-pair``) against their unpaired twins (marker gpu;
compute capability 9.x).

A pair tile runs the two channel tiles of a pixel tile as one thread-block cluster, each block
sampling every other K chunk for both; its MMAs, their order along K and its epilogue are its
twin's (the same name without ``-pair``), so an unsplit run must give the twin's bits (the twins
meet the float64 references in tests/test_core_gpu_fused.py and tests/test_core_gpu_quant.py). The
cases sweep the output channels of one group over whole and partial channel tiles of both tile
heights (128 and 256 rows), on planes of 480 and 80 output pixels (last pixel tiles of 32 and 16),
in BF16, INT8 and FP8, NCHW x with OIHW weights and NHWC x with prepared weights. A pair that
refuses a case must hold an odd number of channel tiles and say so; every pair must run somewhere.
"""

from __future__ import annotations

import numpy as np
import pytest
from support import core, core_fused, core_quant
from support.core_cases import Case, device_cc, ensure_core_built, make_inputs, run_core

#: Output channels of one group: 2 and 4 whole tiles of 128 and 256 rows, and partial last tiles.
COUTS = (256, 288, 320, 384, 448, 512, 640)
PLANES = ((20, 24), (8, 10))
PAIR_CASES = [
    Case(f"pair_m{cout}_{h}x{w}", 1, 128, h, w, cout, (3, 3), padding=(1, 1), off_scale=2.0)
    for cout in COUTS
    for h, w in PLANES
]
PATHS = ((False, False), (True, True))  # (channel_last, prepared)
DTYPES = ("bfloat16", "int8", "fp8e4m3")


@pytest.fixture(scope="module")
def lib():
    return core.load(ensure_core_built())


def pairs_and_twins(lib, dtype: str) -> list[tuple[core_fused.TileInfo, core_fused.TileInfo]]:
    infos = core_fused.tile_infos(lib)
    by_name = {t.name: t for t in infos}
    out = [(t, by_name[t.name.removesuffix("-pair")]) for t in infos if t.pair]
    return [(pair, twin) for pair, twin in out if pair.takes(dtype) and twin.takes(dtype)]


def run(lib, case: Case, dtype: str, inputs: dict, tile: int, path: tuple[bool, bool]) -> np.ndarray:
    algo = core.ALGO_FUSED_TILE + tile
    channel_last, prepared = path
    if dtype in core_quant.QUANT:
        return core_quant.run(lib, case, dtype, "float16", inputs, algo=algo,
                              channel_last=channel_last, prepared=prepared)
    return run_core(lib, case, dtype, inputs, algo, channel_last=channel_last, prepared=prepared)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_pairs_give_their_twins_bits(lib, dtype: str) -> None:
    from dcnconvert.errors import UnsupportedNodeError

    if device_cc() // 10 != 9:
        pytest.skip(f"the sample-sharing tiles are warpgroup-MMA tiles of compute capability 9.x; "
                    f"this GPU is {device_cc()}")
    tiles = pairs_and_twins(lib, dtype)
    assert tiles, f"no sample-sharing tile takes {dtype}"
    seed = f"(seed {core_quant.SESSION_SEED})"
    ran: set[str] = set()
    wrong: list[str] = []
    for case in PAIR_CASES:
        if dtype in core_quant.QUANT:
            inputs = core_quant.make_inputs(case, dtype, "float16")
        else:
            inputs = make_inputs(case, dtype, str(core_quant.SESSION_SEED))
        for pair, twin in tiles:
            for path in PATHS:
                where = f"{case.name} {pair.name} channel_last={path[0]}"
                try:
                    out = run(lib, case, dtype, inputs, pair.index, path)
                except UnsupportedNodeError as exc:
                    assert "channel tiles in pairs" in str(exc), f"{where}: {exc}"
                    assert -(-case.cout // pair.bm) % 2 != 0, f"{where}: refused an even tile count: {exc}"
                    continue
                except AssertionError as exc:  # unwritten outputs, stores past the end
                    wrong.append(f"{where}: {exc}")
                    continue
                ran.add(pair.name)
                expect = run(lib, case, dtype, inputs, twin.index, path)
                differ = int((out != expect).sum())
                if differ:
                    wrong.append(f"{where}: {differ} of {out.size} outputs differ from {twin.name}'s")
    assert not wrong, f"{seed}\n" + "\n".join(wrong)
    every = {pair.name for pair, _ in tiles}
    assert ran == every, f"pairs that ran no case: {sorted(every - ran)}"
