"""Cases and checks for the CUDA core (build/libdcnconvert_core.so) on a GPU against the float64 NumPy
reference.

CuPy holds the device buffers and calls ``dcnForward`` through :mod:`support.core`.
Each case draws fresh seeded random inputs (never zeros), rounds them to the dtype under test and
compares the output with ``support.reference.modulated_deform_conv2d`` evaluated in float64 on
the SAME rounded inputs. What remains is the core's own arithmetic, hence the bounds:

* FP32 (simple kernel, and the fused kernel's default 3xTF32 mode):
  ``||out - ref|| / ||ref|| <= 1e-5`` and ``max|out - ref| <= 2e-5 * max|ref|``
  (FP32 accumulation over K <= 800 terms is ~1e-7 relative).
* FP16 / BF16, simple kernel (FP32 sampling and accumulation, one rounding of the output):
  elementwise ``|out - ref| <= u * |ref| + 1e-5 * max|ref| + 2^-24`` with the unit roundoff
  u = 2^-11 (FP16) or 2^-8 (BF16); this implies a relative L2 error <= u + 1e-5.
* The fused tensor-core kernel rounds each sampled value once more, to the MMA operand type
  (FP16/BF16; TF32 with u = 2^-11 in the opt-in TF32 mode), before the FP32-accumulating product.
  Each product then moves by at most u * |w| * |s|, so the elementwise bound gains
  ``u * absref`` where absref = the reference on |x|, |weight| (mask >= 0), no bias, i.e. the sum of
  |w| * |s|; the relative L2 bound becomes u + u * ||absref|| / ||ref|| + 1e-5 (triangle inequality).
  Callers pass ``absref`` to :func:`check_close` for outputs of the fused kernel.
  In FP16 the channel-vectorised fused kernel interpolates in FP16 itself: the four corner
  weights are rounded to FP16, then one product and three fused multiply-adds, each rounded. The
  sample s = sum_q w_q c_q then moves by at most ((1 + u)^5 - 1) * sum_q w_q |c_q|, and absref (on
  |x|) is exactly the sum of |w| * sum_q w_q |c_q|; so the operand allowance is (1 + u)^5 - 1
  instead of u (:data:`U_PACKED`), the default for FP16 fused outputs (the NCHW fused kernel sums
  in FP32: its tests pass u). Weights and products below FP16's normal range (2^-14) round with an
  absolute error of up to 2^-25 instead of a relative one; over the reduction that stays far
  below the 1e-5 * max|ref| + 2^-24 terms of the bound.

Every run starts from a NaN-poisoned output followed by a guard region; afterwards no NaN may
remain and the guard must be untouched. Set ``DCN_CORE_SUMMARY=<file>`` to append one JSON line per
checked run (used by bench/gpu_check.sh for the summary table).

The cases and helpers (this module) are shared by tests/test_core_gpu*.py,
tests/test_plugin_harness.py (``check_close``) and bench/.
"""

from __future__ import annotations

import json
import os
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import find_nvcc

from support import core

REPO = Path(__file__).resolve().parents[2]
GUARD = 4099  # elements after the output that must stay untouched

U_FP16 = 2.0**-11
U_BF16 = 2.0**-8
U_TF32 = 2.0**-11
U_PACKED = {"float16": (1 + U_FP16) ** 5 - 1}
FP32_REL_L2 = 1e-5
FP32_MAX_REL = 2e-5
FP32_PART = 1e-5  # allowance for the FP32 arithmetic in FP16/BF16 runs, relative to max|ref|

DTYPES = {"float32": core.FLOAT32, "float16": core.FLOAT16, "bfloat16": core.BFLOAT16}


# ----------------------------------------------------------------------------------------------
# cases


