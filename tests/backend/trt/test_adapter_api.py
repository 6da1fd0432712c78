"""Every TensorRT name the adapter and the builder use, checked against the TensorRT 10.x Python API
published in the ``tensorrt-stubs`` wheel.

The stubs come from ``$DCNCONVERT_TRT_STUBS_DIR`` (a folder holding ``tensorrt/__init__.pyi`` and
``tensorrt_bindings/tensorrt.pyi``, e.g. filled by ``.ci/run``) or are installed here with
``pip install --no-deps --target <tmp> tensorrt-stubs==10.13.0.35.1``. They are read as text, never
imported (installed on ``sys.path`` they would turn ``import tensorrt`` into an empty namespace package).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dcnconvert.backend.trt import adapter as trt_adapter
from dcnconvert.backend.trt import builder as trt_builder

STUBS_VERSION = "10.13.0.35.1"
STUBS_ENV = "DCNCONVERT_TRT_STUBS_DIR"
ADAPTER_SOURCE = Path(trt_adapter.__file__).read_text() + "\n" + Path(trt_builder.__file__).read_text()
#: TRT_API names that Polygraphy uses on our behalf (CreateConfig(fp16/bf16), strongly_typed networks).
THROUGH_POLYGRAPHY = {"BuilderFlag.FP16", "BuilderFlag.BF16", "NetworkDefinitionCreationFlag.STRONGLY_TYPED"}


# ------------------------------------------------------------------------------------------------
# the tensorrt-stubs API, read as text
# ------------------------------------------------------------------------------------------------


class StubApi:
    """Module-level names and class members (with bases) parsed tolerantly from .pyi text."""

    def __init__(self, init_text: str, bindings_text: str):
        self.version = None
        self.top: set[str] = set()
        self.classes: dict[str, tuple[set[str], tuple[str, ...]]] = {}
        self._read_top(init_text)
        self._read_top(bindings_text)
        self._read_classes(bindings_text)

    def _read_top(self, text: str) -> None:
        for line in text.splitlines():
            m = re.match(r"^from \S+ import (\w+)(?: as (\w+))?", line)
            if m:
                self.top.add(m.group(2) or m.group(1))
                continue
            m = re.match(r"^(?:def|class) (\w+)", line) or re.match(r"^(\w+)\s*[:=]", line)
            if m:
                self.top.add(m.group(1))
            m = re.match(r"^__version__\s*:\s*str\s*=\s*'([^']+)'", line)
            if m:
                self.version = m.group(1)

    def _read_classes(self, text: str) -> None:
        stack = []  # (indent, qualified name)
        in_doc = False
        for line in text.splitlines():
            quotes = line.count('"""')
            if in_doc:
                in_doc = quotes % 2 == 0
                continue
            if quotes % 2 == 1:
                in_doc = True
            stripped = line.strip()
            if not stripped or stripped.startswith(("#", '"""', "@")):
                continue
            indent = len(line) - len(line.lstrip())
            while stack and indent <= stack[-1][0]:
                stack.pop()
            m = re.match(r"class (\w+)(?:\((.*)\))?\s*:", stripped)
            if m:
                name = m.group(1) if not stack else f"{stack[-1][1]}.{m.group(1)}"
                bases = tuple(b.strip().split(".")[-1] for b in (m.group(2) or "").split(",") if b.strip())
                self.classes.setdefault(name, (set(), bases))
                if stack and indent == stack[-1][0] + 4:
                    self.classes[stack[-1][1]][0].add(m.group(1))
                stack.append((indent, name))
                continue
            if stack and indent == stack[-1][0] + 4:
                m = re.match(r"def (\w+)\s*\(", stripped) or re.match(r"(\w+)\s*[:=]", stripped)
                if m:
                    self.classes[stack[-1][1]][0].add(m.group(1))

    def has_member(self, cls: str, member: str) -> bool:
        seen = set()
        todo = [cls]
        while todo:
            name = todo.pop()
            if name in seen or name not in self.classes:
                continue
            seen.add(name)
            members, bases = self.classes[name]
            if member in members:
                return True
            todo.extend(bases)
        return False

    def resolve(self, path: str) -> bool:
        """Whether ``A`` / ``A.B`` / ``A.B.C`` exists (classes, nested classes, members, inherited)."""
        parts = path.split(".")
        if parts[0] not in self.top:
            return False
        current = parts[0]
        for part in parts[1:]:
            if current is None or not self.has_member(current, part):
                return False
            nested = f"{current}.{part}"
            current = nested if nested in self.classes else (part if part in self.classes else None)
        return True


