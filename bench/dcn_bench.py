"""DCNv2 forward benchmark: our fused kernel (both paths: x NCHW with a prep pass, and the engine path
with x channel-last and weights prepared once), our simple kernel, an im2col + cuBLAS
baseline that follows TensorRT's built-in plugin (bench/baseline/) and torchvision, on the real
layer shapes of dcn_perf.md §3, in FP32 (accurate), TF32 (fused only), FP16 and BF16, and on
request INT8 and FP8 E4M3 (quantized layers: the engine path only; dcn_bench_quant.py).

    python3 bench/dcn_bench.py [--shapes 'r50-*,bev-c4'] [--precisions fp16,bf16] [--quick] [--tiles]
    TOTAL_LIMIT=540 bash bench/dcn_bench.sh --tiles    # on the GPU machine: builds, then this script
    python3 bench/dcn_bench.py --impls fused-engine --precisions fp16,int8,fp8e4m3   # issue 40's table

Every implementation sees the same random inputs (dcn_bench_gpu.py says which distributions).
Time per call is device time: the calls of one measurement rotate among buffer sets that together
exceed 2x the L2, are captured in one CUDA graph (CuPy stream capture; torch.cuda.CUDAGraph for
torchvision) and replayed; the median over replays divided by the calls per graph is reported.
Where a capture fails, the calls run back to back between two events and the row's method says
"events". Accuracy: max|out - ref| / max|ref| and relative L2 against torchvision in float64 on
the same rounded inputs; a quantized row also against the bound of the float64 Q/DQ model. The
tensor-core peaks come from a torch matmul per precision (8192^3, random data; dcn_bench_peak.py).
--tiles adds a second pass (after every shape's main rows) timing each fused tile configuration.

Writes results.json (written again after every shape) and results.md to --out (default $OUT, else
build/dcn_bench/), prints the short table and the acceptance bars last. bench/dcn_bench_plot.py
turns the JSON into a plot and the tables page docs/benchmarks.md reads. Unsupported or failing
implementations become rows with a status; the run goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))  # tests/support: the core binding

import bench_shapes as bs
import dcn_bench_peak as peaks
import dcn_bench_quant as quant
import dcn_bench_quant_report as quant_report
import dcn_bench_report as report
from dcn_bench_env import DEFAULT_BASELINE, environment, load_libs
from support import core

BUDGETS = {  # seconds of timed replays per measurement, replay count bounds, warm-up replays
    "full": {"seconds": 0.25, "lo": 10, "hi": 200, "warmup": 2},
    "tiles": {"seconds": 0.06, "lo": 5, "hi": 50, "warmup": 1},
    "quick": {"seconds": 0.01, "lo": 3, "hi": 5, "warmup": 1},
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--shapes",
        default="",
        help="comma-separated names or globs (default all): " + ", ".join(s.name for s in bs.SHAPES),
    )
    p.add_argument(
        "--precisions",
        default="",
        help="comma-separated subset of " + ",".join(q.name for q in bs.PRECISIONS) + " (default "
        + bs.DEFAULT_PRECISIONS + "; int8 and fp8e4m3 run the fused-engine rows only)",
    )
    p.add_argument(
        "--impls", default="", help="comma-separated subset of " + ",".join(bs.IMPLS) + " (default all)"
    )
    p.add_argument("--quick", action="store_true", help="few replays and a 4096^3 peak matmul (smoke test)")
    p.add_argument("--tiles", action="store_true", help="also time every fused tile configuration per shape")
    p.add_argument("--lib", default=None, help="core library (default $DCNCONVERT_CORE_LIB or build/)")
    p.add_argument(
        "--baseline-lib", default=str(DEFAULT_BASELINE), help="the im2col + cuBLAS baseline library"
    )
    p.add_argument(
        "--no-build", action="store_true", help="do not run make core / build.sh when a library is missing"
    )
    p.add_argument("--out", default=None, help="output folder (default $OUT, else build/dcn_bench)")
    p.add_argument("--budget", type=float, default=None, help="seconds of timed replays per measurement")
    p.add_argument("--l2-factor", type=float, default=2.0, help="buffer sets total more than this x L2")
    p.add_argument("--min-calls", type=int, default=16, help="at least this many calls per graph")
    p.add_argument("--no-peak", action="store_true", help="skip the matmul peak measurement")
    p.add_argument("--seed", type=int, default=20261130)
    p.add_argument(
        "--split-reduce",
        choices=["auto", "kernel", "cluster"],
        default="auto",
        help="how the fused kernel adds up K splits (dcnSetSplitReduce): auto (thread-block clusters where "
        "they pay, else the reduction kernel), kernel (always the reduction kernel), cluster (always "
        "clusters; a split launch that cannot use them fails)",
    )
    p.add_argument(
        "--time-limit", type=float, default=0, help="start no further shape after this many seconds (0: none)"
    )
    return p


class _Impl:
    """An implementation name in the shape bs.select() expects."""

    def __init__(self, name: str) -> None:
        self.name = name


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and resolve the selections (``shape_list``, ``precision_list``, ``impl_list``, ``out_dir``)
    and say what a selection leaves out (``not_run``: the quantized precisions' other implementations
    and tile sweep)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.shape_list = bs.select(bs.SHAPES, args.shapes, "shape")
        args.precision_list = bs.select(bs.PRECISIONS, args.precisions or bs.DEFAULT_PRECISIONS, "precision")
        impls = bs.select(tuple(_Impl(n) for n in bs.IMPLS), args.impls, "implementation")
    except ValueError as exc:
        parser.error(str(exc))
    args.impl_list = [i.name for i in impls]
    args.not_run = []
    quantized = [p.name for p in args.precision_list if p.quant]
    if quantized:
        names = ", ".join(quantized)
        others = [i for i in args.impl_list if i != "fused-engine"]
        if others:
            args.not_run.append(
                f"{names} with {', '.join(others)}: only the engine path of the core (fused-engine) takes "
                "8-bit x and weights (x channel-last, weights prepared once)"
            )
        if "fused-engine" not in args.impl_list:
            args.not_run.append(f"{names}: no selected implementation runs them (fused-engine does)")
        if args.tiles:
            args.not_run.append(f"{names}: the tile sweep (--tiles) times the float precisions only")
    args.out_dir = Path(args.out or os.environ.get("OUT") or REPO / "build" / "dcn_bench")
    budget = dict(BUDGETS["quick" if args.quick else "full"])
    if args.budget is not None:
        if args.budget <= 0:
            parser.error("--budget must be positive")
        budget["seconds"] = args.budget
    args.budget_main, args.budget_tiles = budget, BUDGETS["quick" if args.quick else "tiles"]
    return args


def _row(shape, prec, impl: str, **kw) -> dict:
    return {"shape": shape.name, "precision": prec.name, "impl": impl, **kw}


def measure(gpu, make_call, shape, prec, impl: str, sets, ref, calls, budget, peak) -> dict:
    """Eager call on set 0 (accuracy), then timing; any failure becomes the row's status."""
    import cupy

    try:
        call = make_call()
        if impl == "torchvision":
            tsets = gpu.torch_sets(sets, prec)
            out = call(tsets[0])
            out64 = cupy.asarray(out.double())
        else:
            gpu.poison(sets[0]["out"], prec)
            cupy.cuda.runtime.deviceSynchronize()
            with cupy.cuda.Stream(non_blocking=True) as s:
                call(sets[0])
                s.synchronize()
            out64 = gpu.to_float(sets[0]["out"], prec)
        acc = {} if ref is None else quant.errors(gpu, out64, ref) if prec.quant else gpu.errors(out64, ref)
        del out64
        if impl == "torchvision":
            t = gpu.time_torch(call, tsets, calls, budget)
        else:
            t = gpu.time_cupy(call, sets, calls, budget)
    except gpu.ImplError as exc:
        gpu.clear_cuda_error()
        return _row(shape, prec, impl, status=exc.status, message=str(exc)[:500])
    except Exception as exc:  # noqa: BLE001 - one failing implementation must not end the run
        gpu.clear_cuda_error()
        status = "n/a" if impl == "torchvision" and prec.name == "bf16" else "error"
        msg = f"{type(exc).__name__}: {exc}"
        if status == "error":
            msg += " | " + traceback.format_exc(limit=3).replace("\n", " ")[-300:]
        return _row(shape, prec, impl, status=status, message=msg[:800])
    tf = bs.tflops(shape.flop, t["us"])
    pk = peak.get(prec.name)
    return _row(
        shape,
        prec,
        impl,
        status="ok",
        tflops=tf,
        frac_peak=(tf / pk if tf and pk else None),
        sets=len(sets),
        **acc,
        **t,
    )


