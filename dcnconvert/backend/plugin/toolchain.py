"""The CUDA toolchain for ``dcnconvert plugin build``: finding nvcc, and the GPU architectures to build for.

:func:`find_nvcc` looks at ``$NVCC``, PATH, ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``,
:data:`FALLBACK_NVCC_DIRS` and NVIDIA's nvcc wheel; :func:`parse_archs` reads ``--arch`` values
(``90``, ``9.0``, ``sm_90``), :func:`gpu_archs` asks ``nvidia-smi`` for this machine's GPUs, and
:func:`ptx_arch` is the PTX target (the newest architecture's).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from dcnconvert.errors import MissingDependencyError, UsageError

__all__ = ["FALLBACK_NVCC_DIRS", "Nvcc", "check_archs", "find_nvcc", "gpu_archs", "parse_archs", "ptx_arch",
           "wheel_nvcc_dirs"]

#: Searched for nvcc after $NVCC, PATH, $CUDA_HOME/bin and $CUDA_PATH/bin (then NVIDIA's nvcc wheel).
FALLBACK_NVCC_DIRS: tuple[str, ...] = ("/usr/local/cuda/bin",)
NVCC_HINT = ("install the CUDA toolkit, or `pip install nvidia-cuda-nvcc` (NVIDIA's CUDA 13 wheel, which "
             "ships a working nvcc), or set NVCC=/path/to/nvcc")
_ARCH_RE = re.compile(r"^(?:sm_?)?(\d{2,3})([af]?)$|^(\d{1,2})\.(\d)([af]?)$", re.IGNORECASE)
_ARCH_HINT = ("give compute capabilities: sm_90, 90 or 9.0 (H100/H200), sm_89 (L4/L40), sm_86 (A10, RTX 30), "
              "sm_80 (A100), sm_120 (RTX 50); comma separated or repeated")


@dataclasses.dataclass(frozen=True)
class Nvcc:
    """The CUDA compiler found, and its version (``"13.0.88"``)."""

    path: Path
    version: str


def wheel_nvcc_dirs() -> list[Path]:
    """``bin/`` folders of NVIDIA's nvcc wheels on this Python's path (``nvidia/cu13/bin``, and
    ``nvidia/cuda_nvcc/bin`` for CUDA 12)."""
    found = (p.parent for entry in sys.path for p in sorted(Path(entry or ".").glob("nvidia/*/bin/nvcc")))
    return list(dict.fromkeys(found))


def _nvcc(path: Path) -> Nvcc:
    """``path`` with the version ``nvcc --version`` states."""
    try:
        proc = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=120,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MissingDependencyError(f"nvcc at {path} does not run: {exc}", hint=NVCC_HINT) from exc
    match = re.search(r"\bV(\d+\.\d+(?:\.\d+)?)", proc.stdout) or re.search(r"release (\d+\.\d+)",
                                                                            proc.stdout)
    if proc.returncode != 0 or match is None:
        said = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        raise MissingDependencyError(f"nvcc at {path} states no version (`nvcc --version`: {said[0]})",
                                     hint=NVCC_HINT)
    return Nvcc(path.absolute(), match.group(1))  # absolute: make runs it from the plugin sources


def find_nvcc() -> Nvcc:
    """nvcc from ``$NVCC`` (used as given), else PATH, ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``,
    :data:`FALLBACK_NVCC_DIRS`, then NVIDIA's nvcc wheel (:func:`wheel_nvcc_dirs`).

    Raises:
        MissingDependencyError: none found, ``$NVCC`` names no executable, or nvcc does not run.
    """
    given = os.environ.get("NVCC")
    if given:
        found = shutil.which(given)
        if found is None:
            raise MissingDependencyError(
                f"$NVCC={given} is not an executable nvcc",
                hint="point NVCC at nvcc (e.g. /usr/local/cuda/bin/nvcc) or unset it to search PATH and "
                "the CUDA folders; " + NVCC_HINT)
        return _nvcc(Path(found))
    if shutil.which("nvcc"):
        return _nvcc(Path(str(shutil.which("nvcc"))))
    env = {var: os.environ.get(var) for var in ("CUDA_HOME", "CUDA_PATH")}
    searched = ["PATH"] + [f"${var}/bin (unset)" for var, value in env.items() if not value]
    dirs = [(f"${var}/bin ({value}/bin)", Path(value) / "bin") for var, value in env.items() if value]
    dirs += [(d, Path(d)) for d in FALLBACK_NVCC_DIRS] + [(str(d), d) for d in wheel_nvcc_dirs()]
    for label, folder in dirs:
        if (folder / "nvcc").is_file() and os.access(folder / "nvcc", os.X_OK):
            return _nvcc(folder / "nvcc")
        searched.append(label)
    searched.append("NVIDIA's nvcc wheel in this Python's site-packages")
    raise MissingDependencyError("nvcc (the CUDA compiler, needed to build the plugin) not found; searched "
                                 + ", ".join(dict.fromkeys(searched)), hint=NVCC_HINT)


def _arch_number(arch: str) -> int:
    return int(re.sub(r"\D", "", arch))


def parse_archs(values: Iterable[str]) -> tuple[str, ...]:
    """``sm_NN`` names from ``--arch`` values (``90``, ``9.0``, ``sm_90``, ``sm_90a``; repeated or comma
    separated), without duplicates, oldest first. ``sm_90a`` becomes ``sm_90``: the make rules build sm_90
    as sm_90a, and only under that name do they compile the sm_90a-only kernels in.

    Raises:
        UsageError: a value that is no architecture, or none at all.
    """
    archs: list[str] = []
    for item in (part for value in values for part in re.split(r"[,\s]+", value.strip()) if part):
        match = _ARCH_RE.match(item)
        if match is None:
            raise UsageError(f"--arch {item!r} is not a GPU architecture", hint=_ARCH_HINT)
        number = int(match.group(1) or match.group(3) + match.group(4))
        suffix = (match.group(2) or match.group(5) or "").lower()
        if not 30 <= number <= 199 or (suffix == "a" and number < 90) or (suffix == "f" and number < 100):
            raise UsageError(f"--arch {item!r}: there is no GPU architecture sm_{number}{suffix}",
                             hint=_ARCH_HINT)
        arch = f"sm_{number}" + ("" if number == 90 else suffix)
        archs += [] if arch in archs else [arch]
    if not archs:
        raise UsageError("--arch was given no architecture", hint=_ARCH_HINT)
    return tuple(sorted(archs, key=lambda a: (_arch_number(a), a)))


def gpu_archs() -> tuple[str, ...]:
    """The architectures of this machine's GPUs, from ``nvidia-smi`` (every distinct one).

    Raises:
        UsageError: no GPU (or no nvidia-smi): the caller must name the architectures.
    """
    try:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            raise OSError("nvidia-smi is not on PATH")
        proc = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=60, check=False)
        caps = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode != 0 or not caps:
            said = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["it lists none"]
            raise OSError(f"nvidia-smi: {said[0]}")
        return parse_archs(caps)
    except (OSError, subprocess.TimeoutExpired, UsageError) as exc:
        raise UsageError(f"no --arch given, and no GPU was found to build for ({exc})",
                         hint="pass the GPUs' architectures, e.g. --arch sm_90 (H100/H200) or --arch "
                         "sm_80,sm_86") from exc


def check_archs(archs: Sequence[str], nvcc: Nvcc) -> None:
    """Refuse an architecture this nvcc cannot build (as far as ``nvcc --list-gpu-code`` says)."""
    try:
        proc = subprocess.run([str(nvcc.path), "--list-gpu-code"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return
    known = {_arch_number(a) for a in re.findall(r"\bsm_\d+", proc.stdout)} if proc.returncode == 0 else set()
    for arch in archs if known else ():  # an nvcc without --list-gpu-code: make will tell
        if _arch_number(arch) not in known:
            raise UsageError(f"--arch {arch}: nvcc {nvcc.version} ({nvcc.path}) cannot build it; it builds "
                             + ", ".join(f"sm_{n}" for n in sorted(known)),
                             hint="choose among those, or use a CUDA toolkit that supports this GPU")


def ptx_arch(archs: Sequence[str]) -> str:
    """The PTX embedded beside the SASS: that of the newest architecture (``compute_NN``), which the
    driver compiles for newer GPUs."""
    return f"compute_{max(_arch_number(a) for a in archs)}"
