"""Rows of a bench/dcn_bench.py result (results.json) for the report and summary tests: a timed row
with plausible numbers, any field overridden by keyword."""

from __future__ import annotations


def result_row(shape: str, prec: str, impl: str, us: float, **kw) -> dict:
    """One ``ok`` row of ``shape`` x ``prec`` x ``impl`` at ``us`` µs per call (graph timing)."""
    row = {"shape": shape, "precision": prec, "impl": impl, "status": "ok", "us": us, "method": "graph"}
    row.update(tflops=4.95e9 / us / 1e6, frac_peak=0.5, max_rel_err=1e-4, rel_l2=5e-5)
    row.update(kw)
    return row
