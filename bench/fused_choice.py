"""What kDCN_ALGO_AUTO runs for every benchmark layer and precision on a given device, from the
host-only ``dcnFusedChoice`` (no GPU needed; tiles by their names in plugin_src/core/dcnFusedTiles.h):

    python3 bench/fused_choice.py [--sms 132 --smem 232448 --cc 9] [--lib build/libdcnconvert_core.so]

Prints one line per layer and precision: the tile, ``/sK`` for K split K ways, ``+T/sK`` for a split
tail (the last T pixel tiles as a second launch with K split K ways), or "simple" where no fused
tile applies. INT8 and FP8 E4M3 are quantized layers with a float output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))  # tests/support: the core binding

from bench_shapes import PRECISIONS, QUANT_CODES, SHAPES, Precision, Shape  # noqa: E402
from support import (
    core,  # noqa: E402
    core_fused,  # noqa: E402
)


def layer_params(shape: Shape, prec: Precision) -> core.DcnParams:
    """AUTO's problem for ``shape`` in ``prec`` (x NCHW, OIHW weights); a quantized precision with x
    scale 1 (the choice does not depend on it) and a float output."""
    p = core.make_params(
        (shape.n, shape.c, shape.h, shape.w),
        (shape.cout, shape.c // shape.group, shape.kernel, shape.kernel),
        stride=(shape.stride, shape.stride),
        padding=(shape.pad, shape.pad),
        dilation=(shape.dilation, shape.dilation),
        group=shape.group,
        deformable_group=shape.dg,
        with_bias=shape.bias,
        dtype=prec.dtype,
        math=prec.math,
    )
    if prec.quant:
        p.quant, p.xScale, p.outType = QUANT_CODES[prec.quant], 1.0, prec.dtype
    return p


def choice_name(p: core.DcnParams, device: tuple[int, int, int], lib, names: list[str]) -> str:
    """What AUTO runs for ``p`` on ``device``: ``<tile name>``, ``<tile name>/s<splits>`` or
    ``<tile name>+<tail tiles>/s<tail splits>``, or ``simple``."""
    got = core_fused.fused_split_tail(p, device, lib=lib)
    if got is None:
        return "simple"
    tile, splits, tail_tiles, tail_splits = got
    text = names[tile] if splits == 1 else f"{names[tile]}/s{splits}"
    return text if tail_splits < 2 else f"{text}+{tail_tiles}/s{tail_splits}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sms", type=int, default=core_fused.H200_DEVICE[0])
    ap.add_argument("--smem", type=int, default=core_fused.H200_DEVICE[1],
                    help="opt-in shared memory per block")
    ap.add_argument("--cc", type=int, default=core_fused.H200_DEVICE[2],
                    help="compute capability: the major (8, 9, 10, 12) or 10 x major + minor (86, 89, 120)")
    ap.add_argument("--lib", default=None, help="core library (default: build/)")
    args = ap.parse_args(argv)
    lib = core.load(args.lib)
    device = (args.sms, args.smem, args.cc)
    names = [t.name for t in core_fused.tile_infos(lib)]
    print(f"{'layer':14s} " + " ".join(f"{prec.name:>22s}" for prec in PRECISIONS))
    for shape in SHAPES:
        cells = [choice_name(layer_params(shape, prec), device, lib, names) for prec in PRECISIONS]
        print(f"{shape.name:14s} " + " ".join(f"{c:>22s}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
