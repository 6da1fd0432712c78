"""Tests of the command machinery: report.py (JSON object, tables), cli_common.py (run_command,
common_options, timed, attach_payload) and log.py (stderr logging, verbosity, Polygraphy routing)."""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from dcnconvert import errors, log, report
from dcnconvert.cli.common import (
    add_output,
    add_warning,
    attach_payload,
    common_options,
    current_result,
    run_command,
    timed,
)
from dcnconvert.schema import DcnAttrs


class TestToJsonable:
    def test_plain_and_nested(self):
        @dataclass
        class Thing:
            a: int
            b: tuple

        value = {"p": Path("/x/y"), "t": (1, 2), "s": {3, 1}, "d": Thing(1, (2, 3)), 4: None}
        assert report.to_jsonable(value) == {"p": "/x/y", "t": [1, 2], "s": [1, 3],
                                             "d": {"a": 1, "b": [2, 3]}, "4": None}

    def test_numpy_and_non_finite(self):
        value = {"a": np.float32(1.5), "b": np.arange(3), "c": float("nan"), "d": -math.inf, "e": np.int64(7)}
        out = report.to_jsonable(value)
        assert out == {"a": 1.5, "b": [0, 1, 2], "c": "nan", "d": "-inf", "e": 7}
        json.loads(report.dumps(value))  # strict JSON: no NaN literal

    def test_attrs(self):
        attrs = DcnAttrs(stride=(1, 2), padding=(0, 1), dilation=(2, 1), group=2, deformable_group=4)
        assert report.attrs_to_dict(attrs) == {"stride": [1, 2], "padding": [0, 1], "dilation": [2, 1],
                                               "group": 2, "deformable_group": 4}
        assert report.attrs_to_dict(None) is None


class TestCommandResult:
    def test_standard_keys_and_merge(self):
        res = report.CommandResult("rewrite", inputs={"model": "a.onnx"})
        res.merge({"outputs": {"onnx": "b.onnx"}, "timings": {"load": 0.5}, "warnings": ["w1", "w1"],
                   "rewrite": {"n": 1}, "ok": False, "command": "evil"})
        obj = res.to_dict()
        assert list(obj)[: len(report.STANDARD_KEYS)] == list(report.STANDARD_KEYS)
        assert obj["command"] == "rewrite" and obj["ok"] is True and obj["exit_code"] == 0
        assert obj["schema_version"] == report.SCHEMA_VERSION == 1
        assert obj["outputs"] == {"onnx": "b.onnx"} and obj["warnings"] == ["w1"]
        assert obj["rewrite"] == {"n": 1}

    def test_errors_make_not_ok(self):
        res = report.CommandResult("x")
        res.errors.append(errors.ModelError("bad").to_dict())
        res.exit_code = 1
        assert res.to_dict()["ok"] is False


class TestTables:
    def test_format_table_aligns(self):
        text = report.format_table(["a", "bbb"], [["xxxx", 1], [None, "y"]])
        lines = text.splitlines()
        assert lines[0].startswith("a     bbb")
        assert lines[2].startswith("xxxx  1") and lines[3].startswith("-     y")

    def test_format_matches(self):
        @dataclass
        class FakeMatch:
            node_name: str
            form: str
            attrs: DcnAttrs | None
            kernel: tuple
            shapes: dict
            with_bias: bool
            convertible: bool
            reason: str | None
            op_type: str = "X"
            domain: str = ""

        good = FakeMatch("n1", "mmcv", DcnAttrs(stride=(2, 1)), (3, 3),
                         {"x": [1, 4, 8, None], "offset": [1, 18, 4, 8], "mask": [1, 9, 4, 8],
                          "weight": [4, 4, 3, 3]}, True, True, None)
        bad = FakeMatch("n2", "onnx-deformconv", None, (3, 3, 3), {}, False, False, "3-D DeformConv")
        text = report.format_matches([report.match_to_dict(good), report.match_to_dict(bad)])
        assert "2x1" in text and "[1,4,8,?]" in text and "no: 3-D DeformConv" in text
        assert report.format_matches([]) == "no deformable convolution nodes found"


def _demo_command():
    @click.command()
    @click.option("--fail", type=click.Choice(["none", "model", "usage", "accuracy", "missing", "bug",
                                               "click"]), default="none")
    @common_options
    def demo(fail: str, json_mode: bool) -> None:
        def work():
            print("chatter from a library")  # must not reach stdout
            log.get_logger("demo").info("an info line")
            log.get_logger("demo").debug("a debug line")
            with timed("step"):
                add_warning("a warning")
            assert current_result() is not None
            add_output("thing", "out.bin")
            if fail == "model":
                raise errors.ModelError("model broken", hint="fix it", node="n1")
            if fail == "usage":
                raise errors.UsageError("bad combination", hint="drop one")
            if fail == "accuracy":
                raise attach_payload(errors.AccuracyError("y differs"), {"comparison": [{"max_abs": 1.0}]})
            if fail == "missing":
                raise errors.MissingDependencyError("no TensorRT", hint="pip install tensorrt")
            if fail == "click":
                raise click.BadParameter("nope")
            if fail == "bug":
                raise ZeroDivisionError("oops")
            return {"answer": 42}

        run_command("demo", json_mode, work, render=lambda r: f"answer={r['answer']}", inputs={"model": "m"})

    return demo


