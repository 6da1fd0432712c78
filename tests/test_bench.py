"""CPU tests of the DCNv2 benchmark's pure-Python parts (bench/bench_shapes.py, dcn_bench_report.py,
dcn_bench.py's arguments and orchestration, dcn_bench_plot.py) and of dcn_bench_gpu.py's array
helpers with NumPy standing in for CuPy. No GPU, CuPy or PyTorch is needed or imported: the
end-to-end test runs dcn_bench.main() against fake CuPy / implementations whose outputs come from
the float64 NumPy reference.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
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
import dcn_bench_plot  # noqa: E402
import dcn_bench_report as report  # noqa: E402

from dcnconvert import _core_ctypes as core  # noqa: E402
from dcnconvert.reference import modulated_deform_conv2d  # noqa: E402

# ------------------------------------------------------------------------------------------------
# shapes and sizing


def test_shape_table_matches_the_research_notes():
    names = [s.name for s in bs.SHAPES]
    assert len(names) == len(set(names)) == 18
    by = {s.name: s for s in bs.SHAPES}
    assert (by["r50-c3"].ho, by["r50-c3"].wo) == (100, 168)
    assert (by["r50-c3-s2"].h, by["r50-c3-s2"].stride, by["r50-c3-s2"].ho, by["r50-c3-s2"].wo) == (
        200,
        2,
        100,
        168,
    )
    assert (by["r50-c4"].c, by["r50-c4"].ho, by["r50-c4"].wo) == (256, 50, 84)
    assert (by["r50-c5"].c, by["r50-c5"].ho, by["r50-c5"].wo) == (512, 25, 42)
    assert (by["bev-c4"].n, by["bev-c4"].ho, by["bev-c4"].wo) == (6, 58, 100)
    assert (by["dla-ida0-proj"].c, by["dla-ida0-proj"].cout, by["dla-ida0-proj"].ho) == (512, 256, 16)
    assert (by["dbnet-c4"].ho, by["dbnet-c4"].wo) == (64, 114)
    assert (by["ocd-l2"].ho, by["ocd-l2"].wo) == (92, 160)
    for s in bs.SHAPES:
        assert (s.kernel, s.pad, s.dilation, s.group, s.dg) == (3, 1, 1, 1, 1)
        assert s.bias == s.name.startswith("dla-")  # CenterNet's DCN has a bias, ResNet's none
        assert s.ho == core.output_size(s.h, 3, s.stride, 1, 1)


@pytest.mark.parametrize(
    ("name", "flop"),
    [("r50-c4", 2 * 256 * 50 * 84 * 256 * 9), ("bev-c4", 2 * 6 * 256 * 58 * 100 * 256 * 9)],
)
def test_flop_count(name, flop):
    shape = next(s for s in bs.SHAPES if s.name == name)
    assert shape.flop == flop
    assert bs.tflops(shape.flop, 10.0) == pytest.approx(flop / 10e-6 / 1e12)
    assert bs.tflops(shape.flop, None) is None


def test_elements_and_set_bytes():
    s = bs.Shape("t", "m", 2, 8, 10, 12, 4, stride=2, bias=True, dg=2)
    e = s.elements()
    assert (s.ho, s.wo) == (5, 6)
    assert e == {
        "x": 2 * 8 * 120,
        "offset": 2 * 36 * 30,
        "mask": 2 * 18 * 30,
        "weight": 4 * 8 * 9,
        "bias": 4,
        "out": 2 * 4 * 30,
    }
    assert s.set_bytes(2) == 2 * sum(e.values())
    assert s.desc == "2x8->4@5x6 s2 from 10x12 +b"
    assert s.as_dict()["flop"] == s.flop


def test_select_globs_order_and_errors():
    got = bs.select(bs.SHAPES, "r50-c5,dla-*", "shape")
    assert [s.name for s in got][0] == "r50-c5" and all(s.name.startswith(("r50-c5", "dla-")) for s in got)
    assert len(got) == 8
    assert len(bs.select(bs.SHAPES, "", "shape")) == len(bs.SHAPES)
    assert [p.name for p in bs.select(bs.PRECISIONS, "bf16,fp32", "precision")] == ["fp32", "bf16"]
    with pytest.raises(ValueError, match="nothing|no shape matches 'r18'"):
        bs.select(bs.SHAPES, "r18", "shape")


@pytest.mark.parametrize("set_bytes", [1, 1000, 5 << 20, 37 << 20, 200 << 20])
def test_buffer_sets_exceed_twice_l2(set_bytes):
    l2 = 60 << 20
    n = bs.buffer_sets(set_bytes, l2, hi=10**9)
    assert n >= 2
    assert n * set_bytes > 2 * l2 or n == 2
    assert n == 2 or (n - 1) * set_bytes <= 2 * l2  # no more than needed
    assert bs.buffer_sets(set_bytes, l2, hi=5) <= 5
    calls = bs.calls_per_graph(min(n, 300), 16)
    assert calls % min(n, 300) == 0 and calls >= 16
    with pytest.raises(ValueError):
        bs.buffer_sets(0, l2)


def test_replays_for_bounds():
    assert bs.replays_for(0.01, 0.25, 10, 200) == 25
    assert bs.replays_for(1.0, 0.25, 10, 200) == 10
    assert bs.replays_for(1e-6, 0.25, 10, 200) == 200
    assert bs.replays_for(0.0, 0.25, 10, 200) == 200


# ------------------------------------------------------------------------------------------------
# reports


def _row(shape, prec, impl, us, **kw):
    row = {"shape": shape, "precision": prec, "impl": impl, "status": "ok", "us": us, "method": "graph"}
    row.update(tflops=4.95e9 / us / 1e6, frac_peak=0.5, max_rel_err=1e-4, rel_l2=5e-5)
    row.update(kw)
    return row


def _result():
    shapes = [s.as_dict() for s in bs.SHAPES if s.name in ("r50-c4", "bev-c4")]
    rows = [
        _row("r50-c4", "fp16", "fused", 10.0, frac_peak=0.45),
        _row("r50-c4", "fp16", "simple", 80.0),
        _row("r50-c4", "fp16", "baseline", 75.0),
        _row("r50-c4", "fp16", "torchvision", 150.0, method="events"),
        _row("r50-c4", "fp32", "fused", 50.0, max_rel_err=2e-7),
        _row("r50-c4", "fp32", "simple", 100.0, max_rel_err=3e-7),
        _row("r50-c4", "fp32", "baseline", 166.0),
        _row("r50-c4", "tf32", "fused", 40.0),
        _row("bev-c4", "fp16", "fused", 400.0, frac_peak=0.3),
        _row("bev-c4", "fp16", "baseline", 515.0),
        {"shape": "bev-c4", "precision": "fp16", "impl": "torchvision", "status": "error", "message": "boom"},
        {"shape": "bev-c4", "precision": "bf16", "impl": "fused", "status": "unsupported", "message": "x"},
        _row("bev-c4", "bf16", "simple", 900.0, max_rel_err=None, rel_l2=None, nonfinite=3),
    ]
    tiles = [
        {"shape": "r50-c4", "precision": "fp16", "impl": "fused", "tile": 0, "status": "ok", "us": 12.0},
        {"shape": "r50-c4", "precision": "fp16", "impl": "fused", "tile": 1, "status": "ok", "us": 9.0},
        {"shape": "r50-c4", "precision": "fp16", "impl": "fused", "tile": 2, "status": "unsupported"},
    ]
    return {
        "meta": {"gpu": "NVIDIA H200", "command": "python3 bench/dcn_bench.py"},
        "peak": {"fp16": 700.0},
        "shapes": shapes,
        "rows": rows,
        "tiles": tiles,
    }


def test_ratios_use_fp32_rows_for_tf32():
    idx = report.index(_result()["rows"])
    r = report.ratios(idx, "r50-c4", "fp16")
    assert r == {"simple": 8.0, "baseline": 7.5, "torchvision": 15.0}
    r = report.ratios(idx, "r50-c4", "tf32")
    assert r["baseline"] == pytest.approx(166.0 / 40.0) and r["simple"] == pytest.approx(2.5)
    assert r["torchvision"] is None
    r = report.ratios(idx, "bev-c4", "bf16")  # fused unsupported
    assert set(r.values()) == {None}


def test_short_table_and_markdown():
    res = _result()
    text = report.short_table(res)
    lines = text.splitlines()
    r50 = next(ln for ln in lines if ln.startswith("r50-c4") and " fp16 " in ln)
    assert "10.0" in r50 and "75.0" in r50 and "7.50" in r50 and "15.00" in r50 and "8.00" in r50
    bev = next(ln for ln in lines if ln.startswith("bev-c4") and " fp16 " in ln)
    assert "ERR" in bev
    assert "unsup" in next(ln for ln in lines if ln.startswith("bev-c4") and " bf16 " in ln)
    assert max(len(ln) for ln in lines[:-1]) <= 100
    md = report.markdown(res)
    assert "| r50-c4 | R50-DCN c4 1x256->256@50x84 | fp16 | 10.0 | 80.0 | 75.0 | 150.0 |" in md
    assert "non-finite" in md and "bev-c4/fp16/torchvision: error — boom" in md
    assert "torchvision (events): 1" in md


def test_error_summary_flags_nonfinite():
    text = report.error_summary(_result())
    assert "fp32/fused 2.0e-07" in text
    assert "NON-FINITE" in text and "bev-c4/bf16/simple" in text


def test_acceptance_verdicts():
    lines = report.acceptance(_result())
    # bev-c4 fp16 is only 1.29x the baseline: the 2.5x bar fails and names it
    fp16_base = next(ln for ln in lines if ln.split(None, 1)[1].startswith("fp16 xbaseline >= 2.5"))
    assert fp16_base.startswith("FAIL") and "bev-c4" in fp16_base
    assert next(ln for ln in lines if "fp16 r50-c4 fraction" in ln).startswith("PASS")
    assert next(ln for ln in lines if "fp16 bev-c4 fraction" in ln).startswith("FAIL")
    assert next(ln for ln in lines if "tf32 xbaseline" in ln).startswith("PASS")  # 4.15x
    assert next(ln for ln in lines if "fp32 xbaseline" in ln).startswith("PASS")  # 3.32x
    assert next(ln for ln in lines if "error <= simple" in ln).startswith("PASS")


def test_best_tiles():
    best = report.best_tiles(_result())
    assert best == [{"shape": "r50-c4", "precision": "fp16", "tile": 1, "us": 9.0, "fused_us": 10.0, "ok": 2}]
    assert "r50-c4" in report.tiles_table(_result())
    assert report.tiles_table({"rows": [], "tiles": []}).startswith("tile sweep: no")


# ------------------------------------------------------------------------------------------------
# arguments, imports


def test_parse_args_defaults_and_subsets(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    a = dcn_bench.parse_args([])
    assert len(a.shape_list) == 18 and [p.name for p in a.precision_list] == ["fp32", "tf32", "fp16", "bf16"]
    assert a.impl_list == list(bs.IMPLS) and a.out_dir == tmp_path and a.budget_main["seconds"] == 0.25
    a = dcn_bench.parse_args(
        ["--shapes", "ocd-*", "--precisions", "fp16", "--impls", "fused,baseline", "--quick"]
    )
    assert [s.name for s in a.shape_list] == ["ocd-l2", "ocd-l3", "ocd-l4"]
    assert a.impl_list == ["fused", "baseline"] and a.budget_main["hi"] == 5
    assert dcn_bench.parse_args(["--budget", "0.5", "--out", "x"]).budget_main["seconds"] == 0.5
    for bad in (["--shapes", "nope"], ["--precisions", "fp8"], ["--impls", "cudnn"], ["--budget", "0"]):
        with pytest.raises(SystemExit):
            dcn_bench.parse_args(bad)


def test_modules_import_without_cupy_or_torch():
    code = (
        "import sys; sys.path.insert(0, 'bench'); import dcn_bench, dcn_bench_gpu, dcn_bench_plot; "
        "bad = [m for m in ('cupy', 'torch', 'torchvision', 'matplotlib') if m in sys.modules]; "
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_shell_scripts_parse():
    for script in ("bench/baseline/build.sh", "bench/dcn_bench.sh"):
        proc = subprocess.run(["bash", "-n", script], cwd=REPO, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------------------------------------
# dcn_bench_gpu's array helpers and dcn_bench.main() with NumPy standing in for CuPy


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


def _fake_cupy() -> types.ModuleType:
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


@pytest.fixture
def fake_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())


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

    def core_impl(lib, shape, prec, algo):
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
    mod.matmul_peak = lambda name, size, reps: {"fp32": 50.0, "tf32": 400.0, "fp16": 700.0, "bf16": 720.0}[
        name
    ]
    return mod


def test_main_end_to_end_on_fakes(fake_cupy, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "dcn_bench_gpu", _fake_gpu())
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
    assert len(rows) == len(res["rows"]) == 2 * 13
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


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    res = _result()
    path = tmp_path / "r.json"
    path.write_text(json.dumps(res))
    png = tmp_path / "p.png"
    assert dcn_bench_plot.main([str(path), "--png", str(png), "--docs", str(tmp_path / "b.md")]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![time per call per shape](p.png)" in (tmp_path / "b.md").read_text()


def test_plot_rejects_other_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{}")
    assert dcn_bench_plot.main([str(path)]) == 1


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
