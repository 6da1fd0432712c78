"""The INT8 and FP8 table of the DCNv2 benchmark's results and the speed bars of issue 40 (pure Python;
used by dcn_bench_report.py, dcn_bench_summary.py and dcn_bench_plot.py through it).

Reads the engine rows (``fused-engine``) of a result of bench/dcn_bench.py: FP16, INT8 and FP8 E4M3
of the same run. The bars: a quantized layer is never slower than FP16 (INT8 and FP8 each at least
1.0x FP16's speed on every layer), and at least 1.3x on R50-c4, R50-c5, BEVFormer-c4 and DBNet-c4.
A quantized row's error is against the float64 Q/DQ model: ``err_over_bound`` (the largest error
over its elementwise bound; above 1 the row failed) and ``rel_l2``.
"""

from __future__ import annotations

from bench_shapes import PRECISIONS

QUANT = tuple(p.name for p in PRECISIONS if p.quant)
LABEL = {"fp16": "FP16", "int8": "INT8", "fp8e4m3": "FP8"}
ENGINE = "fused-engine"
#: Issue 40's bars: least speed-up over FP16 on every layer, and on the layers named.
BAR_ALL = 1.0
BAR_FAST, FAST_LAYERS = 1.3, ("r50-c4", "r50-c5", "bev-c4", "dbnet-c4")


def _engine(result: dict) -> dict[tuple[str, str], dict]:
    """The engine rows by (shape, precision)."""
    return {(r["shape"], r["precision"]): r for r in result.get("rows", []) if r.get("impl") == ENGINE}


def _us(row: dict | None) -> float | None:
    return row.get("us") if row is not None and row.get("status") == "ok" else None


def has_quant(result: dict) -> bool:
    return any(r.get("precision") in QUANT for r in result.get("rows", []))


def target(shape: str) -> float:
    """The least speed-up over FP16 that issue 40 asks of ``shape``."""
    return BAR_FAST if shape in FAST_LAYERS else BAR_ALL


def layers(result: dict) -> list[dict]:
    """Per layer with a quantized engine row, in the shape table's order: the µs per call, speed-up
    over FP16 (FP16 µs / its µs) and share of its own peak of FP16 and each quantized precision, what
    AUTO ran, the error numbers, the bar's ``target`` and its ``verdict`` ("met", "not met", or "n.a."
    where a time is missing and nothing failed), with ``short`` the precisions below the target."""
    eng = _engine(result)
    present = [p for p in QUANT if any(k[1] == p for k in eng)]
    out = []
    for s in result.get("shapes", []):
        name = s["name"]
        if not any((name, p) in eng for p in present):
            continue
        fp16 = _us(eng.get((name, "fp16")))
        line: dict = {"shape": name, "target": target(name)}
        line.update({k: {} for k in ("us", "x", "pct", "auto", "err")})
        for prec in ("fp16", *present):
            row = eng.get((name, prec))
            us = _us(row)
            line["us"][prec] = us
            frac = row.get("frac_peak") if us is not None else None
            line["pct"][prec] = None if frac is None else 100.0 * frac
            line["auto"][prec] = (row or {}).get("auto")
            if prec != "fp16":
                line["x"][prec] = fp16 / us if fp16 and us else None
                line["err"][prec] = row if us is not None else None
        short = [p for p in present if line["x"][p] is not None and line["x"][p] < line["target"]]
        missing = [p for p in present if line["x"][p] is None]
        line["short"] = short
        line["verdict"] = "not met" if short else ("n.a." if missing else "met")
        out.append(line)
    return out


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _err_cell(row: dict | None) -> str:
    """``<max error / bound> / <relative L2>``; a failed row in bold with FAIL; "no reference" where
    the reference could not be computed."""
    if row is None:
        return "-"
    if "within_bound" not in row:
        return "no reference"
    over = row.get("err_over_bound")
    if over is None or not row.get("within_bound", False):
        shown = "non-finite" if over is None else f"{over:.2g}"
        return f"**FAIL {shown}** / {_f(row.get('rel_l2'), '.1e')}"
    return f"{over:.2g} / {_f(row.get('rel_l2'), '.1e')}"