@dataclass(frozen=True)
class Case:
    """One DCN problem. Pairs are (h, w)."""

    name: str
    n: int
    c: int
    h: int
    w: int
    cout: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    group: int = 1
    dg: int = 1
    bias: bool = True
    off_scale: float = 1.0
    edge: bool = False  # offsets on a grid of halves: exact borders (y = -1, y = H - 1, ...)
    mask_lo: float = 0.0  # masks uniform in [mask_lo, 1] (quantized cases; -1: INT8's FP16 samples too)

    @property
    def out_hw(self) -> tuple[int, int]:
        return (
            core.output_size(self.h, self.kernel[0], self.stride[0], self.padding[0], self.dilation[0]),
            core.output_size(self.w, self.kernel[1], self.stride[1], self.padding[1], self.dilation[1]),
        )


FIXED_CASES: list[Case] = [
    Case("spatial1x1", 1, 4, 1, 1, 4, (1, 1)),
    Case("spatial1x1_k3_pad1", 2, 4, 1, 1, 6, (3, 3), padding=(1, 1), off_scale=0.4),
    Case("g2_dg2_k3", 2, 8, 7, 9, 6, (3, 3), padding=(1, 1), group=2, dg=2, bias=False, off_scale=2.0),
    Case("nonsquare_all", 3, 8, 16, 12, 8, (3, 3), (2, 1), (1, 2), (1, 2), group=4, dg=2, off_scale=3.0),
    Case("k5_nonsquare", 4, 16, 13, 17, 8, (5, 5), (1, 2), (2, 1), (2, 1), dg=4, off_scale=4.0),
    Case("k1x3", 1, 6, 10, 10, 4, (1, 3), padding=(0, 1), group=2, bias=False, off_scale=1.5),
    Case("far_outside", 2, 4, 9, 5, 8, (3, 3), (3, 2), group=4, dg=4, off_scale=8.0),
    Case("edges_exact", 2, 4, 6, 7, 4, (3, 3), padding=(2, 1), dg=2, edge=True),
    Case("big_256", 1, 8, 256, 256, 16, (3, 3), padding=(1, 1), off_scale=2.0),
    Case("big_256_s2_g4", 2, 8, 256, 200, 8, (3, 3), (2, 2), (1, 1), group=4, dg=4, off_scale=3.0),
    Case("cout70_k27", 1, 3, 40, 48, 70, (3, 3), padding=(1, 1)),
    Case("cout130_g2", 2, 32, 20, 20, 130, (3, 3), padding=(1, 1), group=2, dg=2),
    Case("cout128_tiles", 1, 16, 33, 47, 128, (3, 3), padding=(1, 1), dg=2, off_scale=2.0),
    Case("cg1_k5_g4", 2, 4, 11, 13, 8, (5, 5), padding=(2, 2), group=4, dg=4, off_scale=2.0),
    Case("pad_bigger_than_input", 1, 2, 2, 3, 3, (3, 3), padding=(2, 2), dilation=(2, 1), off_scale=0.5),
    Case("k1_s2_dg2", 1, 4, 5, 4, 4, (1, 1), (2, 2), dg=2, bias=False),
]


def random_cases(count: int, seed: int) -> list[Case]:
    rng = np.random.default_rng(seed)
    cases: list[Case] = []
    kernels = [(1, 1), (3, 3), (5, 5), (1, 3)]
    while len(cases) < count:
        group = int(rng.choice([1, 2, 4]))
        dg = int(rng.choice([1, 2, 4]))
        c = int(np.lcm(group, dg)) * int(rng.integers(1, 4))
        cout = group * int(rng.integers(1, 6))
        kernel = kernels[int(rng.integers(len(kernels)))]
        stride = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        padding = (int(rng.integers(0, 4)), int(rng.integers(0, 4)))
        dilation = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        h, w = int(rng.integers(1, 41)), int(rng.integers(1, 41))
        case = Case(
            f"rand{len(cases)}",
            int(rng.integers(1, 5)),
            c,
            h,
            w,
            cout,
            kernel,
            stride,
            padding,
            dilation,
            group,
            dg,
            bool(rng.integers(2)),
            float(rng.choice([0.5, 2.0, 6.0])),
        )
        if min(case.out_hw) >= 1:
            cases.append(case)
    return cases


