"""CPU checks of the bench/ scripts as a whole: they import only names the repository's modules
define, the documented sanitizer commands name tiles the core has, the shell scripts parse, the
cluster-capacity probe builds, and bench/block_timeline.py still finds its anchors in the core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import find_nvcc

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))


def test_modules_import_without_cupy_or_torch():
    code = (
        "import sys; sys.path.insert(0, 'bench'); import dcn_bench, dcn_bench_gpu, dcn_bench_plot, "
        "dcn_bench_summary, dcn_bench_quant, dcn_bench_peak, dcn_bench_env, fused_choice; "
        "bad = [m for m in ('cupy', 'torch', 'torchvision', 'matplotlib') if m in sys.modules]; "
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def _local_imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, names, line) of every ``from M import names`` in a bench script whose M is one of
    the repository's own modules (bench/*.py, tests/*.py, tests/support/*.py), at any depth (the
    GPU drivers import the test modules inside main())."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
            continue
        parts = node.module.split(".")
        if len(parts) == 1:
            files = (BENCH / f"{parts[0]}.py", REPO / "tests" / f"{parts[0]}.py")
        elif len(parts) == 2 and parts[0] == "support":
            files = (REPO / "tests" / "support" / f"{parts[1]}.py",)
        else:
            files = ()
        if any(f.exists() for f in files):
            found.append((node.module, [a.name for a in node.names], node.lineno))
    return found


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_bench_scripts_import_only_names_their_modules_define(script: str):
    """A bench script runs on the GPU machine only, where a renamed test helper shows up as an
    ImportError halfway through a device run (bench/core_sanitize.py did): every name it imports
    from the repository's own modules must exist there."""
    import importlib

    sys.path.insert(0, str(REPO / "tests"))
    missing = []
    for module, names, line in _local_imports(BENCH / script):
        mod = importlib.import_module(module)
        missing += [f"{script}:{line}: {module}.{n}" for n in names if n != "*" and not hasattr(mod, n)]
    assert not missing, "names that no longer exist: " + ", ".join(missing)


def _tile_names() -> list[str]:
    """kTileNames of the core (plugin_src/core/dcnFusedChoice.cu), in table order."""
    import re

    text = (REPO / "plugin_src" / "core" / "dcnFusedChoice.cu").read_text()
    body = re.search(r"kTileNames\[kTileCount\] = \{(.*?)\};", text, re.S)
    assert body, "kTileNames not found"
    return re.findall(r'"([^"]+)"', body.group(1))


def test_documented_sanitizer_commands_name_tiles_that_exist():
    """The tile lists of SANITIZE_FUSED_TILES and core_race_one.py in the docs and the bench scripts:
    names the core has, or indices inside its table (indices of an older table once sat there)."""
    import re

    names = _tile_names()
    assert len(names) >= 20 and len(set(names)) == len(names)
    files = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md", *sorted(BENCH.glob("*.py"))]
    bad, seen = [], 0
    for path in files:
        text = path.read_text()
        specs = re.findall(r"SANITIZE_FUSED_TILES=([\w.,-]+)", text)
        specs += re.findall(r"core_race_one\.py ([\w.-]+) (?:float32|float16|bfloat16)", text)
        for spec in specs:
            for item in filter(None, spec.split(",")):
                seen += 1
                ok = int(item) < len(names) if item.isdigit() else item in names
                if not ok:
                    bad.append(f"{path.relative_to(REPO)}: {item}")
    assert seen >= 4, "no tile lists found: the patterns no longer match the docs"
    assert not bad, "tiles the core does not have: " + ", ".join(bad)


def test_shell_scripts_parse():
    for script in ("bench/baseline/build.sh", "bench/dcn_bench.sh", "bench/quant_device.sh"):
        proc = subprocess.run(["bash", "-n", script], cwd=REPO, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr


def _build_and_run(tmp_path, name: str, opt: str) -> subprocess.CompletedProcess | None:
    """Compiles bench/NAME.cu for sm_90 (skips without nvcc) and runs it: None where it found no
    GPU (exit 4, saying so), else its completed process, which exited 0."""
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip(f"nvcc not found on PATH (set NVCC): bench/{name}.cu cannot be compiled here")
    exe = tmp_path / name
    build = subprocess.run(
        [nvcc, opt, "-arch=sm_90", "-o", str(exe), str(BENCH / f"{name}.cu")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    proc = subprocess.run([str(exe)], capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode == 4:
        assert f"{name}: no CUDA device" in proc.stderr
        return None
    assert proc.returncode == 0, proc.stderr
    return proc


def test_cluster_capacity_builds_and_reports(tmp_path):
    """bench/cluster_capacity.cu compiles; without a GPU it exits 4 and says so, with one every row's
    blocks are its clusters times the cluster size and never more than the device's SMs."""
    proc = _build_and_run(tmp_path, "cluster_capacity", "-O2")
    if proc is None:
        return
    head, _, *rows = proc.stdout.splitlines()
    sms = int(head.split(", ")[1].split()[0])
    table = [tuple(int(v) for v in row.split()) for row in rows]
    assert {(t, c) for t, c, _, _ in table} == {(t, c) for t in (384, 640) for c in (1, 2, 3, 4, 6, 8)}
    for _threads, cluster, clusters, blocks in table:
        assert blocks == clusters * cluster
        assert 0 < blocks <= sms
        if cluster == 1:
            assert blocks == sms


def test_block_timeline_instruments_the_current_core(tmp_path):
    """bench/block_timeline.py inserts its stamps after anchors in the core's sources: each anchor
    must still be there (a renamed line fails here, not on the GPU machine), and the copy differs
    from plugin_src only by the inserted lines."""
    sys.path.insert(0, str(BENCH))
    import block_timeline

    sites = block_timeline.instrument(tmp_path)
    assert sites == len(block_timeline.EDITS) == 14
    for name in {edit[0] for edit in block_timeline.EDITS} | {"dcnFusedTma.cuh", "dcnFusedSm90a.cu"}:
        original = (REPO / "plugin_src" / "core" / name).read_text().splitlines()
        copy = (tmp_path / "plugin_src" / "core" / name).read_text().splitlines()
        it = iter(copy)
        assert all(line in it for line in original), f"{name}: the copy lost or reordered lines"
        assert len(copy) > len(original), name


def test_fp8_convert_rate_builds_and_reports(tmp_path):
    """bench/fp8_convert_rate.cu compiles; without a GPU it exits 4 and says so, with one it prints
    the four rates, HFMA2's first and the others relative to it."""
    proc = _build_and_run(tmp_path, "fp8_convert_rate", "-O3")
    if proc is None:
        return
    _device, _header, *rows = proc.stdout.splitlines()
    names = [row.split("(")[0].strip() for row in rows]
    assert names == ["hfma2", "cvt e4m3x2 -> f16x2", "integer decode", "cvt f16x2 -> e4m3x2"]
    ratios = [float(row.split()[-1]) for row in rows]
    assert ratios[0] == 1.0 and all(r > 0.0 for r in ratios)