def table(result: dict, choices: dict[tuple[str, str], str] | None = None) -> str:
    """The "INT8 and FP8" Markdown table; AUTO from the rows (``auto``), else from ``choices``
    (bench/fused_choice.py's output, as dcn_bench_summary.parse_choices reads it)."""
    rows = layers(result)
    if not rows:
        return ""
    precs = [p for p in QUANT if p in rows[0]["x"]]
    peak = result.get("peak") or {}
    peaks = ", ".join(f"{LABEL[p]} {_f(peak.get(p), '.0f')}" for p in ("fp16", *precs))
    auto_head = " / ".join(LABEL[p] for p in ("fp16", *precs))
    out = [
        "### INT8 and FP8 (engine path, µs per call)",
        "",
        f"Peaks of this run (TFLOP/s, INT8 TOP/s): {peaks}. × FP16: FP16's µs over the layer's; the bar "
        f"(issue 40): at least {BAR_ALL:.1f}x on every layer and {BAR_FAST:.1f}x on "
        f"{', '.join(FAST_LAYERS)}, for each of {' and '.join(LABEL[p] for p in precs)}. Error: the "
        "largest error over its bound against the float64 Q/DQ model / relative L2 error.",
        "",
        "| layer | FP16 µs | "
        + "".join(f"{LABEL[p]} µs | " for p in precs)
        + "".join(f"{LABEL[p]} × FP16 | " for p in precs)
        + "".join(f"{LABEL[p]} % peak | " for p in ("fp16", *precs))
        + f"AUTO ({auto_head}) | "
        + "".join(f"{LABEL[p]} error | " for p in precs)
        + "bar |",
        "|---|" + "---:|" * (1 + 3 * len(precs) + 1) + "---|" * (2 + len(precs)),
    ]
    for ln in rows:
        name = ln["shape"]
        auto = " / ".join(ln["auto"][p] or (choices or {}).get((name, p), "-") for p in ("fp16", *precs))
        bar = f"≥{ln['target']:.1f}: {ln['verdict']}"
        if ln["short"]:
            bar += " (" + ", ".join(LABEL[p] for p in ln["short"]) + ")"
        out.append(
            f"| {name} | {_f(ln['us']['fp16'], '.1f')} | "
            + "".join(f"{_f(ln['us'][p], '.1f')} | " for p in precs)
            + "".join(f"{_f(ln['x'][p], '.2f')} | " for p in precs)
            + "".join(f"{_f(ln['pct'][p], '.1f')} | " for p in ("fp16", *precs))
            + f"{auto} | "
            + "".join(f"{_err_cell(ln['err'][p])} | " for p in precs)
            + f"{bar} |"
        )
    return "\n".join(out) + "\n"


def over_bound(result: dict) -> list[str]:
    """``shape/precision/impl (xR)`` of every timed quantized row whose error exceeds its bound (or
    whose output is not finite); rows without a reference are dcn_bench_report.error_summary's."""
    return [
        f"{r['shape']}/{r['precision']}/{r['impl']} "
        + ("(non-finite)" if r.get("err_over_bound") is None else f"(x{r['err_over_bound']:.2f})")
        for r in result.get("rows", [])
        if r.get("precision") in QUANT and r.get("status") == "ok" and r.get("within_bound") is False
    ]


def acceptance(result: dict) -> list[str]:
    """Issue 40's bars on this result, one line per precision and bar (PASS, FAIL, or "part" where
    layers lack a time and none failed; n.a. without any), then one per precision for the errors
    (every row within its Q/DQ bound)."""
    rows = layers(result)
    lines = []
    for prec in (p for p in QUANT if rows and p in rows[0]["x"]):
        for least, names in ((BAR_ALL, None), (BAR_FAST, FAST_LAYERS)):
            got = [(ln["shape"], ln["x"][prec]) for ln in rows if names is None or ln["shape"] in names]
            where = "all shapes" if names is None else ", ".join(names)
            label = f"engine path: {prec} xfp16 >= {least:.1f} ({where})"
            vals = [(n, v) for n, v in got if v is not None]
            if not vals:
                lines.append(f"n.a.  {label}: no shape has both times")
                continue
            failed = [n for n, v in vals if v < least]
            worst = min(vals, key=lambda t: t[1])
            verdict = "FAIL" if failed else ("PASS" if len(vals) == len(got) else "part")
            extra = f" (missing {len(got) - len(vals)})" if len(vals) < len(got) else ""
            lines.append(
                f"{verdict:5s} {label}: worst {worst[0]} {worst[1]:.2f}{extra}"
                + (f"; failing: {', '.join(failed)}" if failed else "")
            )
        timed = [ln["err"][prec] for ln in rows if ln["err"].get(prec) is not None]
        errs = [r for r in timed if "within_bound" in r]  # the others had no reference
        if errs:
            bad = [r["shape"] for r in errs if not r["within_bound"]]
            worst = max((r.get("err_over_bound") or 0.0) for r in errs)
            verdict = "FAIL" if bad else ("PASS" if len(errs) == len(timed) else "part")
            extra = f" (no reference: {len(timed) - len(errs)})" if len(errs) < len(timed) else ""
            lines.append(
                f"{verdict:5s} engine path: {prec} error within the Q/DQ bound: worst {worst:.2f} of it"
                + extra
                + (f"; failing: {', '.join(bad)}" if bad else "")
            )
    return lines
