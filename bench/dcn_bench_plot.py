"""Plot and docs page from the JSON of bench/dcn_bench.py (runs anywhere; no GPU needed).

    python3 bench/dcn_bench_plot.py RESULTS.json [--png docs/benchmarks.png]
        [--docs docs/benchmarks_h200_tables.md] [--command "the exact device command"]
        [--previous OLD_RESULTS.json]

--png: time per call per shape and implementation, log scale, one panel per precision (FP16 and
FP32 by default; --panels fp16,bf16,fp32,tf32,int8,fp8e4m3 for more); needs matplotlib (pip install
matplotlib).
--docs: writes the tables page (GPU, driver, versions, command, method, peaks, acceptance, tables,
plot); docs/benchmarks.md, written by hand, reads it. --previous: how each implementation's times and
errors changed against an earlier run (printed, and on the page).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dcn_bench_quant_report as quant_report
import dcn_bench_report as report
from bench_shapes import IMPLS

COLORS = {
    "fused": "#1b9e77",
    "fused-engine": "#66a61e",
    "simple": "#7570b3",
    "baseline": "#d95f02",
    "torchvision": "#e7298a",
}


def from_log(text: str) -> dict:
    """A result object (meta, shapes, rows with µs) rebuilt from the short table that
    bench/dcn_bench.py prints last, for runs whose results.json did not come back."""
    meta: dict = {}
    rows: list[dict] = []
    shapes: list[dict] = []
    impls = ("fused", "simple", "baseline", "torchvision")
    in_table = False
    for line in text.splitlines():
        if line.startswith("[env] "):
            meta = json.loads(line[len("[env] ") :])
        elif line.startswith("shape ") and "fused" in line:
            in_table = True
        elif in_table and line.strip() and not line.startswith("-"):
            parts = line.split()
            if len(parts) < 6 or parts[1] not in ("fp32", "tf32", "fp16", "bf16"):
                in_table = False
                continue
            name, prec = parts[0], parts[1]
            if not any(sh["name"] == name for sh in shapes):
                shapes.append({"name": name})
            for impl, cell in zip(impls, parts[2:6], strict=True):
                if prec == "tf32" and impl != "fused":
                    continue  # the tf32 lines repeat the FP32 times of the others
                try:
                    rows.append(
                        {"shape": name, "precision": prec, "impl": impl, "us": float(cell), "status": "ok"}
                    )
                except ValueError:
                    pass
    if not rows:
        raise ValueError("no benchmark table found in the log")
    return {"meta": meta, "shapes": shapes, "rows": rows}


def load(path: str | os.PathLike) -> dict:
    """The benchmark's result object (raises ValueError when it is not one); a .txt/.log file is
    read as the printed output of the bench (see :func:`from_log`)."""
    if str(path).endswith((".txt", ".log")):
        return from_log(Path(path).read_text(encoding="utf-8"))
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "rows" not in data or "shapes" not in data:
        raise ValueError(f"{path} is not a dcn_bench.py result (no 'rows'/'shapes')")
    return data


def panel_series(result: dict, precision: str) -> tuple[list[str], dict[str, list[float | None]]]:
    """Shape names and, per implementation, µs per shape (None where there is no time)."""
    idx = report.index(result.get("rows", []))
    shapes = [
        s["name"] for s in result.get("shapes", []) if any((s["name"], precision, i) in idx for i in IMPLS)
    ]
    series = {}
    for impl in IMPLS:
        vals = []
        for name in shapes:
            row = report.other_row(idx, name, precision, impl)
            vals.append(row["us"] if row is not None and row.get("status") == "ok" else None)
        if any(v is not None for v in vals):
            series[impl] = vals
    return shapes, series


def plot(result: dict, png: str | os.PathLike, panels: list[str]) -> None:
    """Grouped bars, log-scale µs, one panel per precision."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in panels if panel_series(result, p)[0]]
    if not panels:
        raise ValueError("no rows for the requested panels")
    fig, axes = plt.subplots(len(panels), 1, figsize=(14, 4.2 * len(panels)), squeeze=False)
    for ax, prec in zip(axes[:, 0], panels, strict=True):
        shapes, series = panel_series(result, prec)
        width = 0.8 / max(1, len(series))
        for k, (impl, vals) in enumerate(series.items()):
            xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(shapes))]
            pts = [(x, v) for x, v in zip(xs, vals, strict=True) if v is not None]
            ax.bar([p[0] for p in pts], [p[1] for p in pts], width, label=impl, color=COLORS.get(impl))
        ax.set_yscale("log")
        ax.set_ylabel("µs per call")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=35, ha="right", fontsize=8)
        label = prec.upper() + (" (simple/baseline/torchvision: FP32 rows)" if prec == "tf32" else "")
        ax.set_title(label)
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8, ncol=4)
    meta = result.get("meta", {})
    fig.suptitle(f"DCNv2 forward, {meta.get('gpu', '?')} — lower is better")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def render_docs(
    result: dict, *, command: str | None = None, png_name: str | None = None, previous: dict | None = None
) -> str:
    """The tables page for one result (docs/benchmarks_h200_tables.md); with ``previous``, also how
    each implementation's times and errors changed against that earlier result."""
    meta = result.get("meta", {})
    cmd = command or meta.get("command", "?")
    lines = [
        "# DCNv2 forward benchmark",
        "",
        f"GPU: **{meta.get('gpu', '?')}** ({meta.get('sm_count', '?')} SMs, L2 "
        f"{(meta.get('l2_bytes') or 0) / 2**20:.0f} MiB), driver {meta.get('driver', '?')}, "
        f"CUDA runtime {meta.get('cuda_runtime', '?')}, cuBLAS {meta.get('cublas', '?')}, "
        f"CuPy {meta.get('cupy', '?')}, torch {meta.get('torch', '?')}, "
        f"torchvision {meta.get('torchvision', '?')}; "
        f"run {meta.get('date_utc', '?')} UTC at commit {meta.get('git') or '?'}"
        + (" (**--quick**: few replays, not for comparison)" if meta.get("quick") else "")
        + ".",
        "",
        "Command (from the repository root):",
        "",
        "```sh",  # a GPU command: shown, not run by tests/test_readme.py
        cmd,
        "```",
        "",
        "Implementations: **fused** — our fused tensor-core kernel (`kDCN_ALGO_FUSED`; FP32 rows in "
        "accurate mode, TF32 rows with `kDCN_MATH_TF32`) with x NCHW and the weights permuted on every "
        "call; **engine** — the same kernel as a TensorRT engine with constant weights runs it: x "
        "channel-last, weights prepared once, no prep pass; **simple** — our SIMT reference kernel; "
        "**baseline** — `bench/baseline/im2col_cublas.cu`, the algorithm of TensorRT's built-in "
        "ModulatedDeformConv2d plugin (per-image deformable im2col, one GEMM per group: Sgemm for FP32, "
        "FP16-accumulating Hgemm for FP16, GemmEx BF16/FP32-compute for BF16, then a separate bias pass); "
        "**torchvision** — `torchvision.ops.deform_conv2d`. TF32 lines compare against the FP32 rows "
        "of the others (TensorRT's plugin has no TF32 mode).",
        "",
        *(
            [
                "INT8 and FP8 E4M3 rows: quantized layers on the engine path only (8-bit x and weights, "
                "x per tensor and the weights per output channel at max calibration's scales; FP16 "
                "offset, mask, bias and output; AUTO as the plugin runs it), against FP16's engine rows "
                "of the same run and their own type's peak (INT8 `torch._int_mm`, FP8 `torch._scaled_mm`); "
                "errors against the float64 Q/DQ model within its elementwise bound.",
                "",
            ]
            if quant_report.has_quant(result)
            else []
        ),
        "Method: the same random inputs for every implementation (x ~ N(0,1), offsets ~ N(0, 2²), "
        "mask ~ U(0,1), weights ~ N(0,1)/√fan-in, bias ~ N(0,1)); device time per call = median over "
        "replays of one CUDA graph holding R consecutive calls that rotate among buffer sets totalling "
        "more than 2× the L2, divided by R. Peaks: a torch matmul of "
        f"{meta.get('peak_matmul_size', '?')}³ on random data. Errors against torchvision in float64 "
        "on float64 copies of the same rounded inputs.",
        "",
        "## Acceptance bars",
        "",
        "```",
        *report.acceptance(result),
        "```",
        "",
    ]
    if previous is not None:
        pm = previous.get("meta", {})
        lines += [
            f"## Against the run of {pm.get('date_utc', '?')} UTC (commit {pm.get('git') or '?'})",
            "",
            "Time per call, new against old, over the layers both runs timed; the largest max-relative "
            "error of each.",
            "",
            "```",
            *report.changes(result, previous),
            "```",
            "",
        ]
    lines += [
        "## Results",
        "",
    ]
    if png_name:
        lines += [f"![time per call per shape]({png_name})", ""]
    lines.append(report.markdown(result))
    tiles = report.best_tiles(result)
    if tiles:
        lines += ["## Best fused tile per shape", "", "```", report.tiles_table(result), "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="results.json of bench/dcn_bench.py, or its printed output (.txt/.log)")
    ap.add_argument("--png", default=None, help="write the plot here (needs matplotlib)")
    ap.add_argument("--panels", default="fp16,fp32", help="precisions, one panel each (default fp16,fp32)")
    ap.add_argument(
        "--docs", default=None, help="write the tables page here (docs/benchmarks_h200_tables.md)"
    )
    ap.add_argument("--command", default=None, help="the exact command to show (default: the recorded one)")
    ap.add_argument(
        "--previous",
        default=None,
        help="an earlier results.json: print (and put on the page) how times changed",
    )
    args = ap.parse_args(argv)
    try:
        result = load(args.results)
        previous = load(args.previous) if args.previous else None
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if previous is not None:
        print("\n".join(report.changes(result, previous)))
    png_name = None
    if args.png:
        try:
            plot(result, args.png, [p.strip() for p in args.panels.split(",") if p.strip()])
        except ImportError:
            print("error: matplotlib is not importable (pip install matplotlib)", file=sys.stderr)
            return 1
        print(f"wrote {args.png}")
        if args.docs:
            png_name = os.path.relpath(Path(args.png).resolve(), Path(args.docs).resolve().parent)
    if args.docs:
        Path(args.docs).write_text(
            render_docs(result, command=args.command, png_name=png_name, previous=previous), encoding="utf-8"
        )
        print(f"wrote {args.docs}")
    if not args.png and not args.docs:
        print(report.markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
