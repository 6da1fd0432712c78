"""CPU tests of bench/quant_tiles.py (the forced-tile timer of quantized layers): its arguments,
the algo codes it forces, and the helpers it takes from the benchmark modules. The timing itself
needs a GPU (CuPy and a core library); no GPU, CuPy or PyTorch is needed or imported here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import dcn_bench_gpu as gpu  # noqa: E402
import dcn_bench_quant as quant  # noqa: E402
import quant_tiles  # noqa: E402
from support import core  # noqa: E402

NAMES = ["wg-128x64-q8", "wg-256x64-q8", "tma-128x32-p8-q8"]


def test_defaults_and_repeated_libraries():
    args = quant_tiles.parse_args(["--lib", "a=/x/a.so", "--lib", "b=/y/b.so", "--splits", "1,2,4"])
    assert args.libs == [("a", "/x/a.so"), ("b", "/y/b.so")]
    assert args.split_counts == [1, 2, 4]
    assert args.shapes.split(",") == ["r50-c4", "r50-c5", "bev-c4", "dbnet-c4"]  # issue 40's bar layers
    assert quant_tiles.parse_args([]).libs == []  # the default library: build/


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lib", "a.so"], "expected LABEL=PATH"),
        (["--lib", "=a.so"], "expected LABEL=PATH"),
        (["--shapes", "r50-c4,r51-c4"], "unknown ['r51-c4']"),
        (["--precisions", "int4"], "unknown ['int4']"),
    ],
)
def test_bad_arguments_are_usage_errors_that_name_the_value(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        quant_tiles.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_algo_codes_force_the_named_tile_and_split():
    assert quant_tiles.algo_for("wg-256x64-q8", 1, NAMES, True) == core.ALGO_FUSED_TILE + 1
    three_ways = core.ALGO_FUSED_TILE + 2 + 2 * core.ALGO_SPLIT_STEP
    assert quant_tiles.algo_for("tma-128x32-p8-q8", 3, NAMES, True) == three_ways
    # AUTO picks its own split: forced splits of `auto` are left out
    assert quant_tiles.algo_for("auto", 1, NAMES, True) == core.ALGO_AUTO
    assert quant_tiles.algo_for("auto", 1, NAMES, False) == core.ALGO_FUSED
    assert quant_tiles.algo_for("auto", 2, NAMES, True) is None
    assert quant_tiles.algo_for("wg-512x64-q8", 1, NAMES, True) is None


def test_the_benchmark_helpers_it_calls_exist():
    """The script runs on the GPU machine only, where a renamed helper shows up halfway through a
    device run: the attributes it takes from dcn_bench_quant and dcn_bench_gpu must exist."""
    needed = ((quant, ("make_sets", "params", "packed_weights")), (gpu, ("make_set", "core_impl")))
    for module, names in needed:
        missing = [n for n in names if not callable(getattr(module, n, None))]
        assert not missing, f"{module.__name__} lacks {missing}"


def test_a_refused_tile_shows_the_reason_not_the_prefix():
    """The table cell of a tile the layer cannot take keeps the library's reason: the status name and
    the repeated "fused kernel (tile N, S K splits): " prefix go, and a long reason is cut with "..."."""
    msg = ("kDCN_UNSUPPORTED: fused kernel (tile 26, 2 K splits): the 128-channel-chunk tiles take "
           "INT8 and FP8 only\nsecond line")
    assert quant_tiles.refusal(RuntimeError(msg)) == "the 128-channel-chunk tiles take INT8 and FP8 only"
    long = quant_tiles.refusal(RuntimeError("kDCN_UNSUPPORTED: " + "x" * 200), width=40)
    assert long == "x" * 37 + "..."
    assert quant_tiles.refusal(RuntimeError("")) == "RuntimeError"