@pytest.fixture(scope="session")
def stub_api(tmp_path_factory) -> StubApi:
    folder = os.environ.get(STUBS_ENV)
    if folder:
        root = Path(folder)
    else:
        root = tmp_path_factory.mktemp("trt_stubs")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--disable-pip-version-check",
            "--quiet",
            "--target",
            str(root),
            f"tensorrt-stubs=={STUBS_VERSION}",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=180)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(
                f"could not download tensorrt-stubs {STUBS_VERSION} from PyPI ({exc}); "
                f"set {STUBS_ENV} to an unpacked copy"
            )
        if proc.returncode != 0:
            pytest.skip(
                f"could not download tensorrt-stubs {STUBS_VERSION} from PyPI "
                f"(pip: {proc.stderr.strip()[-300:]}); set {STUBS_ENV} to an unpacked copy"
            )
    init = root / "tensorrt" / "__init__.pyi"
    bindings = root / "tensorrt_bindings" / "tensorrt.pyi"
    if not (init.is_file() and bindings.is_file()):
        pytest.fail(f"{root} does not hold tensorrt/__init__.pyi and tensorrt_bindings/tensorrt.pyi")
    return StubApi(init.read_text(), bindings.read_text())


# ------------------------------------------------------------------------------------------------
# the names the adapter uses, read from its source
# ------------------------------------------------------------------------------------------------


def _chain(node: ast.AST):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return list(reversed(parts))
    return None


def used_names() -> set[str]:
    """Every TensorRT name the adapter's source uses (see the module docstring of trt_adapter)."""
    tree = ast.parse(ADAPTER_SOURCE)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    used: set[str] = set()

    def add(parts):
        root, rest = parts[0], parts[1:]
        if root == "trt" and rest:
            used.add(".".join(rest))
        elif root in trt_adapter.TRT_OBJECTS and rest:
            used.add(".".join([trt_adapter.TRT_OBJECTS[root]] + rest[:1]))

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            parts = _chain(node)
            if parts:
                add(parts)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            parts = _chain(node.args[0])
            if parts:
                add(parts + [node.args[1].value])
        elif isinstance(node, ast.ClassDef) and node.name == "_ProgressMonitor":
            used.update(
                f"IProgressMonitor.{f.name}"
                for f in node.body
                if isinstance(f, ast.FunctionDef) and not f.name.startswith("__")
            )
    for version in ("10.16.0", "11.1.0"):
        api = trt_adapter.api_for(version)
        used.update(f"IPluginRegistry.{m}" for m in api.creator_lookup + api.creator_listing)
    return used


class TestNamesAgainstStubs:
    def test_stubs_are_tensorrt_10(self, stub_api):
        assert stub_api.version and stub_api.version.startswith("10.")
        # the parser finds what it must (guards against a parser that accepts everything or nothing)
        assert stub_api.resolve("BuilderFlag.FP16") and stub_api.resolve("IPluginRegistry.get_creator")
        assert stub_api.resolve("Logger.WARNING") and stub_api.resolve("ILogger.Severity.WARNING")
        assert not stub_api.resolve("BuilderFlag.FP17") and not stub_api.resolve("NoSuchThing")
        assert not stub_api.resolve("IPluginRegistry.getCreator")

    def test_table_lists_every_name_the_source_uses(self):
        used = used_names()
        assert used - set(trt_adapter.TRT_API) == set(), "used but missing from TRT_API"
        assert set(trt_adapter.TRT_API) - used <= THROUGH_POLYGRAPHY, "TRT_API lists names nothing uses"

    def test_every_tensorrt_10_name_exists_in_the_stubs(self, stub_api):
        missing = [
            name
            for name, majors in trt_adapter.TRT_API.items()
            if 10 in majors and not stub_api.resolve(name)
        ]
        assert missing == []

    def test_no_removed_name_on_the_tensorrt_11_path(self):
        on_11 = {name for name, majors in trt_adapter.TRT_API.items() if 11 in majors}
        assert on_11 & trt_adapter.TRT11_REMOVED == set()
        api = trt_adapter.api_for("11.1.0")
        assert {f"IPluginRegistry.{m}" for m in api.creator_lookup + api.creator_listing} <= on_11

    def test_polygraphy_uses_the_names_listed_for_it(self):
        import importlib

        config = importlib.import_module("polygraphy.backend.trt.config")
        loader = importlib.import_module("polygraphy.backend.trt.loader")
        config_src, loader_src = Path(config.__file__).read_text(), Path(loader.__file__).read_text()
        assert '"FP16"' in config_src and '"BF16"' in config_src
        assert "NetworkDefinitionCreationFlag.STRONGLY_TYPED" in loader_src

    def test_tensorrt_is_imported_only_by_the_adapter(self):
        package = Path(trt_adapter.__file__).parents[2]  # dcnconvert/
        adapter = Path(trt_adapter.__file__)
        offenders = []
        for path in package.rglob("*.py"):
            if path == adapter:
                continue
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                if any(n == "tensorrt" or n.startswith("tensorrt.") for n in names):
                    offenders.append(path.name)
        assert offenders == []
