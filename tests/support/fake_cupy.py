"""A stand-in for CuPy made of NumPy, for CPU runs of the benchmark's GPU helpers (tests/test_bench_run.py,
tests/test_bench_quant.py): every function is NumPy's; streams, events and graph capture do nothing but
keep the host clock (so the timing loops run); ``random.RandomState`` draws from NumPy's generator; the
device properties are those of a small fake GPU.
"""

from __future__ import annotations

import time
import types

import numpy as np


class _FakeStream:
    def __init__(self, non_blocking: bool = False) -> None:
        self.capturing = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self) -> None:
        pass

    def begin_capture(self, mode=None) -> None:
        self.capturing = True

    def end_capture(self):
        self.capturing = False
        return types.SimpleNamespace(launch=lambda stream=None: None)


class _FakeEvent:
    def record(self, stream=None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass


class _FakeRandomState:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def standard_normal(self, size, dtype=np.float32):
        return self.rng.standard_normal(size, dtype=dtype)

    def uniform(self, low, high, size, dtype=np.float32):
        return self.rng.uniform(low, high, size).astype(dtype)


def fake_cupy_module() -> types.ModuleType:
    """A module named cupy: NumPy's functions, and the CUDA parts the benchmark uses as stand-ins."""
    mod = types.ModuleType("cupy")
    mod.__getattr__ = lambda name: getattr(np, name)
    props = {"name": b"Fake GPU", "multiProcessorCount": 2, "l2CacheSize": 1 << 16, "major": 9, "minor": 0}
    runtime = types.SimpleNamespace(
        deviceSynchronize=lambda: None,
        getDeviceProperties=lambda i: props,
        runtimeGetVersion=lambda: 13000,
        driverGetVersion=lambda: 13000,
    )
    mod.cuda = types.SimpleNamespace(
        Stream=_FakeStream,
        Event=_FakeEvent,
        runtime=runtime,
        Device=lambda: types.SimpleNamespace(id=0),
        get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
    )
    mod.random = types.SimpleNamespace(RandomState=_FakeRandomState)
    mod.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    mod.__version__ = "fake"
    return mod
