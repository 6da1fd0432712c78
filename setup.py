"""Wheel build: the Python package, the plugin's sources, and the plugin library for each TensorRT major
and for TensorRT-RTX.

pyproject.toml holds the metadata; this file adds two build steps.

* ``build_py`` copies ``plugin_src/`` into the package as ``dcnconvert/_plugin_src`` (what
  ``dcnconvert plugin build`` compiles from an installed wheel or sdist). Given TensorRT headers in
  ``DCNCONVERT_WHEEL_HEADERS`` (include folders, os.pathsep-separated, one or more per major), it
  builds ``libdcnconvert_plugin.so`` against the oldest minor of each major (the IPluginV3 interfaces
  are the same within a major, so that library runs in every later minor) into
  ``dcnconvert/_lib/trt<major>/``, through ``make -C plugin_src plugin-lib``. With TensorRT 11 headers
  among them it also builds the TensorRT-RTX library (``PLUGIN_RUNTIME=tensorrt-rtx``: TensorRT-RTX 1.5+
  has TensorRT 11's plugin ABI) into ``dcnconvert/_lib/rtx1/``, with the forwarding object that goes
  beside it (``libdcnconvert_rtx_forward.so``, plugin_src/trt/rtxParserLink.h); only its glue is compiled
  again, the CUDA core objects are those of the TensorRT builds.
* ``bdist_wheel`` tags a wheel that carries libraries ``py3-none-manylinux_2_<N>_<arch>``, where
  2.<N> is the newest glibc symbol version the libraries need (read from their ELF version
  references), so that the tag's glibc floor is the libraries' own. Without headers the wheel is
  the pure-Python ``py3-none-any`` one, and the build says so.

Other knobs: ``DCNCONVERT_WHEEL_ARCHS`` (SASS architectures; PTX is added for the newest only, or
for ``DCNCONVERT_WHEEL_PTX``),
``DCNCONVERT_WHEEL_BUILD_DIR`` (object files, reused between builds), ``DCNCONVERT_WHEEL_JOBS``
(make -j), ``NVCC``.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
#: Every architecture a CUDA 13 toolkit can target on x86_64 hosts from Turing on; sm_90 is built as
#: sm_90a (plugin_src/Makefile). aarch64 builds add sm_87 (Orin), sm_110 (Thor) and sm_121.
DEFAULT_ARCHS = "sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_103 sm_120"
LIB_NAME = "libdcnconvert_plugin.so"
#: The TensorRT major whose headers the TensorRT-RTX library is built with, and its folder in the package.
RTX_HEADERS_MAJOR = 11
RTX_FOLDER = "rtx1"
#: The file that lies beside the TensorRT-RTX library (dcnconvert.backend.plugin.runtimes.RTX_FORWARD_NAME).
RTX_FORWARD_NAME = "libdcnconvert_rtx_forward.so"


def _say(text: str) -> None:
    print(f"dcnconvert wheel: {text}", file=sys.stderr, flush=True)


def header_version(include_dir: Path) -> tuple[int, int, int]:
    """(major, minor, patch) of NvInferVersion.h (10.6+ define them through TRT_*_ENTERPRISE)."""
    text = (include_dir / "NvInferVersion.h").read_text(errors="replace")
    values = dict(re.findall(r"#define\s+(\w+)\s+(\w+)", text))

    def number(name: str) -> int:
        value = values.get(name, "")
        value = values.get(value, value)
        if not value.isdigit():
            raise SystemExit(f"dcnconvert wheel: {include_dir}/NvInferVersion.h has no {name}")
        return int(value)

    return number("NV_TENSORRT_MAJOR"), number("NV_TENSORRT_MINOR"), number("NV_TENSORRT_PATCH")


def headers_per_major() -> dict[int, tuple[Path, tuple[int, int, int]]]:
    """The oldest header folder of each major in $DCNCONVERT_WHEEL_HEADERS."""
    chosen: dict[int, tuple[Path, tuple[int, int, int]]] = {}
    for item in [p for p in os.environ.get("DCNCONVERT_WHEEL_HEADERS", "").split(os.pathsep) if p]:
        folder = Path(item).resolve()
        if not (folder / "NvInfer.h").is_file():
            raise SystemExit(f"dcnconvert wheel: DCNCONVERT_WHEEL_HEADERS names {folder}, which holds no "
                             "NvInfer.h")
        version = header_version(folder)
        if version[0] not in chosen or version < chosen[version[0]][1]:
            chosen[version[0]] = (folder, version)
    return chosen


def archs() -> tuple[list[str], str]:
    """(SASS architectures, the PTX architecture: the newest one's)."""
    sass = os.environ.get("DCNCONVERT_WHEEL_ARCHS", DEFAULT_ARCHS).replace(",", " ").split()
    if not sass or not all(re.fullmatch(r"sm_\d+a?", a) for a in sass):
        raise SystemExit(f"dcnconvert wheel: DCNCONVERT_WHEEL_ARCHS must list sm_NN values, got {sass}")
    newest = max(sass, key=lambda a: int(re.sub(r"\D", "", a)))
    ptx = os.environ.get("DCNCONVERT_WHEEL_PTX", "compute_" + re.sub(r"\D", "", newest))
    if not re.fullmatch(r"compute_\d+a?", ptx):
        raise SystemExit(f"dcnconvert wheel: DCNCONVERT_WHEEL_PTX must be compute_NN, got {ptx!r}")
    return sass, ptx


def glibc_floor(paths: list[Path]) -> tuple[int, int]:
    """The newest GLIBC_x.y version any of ``paths`` references (ELF .gnu.version_r)."""
    newest = (2, 17)
    for path in paths:
        for name in elf_version_needs(path.read_bytes()):
            match = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", name)
            if match:
                newest = max(newest, (int(match.group(1)), int(match.group(2))))
    return newest


def elf_version_needs(data: bytes) -> set[str]:
    """Version names in a 64-bit little-endian ELF file's version-needed section (SHT_GNU_verneed)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SystemExit("dcnconvert wheel: the plugin library is not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _name, kind, _flags, _addr, offset, _size, link, info, _align, _entsize in sections:
        if kind != 0x6FFFFFFE:  # SHT_GNU_verneed
            continue
        strtab = sections[link][4]
        entry = offset
        for _ in range(info):
            _version, count, _file, aux, following = struct.unpack_from("<HHIII", data, entry)
            item = entry + aux
            for _ in range(count):
                _hash, _flags2, _other, name_off, next_aux = struct.unpack_from("<IHHII", data, item)
                end = data.index(b"\0", strtab + name_off)
                names.add(data[strtab + name_off:end].decode())
                item += next_aux
            entry += following
    return names


class BuildPy(build_py):
    """build_py, plus the plugin's sources and (given headers) its libraries inside the package."""

    def run(self) -> None:
        package = Path(self.build_lib) / "dcnconvert"
        if not getattr(self, "editable_mode", False):
            shutil.rmtree(package, ignore_errors=True)  # no module left over from an earlier build
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install finds plugin_src/ and dcnconvert/_lib/ in the tree itself
        sources = package / "_plugin_src"
        shutil.rmtree(sources, ignore_errors=True)
        shutil.copytree(HERE / "plugin_src", sources,
                        ignore=shutil.ignore_patterns("*.o", "*.so", "__pycache__"))
        shutil.rmtree(package / "_lib", ignore_errors=True)  # only what this build makes
        majors = headers_per_major()
        if not majors:
            _say("no TensorRT headers given (DCNCONVERT_WHEEL_HEADERS): a pure-Python wheel without the "
                 "plugin library; users then run `dcnconvert plugin build`")
            return
        sass, ptx = archs()
        build_dir = Path(os.environ.get("DCNCONVERT_WHEEL_BUILD_DIR", HERE / "build" / "wheel")).resolve()
        jobs = os.environ.get("DCNCONVERT_WHEEL_JOBS", str(os.cpu_count() or 1))
        builds = [(f"trt{major}", f"TensorRT {major}", "tensorrt", include, version)
                  for major, (include, version) in sorted(majors.items())]
        if RTX_HEADERS_MAJOR in majors:
            builds.append((RTX_FOLDER, "TensorRT-RTX 1.5+", "tensorrt-rtx", *majors[RTX_HEADERS_MAJOR]))
        else:
            _say(f"no TensorRT {RTX_HEADERS_MAJOR} headers given: the wheel carries no TensorRT-RTX library")
        for folder, what, runtime, include, version in builds:
            out = build_dir / folder
            dotted = ".".join(map(str, version))
            _say(f"building the plugin for {what} against the {dotted} headers ({include}), "
                 f"SASS {' '.join(sass)}, PTX {ptx}")
            command = ["make", "-C", str(HERE / "plugin_src"), f"-j{jobs}", "plugin-lib",
                       f"PLUGIN_RUNTIME={runtime}", f"TENSORRT_INCLUDE_DIR={include}",
                       f"CUDA_ARCHS={' '.join(sass)}", f"PTX_ARCH={ptx}", f"BUILD_DIR={build_dir}",
                       f"PLUGIN_BUILD_DIR={out}", f"NVCC={os.environ.get('NVCC', 'nvcc')}"]
            subprocess.run(command, check=True)
            for name in [LIB_NAME, *([RTX_FORWARD_NAME] if runtime == "tensorrt-rtx" else [])]:
                target = package / "_lib" / folder / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(out / name, target)
                _say(f"{target.relative_to(package.parent)}: {target.stat().st_size / 1e6:.3f} MB")


class BinaryDistribution(Distribution):
    """A distribution with native code when plugin libraries are built: its files go to platlib."""

    def has_ext_modules(self) -> bool:
        return bool(headers_per_major())


class BdistWheel(bdist_wheel):
    """A platform wheel when plugin libraries were built, tagged with their glibc floor."""

    def _libraries(self) -> list[Path]:
        build_lib = Path(self.get_finalized_command("build_py").build_lib)
        return sorted((build_lib / "dcnconvert" / "_lib").glob("*/*.so"))

    def get_tag(self) -> tuple[str, str, str]:
        libs = self._libraries()
        if not libs:
            return super().get_tag()
        major, minor = glibc_floor(libs)
        machine = platform.machine()
        _say(f"platform tag manylinux_{major}_{minor}_{machine} (glibc floor of {len(libs)} libraries)")
        return "py3", "none", f"manylinux_{major}_{minor}_{machine}"


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
