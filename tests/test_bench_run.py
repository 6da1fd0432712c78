"""CPU run of bench/dcn_bench.py end to end, with NumPy standing in for CuPy (tests/support/fake_cupy.py):
dcn_bench_gpu.py's real input generation, BF16/FP16 conversions, error metrics and CUDA-graph
timing loop, and dcn_bench_quant.py's quantized inputs, Q/DQ reference and bound; the
implementations write the float64 NumPy reference rounded to each precision (one quantized row
beyond its bound). Also checks the baseline library's ctypes signatures against the C prototypes
in bench/baseline/im2col_cublas.cu. No GPU, CuPy or PyTorch is needed or imported.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import bench_shapes as bs  # noqa: E402
import dcn_bench  # noqa: E402
import dcn_bench_gpu as gpu  # noqa: E402
import dcn_bench_peak  # noqa: E402
import dcn_bench_plot  # noqa: E402
import dcn_bench_quant as quant  # noqa: E402
from support import core  # noqa: E402
from support.fake_cupy import fake_cupy_module  # noqa: E402
from support.reference import modulated_deform_conv2d  # noqa: E402


@pytest.fixture
def fake_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy_module())


def test_bf16_and_fp16_storage_round_like_the_core(fake_cupy):
    rng = np.random.default_rng(3)
    vals = np.concatenate(
        [
            rng.standard_normal(4000).astype(np.float32) * 7,
            np.array([1.00390625, 1.01171875, -3.0e38, 1e-40, -0.0], np.float32),
        ]
    )
    bf16 = bs.PRECISIONS[3]
    bits = gpu.to_storage(vals, bf16)
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(bits, core.float_to_bf16_bits(vals))
    np.testing.assert_array_equal(gpu.to_float(bits, bf16), core.bf16_bits_to_float(bits).astype(np.float64))
    fp16 = bs.PRECISIONS[2]
    np.testing.assert_array_equal(gpu.to_storage(vals[:4000], fp16), vals[:4000].astype(np.float16))
    out = np.empty(5, np.uint16)
    gpu.poison(out, bf16)
    assert np.isnan(gpu.to_float(out, bf16)).all()


def test_errors_metrics(fake_cupy):
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((2, 3, 4, 5))
    out = ref + 1e-3 * rng.standard_normal(ref.shape)
    e = gpu.errors(out, ref)
    assert e["nonfinite"] == 0
    assert e["max_rel_err"] == pytest.approx(np.abs(out - ref).max() / np.abs(ref).max())
    assert e["rel_l2"] == pytest.approx(np.linalg.norm(out - ref) / np.linalg.norm(ref))
    out[0, 0, 0, 0] = np.nan
    assert gpu.errors(out, ref) == {"max_rel_err": None, "rel_l2": None, "nonfinite": 1}


TINY = (
    bs.Shape("tiny-a", "test", 2, 8, 9, 11, 6, bias=True),
    bs.Shape("tiny-s2", "test", 1, 4, 12, 10, 8, stride=2, dg=2),
)


def _ref64(shape, prec, st):
    f = {k: (None if v is None else gpu.to_float(v, prec)) for k, v in st.items() if k != "out"}
    attrs = {"stride": shape.stride, "padding": shape.pad, "dilation": shape.dilation}
    args = (f["x"], f["offset"], f["mask"], f["weight"], f["bias"])
    return modulated_deform_conv2d(*args, **attrs, group=shape.group, deformable_group=shape.dg)


def _fake_gpu() -> types.ModuleType:
    """dcn_bench_gpu with the real make_set, errors, poison, conversions and time_cupy (on the fake
    CuPy), and implementations that write the float64 reference rounded to the precision."""
    mod = types.ModuleType("dcn_bench_gpu")
    mod.__dict__.update(gpu.__dict__)

    def core_impl(lib, shape, prec, algo, engine=False):
        def call(st):
            if (algo == core.ALGO_FUSED and prec.name == "tf32") or algo == core.ALGO_FUSED_TILE + 1:
                raise gpu.ImplError("unsupported", "kDCN_UNSUPPORTED: not yet")
            st["out"][...] = gpu.to_storage(_ref64(shape, prec, st).astype(np.float32), prec)

        return call

    def torchvision_impl(shape):
        prec = {np.dtype(p.storage): p for p in bs.PRECISIONS if p.name != "tf32"}

        def call(t):
            if t["x"].dtype == np.uint16:
                raise RuntimeError("\"deformable_im2col\" not implemented for 'BFloat16'")
            return types.SimpleNamespace(double=lambda: _ref64(shape, prec[t["x"].dtype], t))

        return call

    def time_torch(call, tsets, calls, budget):
        for r in range(calls):
            call(tsets[r % len(tsets)])
        return {
            "us": 5.0,
            "us_p10": 4.0,
            "us_p90": 6.0,
            "calls": calls,
            "replays": 3,
            "method": "torch-graph",
        }

    mod.core_impl = core_impl
    mod.baseline_impl = lambda lib, shape, prec: core_impl(lib, shape, prec, core.ALGO_SIMPLE)
    mod.torch_sets = lambda sets, prec: sets
    mod.torchvision_impl = torchvision_impl
    mod.time_torch = time_torch
    mod.reference = _ref64

    def dcn64(shape, f):
        attrs = {"stride": shape.stride, "padding": shape.pad, "dilation": shape.dilation}
        args = (f["x"], f["offset"], f["mask"], f["weight"], f["bias"])
        return modulated_deform_conv2d(*args, **attrs, group=shape.group, deformable_group=shape.dg)

    mod.dcn64 = dcn64
    return mod


PEAKS = {"fp32": 50.0, "tf32": 400.0, "fp16": 700.0, "bf16": 720.0, "int8": 900.0, "fp8e4m3": 1400.0}


def _fake_quant_impl(fake_gpu, over: tuple[str, str]):
    """quant.core_impl writing the Q/DQ model rounded to FP16; on the layer and precision ``over`` one
    output element off by twice its bound."""

    def core_impl(gpu_mod, lib, shape, prec, x_scale):
        assert gpu_mod is fake_gpu and x_scale > 0

        def call(st):
            if "ref" not in st:
                st["ref"] = quant.reference(gpu_mod, shape, prec, st)
            out = st["ref"]["qdq_host"].copy()
            if (shape.name, prec.name) == over:
                out[0, 0, 0, 0] += 2.0 * st["ref"]["bound"][0, 0, 0, 0]
            st["out"][...] = out.astype(np.float16)

        return call

    return core_impl


def test_main_end_to_end_on_fakes(fake_cupy, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "dcn_bench_gpu", _fake_gpu())
    monkeypatch.setattr(dcn_bench_peak, "matmul_peak", lambda name, size, reps: PEAKS[name])
    monkeypatch.setattr(bs, "SHAPES", TINY)
    base = types.SimpleNamespace(baselineCublasVersion=lambda: 130100)
    corelib = types.SimpleNamespace(dcnFusedTileCount=lambda: 2)
    monkeypatch.setattr(
        dcn_bench, "load_libs", lambda args: {"core": corelib, "baseline": base, "errors": {}}
    )
    assert dcn_bench.main(["--quick", "--tiles", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert (
        res["meta"]["gpu"] == "Fake GPU" and res["meta"]["cublas"] == 130100 and res["peak"]["fp16"] == 700.0
    )
    rows = {(r["shape"], r["precision"], r["impl"]): r for r in res["rows"]}
    # per shape: fp32, fp16, bf16 x 5 implementations (torchvision bf16 as n/a), tf32 x 2 (fused paths)
    assert len(rows) == len(res["rows"]) == 2 * 17
    bounds = {"fp32": 1e-6, "fp16": 2.0**-11, "bf16": 2.0**-8}
    for (_shape, prec, impl), r in rows.items():
        if prec == "tf32" or (impl == "torchvision" and prec == "bf16"):
            assert r["status"] == ("unsupported" if prec == "tf32" else "n/a"), r
            continue
        assert r["status"] == "ok", r
        assert r["nonfinite"] == 0 and r["max_rel_err"] <= bounds[prec] and r["rel_l2"] <= bounds[prec]
        assert impl == "torchvision" or r["max_rel_err"] > 0  # rounded to the precision, read back
        assert r["method"] == ("torch-graph" if impl == "torchvision" else "graph")
        assert r["calls"] % r["sets"] == 0 and r["calls"] >= 16 and 3 <= r["replays"] <= 5
    assert len(res["tiles"]) == 2 * 4 * 2
    assert {t["status"] for t in res["tiles"] if t["tile"] == 1} == {"unsupported"}
    assert all(t["status"] == "ok" for t in res["tiles"] if t["tile"] == 0 and t["precision"] != "tf32")
    out = capsys.readouterr().out
    tail = out.strip().splitlines()
    assert tail[-1].startswith("us = device time") and any(ln.startswith("tiny-s2 ") for ln in tail[-12:])
    assert "| tiny-a |" in (tmp_path / "results.md").read_text()

    docs = tmp_path / "benchmarks.md"
    assert (
        dcn_bench_plot.main([str(tmp_path / "results.json"), "--docs", str(docs), "--command", "bash x.sh"])
        == 0
    )
    text = docs.read_text()
    assert "**Fake GPU**" in text and "bash x.sh" in text and "| tiny-s2 |" in text and "Acceptance" in text
    assert dcn_bench_plot.panel_series(res, "fp16")[0] == ["tiny-a", "tiny-s2"]

    # a time limit already spent: no shape runs, the summary is still printed and written
    assert (
        dcn_bench.main(["--quick", "--tiles", "--no-peak", "--time-limit", "1e-9", "--out", str(tmp_path)])
        == 0
    )
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["rows"] == [] and res["meta"]["skipped"] == [
        "tiny-a",
        "tiny-s2",
        "tiny-a tiles",
        "tiny-s2 tiles",
    ]
    assert "SKIPPED by --time-limit: tiny-a" in capsys.readouterr().out
    assert "Not run (time limit): tiny-a" in (tmp_path / "results.md").read_text()


def test_quantized_rows_end_to_end_on_fakes(fake_cupy, monkeypatch, tmp_path, capsys):
    """FP16, INT8 and FP8 in one run: the 8-bit precisions run the engine rows only (and say so),
    each row's share of the peak is against its own type's peak, the Q/DQ bound flags the one row
    written beyond it, and the INT8/FP8 table and bars are printed and written."""
    fake = _fake_gpu()
    monkeypatch.setitem(sys.modules, "dcn_bench_gpu", fake)
    monkeypatch.setattr(dcn_bench_peak, "matmul_peak", lambda name, size, reps: PEAKS[name])
    monkeypatch.setattr(quant, "core_impl", _fake_quant_impl(fake, ("tiny-s2", "fp8e4m3")))
    monkeypatch.setattr(quant, "auto_name", lambda lib, p, meta: f"q{p.quant}-{p.xLayout}{p.weightLayout}")
    monkeypatch.setattr(bs, "SHAPES", TINY)
    corelib = types.SimpleNamespace(dcnFusedTileCount=lambda: 2)
    libs = {"core": corelib, "baseline": None, "errors": {}}
    monkeypatch.setattr(dcn_bench, "load_libs", lambda args: libs)
    argv = ["--quick", "--precisions", "fp16,int8,fp8e4m3", "--impls", "fused-engine,simple"]
    argv += ["--out", str(tmp_path)]
    assert dcn_bench.main(argv) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["peak"] == {"fp16": 700.0, "int8": 900.0, "fp8e4m3": 1400.0}
    rows = {(r["shape"], r["precision"], r["impl"]): r for r in res["rows"]}
    assert set(rows) == {
        (s.name, prec, impl)
        for s in TINY
        for prec, impl in (("fp16", "fused-engine"), ("fp16", "simple"), ("int8", "fused-engine"),
                           ("fp8e4m3", "fused-engine"))
    }
    assert res["meta"]["not_run"] == [
        "int8, fp8e4m3 with simple: only the engine path of the core (fused-engine) takes 8-bit x and "
        "weights (x channel-last, weights prepared once)"
    ]
    for (shape, prec, impl), r in rows.items():
        assert r["status"] == "ok" and r["method"] == "graph", r
        assert r["frac_peak"] == pytest.approx(r["tflops"] / PEAKS[prec])
        if impl == "fused-engine":  # AUTO of the engine problem: x channel-last (1), weights prepared (1)
            assert r["auto"] == f"q{bs.QUANT_CODES.get(prec, 0)}-11"
        if prec == "fp16":
            assert "err_over_bound" not in r
            continue
        # FP16 rounding of the Q/DQ output: within 2^-11 relative, far inside the bound
        if (shape, prec) == ("tiny-s2", "fp8e4m3"):
            assert r["within_bound"] is False and 1.5 < r["err_over_bound"] < 2.5, r
        else:
            assert r["within_bound"] is True and 0 < r["err_over_bound"] < 0.5, r
            assert 0 < r["rel_l2"] <= 2.0**-11
    out = capsys.readouterr().out
    assert "[not run] int8, fp8e4m3 with simple" in out
    assert "OVER THE Q/DQ BOUND: tiny-s2/fp8e4m3/fused-engine (x" in out
    assert "FAIL  engine path: fp8e4m3 error within the Q/DQ bound" in out
    assert "PASS  engine path: int8 error within the Q/DQ bound" in out
    assert "### INT8 and FP8" in out
    md = (tmp_path / "results.md").read_text()
    assert "### INT8 and FP8" in md and "**FAIL" in md and "Not run: int8, fp8e4m3 with simple" in md
    assert not any(ln.startswith("| tiny-a | test") and "| int8 |" in ln for ln in md.splitlines())


def _c_params(source: str, name: str) -> list[str]:
    """Parameter types of ``name`` in a C prototype of ``source`` (pointer-ness and base type)."""
    import re

    m = re.search(rf"\b{name}\s*\(([^)]*)\)", source)
    assert m, name
    params = [p.strip() for p in m.group(1).split(",") if p.strip() and p.strip() != "void"]
    return [re.sub(r"\s*\w+$", "", p).replace("const", "").replace(" ", "") for p in params]


def test_baseline_ctypes_signatures_match_the_source(monkeypatch):
    import ctypes

    source = (BENCH / "baseline" / "im2col_cublas.cu").read_text()
    fake = types.SimpleNamespace(
        baselineWorkspaceSize=types.SimpleNamespace(),
        baselineCublasVersion=types.SimpleNamespace(),
        baselineForward=types.SimpleNamespace(),
    )
    monkeypatch.setattr(ctypes, "CDLL", lambda path: fake)
    lib = gpu.load_baseline("libdcn_baseline.so")
    kinds = {
        "DcnParams*": ctypes.POINTER(core.DcnParams),
        "void*": ctypes.c_void_p,
        "size_t": ctypes.c_size_t,
        "size_t*": ctypes.POINTER(ctypes.c_size_t),
        "cudaStream_t": ctypes.c_void_p,
        "char*": ctypes.c_char_p,
    }
    for fn in ("baselineWorkspaceSize", "baselineCublasVersion", "baselineForward"):
        c_types = _c_params(source, fn)
        assert [kinds[t] for t in c_types] == getattr(lib, fn).argtypes, fn
        assert getattr(lib, fn).restype is ctypes.c_int
    assert len(_c_params(source, "baselineForward")) == 12
