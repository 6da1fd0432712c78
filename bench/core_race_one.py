"""One fused-kernel run of one test case with one forced tile, for compute-sanitizer (racecheck):

    compute-sanitizer --tool racecheck --print-limit 3 python3 bench/core_race_one.py 9 float32 nonsquare_all

Arguments: tile index (``ALGO_FUSED_TILE + tile``), dtype (float32, float16, bfloat16) and a case
name from tests/test_core_gpu.py (CASES) or tests/test_core_gpu_fused.py (FUSED_CASES). CuPy's
memory pool is off so that every tensor is its own allocation. Prints the max |out - ref|.
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
    from test_core_gpu import CASES, ensure_core_built, inputs_refs, run_core
    from test_core_gpu_fused import FUSED_CASES

    from dcnconvert import _core_ctypes as core

    ap = argparse.ArgumentParser()
    ap.add_argument("tile", type=int)
    ap.add_argument("dtype", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("case", choices=[c.name for c in CASES + FUSED_CASES])
    args = ap.parse_args()
    lib = core.load(ensure_core_built())
    case = next(c for c in CASES + FUSED_CASES if c.name == args.case)
    inputs, ref, _ = inputs_refs(case, args.dtype)
    out = run_core(lib, case, args.dtype, inputs, core.ALGO_FUSED_TILE + args.tile)
    print(f"tile {args.tile} {args.dtype} {args.case}: max |out - ref| = {float(abs(out - ref).max()):.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
