"""The shell commands of the README and the docs pages work as written, and their links resolve.

Pages: README.md, docs/*.md and plugin_src/README.md. Every ```bash block of a page is split into
commands (one per line, ``&&`` chains split too) and run in order, in a scratch folder of that page
holding a copy of ``sample_models/``, with ``dcnconvert`` on PATH (a shim that runs
``python -m dcnconvert`` from this checkout), on a CPU-only machine. Other fences (```sh for
commands that need a GPU, TensorRT, nvcc or files the page does not make; ```text, ...) are shown,
not run. Annotations in a line's trailing comment:

* ``# needs TensorRT``: where nothing can build an engine (no usable TensorRT, and no TensorRT-RTX
  with a plugin library for it) the command must exit 4 (the fail-fast path); where something can,
  the line is skipped here (the ``tensorrt`` and ``trt_rtx`` tests build engines).
* ``# exit N``: the command must exit with code N.
* ``# not run by the docs test`` (or the older ``# not run by the README test``): skipped (the
  reason follows in the comment).
* ``pip install`` commands are skipped (this checkout is already importable) and ``make test`` is
  never run from inside the test suite.

Other commands must exit 0.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import engine_builder_available

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md")), REPO / "plugin_src" / "README.md"]

SKIP_MARKS = ("not run by the docs test", "not run by the README test")
TRT_MARK = "needs TensorRT"


@dataclass
class Command:
    line: int
    text: str
    expect: int | None  # None: skipped
    why: str = ""


def bash_blocks(markdown: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of every ```bash block."""
    blocks, current, start = [], None, 0
    for number, line in enumerate(markdown.splitlines(), 1):
        stripped = line.strip()
        if current is None and stripped.startswith("```bash"):
            current, start = [], number + 1
        elif current is not None and stripped.startswith("```"):
            blocks.append((start, current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def split_comment(line: str) -> tuple[str, str]:
    """(command, trailing comment): the first `` #`` outside quotes starts the comment."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def parse_commands(markdown: str, have_tensorrt: bool) -> list[Command]:
    commands = []
    for start, lines in bash_blocks(markdown):
        for offset, raw in enumerate(lines):
            text, comment = split_comment(raw)
            if not text.strip():
                continue
            number = start + offset
            if any(mark in comment for mark in SKIP_MARKS):
                commands.append(Command(number, text, None, comment))
                continue
            expect = 0
            match = re.search(r"\bexit (\d+)\b", comment)
            if match:
                expect = int(match.group(1))
            if TRT_MARK in comment:
                if have_tensorrt:
                    commands.append(Command(number, text, None,
                                            "TensorRT is here: the tensorrt tests cover it"))
                    continue
                expect = 4
            for part in (p.strip() for p in text.split("&&")):
                if part.startswith(("pip install", "python -m pip install")):
                    commands.append(Command(number, part, None, "installs packages"))
                elif re.fullmatch(r"make test\b.*", part):
                    commands.append(Command(number, part, None, "the test suite itself"))
                else:
                    commands.append(Command(number, part, expect))
    return commands


def test_parser_understands_the_annotations():
    text = textwrap.dedent("""\
        ```bash
        pip install -e . && dcnconvert convert a.onnx -o b.engine  # needs TensorRT
        make test
        dcnconvert rewrite a.onnx -o a.onnx  # exit 2
        echo '# not a comment'
        make plugin  # not run by the README test: needs headers
        make core  # not run by the docs test: needs nvcc
        ```
        ```sh
        dcnconvert verify model.engine --model m.onnx
        ```
        ```text
        not a command
        ```
        """)
    got = [(c.text, c.expect) for c in parse_commands(text, have_tensorrt=False)]
    assert got == [
        ("pip install -e .", None),
        ("dcnconvert convert a.onnx -o b.engine", 4),
        ("make test", None),
        ("dcnconvert rewrite a.onnx -o a.onnx", 2),
        ("echo '# not a comment'", 0),
        ("make plugin", None),
        ("make core", None),
    ]
    with_trt = parse_commands(text, have_tensorrt=True)
    assert with_trt[0].expect is None  # the whole chain is left to the tensorrt tests


def test_readme_starts_with_the_two_commands():
    (start, first), *_ = bash_blocks(README.read_text())
    lines = [split_comment(line)[0] for line in first if line.strip()]
    assert len(lines) == 2
    assert lines[0].startswith("pip install -e . && dcnconvert convert sample_models/")
    assert lines[1] == "make test"
    assert start < 10  # the very top of the README


@pytest.fixture()
def scratch(tmp_path: Path) -> tuple[Path, dict]:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(REPO / "sample_models", work / "sample_models",
                    ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "dcnconvert"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m dcnconvert "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.pop("DCNCONVERT_PLUGIN_LIB", None)
    return work, env


def run_page(page: Path, work: Path, env: dict) -> tuple[int, list[str]]:
    """Run the runnable commands of ``page`` in ``work``: (how many ran, failures)."""
    commands = parse_commands(page.read_text(), have_tensorrt=engine_builder_available() is None)
    runnable = [c for c in commands if c.expect is not None]
    name = page.relative_to(REPO)
    failures = []
    for cmd in runnable:
        proc = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd.text}"], cwd=work, env=env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
                              check=False)
        if proc.returncode != cmd.expect:
            failures.append(f"{name}:{cmd.line}: `{cmd.text}` exited {proc.returncode}, expected "
                            f"{cmd.expect}\n{proc.stderr[-1500:]}")
        elif cmd.expect != 0:
            error_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
            if not error_lines or "Traceback" in proc.stderr:
                failures.append(f"{name}:{cmd.line}: `{cmd.text}` failed without a clean error line\n"
                                f"{proc.stderr[-1500:]}")
    return len(runnable), failures


def test_readme_commands(scratch):
    work, env = scratch
    ran, failures = run_page(README, work, env)
    assert ran >= 8, "the README lost its runnable examples"
    assert not failures, "\n\n".join(failures)
    # the first command's promise: without TensorRT the rewritten model is written next to the engine
    if engine_builder_available() is not None:
        assert (work / "out.onnx").is_file() and not (work / "out.engine").exists()
    assert (work / "rewritten.onnx").is_file() and (work / "reference.onnx").is_file()


DOC_PAGES = [p for p in PAGES if p != README and bash_blocks(p.read_text())]


def test_doc_pages_with_commands_are_found():
    names = {str(p.relative_to(REPO)) for p in DOC_PAGES}
    assert {"docs/convert.md", "docs/verify.md"} <= names, names


@pytest.mark.parametrize("page", DOC_PAGES, ids=[str(p.relative_to(REPO)) for p in DOC_PAGES])
def test_doc_page_commands(page, scratch):
    work, env = scratch
    ran, failures = run_page(page, work, env)
    assert ran >= 1, f"{page.relative_to(REPO)} has ```bash blocks but nothing in them runs"
    assert not failures, "\n\n".join(failures)
    if page.name == "convert.md":  # a refused rewrite writes nothing
        assert (work / "rewritten.onnx").is_file() and not (work / "refused.onnx").exists()


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation but ``-``/``_`` dropped,
    spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found, in_fence = set(), False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            found.add(github_anchor(line.lstrip("#")))
    return found


def test_github_anchor():
    assert github_anchor(" Embedded weights (`--weights`)") == "embedded-weights---weights"
    assert github_anchor("TF32 (`allow_tf32`)") == "tf32-allow_tf32"
    assert github_anchor("reference: plugin nodes → standard ONNX") == "reference-plugin-nodes--standard-onnx"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_links_resolve(page):
    """Relative links of a page name files that exist, and their #anchors headings that exist."""
    text = page.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # links inside code blocks are not links
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            bad.append(f"{target}: no heading #{anchor}")
    assert not bad, f"{page.relative_to(REPO)}: " + ", ".join(bad)
