"""Small driver for compute-sanitizer over the CUDA core (memcheck, racecheck, ...).

Runs a reduced version of the GPU test grid (tests/test_core_gpu.py) with CuPy's memory pool
switched off, so every tensor is its own cudaMalloc and an access one element past any of them is
caught. Checks each output against the float64 reference as well.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 bench/core_sanitize.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import cupy

cupy.cuda.set_allocator(None)  # exact-size allocations: no pool hiding out-of-bounds accesses

from support import core, core_fused
from support.core_cases import (
    CASES,
    DTYPES,
    check_close,
    ensure_core_built,
    expect_fused,
    inputs_refs,
    run_core,
)

from dcnconvert.errors import UnsupportedNodeError

# Small cases covering: 1x1 spatial, groups/deformable groups, non-square everything, 5x5, 1x3,
# far-outside offsets, exact borders, partial channel and pixel tiles, K not a multiple of 16.
NAMES = (
    "spatial1x1",
    "spatial1x1_k3_pad1",
    "g2_dg2_k3",
    "nonsquare_all",
    "k5_nonsquare",
    "k1x3",
    "far_outside",
    "edges_exact",
    "cout70_k27",
    "cout128_tiles",
    "cg1_k5_g4",
    "pad_bigger_than_input",
    "k1_s2_dg2",
    "rand0",
    "rand1",
)


def main() -> int:
    lib = core.load(ensure_core_built())
    cases = [c for c in CASES if c.name in NAMES]
    start = time.time()
    runs = 0
    for case in cases:
        for dtype in DTYPES:
            inputs, ref, absref = inputs_refs(case, dtype)
            for algo in (core.ALGO_AUTO, core.ALGO_SIMPLE):
                out = run_core(lib, case, dtype, inputs, algo)
                fused16 = dtype != "float32" and expect_fused(case, dtype, algo)
                check_close(out, ref, dtype, absref if fused16 else None)
                runs += 1
    # The fused kernels on their own grid (channel-vectorised tiles included), every tile once;
    # SANITIZE_FUSED_TILES=<names or indices, comma-separated> limits the tiles (racecheck is slow
    # on the large shared tiles).
    import os

    from test_core_gpu_fused import FUSED_CASES

    wanted = os.environ.get("SANITIZE_FUSED_TILES")
    tiles = core_fused.tile_indices(wanted, lib) if wanted else list(range(core_fused.fused_tile_count(lib)))
    for case in FUSED_CASES:
        for dtype in DTYPES:
            inputs, ref, absref = inputs_refs(case, dtype)
            for tile in tiles:
                try:
                    out = run_core(lib, case, dtype, inputs, core.ALGO_FUSED_TILE + tile)
                except UnsupportedNodeError:
                    continue
                check_close(out, ref, dtype, absref if dtype != "float32" else None)
                runs += 1
    # Split-K: every tile that splits K and takes the element type on this device (the library's
    # tile table, as tests/test_core_gpu_split.py reads it; SANITIZE_FUSED_TILES limits them), at
    # 2, 3 or 4 splits in turn (partial sums and the reduction kernel, or AUTO's clusters).
    from test_core_gpu_split import NOT_THIS_CASE, SPLIT_CASES, split_tiles_for

    for case in SPLIT_CASES:
        for dtype in DTYPES:
            inputs, ref, absref = inputs_refs(case, dtype)
            split_tiles = [t for t in split_tiles_for(lib, dtype) if not wanted or t in tiles]
            for i, tile in enumerate(split_tiles):
                splits = 2 + i % 3
                try:
                    out = run_core(lib, case, dtype, inputs, core_fused.fused_algo(tile, splits))
                except UnsupportedNodeError as exc:
                    if NOT_THIS_CASE in str(exc):
                        continue  # the sample-sharing tile on a case of one channel tile
                    raise
                check_close(out, ref, dtype, absref if dtype != "float32" else None)
                runs += 1
    print(
        f"core_sanitize: {runs} runs ({len(cases)} cases x {len(DTYPES)} dtypes x auto/simple) OK "
        f"in {time.time() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
