"""The wheel: built with the headers of each TensorRT major, installed, and its library chosen and loaded.

The platform wheel is built once per session (``python -m build --wheel`` with
``DCNCONVERT_WHEEL_HEADERS`` naming the oldest headers found of each major, for one architecture,
reusing the harness builds' object files), installed with ``pip install --target``, and run from
there in a process whose ``PYTHONPATH`` holds that folder and one lean runtime: ``plugin-path`` must
name the library inside the installed package for that runtime's major, and that library must
register in that runtime (``tests/harness/lean_probe.py``). The pure-Python wheel (no headers) needs
neither headers nor nvcc. ``DCNCONVERT_TEST_WHEEL=PATH`` tests that wheel instead of building one
(the release workflow tests the wheel it ships).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import LEAN_INSTALL_HINT, REPO, lean_runtimes, trt_header_dirs

from dcnconvert import schema
from dcnconvert.backend.plugin import library as plugin_lib
from dcnconvert.backend.plugin import runtimes

sys.path.insert(0, str(Path(__file__).resolve().parent / "harness"))
import plugin_build as pb  # noqa: E402
from support.elf import dynamic_section  # noqa: E402

pytestmark = pytest.mark.wheel

IDENTITY = [schema.PLUGIN_NAME, schema.PLUGIN_VERSION, schema.PLUGIN_NAMESPACE]


def build_wheel(out: Path, headers: list[Path], archs: str = pb.TEST_ARCHS) -> tuple[Path, str]:
    env = dict(os.environ)
    env.pop("DCNCONVERT_WHEEL_HEADERS", None)
    if headers:
        env.update(DCNCONVERT_WHEEL_HEADERS=os.pathsep.join(map(str, headers)), DCNCONVERT_WHEEL_ARCHS=archs,
                   DCNCONVERT_WHEEL_PTX=pb.TEST_PTX, DCNCONVERT_WHEEL_BUILD_DIR=str(pb.BUILD_ROOT))
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=1800, env=env, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    wheels = list(out.glob("dcnconvert-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0], log


def install(wheel: Path, target: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    return target


def run_installed(target: Path, runtime: Path | None, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m dcnconvert ARGS`` from the installed folder (and a lean runtime's), not the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in (plugin_lib.ENV_VAR, "PYTHONPATH")}
    env["DCNCONVERT_CACHE_DIR"] = str(cwd / "empty-cache")
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (target, runtime) if p)
    return subprocess.run([sys.executable, "-m", "dcnconvert", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd, check=False)


def test_pure_wheel_without_headers_carries_the_sources(tmp_path):
    pytest.importorskip("build", reason="the 'build' package (dev extra) is not installed")
    wheel, log = build_wheel(tmp_path / "dist", [])
    assert wheel.name == "dcnconvert-0.1.0-py3-none-any.whl"
    assert "pure-Python wheel without the plugin library" in log
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith(".so")]
    assert "dcnconvert/_plugin_src/trt/registration.cpp" in names
    assert "dcnconvert/_plugin_src/core/dcnForward.cu" in names
    assert not [n for n in names if n.startswith(("tests/", "support/")) or "/tests/" in n]
    # the test-only helpers (tests/support) are not shipped, and the API imports without them
    assert not [n for n in names if n.rsplit("/", 1)[-1] in {"evaluate.py", "samples.py", "reference.py",
                                                              "core.py", "core_fused.py"}]
    assert "dcnconvert/api.py" in names and "dcnconvert/backend/trt/adapter.py" in names
    target = install(wheel, tmp_path / "site")
    code = ("import dcnconvert.api; from dcnconvert.backend.plugin import library as p; "
            "print(p.plugin_sources()); print(p.source_hash())")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(target)}, check=True, timeout=60)
    where, digest = proc.stdout.split()
    assert Path(where) == target / "dcnconvert" / "_plugin_src"
    assert digest == plugin_lib.source_hash(REPO / "plugin_src")  # the cache key is the same in both
    res = run_installed(target, None, "plugin-path", cwd=tmp_path)
    assert res.returncode == 4 and "dcnconvert plugin build" in res.stderr


@pytest.fixture(scope="module")
def platform_wheel(tmp_path_factory):
    pytest.importorskip("build", reason="the 'build' package (dev extra) is not installed")
    headers = pb.oldest_per_major(trt_header_dirs())
    if not headers:
        pytest.skip("trt_headers: no TensorRT headers found; set TENSORRT_INCLUDE_DIR")
    if pb.nvcc() is None:
        pytest.skip("nvcc not found (needed to build the plugin)")
    out = tmp_path_factory.mktemp("wheel")
    given = os.environ.get("DCNCONVERT_TEST_WHEEL")
    if given:
        wheel, log, archs = Path(given), "", None
    else:
        wheel, log = build_wheel(out / "dist", list(headers.values()))
        archs = [a.replace("sm_90", "sm_90a") for a in pb.TEST_ARCHS.split()] + [pb.TEST_PTX]
    return wheel, archs, headers, install(wheel, out / "site")


@pytest.mark.trt_headers
def test_platform_wheel_carries_one_library_per_major_and_its_glibc_floor(platform_wheel):
    wheel, archs, headers, target = platform_wheel
    names = zipfile.ZipFile(wheel).namelist()
    libs = sorted(n for n in names if n.endswith(".so"))
    folders = [f"trt{m}" for m in headers] + (["rtx1"] if 11 in headers else [])  # TensorRT-RTX: 11's ABI
    # the TensorRT-RTX library travels with its forwarding object, and only it
    forwarders = [f"dcnconvert/_lib/rtx1/{runtimes.RTX_FORWARD_NAME}"] if 11 in headers else []
    assert libs == sorted([f"dcnconvert/_lib/{f}/{plugin_lib.LIB_NAME}" for f in folders] + forwarders)
    tag = re.fullmatch(r"dcnconvert-0\.1\.0-py3-none-manylinux_(\d+)_(\d+)_(\w+)\.whl", wheel.name)
    assert tag, wheel.name
    # the tag's glibc floor is the newest GLIBC_ version the libraries reference (objdump agrees)
    needed = set()
    for lib in libs:
        dump = subprocess.run(["objdump", "-T", str(target / lib)], capture_output=True, text=True,
                              check=True).stdout
        needed |= {(int(a), int(b)) for a, b in re.findall(r"GLIBC_(\d+)\.(\d+)", dump)}
    assert (int(tag.group(1)), int(tag.group(2))) == max(needed)
    for major, folder in headers.items():
        lib = target / "dcnconvert" / "_lib" / f"trt{major}" / plugin_lib.LIB_NAME
        info = plugin_lib.library_build_info(lib)
        assert info["tensorrt_headers"].startswith(pb.header_version(folder) + ".")
        assert info["runtime"] == "tensorrt" and info["runtime_major"] == str(major)
        if archs is not None:
            assert info["archs"].split() == archs
    if 11 in headers:
        info = plugin_lib.library_build_info(target / "dcnconvert" / "_lib" / "rtx1" / plugin_lib.LIB_NAME)
        assert info["tensorrt_headers"].startswith(pb.header_version(headers[11]) + ".")
        assert info["runtime"] == "tensorrt-rtx"
        assert (info["runtime_major"], info["runtime_min_minor"]) == ("1", "5")
        forwarder = dynamic_section(target / "dcnconvert" / "_lib" / "rtx1" / runtimes.RTX_FORWARD_NAME)
        assert forwarder.soname == "libtensorrt_rtx.so" and forwarder.needed == ["libtensorrt_rtx.so.1"]


@pytest.mark.trt_headers
@pytest.mark.trt_lean
@pytest.mark.parametrize("major", [10, 11])
def test_installed_wheel_picks_and_loads_the_library_of_the_runtime_major(platform_wheel, major, tmp_path):
    _wheel, _archs, headers, target = platform_wheel
    runtime = lean_runtimes().get(major)
    if runtime is None:
        pytest.skip(f"trt_lean: no TensorRT {major} lean runtime; {LEAN_INSTALL_HINT}")
    if major not in headers:
        pytest.skip(f"trt_headers: no TensorRT {major} headers, so the wheel carries no library for it")
    res = run_installed(target, runtime[0], "plugin-path", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    choice = json.loads(res.stdout)
    expected = target / "dcnconvert" / "_lib" / f"trt{major}" / plugin_lib.LIB_NAME
    assert Path(choice["plugin_library"]) == expected.resolve()
    assert choice["origin"] == "bundled" and choice["tensorrt_version"] == runtime[1]
    assert "tensorrt-lean-cu13-bindings" in choice["reason"]
    spec = {"library": choice["plugin_library"], "route": "load_library", "name": IDENTITY[0],
            "version": IDENTITY[1], "namespace": IDENTITY[2]}
    proc, result = pb.run_lean_probe(runtime[0], spec, tmp_path / "spec.json", timeout=120)
    assert result is not None, proc.stderr
    assert result["registered"] == [IDENTITY] and result["creator_found"] is True


@pytest.mark.trt_headers
@pytest.mark.trt_rtx
def test_installed_wheel_picks_and_loads_the_tensorrt_rtx_library(platform_wheel, tmp_path):
    _wheel, _archs, headers, target = platform_wheel
    if 11 not in headers:
        pytest.skip("trt_headers: no TensorRT 11 headers, so the wheel carries no TensorRT-RTX library")
    res = run_installed(target, None, "plugin-path", "--runtime", "tensorrt-rtx", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    choice = json.loads(res.stdout)
    expected = target / "dcnconvert" / "_lib" / "rtx1" / plugin_lib.LIB_NAME
    assert Path(choice["plugin_library"]) == expected.resolve()
    assert choice["origin"] == "bundled" and choice["runtime"] == "tensorrt-rtx"
    spec = {"library": choice["plugin_library"], "route": "load_library", "name": IDENTITY[0],
            "version": IDENTITY[1], "namespace": IDENTITY[2]}
    proc, result = pb.run_rtx_probe(spec, tmp_path / "spec.json", timeout=120)
    assert result is not None, proc.stderr
    assert result["registered"] == [IDENTITY] and result["creator_found"] is True
    # without any libtensorrt_rtx.so link, the installed library (with the forwarding object beside it)
    # lets TensorRT-RTX's parser import a plugin node and build an engine
    env = pb.environment_without_rtx_link()
    if env is None:
        pytest.skip("the dynamic loader finds libtensorrt_rtx.so on this machine without any link")
    model = tmp_path / "r.onnx"
    sample = REPO / "sample_models" / "mmcv_MMCVModulatedDeformConv2d.onnx"
    res = run_installed(target, None, "rewrite", str(sample), "-o", str(model), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    proc, steps = pb.run_rtx_parse_probe(expected, "ctypes", IDENTITY, env, model, timeout=120)
    assert proc.returncode == 0 and steps["parsed"]["ok"] is True, f"exit {proc.returncode}\n{proc.stderr}"
    assert steps["built"]["plan_bytes"] > 0
