"""What the CLI contract of tests/model/test_check*.py asserts on a broken model: one run of a
command with --json, and the two outcomes, refused (exit 1, one ModelError naming the node and
tensor, no output, the input unchanged) and warned (exit 0, one warning). Also the sample models
and the corpora's seed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import onnx
from click.testing import CliRunner

from dcnconvert.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p.name for p in (REPO / "sample_models").glob("*.onnx"))
SEED = 20240611


def load_sample(name: str) -> onnx.ModelProto:
    return onnx.load(str(REPO / "sample_models" / name))


def seed(*parts: str) -> int:
    """The corpora's seed for one case (a sample and what is done to it)."""
    return SEED + int(hashlib.sha256("/".join(parts).encode()).hexdigest()[:8], 16)


def run_json(tmp_path: Path, command: str, model: Path) -> tuple[object, dict, Path]:
    """One CLI run of ``command`` on ``model`` with --json (and -o where the command writes):
    the result, the one JSON object on stdout, and the output path. Never a traceback."""
    out = tmp_path / f"out_{command}.{'engine' if command in ('build', 'convert') else 'onnx'}"
    args = [command, str(model), "--json"] + ([] if command == "inspect" else ["-o", str(out)])
    res = CliRunner().invoke(cli, args)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    return res, json.loads(lines[0]), out


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_refused(tmp_path: Path, model: Path, words: tuple[str, ...], commands=("rewrite",)) -> None:
    """Exit 1, one ModelError naming ``words``, no output written, the input unchanged."""
    before = sha(model)
    for command in commands:
        res, obj, out = run_json(tmp_path, command, model)
        assert res.exit_code == 1, (command, res.stderr)
        lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert len(lines) == 1 and len(obj["errors"]) == 1, res.stderr
        assert obj["errors"][0]["type"] == "ModelError" and obj["errors"][0]["hint"]
        assert all(w in lines[0] for w in words), (words, lines[0])
        assert not list(tmp_path.glob("out_*")) and not list(tmp_path.glob(".out_*"))
    assert sha(model) == before


def assert_warned(tmp_path: Path, model: Path, words: tuple[str, ...]) -> None:
    """Exit 0, one warning naming ``words`` in --json (and on stderr), the output written."""
    for command in ("rewrite", "inspect"):
        res, obj, out = run_json(tmp_path, command, model)
        assert res.exit_code == 0, res.stderr
        assert len([t for t in obj["warnings"] if all(w in t for w in words)]) == 1, (words, obj["warnings"])
        assert any(all(w in ln for w in words) for ln in res.stderr.splitlines()), res.stderr
    assert (tmp_path / "out_rewrite.onnx").exists()