def run_shape(gpu, args, libs, shape, peak, l2: int, result: dict, tiles: bool = False) -> None:
    """All precisions of one shape: the implementations (``tiles=False``) or the fused tile sweep."""
    import cupy

    for prec in args.precision_list:
        if tiles and ("fused" not in prec.impls or "fused" not in args.impl_list):
            continue
        if not any(i in args.impl_list for i in prec.impls):
            continue
        t0 = time.perf_counter()
        nsets = bs.buffer_sets(prec.set_bytes(shape), l2, factor=args.l2_factor)
        calls = bs.calls_per_graph(nsets, args.min_calls)
        seed = args.seed + zlib.crc32(shape.name.encode()) % 100000 * 1000
        sets, ref = None, None
        try:
            if prec.quant:
                sets = quant.make_sets(gpu, shape, prec, seed, nsets)
                ref = quant.reference(gpu, shape, prec, sets[0])
            else:
                sets = [gpu.make_set(shape, prec, seed + i) for i in range(nsets)]
                ref = gpu.reference(shape, prec, sets[0])
        except Exception as exc:  # noqa: BLE001 - without a reference the rows carry no error
            print(
                f"[{shape.name} {prec.name}] inputs/reference failed: {type(exc).__name__}: {exc}", flush=True
            )
            if sets is None:
                continue
        cupy.cuda.runtime.deviceSynchronize()  # the sets were made on the legacy stream
        if tiles:
            count = libs["core"].dcnFusedTileCount() if "tile_count_error" not in libs else 0
            for i in range(count):
                make = lambda i=i, p=prec: gpu.core_impl(libs["core"], shape, p, core.ALGO_FUSED_TILE + i)  # noqa: E731
                row = measure(gpu, make, shape, prec, "fused", sets, ref, calls, args.budget_tiles, peak)
                row["tile"] = i
                result["tiles"].append(row)
                print(f"{_progress(row)} tile {i}", flush=True)
        else:
            x_scale = sets[0].get("x_scale", 1.0)  # quantized sets: x's scale, the same in every set
            factories = {
                "fused": lambda p=prec: gpu.core_impl(libs["core"], shape, p, core.ALGO_FUSED),
                "fused-engine": lambda p=prec, xs=x_scale: (
                    quant.core_impl(gpu, libs["core"], shape, p, xs)
                    if p.quant
                    else gpu.core_impl(libs["core"], shape, p, core.ALGO_FUSED, engine=True)
                ),
                "simple": lambda p=prec: gpu.core_impl(libs["core"], shape, p, core.ALGO_SIMPLE),
                "baseline": lambda p=prec: gpu.baseline_impl(libs["baseline"], shape, p),
                "torchvision": lambda: gpu.torchvision_impl(shape),
            }
            for impl in prec.impls:
                if impl not in args.impl_list:
                    continue
                libs_of = {"fused": "core", "fused-engine": "core", "simple": "core", "baseline": "baseline"}
                lib_key = libs_of.get(impl)
                if lib_key and libs[lib_key] is None:
                    msg = f"no {lib_key} library: " + libs["errors"].get(lib_key, "?")
                    row = _row(shape, prec, impl, status="error", message=msg)
                else:
                    row = measure(
                        gpu, factories[impl], shape, prec, impl, sets, ref, calls, args.budget_main, peak
                    )
                if impl == "fused-engine" and libs["core"] is not None:  # what AUTO runs there
                    p = quant.engine_params(gpu, shape, prec, x_scale)
                    row["auto"] = quant.auto_name(libs["core"], p, result["meta"])
                result["rows"].append(row)
                print(_progress(row), flush=True)
        del sets, ref
        cupy.get_default_memory_pool().free_all_blocks()
        _free_torch()
        took = time.perf_counter() - t0
        print(f"[{shape.name} {prec.name}] {nsets} sets x {calls} calls/graph, {took:.1f}s", flush=True)


