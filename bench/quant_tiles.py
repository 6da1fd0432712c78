"""Forced-tile timings of the benchmark layers in INT8 and FP8 (and FP16 beside them), engine path,
with one core library or several side by side: the data behind the 8-bit cost columns of
plugin_src/core/dcnFusedTiles.h, and A/B runs of a changed core against another build.

    python3 bench/quant_tiles.py --shapes r50-c4,bev-c4 --precisions int8,fp8e4m3 \\
        --tiles auto,wg-256x64-q8,wg-128x64-q8 --splits 1,2,4 \\
        --lib a=build-a/libdcnconvert_core.so --lib b=build/libdcnconvert_core.so

Layers and inputs as bench/dcn_bench.py makes them (bench_shapes.SHAPES; quantized: x per tensor and
weights per output channel from the FP32 draws, FP16 offset, mask, bias and output). Per call: a
CUDA graph of one call per buffer set, replayed --reps times, median / sets (bench/fused_tiles.py's
graph_time_us). `auto` is AUTO (quantized) or the fused kernel's own choice (float); a tile that
cannot run a layer or split prints n/a with the library's reason.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "tests", REPO / "bench"):
    sys.path.insert(0, str(_p))

import bench_shapes as bs  # noqa: E402
from support import core, core_fused  # noqa: E402

SPLIT_REDUCE = {
    "auto": core.SPLIT_REDUCE_AUTO,
    "kernel": core.SPLIT_REDUCE_KERNEL,
    "cluster": core.SPLIT_REDUCE_CLUSTER,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="r50-c4,r50-c5,bev-c4,dbnet-c4",
                    help="bench_shapes names (comma-separated)")
    ap.add_argument("--precisions", default="int8,fp8e4m3", help="int8, fp8e4m3, fp16 (comma-separated)")
    ap.add_argument("--tiles", default="auto", help="tile names and/or auto, comma-separated")
    ap.add_argument("--splits", default="1", help="K split counts to force on each named tile")
    ap.add_argument("--lib", action="append", default=[], metavar="LABEL=PATH",
                    help="a core library to time (repeat for A/B; default: build/, built if stale)")
    ap.add_argument("--sets", type=int, default=16,
                    help="buffer sets per graph (16 exceed an H100's 50 MB L2 from R50-c4 up; "
                         "smaller layers stay in it)")
    ap.add_argument("--reps", type=int, default=30, help="graph replays per timing")
    ap.add_argument("--split-reduce", choices=sorted(SPLIT_REDUCE), default="auto")
    args = ap.parse_args(argv)
    args.libs = []
    for item in args.lib:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            ap.error(f"--lib {item!r}: expected LABEL=PATH")
        args.libs.append((label, path))
    known = {s.name for s in bs.SHAPES}
    bad = [s for s in args.shapes.split(",") if s not in known]
    if bad:
        ap.error(f"--shapes: unknown {bad}; known: {sorted(known)}")
    precs = {p.name for p in bs.PRECISIONS}
    bad = [p for p in args.precisions.split(",") if p not in precs]
    if bad:
        ap.error(f"--precisions: unknown {bad}; known: {sorted(precs)}")
    args.split_counts = [int(v) for v in args.splits.split(",")]
    return args


def algo_for(tile: str, split: int, names: list[str], quantized: bool) -> int | None:
    """The DcnParams.algo of `tile` (a name, or auto) forced to `split` ways; None where there is
    none (auto takes its own split; a name the library lacks)."""
    if tile == "auto":
        return (core.ALGO_AUTO if quantized else core.ALGO_FUSED) if split == 1 else None
    if tile not in names:
        return None
    return core_fused.fused_algo(names.index(tile), split)


def refusal(exc: Exception, width: int = 90) -> str:
    """The library's reason in a table cell: its first line without the status name and the
    "fused kernel (tile N, S K splits): " prefix that every refusal of a forced tile repeats."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    line = re.sub(r"^kDCN_[A-Z_]+: ", "", line)
    line = re.sub(r"^fused kernel \(tile \d+, \d+ K splits?\): ", "", line)
    return line if len(line) <= width else line[: width - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import cupy
    import dcn_bench_gpu as gpu
    import dcn_bench_quant as quant
    from fused_tiles import graph_time_us
    from support.core_cases import ensure_core_built

    libs = [(label, core.load(path)) for label, path in (args.libs or [("core", str(ensure_core_built()))])]
    for _, lib in libs:
        if args.split_reduce != "auto":
            core.set_split_reduce(SPLIT_REDUCE[args.split_reduce], lib)
    names = [t.name for t in core_fused.tile_infos(libs[0][1])]

    def time_one(lib, label: str, shape, prec, sets: list[dict], algo: int) -> str:
        """µs per call of `algo` on `lib` (7.2f), or n/a and the library's reason."""
        try:
            launch = _launcher(gpu, quant, cupy, lib, label, shape, prec, sets, algo)
            return f"{graph_time_us(launch, len(sets), args.reps):7.2f}"
        except Exception as exc:  # noqa: BLE001 - a tile or split the layer cannot take: shown, not fatal
            return f"n/a ({refusal(exc)})"

    shapes = {s.name: s for s in bs.SHAPES}
    precs = {p.name: p for p in bs.PRECISIONS}
    for sname in args.shapes.split(","):
        shape = shapes[sname]
        for pname in args.precisions.split(","):
            prec = precs[pname]
            if prec.quant:
                sets = quant.make_sets(gpu, shape, prec, 11, args.sets)
            else:
                sets = [gpu.make_set(shape, prec, 11 + i) for i in range(args.sets)]
            for tile in args.tiles.split(","):
                for split in args.split_counts:
                    algo = algo_for(tile, split, names, bool(prec.quant))
                    if algo is None:
                        continue
                    cells = [f"{lb} {time_one(lib, lb, shape, prec, sets, algo)}" for lb, lib in libs]
                    print(f"{sname:14s} {pname:8s} {tile:18s} s{split}  " + "  ".join(cells), flush=True)
    return 0


def _launcher(gpu, quant, cupy, lib, label: str, shape, prec, sets: list[dict], algo: int):
    """launch(i): one forward of `algo` on buffer set i, engine path (x channel-last, weights
    prepared once per set and library, outside the timed calls)."""
    if not prec.quant:
        call = gpu.core_impl(lib, shape, prec, algo, engine=True)
        for st in sets:  # prepared again for this tile's chunk layout
            st.pop("x_nhwc", None)
        return lambda i: call(sets[i])
    x_scale = sets[0]["x_scale"]
    p = quant.params(gpu, shape, prec, x_scale, engine=True)
    p.algo = algo
    status, msg = core.validate(p, lib)
    if status != core.SUCCESS:
        raise RuntimeError(msg)
    need = core.workspace_size(p, lib)
    ws = cupy.empty((need,), dtype=cupy.uint8) if need else None
    oihw = quant.params(gpu, shape, prec, x_scale, engine=False)
    # AUTO's parameters prepare the weights, whichever tile runs; per library, as a changed core may
    # prepare them differently.
    key = "prepared_" + label
    for st in sets:
        st.setdefault("x_nhwc", cupy.ascontiguousarray(st["x"].transpose(0, 2, 3, 1)))
        if key not in st:
            st[key] = core.prepare_weights(oihw, quant.packed_weights(oihw, st, lib), lib)

    def launch(i: int) -> None:
        st = sets[i]
        core.forward(p, st["x_nhwc"], st["offset"], st["mask"], st[key], st["bias"], st["out"], workspace=ws,
                     lib=lib, check=False)

    return launch


if __name__ == "__main__":
    sys.exit(main())