CASES: list[Case] = FIXED_CASES + random_cases(12, seed=20240603)


# ----------------------------------------------------------------------------------------------
# inputs and rounding


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 copy of ``values`` rounded to ``dtype`` (what the kernel actually reads)."""
    f32 = np.asarray(values, dtype=np.float32)
    if dtype == "float32":
        return f32.astype(np.float64)
    if dtype == "float16":
        return f32.astype(np.float16).astype(np.float64)
    return core.bf16_bits_to_float(core.float_to_bf16_bits(f32)).astype(np.float64)


def to_device(values64: np.ndarray, dtype: str):
    """Device array of ``values64`` (already representable) in ``dtype`` (BF16 as uint16 bits)."""
    import cupy

    if dtype == "float32":
        return cupy.asarray(values64.astype(np.float32))
    if dtype == "float16":
        return cupy.asarray(values64.astype(np.float16))
    return cupy.asarray(core.float_to_bf16_bits(values64.astype(np.float32)))


def from_device(arr, dtype: str) -> np.ndarray:
    host = arr.get()
    if dtype == "bfloat16":
        return core.bf16_bits_to_float(host).astype(np.float64)
    return host.astype(np.float64)


def make_inputs(case: Case, dtype: str, seed_extra: str = "") -> dict[str, np.ndarray | None]:
    """Seeded random inputs for ``case``, rounded to ``dtype``, as float64 host arrays."""
    seed = zlib.crc32(f"{case.name}/{dtype}/{seed_extra}".encode())
    rng = np.random.default_rng(seed)
    kh, kw = case.kernel
    ho, wo = case.out_hw
    kk = kh * kw
    x = rng.standard_normal((case.n, case.c, case.h, case.w))
    if case.edge:
        offset = rng.integers(-6, 7, size=(case.n, 2 * case.dg * kk, ho, wo)) * 0.5
    else:
        offset = rng.standard_normal((case.n, 2 * case.dg * kk, ho, wo)) * case.off_scale
    mask = rng.uniform(0.0, 1.0, (case.n, case.dg * kk, ho, wo))
    fan_in = (case.c // case.group) * kk
    weight = rng.standard_normal((case.cout, case.c // case.group, kh, kw)) / np.sqrt(fan_in)
    bias = rng.standard_normal(case.cout) if case.bias else None
    out = {"x": x, "offset": offset, "mask": mask, "weight": weight, "bias": bias}
    return {k: (None if v is None else round_to(v, dtype)) for k, v in out.items()}


def reference(case: Case, inputs: dict[str, np.ndarray | None]) -> np.ndarray:
    """support.reference (helper B's float64 NumPy implementation)."""
    from support.reference import modulated_deform_conv2d

    return modulated_deform_conv2d(
        inputs["x"],
        inputs["offset"],
        inputs["mask"],
        inputs["weight"],
        inputs["bias"],
        stride=case.stride,
        padding=case.padding,
        dilation=case.dilation,
        group=case.group,
        deformable_group=case.dg,
    )


def abs_reference(case: Case, inputs: dict[str, np.ndarray | None]) -> np.ndarray:
    """Sum of |weight| * |sample| per output element (the reference on |x|, |mask|, |weight|, no bias)."""
    absed = {k: (None if v is None or k == "offset" else np.abs(v)) for k, v in inputs.items()}
    absed["offset"] = inputs["offset"]
    absed["bias"] = None
    return reference(case, absed)


# ----------------------------------------------------------------------------------------------
# fixtures and helpers


def _core_sources() -> list[Path]:
    return sorted((REPO / "plugin_src" / "core").glob("*")) + [REPO / "plugin_src" / "Makefile"]


def ensure_core_built() -> Path:
    """Path of the core library, rebuilt with `make core` when missing or older than its sources."""
    lib = core.library_path()
    if os.environ.get(core.LIBRARY_ENV):
        if not lib.is_file():
            pytest.skip(f"{core.LIBRARY_ENV}={lib} does not exist")
        return lib
    stale = not lib.is_file() or lib.stat().st_mtime < max(p.stat().st_mtime for p in _core_sources())
    if stale:
        nvcc = find_nvcc()
        if nvcc is None:
            if not lib.is_file():
                pytest.skip("build/libdcnconvert_core.so is missing and nvcc is not on PATH to build it")
            return lib
        proc = subprocess.run(
            ["make", "-C", str(REPO), f"-j{os.cpu_count() or 1}", "core", f"NVCC={nvcc}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(f"make core failed:\n{proc.stdout}\n{proc.stderr}")
    return lib


def record_summary(entry: dict) -> None:
    path = os.environ.get("DCN_CORE_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


def params_for(
    case: Case, dtype: str, algo: int = core.ALGO_AUTO, math: int = core.MATH_ACCURATE
) -> core.DcnParams:
    return core.make_params(
        (case.n, case.c, case.h, case.w),
        (case.cout, case.c // case.group, *case.kernel),
        stride=case.stride,
        padding=case.padding,
        dilation=case.dilation,
        group=case.group,
        deformable_group=case.dg,
        with_bias=case.bias,
        dtype=DTYPES[dtype],
        algo=algo,
        math=math,
    )


def poisoned_output(shape: tuple[int, ...], dtype: str):
    """(full buffer, output view): NaN everywhere, GUARD extra elements after the output."""
    import cupy

    count = int(np.prod(shape))
    if dtype == "bfloat16":
        buf = cupy.full(count + GUARD, 0x7FC1, dtype=cupy.uint16)
    else:
        buf = cupy.full(count + GUARD, np.nan, dtype=dtype)
    return buf, buf[:count].reshape(shape)


def guard_intact(buf, count: int, dtype: str) -> bool:
    tail = buf[count:].get()
    if dtype == "bfloat16":
        return bool((tail == 0x7FC1).all())
    return bool(np.isnan(tail).all())


def fused_applies(case: Case) -> bool:
    """Whether the fused kernel takes this case (it needs an input plane of at least 2 x 2)."""
    return case.h >= 2 and case.w >= 2


def run_core(
    lib,
    case: Case,
    dtype: str,
    inputs,
    algo: int = core.ALGO_AUTO,
    stream=None,
    math: int = core.MATH_ACCURATE,
    *,
    channel_last: bool = False,
    prepared: bool = False,
) -> np.ndarray:
    """Runs the core on ``inputs`` and returns the output as float64 (checks poison and guard).

    ``channel_last``: x goes in as NHWC (``DcnParams.xLayout``); ``prepared``: the weights go in
    prepared by ``dcnPrepareWeights`` (``DcnParams.weightLayout``)."""
    import cupy

    p = params_for(case, dtype, algo, math)
    status, msg = core.validate(p, lib)
    assert status == core.SUCCESS, msg
    stream = stream or cupy.cuda.Stream(non_blocking=True)
    try:
        with stream:  # uploads, poison and kernel all on one stream
            dev = {k: (None if v is None else to_device(v, dtype)) for k, v in inputs.items()}
            x, weight = dev["x"], dev["weight"]
            if channel_last:
                p.xLayout = core.LAYOUT_NHWC
                x = cupy.ascontiguousarray(x.transpose(0, 2, 3, 1))
            if prepared:
                weight = core.prepare_weights(p, weight, lib)
                p.weightLayout = core.WEIGHT_PREPARED
            buf, out = poisoned_output((p.n, p.cout, p.ho, p.wo), dtype)
            core.forward(p, x, dev["offset"], dev["mask"], weight, dev["bias"], out, lib=lib)
    finally:
        # A refused call leaves the uploads and the poison fill queued (see core_quant.run).
        stream.synchronize()
    assert guard_intact(buf, out.size, dtype), "the kernel wrote past the end of the output"
    result = from_device(out, dtype)
    unwritten = int(np.isnan(result).sum())
    assert unwritten == 0, f"{unwritten} of {result.size} output elements were not written"
    return result


def check_close(
    out: np.ndarray,
    ref: np.ndarray,
    dtype: str,
    absref: np.ndarray | None = None,
    u_operand: float | None = None,
) -> dict:
    """Asserts the per-dtype bound (module docstring); returns the error numbers.

    ``absref`` (with ``u_operand``; default :data:`U_PACKED` for FP16, else u) adds the allowance for
    the fused kernel's rounding of every sampled value to the MMA operand type (module docstring).
    """
    err = out - ref
    ref_norm = float(np.linalg.norm(ref))
    ref_max = float(np.abs(ref).max())
    assert ref_norm > 0, "degenerate reference (all zeros): the case tests nothing"
    rel_l2 = float(np.linalg.norm(err)) / ref_norm
    max_rel = float(np.abs(err).max()) / ref_max
    if dtype == "float32" and absref is None:
        assert rel_l2 <= FP32_REL_L2, f"relative L2 error {rel_l2:.3e} > {FP32_REL_L2}"
        assert max_rel <= FP32_MAX_REL, f"max error {max_rel:.3e} * max|ref| > {FP32_MAX_REL}"
        bound = FP32_REL_L2
    else:
        u = {"float32": 0.0, "float16": U_FP16, "bfloat16": U_BF16}[dtype]
        allowed = u * np.abs(ref) + FP32_PART * ref_max + 2.0**-24
        bound = u + FP32_PART
        if absref is not None:
            uo = U_PACKED.get(dtype, u) if u_operand is None else u_operand
            allowed = allowed + uo * absref
            bound += uo * float(np.linalg.norm(absref)) / ref_norm
        worst = float((np.abs(err) / allowed).max())
        assert worst <= 1.0, f"elementwise error exceeds the allowed bound by x{worst:.3f}"
        assert rel_l2 <= bound, f"relative L2 error {rel_l2:.3e} > {bound:.3e}"
    return {"rel_l2": rel_l2, "max_abs_over_max_ref": max_rel, "bound": bound}


_REF_CACHE: dict[tuple[str, str], tuple[dict, np.ndarray, np.ndarray]] = {}


def inputs_refs(case: Case, dtype: str) -> tuple[dict, np.ndarray, np.ndarray]:
    """(inputs, reference, abs_reference) of ``case`` in ``dtype``, computed once per session."""
    key = (case.name, dtype)
    if key not in _REF_CACHE:
        inputs = make_inputs(case, dtype)
        _REF_CACHE[key] = (inputs, reference(case, inputs), abs_reference(case, inputs))
    return _REF_CACHE[key]


def inputs_and_ref(case: Case, dtype: str) -> tuple[dict, np.ndarray]:
    inputs, ref, _ = inputs_refs(case, dtype)
    return inputs, ref


def expect_fused(case: Case, dtype: str, algo: int) -> bool:
    """Whether the output of ``algo`` on ``case`` comes from the fused kernel (on sm_80+)."""
    return algo != core.ALGO_SIMPLE and fused_applies(case) and device_has_fused()


def device_cc() -> int:
    """The current device's compute capability as major * 10 + minor (e.g. 90)."""
    import cupy

    return int(cupy.cuda.Device().compute_capability)


def device_has_fused() -> bool:
    return device_cc() >= 80


def device_has_tma() -> bool:
    """Compute capability 9.0+: the fused kernel's TMA tiles run (plugin_src/core/dcnFusedTma.cuh)."""
    import cupy

    return int(cupy.cuda.Device().compute_capability) >= 90


def device_has_wgmma() -> bool:
    """Compute capability 9.x: the fused kernel's warpgroup-MMA tiles run (sm_90a code)."""
    import cupy

    return int(cupy.cuda.Device().compute_capability) // 10 == 9


# ----------------------------------------------------------------------------------------------
