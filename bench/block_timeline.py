"""Per-block timeline of the channel-vectorised fused kernel: where a block's time goes outside its
K walk (docs/benchmarks.md, INT8 and FP8).

    python3 bench/block_timeline.py instrument build-stamps        # copy of plugin_src with stamps
    make -C build-stamps/plugin_src core CUDA_ARCHS=sm_90 PTX_ARCH=compute_90 \\
        BUILD_DIR=$PWD/build-stamps/out EXTRA_NVCCFLAGS=-DDCN_STAMPS
    python3 bench/block_timeline.py run build-stamps/out/libdcnconvert_core.so r50-c4,dbnet-c4

``instrument`` writes a copy of plugin_src/ whose kernels, built with -DDCN_STAMPS, record
``clock64`` and ``%globaltimer`` at each step below for every block (the sm_90a unit's warpgroup
tiles; the first 8192 blocks), and export dcnStampsRead/dcnStampsClear. The copy is for timing
only: the stamps' stores change the schedule a little. ``run`` calls each layer once on the engine
path (AUTO, x channel-last, weights prepared; after a first call, so the inputs are in L2) and
prints the block means in µs from the block's start, converting cycles with the blocks' own ratio
of clock64 to globaltimer.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Slot -> what has happened when the block's thread stamps it.
STEPS = {
    0: "block start",
    7: "block-wide barrier after the mbarrier set-up",
    8: "producers' set-up and dependency wait",
    9: "producers' first barrier",
    10: "plan built",
    1: "plan ready",
    2: "first stage full",
    3: "main loop done",
    15: "every consumer warp past its last MMA",
    13: "cluster barrier (split-K in a cluster)",
    14: "slices received (cluster)",
    4: "tile reduced and staged",
    5: "stored",
    6: "producers done",
}

_STAMP = """#ifdef DCN_STAMPS
static __device__ unsigned long long dcnStamps[8192 * 32];
__device__ __forceinline__ void stamp(int i)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    long long const c = clock64();
    unsigned const b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (b < 8192)
    {
        dcnStamps[b * 32 + i] = static_cast<unsigned long long>(c);
        dcnStamps[b * 32 + 16 + i] = t;
    }
}
#define DCN_STAMP(cond, i) do { if (cond) stamp(i); } while (0)
#else
#define DCN_STAMP(cond, i) do { } while (0)
#endif
"""

_EXPORTS = """
#ifdef DCN_STAMPS
extern "C" __attribute__((visibility("default"))) int dcnStampsRead(unsigned long long* host, int n)
{
    size_t const bytes = sizeof(unsigned long long) * n;
    return static_cast<int>(cudaMemcpyFromSymbol(host, dcn::fused::dcnStamps, bytes));
}
extern "C" __attribute__((visibility("default"))) int dcnStampsClear()
{
    void* at = nullptr;
    cudaGetSymbolAddress(&at, dcn::fused::dcnStamps);
    return static_cast<int>(cudaMemset(at, 0, sizeof(unsigned long long) * 8192 * 32));
}
#endif
"""

_N, _K, _E = "dcnFusedNhwc.cuh", "dcnFusedNhwcConsumers.cuh", "dcnFusedNhwcEpilogue.cuh"
_CL = "dcnFusedCluster.cuh"
#: (file, anchor, lines skipped, indent, DCN_STAMP's arguments): the stamp goes after the line where
#: the anchor's first occurrence ends, and after `skipped` more lines.
EDITS = (
    (_N, "int const tid = threadIdx.x;", 0, 4, "tid == 0, 0"),
    (_N, "initStages<C>(fullA, rank, tid);", 0, 4, "tid == C::CONSUMERS, 7"),
    (_N, "if (a.waitFirst)\n            gridDependencyWait();", 0, 8, "ptid == 0, 8"),
    (_N, "// nobody still reads the slot replaced", 0, 20, "ptid == 0 && planned < 0, 9"),
    (_N, "buildPlan<TF, C, true,", 0, 20, "ptid == 0 && planned < 0, 10"),
    (_N, "if (nChunks > 0)\n            ensurePlan();", 0, 8, "ptid == 0, 1"),
    (_N, "mbarArrive(fullB + 8 * ((nChunks - 1) % C::STAGES));", 2, 8, "ptid == 0, 6"),
    (_K, "// and its weight tile landed", 0, 12, "tid == 0 && kc == 0, 2"),
    (_E, "// Every consumer warp is past its last MMA", 1, 4, "ctid == 0, 15"),
    (_K, "v = static_cast<float>(__float_as_int(v));", 0, 4, "tid == 0, 3"),
    (_K, "rows = clusterReduceTile<C>(a, sT, tid, m0);", 2, 4, "tid == 0, 4"),
    (_K, "storeTile<T, C>(a, sT, tid, p0, m0, g, split, out, part", 0, 4, "tid == 0, 5"),
    (_CL, "clusterSync();", 0, 4, "tid == 0, 13"),
    (_CL, "mbarWait(bar, 0);", 0, 4, "tid == 0, 14"),
)


def _insert(path: Path, anchor: str, skip: int, text: str) -> None:
    body = path.read_text()
    at = body.find(anchor)
    if at < 0:
        raise ValueError(f"{path.name}: anchor not found, update bench/block_timeline.py: {anchor!r}")
    at = body.index("\n", at + len(anchor)) + 1
    for _ in range(skip):
        at = body.index("\n", at) + 1
    path.write_text(body[:at] + text + ("" if text.endswith("\n") else "\n") + body[at:])


def instrument(dst: Path, src: Path = REPO) -> int:
    """Copies src/plugin_src to dst/plugin_src with the stamps; returns the number of stamp sites.
    Raises ValueError naming the anchor that the core no longer has."""
    out = dst / "plugin_src"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src / "plugin_src", out, ignore=shutil.ignore_patterns("build*"))
    core = out / "core"
    _insert(core / "dcnFusedTma.cuh", "namespace fused\n{", 0, _STAMP)
    _insert(core / "dcnFusedSm90a.cu", "} // namespace dcn", 0, _EXPORTS)
    for name, anchor, skip, indent, args in EDITS:
        _insert(core / name, anchor, skip, " " * indent + f"DCN_STAMP({args});")
    return len(EDITS)


def run(lib_path: str, layers: list[str], types: list[str]) -> None:
    import ctypes

    sys.path[:0] = [str(REPO), str(REPO / "bench"), str(REPO / "tests")]
    import bench_shapes as bs
    import cupy
    import dcn_bench_gpu as gpu
    import dcn_bench_quant as dq
    import numpy as np
    from support import core

    lib = core.load(lib_path)
    raw = ctypes.CDLL(lib_path)
    n = 8192 * 32
    order = [0, 7, 8, 9, 10, 1, 2, 3, 15, 13, 14, 4, 5, 6]
    print("µs from the block's start (block means):")
    print("| layer, type | blocks | " + " | ".join(STEPS[i] for i in order[1:]) + " |")
    print("|---|---:|" + "---:|" * (len(order) - 1))
    for name in layers:
        shape = next(s for s in bs.SHAPES if s.name == name)
        for key in types:
            prec = next(p for p in bs.PRECISIONS if p.name == key)
            if prec.quant:
                st = dq.make_sets(gpu, shape, prec, 1, 1)[0]
                call = dq.core_impl(gpu, lib, shape, prec, st["x_scale"])
            else:
                st = gpu.make_set(shape, prec, 1)
                call = gpu.core_impl(lib, shape, prec, core.ALGO_AUTO, engine=True)
            means = []
            for _ in range(7):
                call(st)
                cupy.cuda.runtime.deviceSynchronize()
                raw.dcnStampsClear()
                cupy.cuda.runtime.deviceSynchronize()
                call(st)
                cupy.cuda.runtime.deviceSynchronize()
                buf = (ctypes.c_ulonglong * n)()
                if raw.dcnStampsRead(buf, n) != 0:
                    raise SystemExit("dcnStampsRead failed: is the library built with -DDCN_STAMPS?")
                a = np.frombuffer(buf, dtype=np.uint64).reshape(8192, 32).astype(np.float64)
                a = a[a[:, 16] > 0]  # blocks of the warpgroup tiles that ran
                if len(a) == 0:
                    raise SystemExit(f"{name} {key}: no stamps (AUTO ran a tile outside the sm_90a unit)")
                clk, gt = a[:, :16], a[:, 16:]
                per_ns = (clk[:, 5] - clk[:, 0]).sum() / (gt[:, 5] - gt[:, 0]).sum()
                step = [np.mean(clk[:, i] - clk[:, 0]) / per_ns / 1000.0 if clk[:, i].all() else np.nan
                        for i in order[1:]]
                means.append(step)
            m = np.median(np.array(means), axis=0)
            cells = " | ".join("-" if np.isnan(v) else f"{v:.2f}" for v in m)
            print(f"| {name} {key} | {len(a)} | {cells} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ins = sub.add_parser("instrument", help="copy plugin_src with the stamps into DST/plugin_src")
    ins.add_argument("dst", type=Path)
    r = sub.add_parser("run", help="time layers with a core built from the instrumented copy")
    r.add_argument("lib")
    r.add_argument("layers", help="benchmark layer names, comma-separated (bench/bench_shapes.py)")
    r.add_argument("--types", default="fp16,int8,fp8e4m3")
    args = ap.parse_args()
    if args.cmd == "instrument":
        sites = instrument(args.dst)
        print(f"{args.dst / 'plugin_src'}: {sites} stamp sites; build it with EXTRA_NVCCFLAGS=-DDCN_STAMPS")
        return 0
    run(args.lib, args.layers.split(","), args.types.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main())
