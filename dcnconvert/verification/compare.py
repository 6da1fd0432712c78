"""Tolerances and the output comparison of ``dcnconvert verify`` (:mod:`dcnconvert.verification.runner`).

Polygraphy's ``Comparator.compare_accuracy`` with ``SimpleCompareFunc`` decides, element by
element: an element fails only if ``|engine - ref| > atol`` **and** ``|engine - ref| / |ref| > rtol``.
:func:`compare` also returns per-output error statistics; :func:`format_rows` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dcnconvert.errors import UsageError

#: Default ``(atol, rtol)`` per engine precision (also in docs/verify.md).
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "fp32": (1e-4, 1e-3),
    "fp16": (1e-2, 1e-2),
    "bf16": (5e-2, 5e-2),
}


def tolerances(precision: str, atol: float | None = None, rtol: float | None = None) -> tuple[float, float]:
    """``(atol, rtol)``: the given values, else the defaults for ``precision``.

    Raises:
        UsageError: an unknown precision or a negative tolerance.
    """
    if precision not in DEFAULT_TOLERANCES:
        raise UsageError(f"--precision {precision!r} is not one of {', '.join(DEFAULT_TOLERANCES)}")
    d_atol, d_rtol = DEFAULT_TOLERANCES[precision]
    a = d_atol if atol is None else float(atol)
    r = d_rtol if rtol is None else float(rtol)
    if a < 0 or r < 0:
        raise UsageError(f"tolerances must be >= 0, got atol={a}, rtol={r}")
    return a, r


def _compare_func(atol: float, rtol: float) -> Any:
    from polygraphy.comparator import compare as poly_compare

    simple = getattr(poly_compare, "SimpleCompareFunc", None)  # Polygraphy >= 0.53; CompareFunc.simple before
    if simple is not None:
        return simple(atol=atol, rtol=rtol, check_error_stat="elemwise")
    return poly_compare.CompareFunc.simple(atol=atol, rtol=rtol, check_error_stat="elemwise")


def compare(
    engine_results: Any, reference_results: Any, atol: float, rtol: float
) -> tuple[bool, list[dict[str, Any]]]:
    """Compare engine outputs with the reference (Polygraphy ``compare_accuracy``, elementwise rule).

    Returns:
        ``(passed, rows)``; one row per output: name, shape, max/mean absolute and relative error,
        the number of failing elements and ``passed``.
    """
    from polygraphy.comparator import Comparator
    from polygraphy.comparator.struct import RunResults

    from dcnconvert import log

    log.configure_polygraphy()
    combined = RunResults()
    for name, iters in list(engine_results.items()) + list(reference_results.items()):
        combined[name] = iters
    func = _compare_func(atol, rtol)
    accuracy = Comparator.compare_accuracy(combined, compare_func=func)
    engine_out = next(iter(engine_results.values()))[0]
    ref_out = next(iter(reference_results.values()))[0]
    rows = []
    for name in list(ref_out.keys()):
        ref = np.asarray(ref_out[name], dtype=np.float64)
        if name not in engine_out:
            rows.append({"output": name, "passed": False, "error": "missing in the engine's outputs"})
            continue
        got = np.asarray(engine_out[name], dtype=np.float64)
        if got.shape != ref.shape:
            rows.append({"output": name, "passed": False,
                         "error": f"shape {list(got.shape)} != reference {list(ref.shape)}"})
            continue
        absdiff = np.abs(got - ref)
        reldiff = absdiff / np.where(ref == 0, np.finfo(np.float64).eps, np.abs(ref))
        bad = ((absdiff > atol) | np.isnan(absdiff)) & ((reldiff > rtol) | np.isnan(reldiff))
        rows.append({
            "output": name, "shape": list(ref.shape),
            "max_abs": float(np.nanmax(absdiff)) if absdiff.size else 0.0,
            "mean_abs": float(np.nanmean(absdiff)) if absdiff.size else 0.0,
            "max_rel": float(np.nanmax(reldiff)) if reldiff.size else 0.0,
            "mean_rel": float(np.nanmean(reldiff)) if reldiff.size else 0.0,
            "mismatches": int(bad.sum()), "elements": int(bad.size), "passed": not bool(bad.any()),
        })
    passed = bool(accuracy) and all(r["passed"] for r in rows)
    return passed, rows


def format_rows(rows: Sequence[Mapping[str, Any]], atol: float, rtol: float) -> str:
    """A text table of the comparison."""
    from dcnconvert.report import format_table

    body = []
    for r in rows:
        if "error" in r:
            body.append([r["output"], "-", "-", "-", "-", "-", f"FAIL: {r['error']}"])
            continue
        body.append([r["output"], "x".join(map(str, r["shape"])),
                     f"{r['max_abs']:.3g}", f"{r['mean_abs']:.3g}",
                     f"{r['max_rel']:.3g}", f"{r['mean_rel']:.3g}",
                     "ok" if r["passed"] else f"FAIL ({r['mismatches']}/{r['elements']})"])
    table = format_table(["output", "shape", "max abs", "mean abs", "max rel", "mean rel", "result"], body)
    return f"{table}\n(an element fails if abs > {atol:g} and rel > {rtol:g})"
