"""compute-sanitizer driver for the quantized layers: the 8-bit tiles (each forced, also with K
split 2 ways, both reductions) and the simple kernel on eight small cases (one of 64 channels, four
of 256 to 512 output channels for the sample-sharing tiles), INT8 and FP8, float and quantized output,
with CuPy's pool off so every tensor is its own allocation. Checks each float output against the
Q/DQ model's bound as well. A tile that does not take a case (the sample-sharing tiles need an even
number of channel tiles) skips it; every 8-bit tile must run on at least one case.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 bench/quant_sanitize.py
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import cupy  # noqa: E402

cupy.cuda.set_allocator(None)

import numpy as np  # noqa: E402
from support import core, core_fused, core_quant  # noqa: E402
from support.core_cases import Case, ensure_core_built  # noqa: E402

CASES = (
    Case("s_c128", 1, 128, 7, 9, 72, (3, 3), (2, 1), (1, 2), (1, 2), off_scale=3.0),
    Case("s_c128_cout160", 1, 128, 6, 5, 160, (3, 3), padding=(1, 1), bias=False, off_scale=2.0),
    # 64 channels: two kernel points per chunk, the last chunk's second half empty
    Case("s_c64_pairs", 1, 64, 7, 9, 40, (3, 3), (1, 2), (2, 1), off_scale=3.0),
    # two images of 16 pixels: the 16-byte output items (FP16 and 8-bit) across an image boundary;
    # masks in [-1, 1]: INT8's fixed-point and FP16 samples in one tile
    Case("s_c128_b2_items", 2, 128, 4, 4, 64, (3, 3), padding=(1, 1), off_scale=2.0, mask_lo=-1.0),
    # 256 and 512 output channels: a pair of 128- and of 256-channel tiles (the sample-sharing tiles)
    Case("s_c128_cout256_pair", 1, 128, 5, 7, 256, (3, 3), (1, 2), (1, 1), off_scale=2.0),
    Case("s_c128_cout512_pair", 1, 128, 4, 5, 512, (3, 3), padding=(1, 1), off_scale=2.0),
    # partial last channel tiles: 256 + 64 rows (the 256-row pair), 3 x 128 + 64 rows (the 128-row one)
    Case("s_c128_cout320_pair", 1, 128, 5, 6, 320, (3, 3), padding=(1, 1), off_scale=2.0),
    Case("s_c128_cout448_pair", 1, 128, 4, 6, 448, (3, 3), padding=(1, 1), off_scale=2.0),
)


def main() -> int:
    from dcnconvert.errors import UnsupportedNodeError

    lib = core.load(ensure_core_built())
    runs = 0
    ran: set[tuple[str, int]] = set()
    every: set[tuple[str, int]] = set()
    for case in CASES:
        for qtype in core_quant.QUANT:
            # the 8-bit tiles built for this type (tma-128x32-p8-q8: INT8 only)
            infos = core_fused.quant_tiles(qtype, lib)
            tiles = [core.ALGO_FUSED_TILE + t.index for t in infos]
            # the sample-sharing tiles add split sums with the reduction kernel only
            pairs = {core.ALGO_FUSED_TILE + t.index for t in infos if t.pair}
            inputs = core_quant.make_inputs(case, qtype, "float16")
            refs = core_quant.references(case, qtype, inputs)
            bound = core_quant.allowed(qtype, "float16", inputs, refs["qdq"])
            every.update((qtype, algo) for algo in tiles)
            taken = []
            for algo in [core.ALGO_SIMPLE, *tiles]:
                for layout in ((False, False), (True, True)):
                    try:
                        out = core_quant.run(
                            lib,
                            case,
                            qtype,
                            "float16",
                            inputs,
                            algo=algo,
                            channel_last=layout[0],
                            prepared=layout[1],
                        )
                    except UnsupportedNodeError:
                        if algo == core.ALGO_SIMPLE:
                            raise
                        break
                    worst = float((np.abs(out - refs["qdq"]) / bound).max())
                    if worst > 1.0:
                        print(f"FAIL {case.name} {qtype} algo {algo}: x{worst:.3f} of the bound")
                        return 1
                    runs += 1
                else:
                    taken.append(algo)
                    ran.add((qtype, algo))
            core_quant.run(lib, case, qtype, "float16", inputs, algo=core.ALGO_AUTO, out_scale=0.05)
            runs += 1
            # K split 2 ways, added by the reduction kernel and in clusters, float and quantized output
            for mode in (core.SPLIT_REDUCE_KERNEL, core.SPLIT_REDUCE_CLUSTER):
                core.set_split_reduce(mode, lib)
                for algo in taken[1:]:
                    if mode == core.SPLIT_REDUCE_CLUSTER and algo in pairs:
                        continue
                    for out_scale in (None, 0.05):
                        core_quant.run(lib, case, qtype, "float16", inputs, algo=algo + core.ALGO_SPLIT_STEP,
                                       out_scale=out_scale)
                        runs += 1
            core.set_split_reduce(core.SPLIT_REDUCE_AUTO, lib)
    if every - ran:
        print(f"FAIL: tiles that took no case: {sorted(every - ran)}")
        return 1
    print(f"quant_sanitize: {runs} runs within their bounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
