"""Builds the TensorRT plugin and the C++ harness for the tests, once per TensorRT header folder.

Shared by ``tests/test_plugin_harness.py`` and ``tests/test_plugin_contract.py`` (which put this
folder on ``sys.path`` and ``import plugin_build``). Builds go to ``build/test-plugin/<tag>/``
through ``make -C plugin_src harness`` (the same rules as ``make plugin``), for one real
architecture plus portable PTX so that the GPU tests run on any recent device;
``DCN_TEST_CUDA_ARCHS`` overrides the real architectures.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SRC = REPO / "plugin_src"
BUILD_ROOT = REPO / "build" / "test-plugin"
TEST_ARCHS = os.environ.get("DCN_TEST_CUDA_ARCHS", "sm_90")
TEST_PTX = "compute_75"


@dataclass(frozen=True)
class Built:
    """A plugin library and harness built against one header folder."""

    include_dir: Path
    version: str
    lib: Path
    harness: Path
    log: str


class BuildError(RuntimeError):
    """make failed; the message holds its output."""


def nvcc() -> str | None:
    """Path of nvcc ($NVCC or PATH), or None."""
    return shutil.which(os.environ.get("NVCC", "nvcc"))


def header_version(include_dir: Path) -> str:
    """'major.minor' from NvInferVersion.h (handles the TRT_*_ENTERPRISE indirection of 10.6+)."""
    text = (Path(include_dir) / "NvInferVersion.h").read_text(errors="replace")
    values = dict(re.findall(r"#define\s+(\w+)\s+(\w+)", text))

    def resolve(name: str) -> str:
        value = values.get(name, "?")
        return values.get(value, value)

    return f"{resolve('NV_TENSORRT_MAJOR')}.{resolve('NV_TENSORRT_MINOR')}"


def _tag(include_dir: Path) -> str:
    digest = hashlib.sha1(str(Path(include_dir).resolve()).encode()).hexdigest()[:8]
    return f"trt{header_version(include_dir)}-{digest}"


def make(target: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Runs ``make -C plugin_src <target> <args>`` on every CPU and returns the completed process."""
    return subprocess.run(
        ["make", "-C", str(PLUGIN_SRC), f"-j{os.cpu_count() or 1}", target, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _make_plugin(target: str, include_dir: Path, out: Path, *extra: str) -> str:
    """``make -C plugin_src <target>`` against ``include_dir`` into ``out`` for the test architectures;
    returns make's output."""
    compiler = nvcc()
    if compiler is None:
        raise BuildError("nvcc not found on PATH (set NVCC)")
    proc = make(target, *extra, f"TENSORRT_INCLUDE_DIR={include_dir}", f"BUILD_DIR={BUILD_ROOT}",
                f"PLUGIN_BUILD_DIR={out}", f"CUDA_ARCHS={TEST_ARCHS}", f"PTX_ARCH={TEST_PTX}",
                f"NVCC={compiler}")
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise BuildError(f"make {' '.join((target, *extra))} against {include_dir} failed:\n{log}")
    return log


@functools.cache
def build(include_dir: Path) -> Built:
    """Builds libdcnconvert_plugin.so and dcn_harness against ``include_dir`` (cached per folder)."""
    out = BUILD_ROOT / _tag(include_dir)
    log = _make_plugin("harness", include_dir, out)
    return Built(
        include_dir=Path(include_dir),
        version=header_version(include_dir),
        lib=out / "libdcnconvert_plugin.so",
        harness=out / "dcn_harness",
        log=log,
    )


@functools.cache
def build_rtx(include_dir: Path) -> Path:
    """Builds the TensorRT-RTX library (``PLUGIN_RUNTIME=tensorrt-rtx``, TensorRT 11 headers) against
    ``include_dir`` into ``build/test-plugin/rtx-<tag>/``; the CUDA core objects are those of
    :func:`build` (same architectures)."""
    out = BUILD_ROOT / f"rtx-{_tag(include_dir)}"
    _make_plugin("plugin-lib", include_dir, out, "PLUGIN_RUNTIME=tensorrt-rtx")
    return out / "libdcnconvert_plugin.so"


def run_harness(
    built: Built, *args: str, env: dict | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Runs ``dcn_harness <args>`` with the plugin library of ``built`` as its first argument."""
    full_env = dict(os.environ)
    full_env.pop("DCNCONVERT_PLUGIN_NO_AUTO_REGISTER", None)
    full_env.update(env or {})
    mode, *rest = args
    return subprocess.run(
        [str(built.harness), mode, str(built.lib), *rest],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


@functools.cache
def build_fake_nvinfer(built: Built) -> Path:
    """Builds tests/harness/fakeRegistry.cpp alone as ``<build>/fake-nvinfer/libnvinfer.so.<major>``
    (soname included), once per header folder.

    It stands in for the libnvinfer that ``import tensorrt`` loads with RTLD_LOCAL: its
    ``getPluginRegistry`` is not in the global symbol scope, so the plugin has to find it by soname.
    Query it with its ``dcnFakeRegistryFind(name, version, namespace)``.
    """
    compiler = nvcc()
    if compiler is None:
        raise BuildError("nvcc not found on PATH (set NVCC)")
    soname = f"libnvinfer.so.{built.version.split('.')[0]}"
    out_dir = built.lib.parent / "fake-nvinfer"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / soname
    proc = subprocess.run(
        [compiler, "-std=c++17", "-shared", "-Xcompiler", "-fPIC,-Wno-deprecated-declarations",
         "-isystem", str(built.include_dir), f"-Xlinker=-soname={soname}",
         str(REPO / "tests" / "harness" / "fakeRegistry.cpp"), "-o", str(out), "-ldl"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    if proc.returncode != 0:
        raise BuildError(f"building the fake {soname} failed:\n{proc.stdout}{proc.stderr}")
    return out


def _version_key(include_dir: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in header_version(include_dir).split("."))


def oldest_per_major(include_dirs) -> dict[int, Path]:
    """The oldest header folder of each TensorRT major in ``include_dirs`` (a library built against
    it runs in every later minor of that major)."""
    chosen: dict[int, Path] = {}
    for folder in include_dirs:
        major = _version_key(folder)[0]
        if major not in chosen or _version_key(folder) < _version_key(chosen[major]):
            chosen[major] = Path(folder)
    return chosen


LEAN_PROBE = Path(__file__).resolve().parent / "lean_probe.py"


def run_lean_probe(runtime: Path, spec: dict, spec_path: Path,
                   timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Runs lean_probe.py on ``spec`` in a process of its own whose PYTHONPATH holds the lean runtime
    folder ``runtime``; returns the process and its JSON result (None if it died or printed none)."""
    spec_path.write_text(json.dumps(spec))
    dropped = ("DCNCONVERT_PLUGIN_NO_AUTO_REGISTER", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONPATH"] = str(runtime)
    proc = subprocess.run([sys.executable, str(LEAN_PROBE), str(spec_path)], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, (json.loads(lines[-1]) if proc.returncode == 0 and lines else None)


def run_rtx_probe(spec: dict, spec_path: Path,
                  timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Runs lean_probe.py on ``spec`` inside TensorRT-RTX (module ``tensorrt_rtx`` of this Python), in a
    process of its own started with the loader link first on LD_LIBRARY_PATH (what dcnconvert does for
    TensorRT-RTX processes); returns the process and its JSON result (None if it died or printed none)."""
    from dcnconvert.backend.trt import rtx

    spec_path.write_text(json.dumps({**spec, "module": rtx.MODULE}))
    dropped = ("DCNCONVERT_PLUGIN_NO_AUTO_REGISTER", "PYTHONPATH")
    env = {k: v for k, v in rtx.loader_environment().items() if k not in dropped}
    proc = subprocess.run([sys.executable, str(LEAN_PROBE), str(spec_path)], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, (json.loads(lines[-1]) if proc.returncode == 0 and lines else None)


RTX_PARSE_PROBE = Path(__file__).resolve().parent / "rtx_parse_probe.py"


def environment_without_rtx_link() -> dict[str, str] | None:
    """This process's environment with no folder holding ``libtensorrt_rtx.so`` on LD_LIBRARY_PATH and no
    LD_PRELOAD (what a user of Polygraphy has), or None where the dynamic loader finds
    ``libtensorrt_rtx.so`` all the same (a system install): TensorRT-RTX's parser then finds that name
    only through the plugin library's forwarding object."""
    from dcnconvert.backend.trt import rtx

    dropped = ("LD_PRELOAD", "DCNCONVERT_PLUGIN_NO_AUTO_REGISTER")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    kept = [p for p in env.pop("LD_LIBRARY_PATH", "").split(os.pathsep)
            if p and not (Path(p) / rtx.CORE_LIBRARY).exists()]
    if kept:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(kept)
    found = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({rtx.CORE_LIBRARY!r})"],
                           capture_output=True, text=True, timeout=60, env=env, check=False)
    return None if found.returncode == 0 else env


def run_rtx_parse_probe(library: Path, route: str, identity: list[str], env: dict[str, str],
                        model: Path | None = None,
                        timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    """rtx_parse_probe.py (load ``library`` into TensorRT-RTX by ``route``; given ``model``, parse it and
    build an engine) in a process of its own with ``env``: the process, and its JSON lines by step."""
    args = [sys.executable, str(RTX_PARSE_PROBE), str(library), route, *identity]
    args += [str(model)] if model else []
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    steps = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            steps[record.pop("step")] = record
    return proc, steps
