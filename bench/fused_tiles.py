"""Times every tile configuration of the fused kernel (and AUTO's choice, the simple kernel) on the
benchmark shapes: the data behind the automatic tile choice in plugin_src/core/dcnFusedCost.cu.

    python3 bench/fused_tiles.py [--dtypes float16,float32,tf32] [--shapes NAME,...] [--reps 30]
                                 [--tiles wg-256x64-p16,tma-128x32-k64-p8] [--splits 1,2,4,8] [--engine]

Per-call device time: a CUDA graph of R calls rotating over input sets larger than 2x the L2,
replayed after a warm-up, median over replays / R. Inputs: x ~ N(0,1), offsets ~ N(0,2),
mask ~ U(0,1), weights ~ N(0,1)/sqrt(fan-in). Prints one line per shape, precision and K split
count (``float16/s4``: every tile forced to 4 splits; n/a where a tile cannot split that way).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support import (
    core,  # noqa: E402
    core_fused,  # noqa: E402
)
from support.core_cases import ensure_core_built  # noqa: E402

# name: (n, c, h, w, cout, stride[, kernel, deformable groups]); 3x3 and one deformable group
# unless given; padding kernel // 2
SHAPES = {
    "R50-c3": (1, 128, 100, 168, 128, 1),
    "R50-c3-s2": (1, 128, 200, 336, 128, 2),
    "R50-c4": (1, 256, 50, 84, 256, 1),
    "R50-c5": (1, 512, 25, 42, 512, 1),
    "BEV-c4": (6, 256, 58, 100, 256, 1),
    "CenterNet-64": (1, 64, 128, 128, 64, 1),
    "DBNet-c4": (1, 256, 64, 114, 256, 1),
    "DLA-ida0-proj": (1, 512, 16, 16, 256, 1),
    "OCD-l4": (1, 512, 23, 40, 512, 1),
    "DBNet-c5": (1, 512, 32, 57, 512, 1),
    "DLA-ida2-proj": (1, 128, 64, 64, 64, 1),
    "DLA-ida0-node": (1, 256, 32, 32, 256, 1),
    "DLA-ida1-proj": (1, 256, 32, 32, 128, 1),
    "DLA-ida1-node": (1, 128, 64, 64, 128, 1),
    "DLA-up-proj": (1, 256, 32, 32, 64, 1),
    # R50-c5 at batch 8: 512 output channels over more than one wave of unsplit blocks (the
    # sample-sharing tile's cost column against wg-256x64-p16 where K is not split)
    "R50-c5-b8": (8, 512, 25, 42, 512, 1),
    # 5x5 with several deformable groups, where the 16-producer tiles' plans do not fit and an H200
    # runs wg-256x64-2wg
    "K5-dg8": (1, 1024, 108, 134, 256, 1, 5, 8),
    "K5-dg2": (2, 256, 61, 159, 1024, 1, 5, 2),
}
SPLIT_REDUCE = {
    "auto": core.SPLIT_REDUCE_AUTO,
    "kernel": core.SPLIT_REDUCE_KERNEL,
    "cluster": core.SPLIT_REDUCE_CLUSTER,
}
PRECISIONS = {  # name: (dtype code, math)
    "float16": (core.FLOAT16, core.MATH_ACCURATE),
    "bfloat16": (core.BFLOAT16, core.MATH_ACCURATE),
    "float32": (core.FLOAT32, core.MATH_ACCURATE),
    "tf32": (core.FLOAT32, core.MATH_TF32),
}


def graph_time_us(launch, sets: int, reps: int) -> float:
    """Median per-call µs of ``launch(i)`` for i over ``sets`` buffer sets, via CUDA graph replay."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for i in range(sets):
            launch(i)
        stream.synchronize()
        stream.begin_capture()
        for i in range(sets):
            launch(i)
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        times = []
        for _ in range(reps):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3 / sets)
    return float(np.median(times))


