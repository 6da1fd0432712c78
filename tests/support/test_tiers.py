"""tests/support/tiers.py: a required tier's skips fail the run with the tier and the reason, a required
tier that ran no test fails it, the per-tier table. Each case runs pytest in a process of its own on
a small generated test file (under a second each), and once on a real test of the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TRT_HEADER_CANDIDATES

from support import tiers

GENERATED_CONFTEST = '''
import pytest

pytest_plugins = ["support.tiers"]


def pytest_collection_modifyitems(config, items):  # as tests/conftest.py skips what a machine lacks
    for item in items:
        if item.get_closest_marker("needs_thing"):
            item.add_marker(pytest.mark.skip(reason="thing: not on this machine"))
'''

GENERATED_TESTS = '''
import pytest


@pytest.fixture
def thing():
    pytest.skip("the fixture found no thing")


@pytest.mark.wheel
def test_passes():
    assert True


@pytest.mark.wheel
@pytest.mark.skip(reason="a skip marker in the test file")
def test_marker_skip():
    pass


@pytest.mark.wheel
@pytest.mark.needs_thing
def test_collection_skip():
    pass


@pytest.mark.wheel
def test_fixture_skip(thing):
    pass


@pytest.mark.wheel
def test_runtime_skip():
    pytest.skip("skipped inside the test")


@pytest.mark.wheel
@pytest.mark.gpu
def test_needs_a_gpu_too():
    pytest.skip("no CUDA device")


@pytest.mark.wheel
@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False


@pytest.mark.trt_lean
def test_other_tier_skip():
    pytest.skip("no lean runtime")


def test_untiered_skip():
    pytest.skip("not a tier")
'''


def run_pytest(args: list[str], cwd: Path, required: str | None, **env: str) -> tuple[int, str]:
    environ = {k: v for k, v in os.environ.items() if k not in (tiers.ENV_VAR, "PYTEST_ADDOPTS")}
    environ.update(CI="true", PYTHONPATH=str(REPO / "tests"), **env)  # CI: untrimmed summary lines
    if required is not None:
        environ[tiers.ENV_VAR] = required
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-ra", *args],
                          cwd=cwd, env=environ, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture
def generated(tmp_path) -> Path:
    markers = "\n".join(f"    {m}: marker" for m in (*tiers.TIERS, "needs_thing"))
    (tmp_path / "pytest.ini").write_text(f"[pytest]\naddopts = --strict-markers\nmarkers =\n{markers}\n")
    (tmp_path / "conftest.py").write_text(GENERATED_CONFTEST)
    (tmp_path / "test_generated.py").write_text(GENERATED_TESTS)
    return tmp_path


def outcomes(output: str) -> dict[str, int]:
    """pytest's last line, e.g. ``1 failed, 1 passed, 3 errors in 0.1s`` -> {"failed": 1, ...}."""
    last = output.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last.split(" in ")[0])}


def table_row(output: str, tier: str) -> list[str]:
    (line,) = [ln for ln in output.splitlines() if ln.split()[:1] == [tier]]
    return line.split()[1:]


def test_parse_required():
    assert tiers.parse_required(None) == () and tiers.parse_required(" ,") == ()
    assert tiers.parse_required("trt_rtx, wheel  trt_headers,") == ("trt_headers", "wheel", "trt_rtx")
    with pytest.raises(ValueError, match="unknown tier 'wheels'.*the tiers are trt_headers"):
        tiers.parse_required("trt_headers wheels")


def test_machine_tiers_decide_unless_required():
    assert tiers.enforced_tiers(("trt_headers", "trt_lean"), ("trt_lean",)) == ("trt_lean",)
    assert tiers.enforced_tiers(("trt_headers", "gpu"), ("trt_headers",)) == ()
    assert tiers.enforced_tiers(("trt_headers", "gpu"), ("trt_headers", "gpu")) == ("trt_headers", "gpu")
    assert tiers.enforced_tiers((), ("trt_headers",)) == ()


