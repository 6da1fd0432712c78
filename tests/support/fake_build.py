"""Stand-ins for ``dcnconvert plugin build``'s tools and inputs (tests/backend/plugin): a fake nvcc
and a fake make (shell scripts that write a library stand-in carrying the build-info line), a tiny
TensorRT ``include/`` and a tarball of one."""

from __future__ import annotations

import stat
import tarfile
from pathlib import Path

FAKE_NVCC = """#!/bin/sh
case "$1" in
  --version) echo "Cuda compilation tools, release 13.0, V13.0.88" ;;
  --list-gpu-code) printf 'sm_75\\nsm_80\\nsm_86\\nsm_89\\nsm_90\\nsm_100\\nsm_120\\n' ;;
  *) echo "fake nvcc: $*" >&2; exit 1 ;;
esac
"""

# Writes the library where plugin.mk would, with the build-info line of the headers it was given (and,
# for tensorrt-rtx, the forwarding object beside it unless $FAKE_MAKE_NO_FORWARD is set), and echoes the
# recipe lines (starting with $NVCC) that the progress lines are made from.
FAKE_MAKE = r"""#!/bin/sh
echo "$*" >> "$FAKE_MAKE_LOG"
for arg in "$@"; do
  case "$arg" in
    PLUGIN_BUILD_DIR=*) out="${arg#*=}" ;;
    NVCC=*) nvcc="${arg#*=}" ;;
    TENSORRT_INCLUDE_DIR=*) inc="${arg#*=}" ;;
    PLUGIN_RUNTIME=tensorrt-rtx) runtime="runtime=tensorrt-rtx runtime_major=1 runtime_min_minor=5 " ;;
  esac
done
if [ -n "$FAKE_MAKE_FAIL" ]; then
  echo "core/dcnFused.cu(12): error: something is wrong"
  echo "make: *** [plugin.mk:99] Error 1"
  exit 2
fi
v() {
  sed -n "s/^#define \(NV_TENSORRT_$1\|TRT_$1_ENTERPRISE\) *\([0-9][0-9]*\).*/\2/p" "$inc/NvInferVersion.h" \
    | head -n 1
}
echo "$nvcc -O3 -c -o /x/dcnFused.o core/dcnFused.cu"
echo "$nvcc -std=c++17 -c -o $out/registration.o trt/registration.cpp"
echo "$nvcc -shared -cudart static -o $out/libdcnconvert_plugin.so.tmp x.o"
mkdir -p "$out"
printf 'ELF\000dcnconvert-plugin-build-info: tensorrt_headers=%s %scuda_runtime=13000 %s\000' \
  "$(v MAJOR).$(v MINOR).$(v PATCH)" "$runtime" "archs=sm_90a compute_90" > "$out/libdcnconvert_plugin.so"
if [ -n "$runtime" ] && [ -z "$FAKE_MAKE_NO_FORWARD" ]; then
  echo "$nvcc -shared -cudart none -o $out/libdcnconvert_rtx_forward.so.tmp trt/rtxForwardObject.c"
  printf 'ELF forwarder\000' > "$out/libdcnconvert_rtx_forward.so"
else
  rm -f "$out/libdcnconvert_rtx_forward.so"
fi
"""
#: ``plugin build`` for TensorRT 10.16.1.11 and sm_90.
BUILD = ("plugin", "build", "--tensorrt-version", "10.16.1.11", "--arch", "sm_90")




def empty(folder: Path) -> bool:
    return not folder.exists() or not any(folder.iterdir())






def script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fake_include(folder: Path, major: int, minor: int, patch: int = 0, indirect: bool = True) -> Path:
    """``folder`` holding NvInfer.h and NvInferVersion.h of TensorRT ``major.minor.patch`` (with the
    TRT_*_ENTERPRISE indirection of 10.6+ when ``indirect``)."""
    folder.mkdir(parents=True, exist_ok=True)
    names = {"MAJOR": major, "MINOR": minor, "PATCH": patch, "BUILD": 7}
    if indirect:
        lines = [f"#define TRT_{k}_ENTERPRISE {v}" for k, v in names.items()]
        lines += [f"#define NV_TENSORRT_{k} TRT_{k}_ENTERPRISE //!< TensorRT {k.lower()}" for k in names]
    else:
        lines = [f"#define NV_TENSORRT_{k} {v} //!< TensorRT {k.lower()}" for k, v in names.items()]
    (folder / "NvInferVersion.h").write_text("\n".join(lines) + "\n")
    (folder / "NvInfer.h").write_text('#include "NvInferVersion.h"\n')
    return folder


def tarball(path: Path, include: Path, top: str) -> Path:
    """A tarball of a repository stand-in: ``top/include/...`` and a file outside include/."""
    path.parent.mkdir(parents=True, exist_ok=True)
    readme = include.parent / "README.md"
    readme.write_text("not headers")
    with tarfile.open(path, "w:gz") as tar:
        tar.add(include, arcname=f"{top}/include")
        tar.add(readme, arcname=f"{top}/README.md")
    return path
