"""The CUDA core on a GPU against the float64 NumPy reference, over the case grid of
tests/support/core_cases.py (its docstring states the error bounds)."""

from __future__ import annotations

import numpy as np
import pytest
from support import core
from support.core_cases import (
    CASES,
    DTYPES,
    FIXED_CASES,
    U_TF32,
    Case,
    check_close,
    device_has_fused,
    ensure_core_built,
    expect_fused,
    fused_applies,
    inputs_refs,
    make_inputs,
    params_for,
    record_summary,
    run_core,
    to_device,
)


@pytest.fixture(scope="module")
def lib():
    return core.load(ensure_core_built())


@pytest.mark.gpu
@pytest.mark.parametrize(
    "algo", [core.ALGO_AUTO, core.ALGO_SIMPLE, core.ALGO_FUSED], ids=["auto", "simple", "fused"]
)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_core_matches_reference(lib, case: Case, dtype: str, algo: int) -> None:
    if algo == core.ALGO_FUSED and not fused_applies(case):
        pytest.skip("the fused kernel needs an input plane of at least 2 x 2 (AUTO runs the simple kernel)")
    if algo == core.ALGO_FUSED and not device_has_fused():
        pytest.skip("the fused kernel needs compute capability 8.0+ (AUTO runs the simple kernel)")
    inputs, ref, absref = inputs_refs(case, dtype)
    out = run_core(lib, case, dtype, inputs, algo)
    fused16 = expect_fused(case, dtype, algo) and dtype != "float32"
    numbers = check_close(out, ref, dtype, absref if fused16 else None)
    record_summary({"test": "grid", "case": case.name, "dtype": dtype, "algo": algo, **numbers})


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fused_tf32_mode(lib, case: Case) -> None:
    """The opt-in TF32 mode: both operands rounded to TF32 (u = 2^-11), FP32 accumulation."""
    if not (fused_applies(case) and device_has_fused()):
        pytest.skip("the fused kernel does not take this case on this device")
    inputs, ref, absref = inputs_refs(case, "float32")
    out = run_core(lib, case, "float32", inputs, core.ALGO_FUSED, math=core.MATH_TF32)
    # weight and sample each rounded once: |w*s - tf32(w)*tf32(s)| <= (2u + u^2) |w| |s|
    numbers = check_close(out, ref, "float32", absref, u_operand=2 * U_TF32 + U_TF32**2)
    record_summary({"test": "tf32", "case": case.name, "dtype": "float32", **numbers})


@pytest.mark.gpu
def test_repeat_runs_are_bit_identical(lib) -> None:
    case = FIXED_CASES[9]
    for dtype in DTYPES:
        inputs = make_inputs(case, dtype, "repeat")
        a = run_core(lib, case, dtype, inputs)
        b = run_core(lib, case, dtype, inputs)
        assert np.array_equal(a, b), f"{dtype}: two runs on the same inputs differ (a race?)"


@pytest.mark.gpu
def test_bad_params_raise_with_field_name(lib) -> None:
    import cupy

    from dcnconvert.errors import ValidationError

    case = FIXED_CASES[2]
    inputs = make_inputs(case, "float32")
    dev = {k: (None if v is None else to_device(v, "float32")) for k, v in inputs.items()}
    p = params_for(case, "float32")
    p.strideW = 0
    with pytest.raises(ValidationError, match="strideW = 0"):
        core.forward(
            p,
            dev["x"],
            dev["offset"],
            dev["mask"],
            dev["weight"],
            dev["bias"],
            cupy.empty((1,), cupy.float32),
            lib=lib,
            check=False,
        )
