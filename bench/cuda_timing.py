"""Shared timing helper of the GPU bench scripts: median microseconds with CUDA events (CuPy)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def median_us(fn: Callable[[], object], reps: int = 20, warmup: int = 3) -> float:
    """Median µs of ``fn()`` on the current stream, timed with CUDA events after ``warmup`` calls."""
    import cupy

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)
    return float(np.median(times))