def _free_torch() -> None:
    try:
        import torch

        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass


def _progress(row: dict) -> str:
    head = f"  {row['shape']:14s} {row['precision']:5s} {row['impl']:12s}"
    if row["status"] != "ok":
        return f"{head} {row['status']}: {row.get('message', '')[:160]}"
    err, over = row.get("max_rel_err"), row.get("err_over_bound")
    text = f"{head} {row['us']:10.2f} us {row['method']:11s} err {err if err is None else f'{err:.2e}'}"
    return text + ("" if over is None else f" ({over:.2f} of the Q/DQ bound)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    try:
        import cupy
    except ImportError as exc:
        print(f"error: the benchmark needs CuPy and a CUDA GPU ({exc})", file=sys.stderr)
        return 4
    import dcn_bench_gpu as gpu

    try:  # torch first: its libcublas is then the one the baseline library binds to
        import torch  # noqa: F401
    except ImportError:
        print("[env] torch is not importable: no torchvision rows, no reference, no peak", flush=True)
    libs = load_libs(args)
    result = {"meta": environment(args, libs), "peak": {}, "shapes": [], "rows": [], "tiles": []}
    l2 = int(result["meta"]["l2_bytes"]) or 50 << 20
    result["meta"]["not_run"] = args.not_run
    print(f"[env] {json.dumps(result['meta'])}", flush=True)
    for note in args.not_run:
        print(f"[not run] {note}", flush=True)
    if not args.no_peak:
        size, reps = (4096, 5) if args.quick else (8192, 10)
        for prec in args.precision_list:
            try:
                result["peak"][prec.name] = peaks.matmul_peak(prec.name, size, reps)
            except Exception as exc:  # noqa: BLE001
                print(f"[peak] {prec.name}: {exc}", flush=True)
            _free_torch()
        print(f"[peak] TFLOP/s, INT8 TOP/s ({size}^3 torch matmul): {result['peak']}", flush=True)
    result["meta"]["peak_matmul_size"] = None if args.no_peak else size
    passes = [False, True] if args.tiles else [False]
    if args.tiles and (libs["core"] is None or "tile_count_error" in libs):
        print(f"[tiles] no sweep: {libs.get('tile_count_error') or libs['errors'].get('core')}", flush=True)
        passes = [False]
    for tiles in passes:
        for shape in args.shape_list:
            elapsed = time.perf_counter() - start
            if args.time_limit and elapsed > args.time_limit:
                result["meta"].setdefault("skipped", []).append(f"{shape.name}{' tiles' if tiles else ''}")
                print(
                    f"[{shape.name}] skipped{' (tiles)' if tiles else ''}: {elapsed:.0f}s > --time-limit",
                    flush=True,
                )
                continue
            if not tiles:
                result["shapes"].append(shape.as_dict())
            print(
                f"[{shape.name}{' tiles' if tiles else ''}] {shape.model} {shape.desc} (t={elapsed:.0f}s)",
                flush=True,
            )
            try:
                run_shape(gpu, args, libs, shape, result["peak"], l2, result, tiles=tiles)
            except Exception as exc:  # noqa: BLE001
                print(f"[{shape.name}] FAILED: {type(exc).__name__}: {exc}", flush=True)
                traceback.print_exc()
                gpu.clear_cuda_error()
                cupy.get_default_memory_pool().free_all_blocks()
            report.write(result, args.out_dir)
    result["meta"]["bench_seconds"] = round(time.perf_counter() - start, 1)
    report.write(result, args.out_dir)
    print(f"\nwrote {args.out_dir / 'results.json'} and results.md", flush=True)
    if args.tiles:
        print(report.tiles_table(result))
    if result["meta"].get("skipped"):
        print(f"SKIPPED by --time-limit: {', '.join(result['meta']['skipped'])}")
    print(report.error_summary(result))
    if quant_report.has_quant(result):
        print(quant_report.table(result))
    print("\n".join(report.acceptance(result)))
    print(f"peak TFLOP/s: {', '.join(f'{k} {v:.0f}' for k, v in result['peak'].items())}")
    print(report.short_table(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
