"""The plugin inside TensorRT-RTX (module ``tensorrt_rtx``), which ships no DCN of its own.

* The ABI probe (tests/harness/rtx_abi): programs built with the TensorRT 10 and 11 headers call the real
  ``libtensorrt_rtx``'s plugin registry, logger finder and logger. TensorRT-RTX 1.5+ has TensorRT 11's
  layout, so the 11 probes get the right answers and the 10 probes crash or get wrong ones; this is
  why the TensorRT-RTX library is built with TensorRT 11's headers.
* The TensorRT-RTX library (``PLUGIN_RUNTIME=tensorrt-rtx``) registers through both routes (its
  constructor after ``ctypes.CDLL``, and ``registry.load_library``) and creates plugins in both phases;
  the TensorRT 10/11 libraries refuse TensorRT-RTX, and the TensorRT-RTX library refuses the lean
  TensorRT runtimes, each with one stderr line, registering nothing and without crashing.
* The forwarding object beside the TensorRT-RTX library (soname ``libtensorrt_rtx.so``, needing
  ``libtensorrt_rtx.so.1``), which the library loads so that TensorRT-RTX's ONNX parser, which opens the
  unversioned name, does not abort the process: its dynamic section; a parse and build through both
  routes without any link on ``LD_LIBRARY_PATH``; the library copied without it says so once on stderr,
  registers, and the parse then aborts as it would without dcnconvert's help.
* Polygraphy with TensorRT-RTX builds an engine from a rewritten sample with ``--plugins`` (the
  acceptance command), on a machine without a GPU, with and without the loader link.

Every TensorRT-RTX process is a child of the test (``tests/harness/lean_probe.py``,
``tests/harness/rtx_parse_probe.py``), started with the loader link of
:func:`dcnconvert.backend.trt.rtx.loader_environment`, or where a test says so, with no link at all
(:func:`environment_without_link`).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LEAN_INSTALL_HINT, REPO, lean_runtimes, trt_header_dirs
from support.elf import dynamic_section

from dcnconvert import schema
from dcnconvert.backend.plugin import library as plugin_lib
from dcnconvert.backend.plugin import runtimes
from dcnconvert.backend.trt import rtx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness"))
import plugin_build as pb  # noqa: E402

IDENTITY = [schema.PLUGIN_NAME, schema.PLUGIN_VERSION, schema.PLUGIN_NAMESPACE]
SCHEMA_FIELDS = [[name, "INT32"] for name, _n in schema.PLUGIN_FIELDS] + [
    [name, "INT32"] for name, _n, _d in schema.OPTIONAL_PLUGIN_FIELDS] + [
    [name, kind] for name, kind, _n in schema.WEIGHT_FIELDS] + [
    [name, kind] for name, kind, _n in schema.QUANT_FIELDS]
GOOD = {"id": "good", "fields": [["stride", "int32", [1, 2]], ["padding", "int32", [0, 1]],
                                 ["dilation", "int32", [2, 1]], ["group", "int32", [1]],
                                 ["deformable_group", "int64", [1]]]}
BAD = {"id": "bad-stride-0", "fields": [["stride", "int32", [0, 1]], *GOOD["fields"][1:]]}
PROBE_SRC = REPO / "tests" / "harness" / "rtx_abi"
SAMPLE = REPO / "sample_models" / "mmcv_MMCVModulatedDeformConv2d.onnx"


def headers_or_skip(major: int) -> Path:
    found = pb.oldest_per_major(trt_header_dirs()).get(major)
    if found is None:
        pytest.skip(f"trt_headers: no TensorRT {major} headers (NvInfer.h) found; set TENSORRT_INCLUDE_DIR")
    if pb.nvcc() is None:
        pytest.skip("nvcc not found (needed to build the plugin)")
    return found


def rtx_library() -> Path:
    return pb.build_rtx(headers_or_skip(11))


def spec_for(library: Path, route: str, cases: list[dict] | None = None) -> dict:
    return {"library": str(library), "route": route, "name": IDENTITY[0], "version": IDENTITY[1],
            "namespace": IDENTITY[2], "cases": cases or []}


def errors_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[dcnconvert] error:")]


# ------------------------------------------------------------------------------------------------
# the ABI of TensorRT-RTX's plugin interfaces
# ------------------------------------------------------------------------------------------------


def build_probe(major: int) -> tuple[Path, Path]:
    """The probe program and its plugin library compiled against the TensorRT ``major`` headers (cached
    under build/test-plugin/rtx-abi/, rebuilt when a probe source is newer)."""
    include = headers_or_skip(major)
    out = pb.BUILD_ROOT / "rtx-abi" / f"trt{pb.header_version(include)}"
    out.mkdir(parents=True, exist_ok=True)
    newest = max(p.stat().st_mtime for p in PROBE_SRC.iterdir())
    flags = ["-std=c++17", "-Xcompiler", "-Wall,-Wextra,-Wno-deprecated-declarations", "-isystem",
             str(include), "-cudart", "none"]
    targets = {out / "rtx_abi_probe": ["rtxAbiProbe.cpp", "-ldl"],
               out / "librtx_abi_probe.so": ["-shared", "-Xcompiler", "-fPIC", "rtxAbiProbeLib.cpp"]}
    for target, args in targets.items():
        if target.is_file() and target.stat().st_mtime > newest:
            continue
        sources = [str(PROBE_SRC / a) if a.endswith(".cpp") else a for a in args]
        proc = subprocess.run([str(pb.nvcc()), *flags, *sources, "-o", str(target)], capture_output=True,
                              text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return out / "rtx_abi_probe", out / "librtx_abi_probe.so"


def run_probe(program: Path, mode: str, library: Path | None = None) -> tuple[int, dict[str, str], str]:
    """Exit status, the "key: value" lines (the first of each key) and the whole output of one probe."""
    args = [str(program), str(rtx.core_library()), mode, *([str(library)] if library else [])]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    values: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            values.setdefault(key, value)
    return proc.returncode, values, proc.stdout + proc.stderr


REGISTRY_RIGHT = {"registered": "1", "get_creator_is_ours": "1", "all_creators_lists_ours": "1",
                  "deregistered": "1", "get_creator_after_deregister_is_null": "1"}


@pytest.mark.trt_headers
@pytest.mark.trt_rtx
def test_tensorrt_rtx_has_tensorrt_11s_registry_and_logger_layout():
    eleven, eleven_lib = build_probe(11)
    ten, ten_lib = build_probe(10)

    # TensorRT 11's headers: every call lands where it should.
    code, got, out = run_probe(eleven, "registry")
    assert code == 0 and {k: got.get(k) for k in REGISTRY_RIGHT} == REGISTRY_RIGHT, out
    assert got["runtime_major"] == "1" and int(got["all_creators_count"]) >= 1
    code, got, out = run_probe(eleven, "library", eleven_lib)
    assert code == 0, out
    assert got["load_library_handle"] == "1" and got["library_creator_found"] == "1", out
    # the finder TensorRT-RTX hands to setLoggerFinder derives from IVersionedInterface (TensorRT 11's)
    assert "ILoggerFinder" in got["finder_type"] and "IVersionedInterface" in got["finder_type"], out
    assert "ProbeLogger" in got["found_logger_type"], out  # findLogger() returned our builder's logger
    assert "probe_logger_message: 2 rtx-abi-probe-lib: through the logger finder" in out  # log() got there

    # TensorRT 10's headers: the registry, the finder and the logger are all called at the wrong slot.
    code, got, out = run_probe(ten, "registry")
    assert code != 0 or {k: got.get(k) for k in REGISTRY_RIGHT} != REGISTRY_RIGHT, out
    code, got, out = run_probe(eleven, "library", ten_lib)  # the right registry, a TensorRT 10 library
    assert "ProbeLogger" not in got.get("found_logger_type", ""), out  # findLogger() was not what ran
    code, got, out = run_probe(eleven, "library-logger", ten_lib)  # TensorRT-RTX logging to a 10 ILogger
    assert code != 0 or "library_logger_message:" not in out, out


# ------------------------------------------------------------------------------------------------
# the TensorRT-RTX library
# ------------------------------------------------------------------------------------------------


@pytest.mark.trt_headers
def test_rtx_glue_needs_tensorrt_11_headers(tmp_path):
    eleven, ten = headers_or_skip(11), headers_or_skip(10)
    # the glue that only the TensorRT-RTX build compiles is warning-free too
    builds = [(eleven, name) for name in ("runtimeGuard.cpp", "rtxParserLink.cpp", "registration.cpp")]
    for include, name in [*builds, (ten, "runtimeGuard.cpp")]:
        proc = subprocess.run(
            [str(pb.nvcc()), "-std=c++17", "-Xcompiler", "-Wall,-Wextra,-Werror", "-isystem", str(include),
             "-DDCN_RUNTIME_TENSORRT_RTX=1", "-c", str(pb.PLUGIN_SRC / "trt" / name), "-o",
             str(tmp_path / "g.o")],
            capture_output=True, text=True, timeout=300, check=False)
        if include == eleven:
            assert proc.returncode == 0, name + "\n" + proc.stdout + proc.stderr
        else:
            assert proc.returncode != 0 and "needs TensorRT 11's headers" in proc.stderr
    info = plugin_lib.library_build_info(rtx_library())
    assert info["runtime"] == "tensorrt-rtx" and info["tensorrt_headers"].startswith("11.")
    assert (info["runtime_major"], info["runtime_min_minor"]) == ("1", "5")


@pytest.mark.trt_headers
@pytest.mark.trt_rtx
@pytest.mark.parametrize("route", ["ctypes", "load_library"])
def test_rtx_library_registers_in_tensorrt_rtx(route, tmp_path):
    proc, result = pb.run_rtx_probe(spec_for(rtx_library(), route, [GOOD, BAD]), tmp_path / "spec.json")
    assert result is not None, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert result["tensorrt_version"] == rtx.installed_version()
    if route == "ctypes":  # the constructor found libtensorrt_rtx (loaded RTLD_LOCAL) and registered
        assert result["after_ctypes"] == [IDENTITY]
    assert result["load_library_handle"] is True
    assert result["registered"] == [IDENTITY] and result["creator_found"] is True
    assert result["field_names"] == SCHEMA_FIELDS
    for phase, outcome in result["cases"]["good"].items():
        assert outcome == {"created": True, "exception": None, "identity": IDENTITY}, phase
    for phase, outcome in result["cases"][BAD["id"]].items():
        assert outcome == {"created": False, "exception": None}, phase
    assert errors_of(proc.stderr) == []
    # one message per phase, naming the layer (through TensorRT-RTX's logger finder on load_library)
    named = [line for line in proc.stderr.splitlines() if f"layer '{BAD['id']}'" in line]
    assert len(named) == 2, proc.stderr


@pytest.mark.trt_headers
@pytest.mark.trt_rtx
@pytest.mark.parametrize("major", [10, 11])
@pytest.mark.parametrize("route", ["ctypes", "load_library"])
def test_tensorrt_libraries_refuse_tensorrt_rtx(major, route, tmp_path):
    built = pb.build(headers_or_skip(major))
    proc, result = pb.run_rtx_probe(spec_for(built.lib, route), tmp_path / "spec.json")
    assert result is not None, f"the process died: exit {proc.returncode}\n{proc.stderr}"
    assert result["registered"] == [] and result["creator_found"] is False
    assert result["load_library_handle"] is False
    if route == "ctypes":
        assert result["after_ctypes"] == []
    (error,) = errors_of(proc.stderr)
    assert f"built for TensorRT {major} (headers" in error
    assert re.search(r"is TensorRT-RTX 1\.\d+: it registers no plugin there", error), error
    assert "`dcnconvert plugin-path --runtime tensorrt-rtx`" in error


@pytest.mark.trt_headers
@pytest.mark.trt_lean
@pytest.mark.parametrize("major", [10, 11])
@pytest.mark.parametrize("route", ["ctypes", "load_library"])
def test_rtx_library_refuses_the_lean_runtimes(major, route, tmp_path):
    runtime = lean_runtimes().get(major)
    if runtime is None:
        pytest.skip(f"trt_lean: no TensorRT {major} lean runtime; {LEAN_INSTALL_HINT}")
    proc, result = pb.run_lean_probe(runtime[0], spec_for(rtx_library(), route), tmp_path / "spec.json")
    assert result is not None, f"the process died: exit {proc.returncode}\n{proc.stderr}"
    assert result["registered"] == [] and result["creator_found"] is False
    assert result["load_library_handle"] is False
    (error,) = errors_of(proc.stderr)
    assert "built for TensorRT-RTX 1.5 or a newer 1.x (TensorRT 11." in error
    assert f"is major version {major}: it registers no plugin there" in error
    assert "`dcnconvert plugin-path`" in error


# ------------------------------------------------------------------------------------------------
# the forwarding object: TensorRT-RTX's parser without a link on LD_LIBRARY_PATH
# ------------------------------------------------------------------------------------------------


def environment_without_link() -> dict[str, str]:
    """:func:`plugin_build.environment_without_rtx_link`, or a skip where it cannot be set up."""
    env = pb.environment_without_rtx_link()
    if env is None:
        pytest.skip(f"the dynamic loader finds {rtx.CORE_LIBRARY} on this machine without any link, so a "
                    "process without it cannot be set up")
    return env


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory) -> Path:
    """The mmcv sample rewritten by ``python -m dcnconvert rewrite`` (one ModulatedDeformConv2d node)."""
    out = tmp_path_factory.mktemp("rtx-model") / "r.onnx"
    proc = subprocess.run([sys.executable, "-m", "dcnconvert", "rewrite", str(SAMPLE), "-o", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


def run_parse_probe(library: Path, route: str, env: dict[str, str], model: Path | None = None):
    return pb.run_rtx_parse_probe(library, route, IDENTITY, env, model)


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[dcnconvert] warning:")]


@pytest.mark.trt_headers
def test_forwarding_object_is_built_beside_the_rtx_library_only():
    """Soname libtensorrt_rtx.so, needing libtensorrt_rtx.so.1 and nothing else, with no search path of its
    own (the one it needs is the library already loaded); the TensorRT builds have none."""
    lib = rtx_library()
    forwarder = lib.with_name(runtimes.RTX_FORWARD_NAME)
    dynamic = dynamic_section(forwarder)
    assert dynamic.soname == rtx.CORE_LIBRARY and dynamic.needed == [rtx.CORE_LIBRARY + ".1"], dynamic
    assert dynamic.rpath == [] and dynamic.runpath == [], dynamic
    readelf = shutil.which("readelf")
    if readelf is not None:  # a second reader agrees
        out = subprocess.run([readelf, "-d", str(forwarder)], capture_output=True, text=True,
                             check=True).stdout
        assert re.findall(r"\(SONAME\)\s+Library soname: \[(.*)\]", out) == [rtx.CORE_LIBRARY], out
        assert re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", out) == [rtx.CORE_LIBRARY + ".1"], out
    # the plugin library itself needs no TensorRT-RTX (it finds the loaded one at run time)
    assert not [n for n in dynamic_section(lib).needed if "tensorrt_rtx" in n]
    assert not pb.build(headers_or_skip(11)).lib.with_name(runtimes.RTX_FORWARD_NAME).exists()


@pytest.mark.trt_headers
@pytest.mark.trt_rtx
@pytest.mark.parametrize("route", ["ctypes", "load_library", "early_load_library"])
def test_rtx_library_parses_plugin_nodes_without_a_loader_link(route, rewritten):
    """Either way of loading, and loadLibrary of a library loaded before TensorRT-RTX (its constructor then
    found no runtime; getCreators loads the forwarding object)."""
    proc, steps = run_parse_probe(rtx_library(), route, environment_without_link(), rewritten)
    out = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.returncode == 0, out
    assert steps["loaded"] == {"creator_found": True}, out
    assert steps["parsed"] == {"ok": True, "errors": []}, out
    assert steps["built"]["plan_bytes"] > 0, out
    assert errors_of(proc.stderr) == [] and warnings_of(proc.stderr) == [], proc.stderr


@pytest.mark.trt_headers
@pytest.mark.trt_rtx
@pytest.mark.parametrize("route", ["ctypes", "load_library"])
def test_rtx_library_without_its_forwarding_object_says_so(route, rewritten, tmp_path):
    """Copied alone, the library still loads and registers, and says once on stderr which file is missing
    and what else to do. The parse then aborts the process: what TensorRT-RTX 1.7's parser does when it
    cannot open libtensorrt_rtx.so, and why the forwarding object exists."""
    alone = tmp_path / "alone" / plugin_lib.LIB_NAME
    alone.parent.mkdir()
    shutil.copy2(rtx_library(), alone)
    env = environment_without_link()
    proc, steps = run_parse_probe(alone, route, env)
    out = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.returncode == 0 and steps["loaded"] == {"creator_found": True}, out
    (warning,) = warnings_of(proc.stderr)
    assert f"{alone.parent / runtimes.RTX_FORWARD_NAME} is missing" in warning, warning
    assert "ONNX parser will abort" in warning and "libtensorrt_rtx.so -> libtensorrt_rtx.so.1" in warning
    assert "LD_LIBRARY_PATH" in warning and errors_of(proc.stderr) == []
    proc, steps = run_parse_probe(alone, route, env, rewritten)
    died = f"exit {proc.returncode}\n{proc.stderr}"
    assert proc.returncode == -signal.SIGABRT and "parsed" not in steps, died
    # with the loader link, the same lone library parses: the link does what the forwarding object does
    proc, steps = run_parse_probe(alone, route, rtx.loader_environment(env), rewritten)
    assert proc.returncode == 0 and steps["parsed"]["ok"] is True, f"exit {proc.returncode}\n{proc.stderr}"
    assert warnings_of(proc.stderr) == []


# ------------------------------------------------------------------------------------------------
# the acceptance command: Polygraphy with TensorRT-RTX
# ------------------------------------------------------------------------------------------------


def polygraphy_or_skip() -> str:
    found = Path(sys.executable).with_name("polygraphy")
    if found.is_file():
        return str(found)
    which = shutil.which("polygraphy")
    if which is None:
        pytest.skip("polygraphy is not installed (pip install polygraphy)")
    return which


@pytest.mark.trt_headers
@pytest.mark.trt_rtx
@pytest.mark.parametrize(("library", "loader_link"), [("tensorrt-rtx", False), ("tensorrt-rtx", True),
                                                      ("tensorrt-11", True)])
def test_polygraphy_builds_an_engine_with_the_plugin(library, loader_link, rewritten, tmp_path):
    """``POLYGRAPHY_USE_TENSORRT_RTX=1 polygraphy convert r.onnx --plugins LIB --compute-capabilities 8.6
    -o x.engine``, in an environment with no libtensorrt_rtx.so link (what a user has), or with
    dcnconvert's."""
    polygraphy = polygraphy_or_skip()
    lib = rtx_library() if library == "tensorrt-rtx" else pb.build(headers_or_skip(11)).lib
    engine = tmp_path / "x.engine"
    base = environment_without_link()
    env = {**(rtx.loader_environment(base) if loader_link else base), "POLYGRAPHY_USE_TENSORRT_RTX": "1"}
    command = [polygraphy, "convert", str(rewritten), "--plugins", str(lib), "--compute-capabilities", "8.6",
               "-o", str(engine)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
                          check=False)
    out = proc.stdout + proc.stderr
    if library == "tensorrt-rtx":
        assert proc.returncode == 0, out[-6000:]
        assert engine.is_file() and engine.stat().st_size > 0
        assert errors_of(proc.stderr) == [] and warnings_of(proc.stderr) == []
    else:  # the TensorRT 11 library registers nothing under TensorRT-RTX: the parser finds no creator
        assert proc.returncode != 0 and not engine.exists(), out[-6000:]
        (error,) = errors_of(proc.stderr)
        assert "built for TensorRT 11" in error and "--runtime tensorrt-rtx" in error
