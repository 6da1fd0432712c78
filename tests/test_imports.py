"""The package's import graph has no cycle, and every module imports in a fresh interpreter.

The graph is read from the source (``ast``): every ``import dcnconvert.x`` / ``from dcnconvert import x``
/ ``from dcnconvert.x import y`` at any depth counts, those inside functions and ``TYPE_CHECKING`` blocks
too (a cycle that only a deferred import hides is still a cycle of the design).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dcnconvert"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The dcnconvert modules that module ``name`` imports."""
    tree = ast.parse(MODULES[name].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("dcnconvert")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dcnconvert"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES}
    return {m for m in found if m in MODULES and m != name and m != "dcnconvert"}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycle():
    graph = {name: imports_of(name) for name in MODULES}
    assert sum(len(v) for v in graph.values()) > len(MODULES)  # the reader sees the imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_every_module_imports_in_a_fresh_interpreter():
    code = "import importlib\n" + "".join(f"importlib.import_module({n!r})\n" for n in sorted(MODULES))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=PACKAGE.parent, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
