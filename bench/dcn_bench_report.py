"""Tables of the DCNv2 benchmark's results (pure Python; used by dcn_bench.py and dcn_bench_plot.py).

A result is the JSON object dcn_bench.py writes: ``meta``, ``peak`` (TFLOP/s per precision),
``shapes`` (Shape.as_dict()), ``rows`` (one per shape x precision x implementation: ``status``
"ok" / "unsupported" / "error" / "n/a", ``us`` per call, ``method``, ``tflops``, ``frac_peak``,
``max_rel_err``, ``rel_l2``, ``message``; quantized rows also ``err_over_bound``, ``within_bound``
and, as every engine row, ``auto``) and ``tiles`` (the fused tile sweep, optional). The INT8 and FP8
rows have their own table and bars (dcn_bench_quant_report.py); the tables here are the float ones.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import dcn_bench_quant_report as quant_report
from bench_shapes import IMPLS, PRECISIONS

#: The implementations the fused kernel is compared with (``fused-engine`` is the fused kernel too).
OTHER_IMPLS = ("simple", "baseline", "torchvision")

_COMPARE = {p.name: p.compare_to for p in PRECISIONS}
_SHORT_STATUS = {"unsupported": "unsup", "error": "ERR", "n/a": "n/a"}


def index(rows: list[dict]) -> dict[tuple[str, str, str], dict]:
    """Rows by (shape, precision, impl)."""
    return {(r["shape"], r["precision"], r["impl"]): r for r in rows}


def _us(row: dict | None) -> float | None:
    if row is None or row.get("status") != "ok":
        return None
    return row.get("us")


def other_row(idx: dict, shape: str, precision: str, impl: str) -> dict | None:
    """The row that ``impl`` contributes to a (shape, precision) line: TF32 uses the FP32 rows
    of simple/baseline/torchvision (TensorRT's plugin has no TF32 mode); both fused paths have
    TF32 rows of their own."""
    if impl in ("fused", "fused-engine"):
        return idx.get((shape, precision, impl))
    return idx.get((shape, _COMPARE.get(precision, precision), impl))


def ratios(idx: dict, shape: str, precision: str, path: str = "fused") -> dict[str, float | None]:
    """Speed-up of one path of the fused kernel over each other implementation (their µs / its µs):
    ``fused`` (x NCHW, weights permuted on every call) or ``fused-engine`` (x channel-last, weights
    prepared once: what a TensorRT engine with constant weights runs)."""
    fused = _us(idx.get((shape, precision, path)))
    out: dict[str, float | None] = {}
    for impl in OTHER_IMPLS:
        other = _us(other_row(idx, shape, precision, impl))
        out[impl] = other / fused if (fused and other) else None
    return out


def _cell_us(row: dict | None) -> str:
    if row is None:
        return "-"
    if row.get("status") != "ok":
        return _SHORT_STATUS.get(row.get("status", ""), "?")
    return f"{row['us']:.1f}"


def _fmt(v: float | None, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def lines_pairs(result: dict) -> list[tuple[str, str]]:
    """(shape, float precision) pairs present in the rows, in shape-table then precision order."""
    present = {(r["shape"], r["precision"]) for r in result.get("rows", [])}
    shapes = [s["name"] for s in result.get("shapes", [])]
    precs = [p.name for p in PRECISIONS if not p.quant]
    return [(s, p) for s in shapes for p in precs if (s, p) in present]


def short_table(result: dict) -> str:
    """The compact table printed last by dcn_bench.py (µs per call; ×: speed-up of fused; engine: the
    fused kernel with channel-last x and prepared weights)."""
    idx = index(result.get("rows", []))
    head = (
        f"{'shape':14s}{'prec':5s}{'fused':>8s}{'engine':>8s}{'simple':>8s}{'base':>8s}{'tvision':>8s}"
        f"{'TF/s':>7s}{'%pk':>5s}{'xbase':>7s}{'xtv':>7s}{'xsimp':>7s}{'err':>8s}"
    )
    out = [head, "-" * len(head)]
    for shape, prec in lines_pairs(result):
        fused = idx.get((shape, prec, "fused"))
        cells = [_cell_us(other_row(idx, shape, prec, impl)) for impl in IMPLS]
        r = ratios(idx, shape, prec)
        ok = fused is not None and fused.get("status") == "ok"
        frac = fused.get("frac_peak") if ok else None
        out.append(
            f"{shape:14s}{prec:5s}"
            + "".join(f"{c:>8s}" for c in cells)
            + f"{_fmt(fused.get('tflops') if ok else None, '.1f'):>7s}"
            + f"{_fmt(None if frac is None else 100 * frac, '.0f'):>5s}"
            + "".join(f"{_fmt(r[i], '.2f'):>7s}" for i in ("baseline", "torchvision", "simple"))
            + f"{_fmt(fused.get('max_rel_err') if ok else None, '.1e'):>8s}"
        )
    out.append(
        "us = device time per call (median over graph replays / calls per graph); tf32 lines show the "
        "fp32 simple/baseline/torchvision times; err = fused max|out-ref|/max|ref| vs float64"
    )
    return "\n".join(out)


def error_summary(result: dict) -> str:
    """Worst max-relative error and relative L2 per (precision, impl) over all shapes."""
    worst: dict[tuple[str, str], tuple[float, float]] = {}
    bad: list[str] = []
    for r in result.get("rows", []):
        if r.get("status") != "ok":
            continue
        key = (r["precision"], r["impl"])
        if r.get("nonfinite") or r.get("max_rel_err") is None:
            bad.append(f"{r['shape']}/{r['precision']}/{r['impl']}")
            continue
        m, l2 = worst.get(key, (0.0, 0.0))
        worst[key] = (max(m, r["max_rel_err"]), max(l2, r.get("rel_l2") or 0.0))
    parts = [f"{p}/{i} {m:.1e}/{l2:.1e}" for (p, i), (m, l2) in sorted(worst.items())]
    text = "worst error (max rel / rel L2): " + ("; ".join(parts) if parts else "none")
    if bad:
        text += "\nNON-FINITE or missing output: " + ", ".join(bad)
    over = quant_report.over_bound(result)
    if over:
        text += "\nOVER THE Q/DQ BOUND: " + ", ".join(over)
    return text


def implied_peak(result: dict, prec: str, impl: str, factor: float) -> list[tuple[str, float]]:
    """For the bar "fused >= factor x impl" in ``prec``: per shape with both times, the fraction of
    the measured ``prec`` peak at which a whole call (its FLOPs only, nothing else) would have to run
    to meet it, largest first. Above 1.0 a bar cannot be met on that GPU."""
    idx = index(result.get("rows", []))
    peak = (result.get("peak") or {}).get(prec)
    out = []
    for s in result.get("shapes", []):
        other = _us(other_row(idx, s["name"], prec, impl))
        if not peak or not other or not s.get("flop"):
            continue
        out.append((s["name"], s["flop"] / (peak * 1e12) / (other / factor * 1e-6)))
    return sorted(out, key=lambda t: -t[1])


#: The fused paths the bars are evaluated on, the engine path first (the issue's bars are about it).
PATHS = (("fused-engine", "engine path"), ("fused", "NCHW path"))
#: The ratio bars: (least ratio, on layers with at least this many output channels).
BASELINE_BAR = (2.5, 128)  # FP16 and BF16, x the baseline
TORCHVISION_BAR = (1.0, 0)  # FP16, x torchvision


def acceptance(result: dict) -> list[str]:
    """The speed bars of the current issue (17), evaluated on this result for each fused path
    (PATHS): PASS / FAIL / n.a. per bar, each 2.5x bar followed by a "need" line (the fraction of
    the measured peak its target implies on the layer where it is highest, implied_peak). The bars:
    FP16 and BF16 at least 2.5x the baseline on every layer with 128 or more output channels, FP16
    at least torchvision's speed on every layer, FP16 tensor work at least 40% of the measured peak
    on R50-c4 and 60% on BEVFormer-c4. Then one line: the FP32 error against the simple kernel's; then
    the INT8/FP8 bars of issue 40 (dcn_bench_quant_report.acceptance)."""
    idx = index(result.get("rows", []))
    shapes = {s["name"]: s for s in result.get("shapes", [])}
    lines = []

    def bar(label: str, values: list[tuple[str, float | None]], ok) -> None:
        got = [(n, v) for n, v in values if v is not None]
        if not got:
            lines.append(f"n.a.  {label}: no shape has both times")
            return
        worst = min(got, key=lambda t: t[1])
        failed = [n for n, v in got if not ok(v)]
        missing = len(values) - len(got)
        verdict = "FAIL" if failed else ("PASS" if not missing else "part")
        extra = f" (missing {missing})" if missing else ""
        lines.append(
            f"{verdict:5s} {label}: worst {worst[0]} {worst[1]:.2f}{extra}"
            + (f"; failing: {', '.join(failed)}" if failed else "")
        )

    for path, what in PATHS:
        if not any(k[2] == path for k in idx):
            continue
        for prec in ("fp16", "bf16"):
            least, cout = BASELINE_BAR
            big = [n for n, s in shapes.items() if s["cout"] >= cout and (n, prec, path) in idx]
            vals = [(n, ratios(idx, n, prec, path)["baseline"]) for n in big]
            bar(f"{what}: {prec} xbaseline >= {least} (Cout >= {cout})", vals, lambda v, m=least: v >= m)
            need = [t for t in implied_peak(result, prec, "baseline", least) if t[0] in big]
            if need:
                lines.append(
                    f"need  {what}: {prec} xbaseline >= {least}: a call at {100 * need[0][1]:.0f}% of the "
                    f"measured {prec} peak on {need[0][0]} (its FLOPs alone)"
                )
        least, cout = TORCHVISION_BAR
        allp = [n for n in shapes if shapes[n]["cout"] >= cout and (n, "fp16", path) in idx]
        bar(
            f"{what}: fp16 xtorchvision >= {least} (all shapes)",
            [(n, ratios(idx, n, "fp16", path)["torchvision"]) for n in allp],
            lambda v, m=least: v >= m,
        )
        for name, need in (("r50-c4", 0.40), ("bev-c4", 0.60)):
            row = idx.get((name, "fp16", path))
            frac = row.get("frac_peak") if row and row.get("status") == "ok" else None
            if row is not None:
                label = f"{what}: fp16 {name} fraction of peak >= {need:.2f}"
                bar(label, [(name, frac)], lambda v, n=need: v >= n)
    errs = []
    for n in shapes:
        f, s = idx.get((n, "fp32", "fused")), idx.get((n, "fp32", "simple"))
        if f and s and f.get("status") == "ok" and s.get("status") == "ok" and s.get("max_rel_err"):
            if f.get("max_rel_err") is not None:
                errs.append((n, f["max_rel_err"] / s["max_rel_err"]))
    if errs:
        worst = max(errs, key=lambda t: t[1])
        verdict = "PASS" if worst[1] <= 1.0 else "FAIL"
        lines.append(f"{verdict:5s} fp32 fused error <= simple's: worst ratio {worst[0]} {worst[1]:.2f}")
    return lines + quant_report.acceptance(result)


def changes(result: dict, previous: dict) -> list[str]:
    """Per (implementation, precision) present in both results: how the time per call changed from
    ``previous`` to ``result`` over the layers timed in both (median, least and most, and the layer of
    the most), and the largest max-relative error in each. For the bars "no slower than today" and
    "errors no worse than today"; run-to-run spread is the reader's to judge."""
    new, old = index(result.get("rows", [])), index(previous.get("rows", []))
    lines = []
    impls = [i for i in IMPLS if any(k[2] == i for k in new)]
    for impl in impls:
        for prec in (p.name for p in PRECISIONS):
            pairs = []
            err_new = err_old = None
            for key, row in new.items():
                if key[1:] != (prec, impl) or _us(row) is None or _us(old.get(key)) is None:
                    continue
                pairs.append((key[0], row["us"] / old[key]["us"] - 1.0))
                if row.get("max_rel_err") is not None and old[key].get("max_rel_err") is not None:
                    err_new = max(err_new or 0.0, row["max_rel_err"])
                    err_old = max(err_old or 0.0, old[key]["max_rel_err"])
            if not pairs:
                continue
            ch = sorted(c for _, c in pairs)
            median = statistics.median(ch)
            most = max(pairs, key=lambda t: t[1])
            err = f"; max error {err_old:.1e} -> {err_new:.1e}" if err_new is not None else ""
            lines.append(
                f"{impl:13s}{prec:5s} {len(pairs):2d} layers: median {100 * median:+.1f}%, "
                f"{100 * ch[0]:+.1f}% .. {100 * most[1]:+.1f}% ({most[0]}){err}"
            )
    return lines


def best_tiles(result: dict) -> list[dict]:
    """Per (shape, precision) of the tile sweep: the fastest tile, its µs and the AUTO fused µs."""
    idx = index(result.get("rows", []))
    best: dict[tuple[str, str], dict] = {}
    for t in result.get("tiles", []):
        if t.get("status") != "ok" or t.get("us") is None:
            continue
        key = (t["shape"], t["precision"])
        if key not in best or t["us"] < best[key]["us"]:
            best[key] = t
    out = []
    for (shape, prec), t in best.items():
        fused = _us(idx.get((shape, prec, "fused")))
        ok = sum(
            1
            for x in result["tiles"]
            if (x["shape"], x["precision"]) == (shape, prec) and x["status"] == "ok"
        )
        out.append(
            {"shape": shape, "precision": prec, "tile": t["tile"], "us": t["us"], "fused_us": fused, "ok": ok}
        )
    return out


def tiles_table(result: dict) -> str:
    """:func:`best_tiles` as text, one line per shape: per precision ``t<best> <µs>/<fused AUTO µs>``."""
    rows = best_tiles(result)
    if not rows:
        return "tile sweep: no successful tile"
    precs = [p.name for p in PRECISIONS if any(r["precision"] == p.name for r in rows)]
    by = {(r["shape"], r["precision"]): r for r in rows}
    out = [
        f"best fused tile per shape: t<tile> <us>/<fused us>\n{'shape':14s}"
        + "".join(f"{p:>22s}" for p in precs)
    ]
    for shape in dict.fromkeys(r["shape"] for r in rows):
        cells = []
        for p in precs:
            r = by.get((shape, p))
            cells.append("-" if r is None else f"t{r['tile']} {r['us']:.1f}/{_fmt(r['fused_us'], '.1f')}")
        out.append(f"{shape:14s}" + "".join(f"{c:>22s}" for c in cells))
    return "\n".join(out)


def markdown(result: dict) -> str:
    """Full Markdown tables: times and ratios, then accuracy, then INT8 and FP8, then the timing
    methods and what did not run."""
    idx = index(result.get("rows", []))
    shapes = {s["name"]: s for s in result.get("shapes", [])}
    peak = result.get("peak", {})
    out = ["| precision | measured peak (TFLOP/s, INT8 TOP/s; torch matmul) |", "|---|---|"]
    out += [f"| {k} | {_fmt(v, '.1f')} |" for k, v in peak.items()]
    out += [
        "",
        "| shape | layer | prec | fused µs | engine µs | simple µs | baseline µs | torchvision µs "
        "| fused TFLOP/s | fused % peak | × baseline | × torchvision | × simple |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    pairs = lines_pairs(result)
    for shape, prec in pairs:
        fused = idx.get((shape, prec, "fused"))
        ok = fused is not None and fused.get("status") == "ok"
        r = ratios(idx, shape, prec)
        cells = [_cell_us(other_row(idx, shape, prec, i)) for i in IMPLS]
        frac = fused.get("frac_peak") if ok else None
        s = shapes.get(shape, {})
        out.append(
            f"| {shape} | {s.get('model', '')} {s.get('desc', '')} | {prec} | "
            + " | ".join(cells)
            + f" | {_fmt(fused.get('tflops') if ok else None, '.1f')}"
            + f" | {_fmt(None if frac is None else 100 * frac, '.1f')}"
            + "".join(f" | {_fmt(r[i], '.2f')}" for i in ("baseline", "torchvision", "simple"))
            + " |"
        )
    out += [
        "",
        "Error vs the float64 reference on the same rounded inputs: max\\|out − ref\\| / max\\|ref\\| "
        "and ‖out − ref‖₂ / ‖ref‖₂.",
        "",
        "| shape | prec | fused | engine | simple | baseline | torchvision |",
        "|---|---|---|---|---|---|---|",
    ]
    for shape, prec in pairs:
        cells = []
        for impl in IMPLS:
            row = idx.get((shape, prec, impl))
            if row is None:
                cells.append("-")
            elif row.get("status") != "ok":
                cells.append(row.get("status", "?"))
            elif row.get("max_rel_err") is None:
                cells.append("non-finite")
            else:
                cells.append(f"{row['max_rel_err']:.1e} / {row['rel_l2']:.1e}")
        out.append(f"| {shape} | {prec} | " + " | ".join(cells) + " |")
    if quant_report.has_quant(result):
        out += ["", quant_report.table(result)]
    skipped = result.get("meta", {}).get("skipped")
    if skipped:
        out += ["", "Not run (time limit): " + ", ".join(skipped)]
    for note in result.get("meta", {}).get("not_run", []):
        out += ["", f"Not run: {note}"]
    odd = [r for r in result.get("rows", []) if r.get("status") == "ok" and r.get("method") != "graph"]
    failed = [r for r in result.get("rows", []) if r.get("status") in ("error", "unsupported", "n/a")]
    if odd:
        counts: dict[str, int] = {}
        for r in odd:
            key = f"{r['impl']} ({r['method']})"
            counts[key] = counts.get(key, 0) + 1
        out += [
            "",
            "Rows not timed by CuPy graph replay: " + ", ".join(f"{k}: {v}" for k, v in counts.items()),
        ]
    if failed:
        out += ["", "Rows without a time:", ""]
        out += [
            f"- {r['shape']}/{r['precision']}/{r['impl']}: {r['status']} — {r.get('message', '')[:200]}"
            for r in failed
        ]
    return "\n".join(out) + "\n"


def _clean(obj):
    """JSON-safe copy: non-finite floats become None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write(result: dict, out_dir: Path) -> None:
    """results.json (atomically; non-finite numbers as null) and results.md into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "results.json.tmp"
    tmp.write_text(
        json.dumps(_clean(result), indent=1, allow_nan=False, default=str) + "\n", encoding="utf-8"
    )
    tmp.replace(out_dir / "results.json")
    (out_dir / "results.md").write_text(markdown(result), encoding="utf-8")
