"""One fused-kernel run of one test case with one forced tile, for compute-sanitizer (racecheck):

    compute-sanitizer --tool racecheck --print-limit 3 \
        python3 bench/core_race_one.py regs-128x64 float32 nonsquare_all
    compute-sanitizer --tool racecheck \
        python3 bench/core_race_one.py wg-256x64-p16 float16 s_c256_dg2 --splits 4

Arguments: the tile's name (``dcnFusedTileInfo``) or index (``ALGO_FUSED_TILE + index``), dtype
(float32, float16, bfloat16), a case name from tests/test_core_gpu.py (CASES),
tests/test_core_gpu_fused.py (FUSED_CASES) or tests/test_core_gpu_split.py (SPLIT_CASES), and
optionally the K splits (``--tf32``: float32 in TF32 mode). CuPy's memory pool is off so that
every tensor is its own allocation. Prints the max |out - ref|.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


def main() -> int:
    import cupy

    cupy.cuda.set_allocator(None)
    from support import core, core_fused
    from support.core_cases import CASES, ensure_core_built, inputs_refs, run_core
    from test_core_gpu_fused import FUSED_CASES
    from test_core_gpu_split import SPLIT_CASES

    ap = argparse.ArgumentParser()
    ap.add_argument("tile", help="tile name (e.g. wg-256x64-p16) or index")
    ap.add_argument("dtype", choices=["float32", "float16", "bfloat16"])
    cases = CASES + FUSED_CASES + SPLIT_CASES
    ap.add_argument("case", choices=[c.name for c in cases])
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--tf32", action="store_true", help="float32 in the opt-in TF32 mode (default: 3xTF32)")
    modes = {
        "auto": core.SPLIT_REDUCE_AUTO,
        "kernel": core.SPLIT_REDUCE_KERNEL,
        "cluster": core.SPLIT_REDUCE_CLUSTER,
    }
    ap.add_argument("--split-reduce", choices=sorted(modes), default="auto", help="dcnSetSplitReduce mode")
    ap.add_argument(
        "--engine", action="store_true", help="x channel-last and the weights prepared, as an engine runs"
    )
    args = ap.parse_args()
    lib = core.load(ensure_core_built())
    core.set_split_reduce(modes[args.split_reduce], lib)
    (tile,) = core_fused.tile_indices(args.tile, lib)
    case = next(c for c in cases if c.name == args.case)
    inputs, ref, _ = inputs_refs(case, args.dtype)
    math = core.MATH_TF32 if args.tf32 else core.MATH_ACCURATE
    algo = core_fused.fused_algo(tile, args.splits)
    path = dict(channel_last=args.engine, prepared=args.engine)
    out = run_core(lib, case, args.dtype, inputs, algo, math=math, **path)
    err = float(abs(out - ref).max())
    print(
        f"tile {args.tile} ({tile}) {args.dtype} {args.case} {args.splits} splits "
        f"({args.split_reduce}{' engine' * args.engine}): "
        f"max |out - ref| = {err:.3e}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
