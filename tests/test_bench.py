"""CPU tests of the DCNv2 benchmark's pure-Python parts: the shape table and sizing rules
(bench/bench_shapes.py), the tables and acceptance bars (dcn_bench_report.py), dcn_bench.py's
arguments, and dcn_bench_plot.py. tests/test_bench_quant.py tests the INT8 and FP8 precisions,
tests/test_bench_run.py runs the whole script on a fake CuPy, tests/test_bench_scripts.py checks
every bench script's imports and the tools beside them. No GPU, CuPy or PyTorch is needed or
imported.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import bench_shapes as bs  # noqa: E402
import dcn_bench  # noqa: E402
import dcn_bench_plot  # noqa: E402
import dcn_bench_report as report  # noqa: E402
import dcn_bench_summary as summary  # noqa: E402
from support import core  # noqa: E402
from support.bench_rows import result_row as _row  # noqa: E402

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
    by = {p.name: p for p in bs.PRECISIONS}
    assert by["bf16"].set_bytes(s) == s.set_bytes(2)
    # 8-bit x and weights, FP32 weight scales, FP16 offset, mask, bias and output
    quant = e["x"] + e["weight"] + 4 * 4 + 2 * (e["offset"] + e["mask"] + e["bias"] + e["out"])
    assert by["int8"].set_bytes(s) == by["fp8e4m3"].set_bytes(s) == quant
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


def test_both_fused_paths_keep_their_own_tf32_rows():
    rows = _result()["rows"] + [
        _row("r50-c4", "fp32", "fused-engine", 45.0),
        _row("r50-c4", "tf32", "fused-engine", 33.0),
    ]
    idx = report.index(rows)
    assert report.other_row(idx, "r50-c4", "tf32", "fused-engine")["us"] == 33.0
    assert report.other_row(idx, "r50-c4", "tf32", "fused")["us"] == 40.0
    assert report.other_row(idx, "r50-c4", "tf32", "baseline")["us"] == 166.0


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
    assert "| r50-c4 | R50-DCN c4 1x256->256@50x84 | fp16 | 10.0 | - | 80.0 | 75.0 | 150.0 |" in md
    assert "non-finite" in md and "bev-c4/fp16/torchvision: error — boom" in md
    assert "torchvision (events): 1" in md


def test_error_summary_flags_nonfinite():
    text = report.error_summary(_result())
    assert "fp32/fused 2.0e-07" in text
    assert "NON-FINITE" in text and "bev-c4/bf16/simple" in text


def test_acceptance_verdicts():
    res = _result()
    res["rows"] += [
        _row("r50-c4", "fp16", "fused-engine", 8.0, frac_peak=0.5),
        _row("bev-c4", "fp16", "fused-engine", 300.0, frac_peak=0.4),
    ]
    lines = report.acceptance(res)

    def line(start: str) -> str:
        return next(ln for ln in lines if ln.split(None, 1)[1].startswith(start))

    # the engine path first; bev-c4 is 1.72x the baseline there (515 / 300) and 1.29x on NCHW
    assert lines.index(line("engine path: fp16 xbaseline")) < lines.index(line("NCHW path: fp16 xbaseline"))
    eng = line("engine path: fp16 xbaseline >= 2.5")
    assert eng.startswith("FAIL") and "worst bev-c4 1.72" in eng and "failing: bev-c4" in eng
    assert "worst bev-c4 1.29" in line("NCHW path: fp16 xbaseline >= 2.5")
    # torchvision: r50-c4 only (bev-c4's row is an error): 150 / 8 and 150 / 10
    tv = line("engine path: fp16 xtorchvision >= 1.0")
    assert tv.startswith("part") and "r50-c4 18.75" in tv and "(missing 1)" in tv
    assert line("engine path: fp16 r50-c4 fraction").startswith("PASS")
    assert line("engine path: fp16 bev-c4 fraction").startswith("FAIL")
    assert line("NCHW path: fp16 r50-c4 fraction").startswith("PASS")  # 0.45
    assert line("NCHW path: fp16 bev-c4 fraction").startswith("FAIL")  # 0.3
    assert line("fp32 fused error <= simple's").startswith("PASS")
    # the highest implied fraction: bev-c4, 2.5x the baseline's 515 us is 206 us for its FLOPs
    need = next(ln for ln in lines if ln.startswith("need  engine path: fp16 xbaseline"))
    assert "a call at 28% of the measured fp16 peak on bev-c4" in need, need
    # a result with one path only evaluates that path
    only = report.acceptance(_result())
    assert not any("engine path" in ln for ln in only) and any("NCHW path" in ln for ln in only)


def test_changes_against_a_previous_result():
    old = _result()
    new = _result()
    for r in new["rows"]:
        if r["impl"] == "fused" and r.get("status") == "ok":
            r["us"] *= {"fp16": 0.9, "fp32": 1.02, "tf32": 1.0}[r["precision"]]
    lines = report.changes(new, old)
    fp16 = next(ln for ln in lines if ln.startswith("fused") and " fp16 " in ln)
    # r50-c4 and bev-c4 both 10% faster
    assert " 2 layers: median -10.0%, -10.0% .. -10.0%" in fp16, fp16
    fp32 = next(ln for ln in lines if ln.startswith("fused") and " fp32 " in ln)
    assert "median +2.0%" in fp32 and "(r50-c4)" in fp32 and "max error 2.0e-07 -> 2.0e-07" in fp32
    base = next(ln for ln in lines if ln.startswith("baseline") and " fp16 " in ln)
    assert "median +0.0%" in base
    # rows that are not "ok" in either run are left out: bev-c4's torchvision error, bf16's unsupported fused
    assert not any(ln.startswith("torchvision") and "2 layers" in ln for ln in lines)
    assert not any(ln.startswith("fused") and " bf16 " in ln for ln in lines)


def test_summary_tables_mark_the_bars_and_take_the_choices(tmp_path: Path) -> None:
    res = _result()
    res["rows"] += [
        _row("r50-c4", "fp16", "fused-engine", 8.0, frac_peak=0.5, max_rel_err=7e-4),
        _row("bev-c4", "fp16", "fused-engine", 300.0, frac_peak=0.4),
        _row("r50-c4", "bf16", "fused-engine", 30.0),
        _row("r50-c4", "bf16", "baseline", 60.0),
    ]
    choices = summary.parse_choices(
        "layer  fp32  tf32  fp16  bf16\nr50-c4  a  b  wg-256x64-p16/s2  d\nbev-c4  e  f  g+16/s8  h\n"
    )
    assert choices[("bev-c4", "fp16")] == "g+16/s8"
    text = summary.tables(res, choices)
    lines = text.splitlines()
    r50 = next(ln for ln in lines if ln.startswith("| r50-c4 | 256 | wg-256x64-p16/s2 |"))
    # engine 8 us: 75 / 8 = 9.38x the baseline, 150 / 8 = 18.75x torchvision; NCHW 150 / 10 = 15.00
    assert "| 8.0 | 10.0 | 75.0 | 150.0 | 9.38 | 18.75 | 15.00 | 50 | 7.0e-04 |" in r50, r50
    bev = next(ln for ln in lines if ln.startswith("| bev-c4 | 256 | g+16/s8 |"))
    assert "| **1.72** |" in bev and "| - |" in bev  # below 2.5x; no torchvision time
    bf16 = next(ln for ln in lines if ln.startswith("| r50-c4 | 256 | d |"))
    assert "| 30.0 | - | 60.0 | **2.00** | - |" in bf16, bf16  # no NCHW row
    fp32 = next(ln for ln in lines if ln.startswith("| r50-c4 | a |"))
    assert "| - | 50.0 | 166.0 | - | b | - | 40.0 | - |" in fp32, fp32
    with pytest.raises(ValueError, match="fused_choice"):
        summary.parse_choices("shape fp16\n")
    (tmp_path / "r.json").write_text(json.dumps(res))
    assert summary.main([str(tmp_path / "r.json")]) == 0
    assert summary.main([str(tmp_path / "missing.json")]) == 1


def test_implied_peak_is_flops_over_peak_times_target():
    res = _result()
    flop = next(s["flop"] for s in res["shapes"] if s["name"] == "bev-c4")
    got = dict(report.implied_peak(res, "fp16", "baseline", 2.5))
    assert got["bev-c4"] == pytest.approx(flop / 700e12 / (515.0 / 2.5 * 1e-6))
    assert "r50-c4" in got and set(got) == {"r50-c4", "bev-c4"}
    assert report.implied_peak(res, "bf16", "baseline", 2.5) == []  # no bf16 peak in this result


def test_best_tiles():
    best = report.best_tiles(_result())
    assert best == [{"shape": "r50-c4", "precision": "fp16", "tile": 1, "us": 9.0, "fused_us": 10.0, "ok": 2}]
    assert "r50-c4" in report.tiles_table(_result())
    assert report.tiles_table({"rows": [], "tiles": []}).startswith("tile sweep: no")


# ------------------------------------------------------------------------------------------------
# arguments, plots


def test_parse_args_defaults_and_subsets(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    a = dcn_bench.parse_args([])
    assert len(a.shape_list) == 18 and [p.name for p in a.precision_list] == ["fp32", "tf32", "fp16", "bf16"]
    assert a.not_run == []
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