def main() -> int:
    import cupy

    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="float16,bfloat16,float32,tf32")
    # default: the benchmark's 3x3 shapes (the data of the cost weights), not the 5x5 ones
    ap.add_argument("--shapes", default=",".join(k for k, v in SHAPES.items() if len(v) == 6))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--simple", action="store_true", help="time the simple kernel too")
    ap.add_argument("--offset-scale", type=float, default=2.0, help="offsets ~ N(0, scale)")
    ap.add_argument("--lib", default=None, help="core library (default: build/, built if stale)")
    ap.add_argument("--tiles", default=None, help="tiles to time, by name or index (default: all)")
    ap.add_argument("--splits", default="1", help="K split counts to force on every tile")
    ap.add_argument("--engine", action="store_true",
                    help="x channel-last and the weights prepared once, as a TensorRT engine with constant "
                         "weights runs the plugin (no prep pass)")
    ap.add_argument("--split-reduce", choices=sorted(SPLIT_REDUCE), default="auto",
                    help="how K splits add up: auto (clusters where they pay), kernel (the reduction "
                         "kernel), cluster (clusters; a launch that cannot use them fails)")
    args = ap.parse_args()
    lib = core.load(args.lib or ensure_core_built())
    if args.split_reduce != "auto":
        core.set_split_reduce(SPLIT_REDUCE[args.split_reduce], lib)
    tiles = core_fused.fused_tile_count(lib)
    tile_ids = core_fused.tile_indices(args.tiles, lib) if args.tiles else list(range(tiles))
    names = [t.name for t in core_fused.tile_infos(lib)]
    print("tiles: " + ", ".join(f"t{t} = {names[t]}" for t in tile_ids))
    split_counts = [int(v) for v in args.splits.split(",")]
    l2 = cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    rs = cupy.random.RandomState(11)
    print(
        f"{'shape':14s} {'prec':9s} "
        + " ".join(f"{'t' + str(t):>7s}" for t in tile_ids)
        + f" {'auto':>7s} {'simple':>7s}  best  TFLOP/s(auto)"
    )
    for name in args.shapes.split(","):
        n, c, h, w, cout, s, ks, dg = (*SHAPES[name], 3, 1)[:8]
        kk, pad = ks * ks, ks // 2
        ho, wo = (h + 2 * pad - ks) // s + 1, (w + 2 * pad - ks) // s + 1
        flop = 2.0 * n * cout * ho * wo * c * kk
        for prec in args.dtypes.split(","):
            code, math = PRECISIONS[prec]
            esize = 4 if code == core.FLOAT32 else 2
            per_set = (n * c * h * w + n * 3 * dg * kk * ho * wo + n * cout * ho * wo) * esize
            sets = max(2, int(2 * l2 // per_set) + 1)
            bufs = []
            for _ in range(sets):
                x = rs.standard_normal((n, c, h, w), dtype=cupy.float32)
                o = rs.standard_normal((n, 2 * dg * kk, ho, wo), dtype=cupy.float32) * args.offset_scale
                m = rs.uniform(0, 1, (n, dg * kk, ho, wo), dtype=cupy.float32)
                if code == core.FLOAT16:
                    cast = lambda a: a.astype(cupy.float16)  # noqa: E731
                elif code == core.BFLOAT16:
                    cast = lambda a: (a.view(cupy.uint32) >> 16).astype(cupy.uint16)  # noqa: E731
                else:
                    cast = lambda a: a  # noqa: E731
                out = cupy.empty((n, cout, ho, wo), dtype=cupy.float32 if esize == 4 else cupy.uint16)
                bufs.append((cast(x), cast(o), cast(m), out))
            wt = cast(rs.standard_normal((cout, c, ks, ks), dtype=cupy.float32) / np.sqrt(c * kk))
            bias = cast(rs.standard_normal((cout,), dtype=cupy.float32))
            row = []

            p_auto = core.make_params(
                (n, c, h, w),
                (cout, c, ks, ks),
                stride=(s, s),
                padding=(pad, pad),
                deformable_group=dg,
                with_bias=True,
                dtype=code,
                math=math,
            )
            if args.engine:
                wt = core.prepare_weights(p_auto, wt, lib)
                p_auto.xLayout = core.LAYOUT_NHWC
                p_auto.weightLayout = core.WEIGHT_PREPARED
                bufs = [(cupy.ascontiguousarray(b[0].transpose(0, 2, 3, 1)), *b[1:]) for b in bufs]
            ws = cupy.empty((max(1, core.workspace_size(p_auto, lib)),), dtype=cupy.uint8)

            def timed(algo: int, params=p_auto, bufs=bufs, wt=wt, bias=bias, ws=ws, sets=sets) -> float:
                pa = core.DcnParams.from_buffer_copy(params)
                pa.algo = algo
                try:
                    core.forward(pa, *bufs[0][:3], wt, bias, bufs[0][3], workspace=ws, lib=lib, check=False)
                except Exception:  # noqa: BLE001 - unsupported tile: shown as n/a
                    return float("nan")
                return graph_time_us(
                    lambda i: core.forward(
                        pa, *bufs[i][:3], wt, bias, bufs[i][3], workspace=ws, lib=lib, check=False
                    ),
                    sets,
                    args.reps,
                )

            auto = timed(core.ALGO_AUTO)
            simple = timed(core.ALGO_SIMPLE) if args.simple else float("nan")
            for k in split_counts:
                row = [timed(core_fused.fused_algo(t, k)) for t in tile_ids]
                best = tile_ids[int(np.nanargmin(row))] if not np.all(np.isnan(row)) else -1
                label = prec if k == 1 else f"{prec}/s{k}"
                print(
                    f"{name:14s} {label:9s} "
                    + " ".join(f"{v:7.1f}" for v in row)
                    + f" {auto:7.1f} {simple:7.1f}  t{best}  {flop / auto / 1e6:7.1f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
