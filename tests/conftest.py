"""Shared pytest configuration: markers that skip, with a reason, what this machine cannot run."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: The tiers a run must not skip ($DCNCONVERT_REQUIRED_TIERS), and the per-tier table at the end.
pytest_plugins = ["support.tiers"]

TRT_HEADER_CANDIDATES = (
    "/usr/include/x86_64-linux-gnu",
    "/usr/include/aarch64-linux-gnu",
    "/usr/include",
    "/usr/local/tensorrt/include",
    "/opt/tensorrt/include",
)


@functools.cache
def gpu_available() -> str | None:
    """None if a CUDA device is usable through CuPy, else the reason it is not."""
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return f"CuPy is not importable ({type(exc).__name__}: {exc}); install the 'gpu' extra"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"no CUDA device ({type(exc).__name__}: {exc})"
    if count < 1:
        return "no CUDA device"
    return None


def trt_header_dirs() -> list[Path]:
    """Folders holding NvInfer.h: $TENSORRT_INCLUDE_DIR (os.pathsep-separated) first, then the usual ones."""
    found = []
    env = os.environ.get("TENSORRT_INCLUDE_DIR", "")
    for item in [p for p in env.split(os.pathsep) if p] + list(TRT_HEADER_CANDIDATES):
        path = Path(item)
        if (path / "NvInfer.h").is_file() and path not in found:
            found.append(path)
    return found


@functools.cache
def tensorrt_available() -> str | None:
    """None if a real TensorRT (with __version__) imports, else the reason."""
    try:
        import tensorrt
    except Exception as exc:
        return (f"the tensorrt module is not importable ({type(exc).__name__}: {exc}); "
                "pip install 'dcnconvert[trt]'")
    if not getattr(tensorrt, "__version__", None):
        return "the tensorrt module has no __version__ (stubs or an empty namespace package, not TensorRT)"
    return gpu_available()


#: Folders each holding one TensorRT lean runtime (``pip install --target DIR tensorrt-lean-cu13-libs
#: tensorrt-lean-cu13-bindings``), os.pathsep-separated; ``.ci/run`` installs 10.16 and 11.4.
LEAN_ENV_VAR = "DCNCONVERT_TRT_LEAN_DIRS"
LEAN_INSTALL_HINT = (
    f"set {LEAN_ENV_VAR} to folders made with `pip install --target DIR 'tensorrt-lean-cu13-libs==V' "
    "'tensorrt-lean-cu13-bindings==V'` (10.15 or newer for TensorRT 10; .ci/run installs 10.16 and 11.4)"
)


@functools.cache
def lean_runtimes() -> dict[int, tuple[Path, str]]:
    """``{major: (folder, version)}`` of the lean runtimes in $DCNCONVERT_TRT_LEAN_DIRS, read from their
    dist-info (nothing is imported here: two majors cannot share one process)."""
    found: dict[int, tuple[Path, str]] = {}
    for item in [p for p in os.environ.get(LEAN_ENV_VAR, "").split(os.pathsep) if p]:
        folder = Path(item)
        if not (folder / "tensorrt_lean_bindings" / "__init__.py").is_file():
            continue
        for info in sorted(folder.glob("tensorrt_lean*bindings-*.dist-info")):
            version = info.name[: -len(".dist-info")].rsplit("-", 1)[-1]
            major = version.split(".")[0]
            if major.isdigit():
                found.setdefault(int(major), (folder, version))
    return found


#: Oldest TensorRT-RTX the ``trt_rtx`` tests accept.
RTX_MIN_VERSION = (1, 7)
RTX_INSTALL_HINT = "pip install 'dcnconvert[rtx]' (TensorRT-RTX 1.7 or newer; no GPU needed to build)"


@functools.cache
def rtx_available() -> str | None:
    """None if TensorRT-RTX (module ``tensorrt_rtx``) is installed and recent enough, else the reason.

    Nothing is imported here: the module loads a 230 MB library, and a TensorRT-family library loaded
    into the test process would change what our plugin library sees when tests load it in-process.
    """
    import importlib.metadata as md
    import importlib.util

    if importlib.util.find_spec("tensorrt_rtx") is None:
        return f"the tensorrt_rtx module is not installed; {RTX_INSTALL_HINT}"
    version = None
    for dist in ("tensorrt-rtx-cu13-bindings", "tensorrt-rtx-cu12-bindings", "tensorrt-rtx"):
        try:
            version = md.version(dist)
            break
        except md.PackageNotFoundError:
            continue
    parts = tuple(int(p) for p in (version or "").split(".")[:2] if p.isdigit())
    if len(parts) < 2 or parts < RTX_MIN_VERSION:
        return f"TensorRT-RTX {version or '(unknown version)'} is older than 1.7; {RTX_INSTALL_HINT}"
    return None


def engine_builder_available() -> str | None:
    """None if ``dcnconvert build`` can build here with its defaults (a usable TensorRT, or TensorRT-RTX
    with a plugin library for it), else the reason."""
    trt_reason = tensorrt_available()
    if trt_reason is None:
        return None
    rtx_reason = rtx_available()
    if rtx_reason is not None:
        return f"{trt_reason}; {rtx_reason}"
    from dcnconvert.backend.plugin import library
    from dcnconvert.errors import DcnConvertError

    try:
        library.choose_plugin_library(runtime="tensorrt-rtx")
    except DcnConvertError as exc:
        return f"{trt_reason}; TensorRT-RTX is installed but has no plugin library here ({exc})"
    return None


def find_nvcc() -> str | None:
    """nvcc for the tests that compile: $NVCC or nvcc on PATH (None: neither)."""
    return shutil.which(os.environ.get("NVCC", "nvcc"))


@pytest.fixture(scope="session")
def built_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The core built once per session with `make core` into a temporary BUILD_DIR (the repo's build/
    is untouched), for the CPU-side core tests (test_core_build.py, test_core_choice.py)."""
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH (set NVCC): the CUDA core cannot be compiled here")
    out = tmp_path_factory.mktemp("core_build")
    proc = subprocess.run(
        ["make", "-C", str(REPO / "plugin_src"), f"-j{os.cpu_count() or 1}", "core", f"BUILD_DIR={out}",
         f"NVCC={nvcc}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"make core failed:\n{proc.stdout}\n{proc.stderr}"
    lib = out / "libdcnconvert_core.so"
    assert lib.is_file()
    return lib


@pytest.fixture
def no_engine_runtime(monkeypatch):
    """As on a machine with neither TensorRT nor TensorRT-RTX, whichever this one has."""
    from dcnconvert.backend.trt import runtimes

    monkeypatch.setattr(runtimes, "installed_runtimes", lambda: {})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords:
            reason = gpu_available()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"gpu: {reason}"))
        if "trt_headers" in item.keywords and not trt_header_dirs():
            item.add_marker(
                pytest.mark.skip(
                    reason="trt_headers: TensorRT headers (NvInfer.h) not found; set TENSORRT_INCLUDE_DIR"
                )
            )
        if "tensorrt" in item.keywords:
            reason = tensorrt_available()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"tensorrt: {reason}"))
        if "trt_rtx" in item.keywords:
            reason = rtx_available()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"trt_rtx: {reason}"))
