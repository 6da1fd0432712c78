"""Which fused tiles AUTO picks, per precision and device class, over random problems (no GPU).

Draws random DCNv2 problems (batch, groups, channels, deformable groups, kernel 1/3/5, stride and
dilation 1-2, spatial sizes up to 160x200), asks the host-only choice (``dcnFusedChoice`` with its
split tail) what AUTO runs on each device profile, and prints, per precision, how often each tile
was picked per device class (8.x, 9.x, 10+) and the tiles the library builds for that precision
(``dcnFusedTileInfo``) that it never picked: a kernel only forced runs would reach, which the
family should not hold (``tests/test_core_choice.py`` checks there is none). The profiles are (SMs,
opt-in shared memory per block, compute capability as 10 x major + minor) of common GPUs:

    python3 bench/fused_reach.py --problems 20000 --lib build/libdcnconvert_core.so

With ``--against OTHER_LIB`` it also asks a second library on the same problems and reports every
choice (tile, K splits, split tail) on which the two differ (exit status 1 when any does): how a
change to the tile table or the cost model is shown to leave AUTO's choices as they were.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))  # tests/support: the core binding

from bench_shapes import PRECISIONS  # noqa: E402
from support import (
    core,  # noqa: E402
    core_fused,  # noqa: E402
)

DEVICES = {
    "A100": (108, 166912, 80),
    "RTX-3090": (82, 101376, 86),
    "L40": (142, 101376, 89),
    "H200": (132, 232448, 90),
    "B200": (148, 232448, 100),
    "RTX-5090": (170, 101376, 120),
}


def device_class(cc: int) -> str:
    major = cc // 10 if cc >= 20 else cc
    return "8.x" if major == 8 else "9.x" if major == 9 else "10+"


def random_problem(rng: random.Random, dtype: int, math: int, quant: str = ""):
    """One random problem as DcnParams (a fixed draw order, so that every precision gets the same shapes);
    ``quant`` ("int8", "fp8e4m3"): a quantized layer with FP16 offset, mask, bias and output."""
    group = rng.choice([1, 1, 1, 2, 4])
    cpg = rng.choice([8, 16, 24, 32, 40, 64, 96, 128, 192, 256, 320, 512, 1024])
    c = cpg * group
    dg = rng.choice([d for d in (1, 2, 4, 8) if c % d == 0])
    cout = group * rng.choice([16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024])
    k = rng.choice([1, 3, 3, 3, 5])
    stride, dilation = rng.choice([1, 1, 2]), rng.choice([1, 1, 2])
    pad = rng.choice([0, k // 2, k // 2 * dilation])
    n = rng.choice([1, 1, 2, 4, 8])
    low = max(1, (k - 1) * dilation + 1 - 2 * pad)
    h, w = rng.randint(low, 160), rng.randint(low, 200)
    p = core.make_params(
        (n, c, h, w), (cout, cpg, k, k), stride=(stride, stride), padding=(pad, pad),
        dilation=(dilation, dilation), group=group, deformable_group=dg, with_bias=True,
        dtype=dtype, math=math,
    )
    if quant:
        p.quant = core.QUANT_INT8 if quant == "int8" else core.QUANT_FP8
        p.xScale, p.outType = 0.05, core.FLOAT16
    return p


def reach(lib, problems: int, seed: int, other=None) -> tuple[dict, list[str]]:
    """AUTO's picks over ``problems`` random problems per precision on every profile of DEVICES.

    Returns:
        ``{precision name: Counter of (tile name, device class)}`` and, when ``other`` (a second
        core library with the same tile table) is given, one line per choice the two make
        differently.
    """
    names = [t.name for t in core_fused.tile_infos(lib)]
    picks: dict[str, collections.Counter] = {}
    differ: list[str] = []
    for prec in PRECISIONS:
        rng = random.Random(seed)
        picked: collections.Counter[tuple[str, str]] = collections.Counter()
        for _ in range(problems):
            p = random_problem(rng, prec.dtype, prec.math, prec.quant)
            for device in DEVICES.values():
                got = core_fused.fused_split_tail(p, device, lib=lib)
                if other is not None:
                    theirs = core_fused.fused_split_tail(p, device, lib=other)
                    if theirs != got:
                        differ.append(
                            f"{prec.name} {device} {p.n}x{p.c}x{p.h}x{p.w} -> {p.cout} k{p.kh} "
                            f"s{p.strideH} d{p.dilationH} g{p.group} dg{p.deformableGroup}: "
                            f"{got} against {theirs}"
                        )
                if got is not None:
                    picked[(names[got[0]], device_class(device[2]))] += 1
        picks[prec.name] = picked
    return picks, differ


def built_never_picked(lib, picks: dict) -> dict[str, list[str]]:
    """Per precision, the tiles the library builds for it (``dcnFusedTileInfo``) that AUTO never picked."""
    infos = core_fused.tile_infos(lib)
    dtypes = {core.FLOAT32: "float32", core.FLOAT16: "float16", core.BFLOAT16: "bfloat16"}
    out = {}
    for prec in PRECISIONS:
        built = [t.name for t in infos if t.takes(prec.quant or dtypes[prec.dtype], prec.math)]
        out[prec.name] = [t for t in built if not any(k[0] == t for k in picks[prec.name])]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--lib", default=None, help="core library (default: build/)")
    ap.add_argument("--against", default=None, help="a second core library whose choices are compared")
    args = ap.parse_args(argv)
    lib = core.load(args.lib)
    other = core.load(args.against) if args.against else None
    names = [t.name for t in core_fused.tile_infos(lib)]
    if other is not None and [t.name for t in core_fused.tile_infos(other)] != names:
        print("the two libraries have different tile tables; their choices are not comparable")
        return 1
    picks, differ = reach(lib, args.problems, args.seed, other)
    never = built_never_picked(lib, picks)
    classes = sorted({device_class(cc) for _, _, cc in DEVICES.values()})
    for prec in PRECISIONS:
        picked = picks[prec.name]
        for cls in classes:
            cells = ", ".join(f"{t} {picked[(t, cls)]}" for t in names if picked[(t, cls)])
            print(f"{prec.name} {cls}: {cells}")
        print(f"{prec.name} built and never picked: {', '.join(never[prec.name]) or '-'}")
    if other is not None:
        for line in differ[:20]:
            print(f"differ: {line}")
        compared = args.problems * len(DEVICES) * len(PRECISIONS)
        print(f"choices compared: {compared}, differing: {len(differ)}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
