"""Running the click CLI in-process for the tests: ``invoke``, the one JSON object, the error lines."""

from __future__ import annotations

import json

from click.testing import CliRunner

from dcnconvert.cli.main import cli


def invoke(*args):
    """``dcnconvert ARGS`` in-process (CliRunner keeps stdout and stderr apart)."""
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_json(stdout: str) -> dict:
    """The single JSON object a ``--json`` run prints (and nothing else on stdout)."""
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


def error_lines(res) -> list[str]:
    """The ``error:`` lines of a run, which must not have crashed."""
    assert "Traceback" not in res.stderr, res.stderr
    return [line for line in res.stderr.splitlines() if line.startswith("error:")]