EXPECTED_CODES = {"none": 0, "model": 1, "usage": 2, "accuracy": 3, "missing": 4, "bug": 1, "click": 2}


class TestRunCommand:
    @pytest.mark.parametrize("fail", sorted(EXPECTED_CODES))
    def test_json_contract(self, fail):
        res = CliRunner().invoke(_demo_command(), ["--fail", fail, "--json"])
        assert res.exit_code == EXPECTED_CODES[fail], res.stderr
        obj = json.loads(res.stdout)  # exactly one object: json.loads fails on trailing data
        assert res.stdout.count("\n") == 1
        assert obj["command"] == "demo" and obj["exit_code"] == EXPECTED_CODES[fail]
        assert obj["ok"] is (fail == "none")
        assert obj["inputs"] == {"model": "m"} and obj["warnings"] == ["a warning"]
        assert "step" in obj["timings"] and "total" in obj["timings"]
        assert "chatter from a library" in res.stderr
        if fail == "none":
            assert obj["answer"] == 42 and obj["errors"] == [] and obj["outputs"] == {"thing": "out.bin"}
        else:
            assert len(obj["errors"]) == 1 and obj["errors"][0]["exit_code"] == EXPECTED_CODES[fail]
        if fail == "accuracy":
            assert obj["comparison"] == [{"max_abs": 1.0}]

    @pytest.mark.parametrize("fail", ["model", "usage", "accuracy", "missing"])
    def test_text_errors_have_no_traceback(self, fail):
        res = CliRunner().invoke(_demo_command(), ["--fail", fail])
        assert res.exit_code == EXPECTED_CODES[fail]
        assert res.stdout == ""
        err_lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert len(err_lines) == 1
        assert "Traceback" not in res.stderr
        if fail == "model":
            assert err_lines[0] == "error: node 'n1': model broken"
            assert "hint: fix it" in res.stderr

    def test_vv_shows_traceback_and_debug(self):
        res = CliRunner().invoke(_demo_command(), ["--fail", "model", "-vv"])
        assert res.exit_code == 1
        assert "Traceback" in res.stderr and "a debug line" in res.stderr

    def test_bug_keeps_traceback(self):
        res = CliRunner().invoke(_demo_command(), ["--fail", "bug"])
        assert res.exit_code == 1
        assert "Traceback" in res.stderr and "ZeroDivisionError" in res.stderr
        assert "error: internal error" in res.stderr

    def test_text_mode_render_and_quiet(self):
        res = CliRunner().invoke(_demo_command(), [])
        assert res.exit_code == 0 and res.stdout == "answer=42\n"
        assert "[I] an info line" in res.stderr and "[W] a warning" in res.stderr
        assert "a debug line" not in res.stderr
        quiet = CliRunner().invoke(_demo_command(), ["-q"])
        assert "an info line" not in quiet.stderr and "a warning" in quiet.stderr
        silent = CliRunner().invoke(_demo_command(), ["-qq", "--json"])
        assert "a warning" not in silent.stderr
        assert json.loads(silent.stdout)["warnings"] == ["a warning"]  # still collected


def test_c_level_stdout_goes_to_stderr(tmp_path):
    """Output that a C library writes to file descriptor 1 does not reach the JSON stream."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "demo.py"
    script.write_text(textwrap.dedent("""\
        import os, click
        from dcnconvert.cli.common import common_options, run_command

        @click.command()
        @common_options
        def demo(json_mode):
            def work():
                os.write(1, b"raw fd-1 output\\n")
                print("python print")
                return {"answer": 1}
            run_command("demo", json_mode, work, render=lambda r: "rendered")

        demo()
        """))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for args, expected in ((["--json"], None), ([], "rendered\n")):
        proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env,
                              timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "raw fd-1 output" in proc.stderr and "python print" in proc.stderr
        if expected is None:
            assert json.loads(proc.stdout)["answer"] == 1 and proc.stdout.count("\n") == 1
        else:
            assert proc.stdout == expected


class TestLog:
    @pytest.mark.parametrize("v,q,level", [(0, 0, logging.INFO), (1, 0, logging.DEBUG),
                                           (3, 0, logging.DEBUG), (0, 1, logging.WARNING),
                                           (0, 2, logging.ERROR), (1, 1, logging.INFO)])
    def test_levels(self, v, q, level):
        assert log.level_for(v, q) == level

    def test_polygraphy_goes_to_stderr(self, capsys):
        from polygraphy.logger import G_LOGGER

        log.setup_logging(1, 0)
        log.configure_polygraphy()
        G_LOGGER.info("polygraphy info line")
        G_LOGGER.warning("polygraphy warning line")
        captured = capsys.readouterr()
        assert captured.out == ""
        assert "polygraphy info line" in captured.err and "polygraphy warning line" in captured.err
        log.setup_logging(0, 0)
        G_LOGGER.info("hidden info")
        assert "hidden info" not in capsys.readouterr().err

    def test_polygraphy_severity(self):
        assert [log.polygraphy_severity(n) for n in (-1, 0, 1, 2, 3)] == [40, 30, 20, 10, 0]
