"""The DCNv2 benchmark's libraries and environment (bench/dcn_bench.py): loads (and, when missing,
builds) the core library and the im2col + cuBLAS baseline, and records the GPU, driver, versions
and commit of a run. CuPy and PyTorch are imported inside the functions.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

from support import core

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE = REPO / "build" / "libdcn_baseline.so"


def _run(cmd: list[str], timeout: float = 600) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, (proc.stdout + proc.stderr)[-3000:]


def load_libs(args: argparse.Namespace) -> dict:
    """Core and baseline libraries (building them when missing unless --no-build; the baseline only
    when its rows are asked for); errors as text."""
    libs: dict = {"core": None, "baseline": None, "errors": {}}
    core_path = Path(args.lib) if args.lib else core.library_path()
    if not core_path.is_file() and not args.no_build and not args.lib:
        rc, log = _run(["make", "-C", str(REPO), "core"])
        print(f"[build] make core: rc={rc}\n{log[-800:]}", flush=True)
    try:
        libs["core"] = core.load(core_path)
        if args.split_reduce != "auto":
            modes = {"kernel": core.SPLIT_REDUCE_KERNEL, "cluster": core.SPLIT_REDUCE_CLUSTER}
            core.set_split_reduce(modes[args.split_reduce], libs["core"])
        fn = libs["core"].dcnFusedTileCount  # declared here: (void) -> int32_t
        fn.argtypes, fn.restype = [], ctypes.c_int32
    except AttributeError:
        libs["tile_count_error"] = "dcnFusedTileCount missing from the core library"
    except Exception as exc:  # noqa: BLE001
        libs["errors"]["core"] = f"{type(exc).__name__}: {exc}"
    if "baseline" not in args.impl_list:
        return libs
    base_path = Path(args.baseline_lib)
    if not base_path.is_file() and not args.no_build and base_path == DEFAULT_BASELINE:
        rc, log = _run(["bash", str(REPO / "bench" / "baseline" / "build.sh")])
        print(f"[build] bench/baseline/build.sh: rc={rc}\n{log[-1500:]}", flush=True)
    try:
        import dcn_bench_gpu as gpu

        libs["baseline"] = gpu.load_baseline(str(base_path))
    except Exception as exc:  # noqa: BLE001
        libs["errors"]["baseline"] = f"{type(exc).__name__}: {exc}"
    return libs


def environment(args: argparse.Namespace, libs: dict) -> dict:
    """The run's ``meta``: GPU and its properties, versions, command, date, commit."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    meta = {
        "gpu": props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
        "sm_count": props["multiProcessorCount"],
        "l2_bytes": props["l2CacheSize"],
        "cc": f"{props['major']}.{props['minor']}",
        "smem_optin": props.get("sharedMemPerBlockOptin"),  # bytes per block: the AUTO choice's input
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "cuda_driver_api": cupy.cuda.runtime.driverGetVersion(),
        "cupy": cupy.__version__,
        "python": platform.python_version(),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "offset_std": 2.0,
        "quick": args.quick,
        "lib_errors": libs["errors"],
    }
    rc, text = _run(
        [
            "nvidia-smi",
            "--query-gpu=driver_version,clocks.sm,clocks.max.sm,power.limit",
            "--format=csv,noheader",
        ],
        timeout=20,
    )
    meta["nvidia_smi"] = text.strip() if rc == 0 else None
    meta["driver"] = text.split(",")[0].strip() if rc == 0 else None
    # DCN_BENCH_GIT names the commit where the tree that runs is a copy without its repository's
    # HEAD (the GPU machine's copy of a working tree).
    rc, text = _run(["git", "rev-parse", "--short", "HEAD"], timeout=20)
    meta["git"] = os.environ.get("DCN_BENCH_GIT") or (text.strip() if rc == 0 else None)
    for mod in ("torch", "torchvision"):
        try:
            meta[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            meta[mod] = None
    if libs["baseline"] is not None:
        meta["cublas"] = libs["baseline"].baselineCublasVersion()
    return meta
