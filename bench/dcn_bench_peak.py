"""Tensor-core peaks of the GPU for the DCNv2 benchmark (bench/dcn_bench.py): a size^3 torch matmul on
random data per precision, so that every row's share of the peak is against its own type's peak.

FP32 (TF32 off), TF32 (FP32 inputs, TF32 allowed), FP16 and BF16: ``torch.matmul``; INT8:
``torch._int_mm`` (INT32 sums); FP8 E4M3: ``torch._scaled_mm`` (unit scales, FP16 output). PyTorch is
imported inside the function, so importing this module needs no GPU library.
"""

from __future__ import annotations

from collections.abc import Callable


def _median_seconds(fn: Callable[[], object], reps: int) -> float:
    """Median device time of ``fn`` over ``reps`` calls (each between two events), after 3 warm-ups."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    times.sort()
    return times[len(times) // 2]


def matmul_peak(name: str, size: int, reps: int) -> float:
    """TFLOP/s (TOP/s for INT8) of a ``size``^3 matmul in precision ``name`` (fp32, tf32, fp16, bf16,
    int8, fp8e4m3), the median of ``reps`` timed calls."""
    import torch

    if name == "int8":
        a = torch.randint(-128, 128, (size, size), device="cuda", dtype=torch.int8)
        b = torch.randint(-128, 128, (size, size), device="cuda", dtype=torch.int8)
        return 2.0 * size**3 / _median_seconds(lambda: torch._int_mm(a, b.t()), reps) / 1e12
    if name == "fp8e4m3":
        a = torch.randn(size, size, device="cuda", dtype=torch.float16).to(torch.float8_e4m3fn)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16).to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device="cuda")

        def fp8() -> object:  # the second operand column-major, as _scaled_mm requires
            return torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.float16)

        return 2.0 * size**3 / _median_seconds(fp8, reps) / 1e12
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(name, torch.float32)
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if name == "tf32" else "highest")
    try:
        a = torch.randn(size, size, device="cuda", dtype=dtype)
        b = torch.randn(size, size, device="cuda", dtype=dtype)
        c = torch.empty(size, size, device="cuda", dtype=dtype)
        return 2.0 * size**3 / _median_seconds(lambda: torch.matmul(a, b, out=c), reps) / 1e12
    finally:
        torch.set_float32_matmul_precision(old)
