"""The result tables of docs/benchmarks.md from the JSON of bench/dcn_bench.py (pure Python, no GPU).

    python3 bench/fused_choice.py > choices.txt
    python3 bench/dcn_bench_summary.py docs/benchmarks_h200_results.json --choices choices.txt
    python3 bench/dcn_bench_summary.py build/dcn_bench_quant/results.json --quant   # INT8 and FP8 only

Prints three Markdown tables: FP16 and BF16 (both fused paths against the baseline, FP16 also
against torchvision), then FP32 (3xTF32) and TF32; and where the result has INT8/FP8 rows, the
INT8 and FP8 table (dcn_bench_quant_report.table: against FP16's engine rows of the same run, with
issue 40's bar per layer). ``engine`` is the ``fused-engine`` rows (x channel-last, weights
prepared once), ``NCHW`` the ``fused`` rows. A ratio below a bar of the current issue is in bold:
2.5x the baseline where a layer has 128 or more output channels (FP16, BF16), torchvision's speed
(FP16). The AUTO columns: what the run recorded for its engine rows, else what bench/fused_choice.py
printed for the same device (``--choices``), else "-".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import dcn_bench_quant_report as quant_report
import dcn_bench_report as report
from dcn_bench_report import BASELINE_BAR, TORCHVISION_BAR


def parse_choices(text: str) -> dict[tuple[str, str], str]:
    """bench/fused_choice.py's output -> {(layer, precision): choice}."""
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0][0] != "layer":
        raise ValueError("not the output of bench/fused_choice.py (no 'layer' header)")
    precs = lines[0][1:]
    return {(row[0], p): c for row in lines[1:] for p, c in zip(precs, row[1:], strict=False)}


def _us(idx: dict, shape: str, prec: str, impl: str) -> float | None:
    return report._us(idx.get((shape, prec, impl)))


def _ratio(num: float | None, den: float | None, bar: tuple[float, int] | None = None, cout: int = 0) -> str:
    if not num or not den:
        return "-"
    v = num / den
    text = f"{v:.2f}"
    return f"**{text}**" if bar is not None and cout >= bar[1] and v < bar[0] else text


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _err(idx: dict, shape: str, prec: str) -> str:
    errs = [
        r["max_rel_err"]
        for r in (idx.get((shape, prec, i)) for i in ("fused", "fused-engine"))
        if r and r.get("status") == "ok" and r.get("max_rel_err") is not None
    ]
    return f"{max(errs):.1e}" if errs else "-"


def tables(result: dict, choices: dict[tuple[str, str], str] | None = None) -> str:
    """The FP16, BF16 and FP32/TF32 tables (Markdown) of one result, then INT8 and FP8 if it has them."""
    idx = report.index(result.get("rows", []))
    choices = choices or {}
    shapes = result.get("shapes", [])

    def auto(n: str, p: str) -> str:
        return (idx.get((n, p, "fused-engine")) or {}).get("auto") or choices.get((n, p), "-")

    out = [
        "### FP16 (µs per call)",
        "",
        "| layer | Cout | AUTO | engine µs | NCHW µs | baseline µs | torchvision µs | engine × baseline "
        "| engine × torchvision | NCHW × torchvision | engine % of peak | max error |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in shapes:
        n, cout = s["name"], s["cout"]
        e, f = _us(idx, n, "fp16", "fused-engine"), _us(idx, n, "fp16", "fused")
        b, t = _us(idx, n, "fp16", "baseline"), _us(idx, n, "fp16", "torchvision")
        row = idx.get((n, "fp16", "fused-engine")) or {}
        pk = f"{100 * row['frac_peak']:.0f}" if row.get("frac_peak") is not None else "-"
        out.append(
            f"| {n} | {cout} | {auto(n, 'fp16')} | {_f(e)} | {_f(f)} | {_f(b)} | {_f(t)} "
            f"| {_ratio(b, e, BASELINE_BAR, cout)} | {_ratio(t, e, TORCHVISION_BAR, cout)} "
            f"| {_ratio(t, f, TORCHVISION_BAR, cout)} | {pk} | {_err(idx, n, 'fp16')} |"
        )
    out += [
        "",
        "### BF16",
        "",
        "| layer | Cout | AUTO | engine µs | NCHW µs | baseline µs | engine × baseline | NCHW × baseline "
        "| max error |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in shapes:
        n, cout = s["name"], s["cout"]
        e, f = _us(idx, n, "bf16", "fused-engine"), _us(idx, n, "bf16", "fused")
        b = _us(idx, n, "bf16", "baseline")
        out.append(
            f"| {n} | {cout} | {auto(n, 'bf16')} | {_f(e)} | {_f(f)} | {_f(b)} "
            f"| {_ratio(b, e, BASELINE_BAR, cout)} | {_ratio(b, f, BASELINE_BAR, cout)} "
            f"| {_err(idx, n, 'bf16')} |"
        )
    out += [
        "",
        "### FP32 (3xTF32) and TF32",
        "",
        "| layer | FP32 AUTO | FP32 engine µs | FP32 NCHW µs | FP32 baseline µs | FP32 engine × baseline "
        "| TF32 AUTO | TF32 engine µs | TF32 NCHW µs | TF32 engine × FP32 baseline |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for s in shapes:
        n = s["name"]
        e, f, b = (_us(idx, n, "fp32", i) for i in ("fused-engine", "fused", "baseline"))
        te, tf = _us(idx, n, "tf32", "fused-engine"), _us(idx, n, "tf32", "fused")
        out.append(
            f"| {n} | {auto(n, 'fp32')} | {_f(e)} | {_f(f)} | {_f(b)} | {_ratio(b, e)} "
            f"| {auto(n, 'tf32')} | {_f(te)} | {_f(tf)} | {_ratio(b, te)} |"
        )
    if quant_report.has_quant(result):
        out += ["", quant_report.table(result, choices).rstrip("\n")]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="results.json of bench/dcn_bench.py")
    ap.add_argument("--choices", default=None, help="what bench/fused_choice.py printed (the AUTO columns)")
    ap.add_argument("--quant", action="store_true", help="only the INT8 and FP8 table")
    args = ap.parse_args(argv)
    try:
        result = json.loads(Path(args.results).read_text(encoding="utf-8"))
        choices = parse_choices(Path(args.choices).read_text(encoding="utf-8")) if args.choices else None
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.quant:
        text = quant_report.table(result, choices)
        if not text:
            print(f"error: {args.results} has no INT8 or FP8 rows", file=sys.stderr)
            return 1
        print(text, end="")
    else:
        print(tables(result, choices))
    return 0


if __name__ == "__main__":
    sys.exit(main())