def test_required_tier_skips_fail_with_the_tier_and_the_reason(generated):
    code, out = run_pytest([], generated, "wheel")
    assert code == 1, out
    # setup-time skips (markers, fixtures) become errors, a skip in the test body a failure
    assert outcomes(out) == {"failed": 1, "passed": 1, "skipped": 3, "xfailed": 1, "errors": 3}, out
    prefix = f"required tier wheel skipped ({tiers.ENV_VAR}=wheel): "
    for kind, test, reason in [("ERROR", "test_marker_skip", "a skip marker in the test file"),
                               ("ERROR", "test_collection_skip", "thing: not on this machine"),
                               ("ERROR", "test_fixture_skip", "the fixture found no thing"),
                               ("FAILED", "test_runtime_skip", "skipped inside the test")]:
        assert f"{kind} test_generated.py::{test} - {prefix}{reason}" in out, out
    # a gpu test may skip (gpu is not required); other tiers and untiered tests skip as before
    for reason in ("no CUDA device", "no lean runtime", "not a tier"):
        assert re.search(rf"SKIPPED \[1\] test_generated.py:\d+: {reason}", out), out
    assert table_row(out, "wheel") == ["yes", "2", "2", "0", "5"]  # ran, passed, failed, skipped
    assert table_row(out, "trt_lean") == ["0", "0", "0", "1"]
    assert "FAILED: required tier wheel ran no test" not in out


def test_unset_everything_skips_with_its_reason(generated):
    code, out = run_pytest([], generated, None)
    assert code == 0, out
    assert outcomes(out) == {"passed": 1, "skipped": 7, "xfailed": 1}, out
    assert "required tier" not in out
    assert re.search(r"SKIPPED \[1\] test_generated.py:\d+: skipped inside the test", out), out
    assert f"no tier is required ({tiers.ENV_VAR} unset)" in out
    assert table_row(out, "wheel") == ["2", "2", "0", "5"]
    code, out = run_pytest([], generated, "")  # set but empty: nothing required either
    assert code == 0 and outcomes(out)["skipped"] == 7, out


def test_a_required_tier_that_ran_no_test_fails(generated):
    code, out = run_pytest(["-k", "passes"], generated, "wheel,trt_rtx")
    assert code == 1, out
    assert outcomes(out) == {"passed": 1, "deselected": 8}, out
    assert f"FAILED: required tier trt_rtx ran no test ({tiers.ENV_VAR}=wheel trt_rtx)" in out
    assert table_row(out, "trt_rtx") == ["yes", "0", "0", "0", "0"]
    code, out = run_pytest(["-k", "passes"], generated, "wheel")
    assert code == 0, out


def test_an_unknown_tier_is_a_usage_error(generated):
    code, out = run_pytest([], generated, "wheel gpus")
    assert code == pytest.ExitCode.USAGE_ERROR, out
    assert "unknown tier 'gpus'" in out and "trt_rtx" in out


def test_a_real_header_test_without_headers(tmp_path):
    """The header tier's real build test, with TENSORRT_INCLUDE_DIR naming an empty folder."""
    if any((Path(d) / "NvInfer.h").is_file() for d in TRT_HEADER_CANDIDATES):
        pytest.skip("this machine has TensorRT headers in a system folder; the test would compile")
    test = "tests/backend/plugin/test_compile.py::test_real_build_from_a_fetched_tarball"
    (tmp_path / "empty").mkdir()
    code, out = run_pytest([test], REPO, "trt_headers", TENSORRT_INCLUDE_DIR=str(tmp_path / "empty"))
    assert code == 1, out
    assert (f"ERROR {test} - required tier trt_headers skipped ({tiers.ENV_VAR}=trt_headers): "
            "trt_headers: TensorRT headers (NvInfer.h) not found") in out
    assert table_row(out, "plugin_build") == ["0", "0", "0", "1"]  # in that tier too, not required
    code, out = run_pytest([test], REPO, None, TENSORRT_INCLUDE_DIR=str(tmp_path / "empty"))
    assert code == 0 and outcomes(out) == {"skipped": 1}, out
    assert "trt_headers: TensorRT headers (NvInfer.h) not found; set TENSORRT_INCLUDE_DIR" in out
