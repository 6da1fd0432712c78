"""The fused kernel's tuning helpers of the core binding (:mod:`support.core`): algo codes
that force a tile and a K split count, the host-only choice AUTO makes (``dcnFusedChoice``), the
tile count. Tests and benchmarks import it as ``core_fused``, beside the binding as ``core``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from support import core as _c

__all__ = ["H200_DEVICE", "TileInfo", "fused_algo", "fused_choice", "fused_split_tail", "fused_tile_count",
           "quant_tiles", "tile_index", "tile_infos"]


def fused_algo(tile: int, splits: int = 1, tail_splits: int = 1) -> int:
    """The ``DcnParams.algo`` code that forces fused tile ``tile`` with its K range split ``splits`` ways,
    or (``tail_splits`` > 1) unsplit on the first half of the pixel tiles and split ``tail_splits``
    ways on the rest: the split tail AUTO runs where the last wave of blocks is partial.

    Raises:
        ValueError: ``splits`` or ``tail_splits`` outside ``1..MAX_SPLITS``, both above 1, or a
            negative tile.
    """
    if tile < 0 or not 1 <= splits <= _c.MAX_SPLITS or not 1 <= tail_splits <= _c.MAX_SPLITS:
        raise ValueError(
            f"fused_algo(tile={tile}, splits={splits}, tail_splits={tail_splits}): need tile >= 0 and "
            f"1 <= splits, tail_splits <= {_c.MAX_SPLITS}"
        )
    if splits > 1 and tail_splits > 1:
        raise ValueError(
            f"fused_algo(tile={tile}): a K split ({splits}) and a split tail ({tail_splits}) are exclusive"
        )
    split_code = _c.ALGO_SPLIT_STEP * (splits - 1)
    return _c.ALGO_FUSED_TILE + tile + split_code + _c.ALGO_TAIL_STEP * (tail_splits - 1)


# An H200: 132 SMs, 227 KiB of opt-in shared memory per block, compute capability 9.0.
H200_DEVICE = (132, 232448, 9)


def fused_choice(
    params: Any, device: tuple[int, int, int] = H200_DEVICE, lib: ctypes.CDLL | None = None
) -> tuple[int, int] | None:
    """``dcnFusedChoice``: the fused ``(tile, splits)`` AUTO runs for ``params`` on ``device``.

    Args:
        params: the problem.
        device: ``(SM count, opt-in shared memory bytes per block, compute capability)``, the
            last as its major (8 .. 12, minor 0) or as 10 x major + minor (86, 89, 90, 120).
        lib: the loaded library (default :func:`load`).

    Returns:
        ``(tile, splits)``, or None where no fused tile takes the problem (AUTO runs the simple kernel).

    Raises:
        ValidationError: ``kDCN_INVALID_ARGUMENT`` (the message names the field).
    """
    lib = lib or _c.load()
    tile, splits = ctypes.c_int32(-1), ctypes.c_int32(0)
    buf = ctypes.create_string_buffer(_c._MSG_LEN)
    sms, smem, cc = device
    status = int(
        lib.dcnFusedChoice(
            ctypes.byref(params), sms, smem, cc, ctypes.byref(tile), ctypes.byref(splits), buf, _c._MSG_LEN
        )
    )
    if status == _c.UNSUPPORTED:
        return None
    if status != _c.SUCCESS:
        _c._raise_status(status, buf.value.decode("utf-8", "replace"))
    return int(tile.value), int(splits.value)


def fused_split_tail(
    params: Any, device: tuple[int, int, int] = H200_DEVICE, lib: ctypes.CDLL | None = None
) -> tuple[int, int, int, int] | None:
    """``dcnFusedSplitTail``: :func:`fused_choice` and its split tail, ``(tile, splits, tail tiles,
    tail splits)``: AUTO runs the last ``tail tiles`` pixel tiles with K split ``tail splits`` ways
    as a second launch ((0, 1): no split tail). None where no fused tile takes the problem.

    Raises:
        ValidationError: ``kDCN_INVALID_ARGUMENT`` (the message names the field).
    """
    lib = lib or _c.load()
    out = [ctypes.c_int32(v) for v in (-1, 0, 0, 1)]
    buf = ctypes.create_string_buffer(_c._MSG_LEN)
    sms, smem, cc = device
    status = int(
        lib.dcnFusedSplitTail(
            ctypes.byref(params), sms, smem, cc, *(ctypes.byref(v) for v in out), buf, _c._MSG_LEN
        )
    )
    if status == _c.UNSUPPORTED:
        return None
    if status != _c.SUCCESS:
        _c._raise_status(status, buf.value.decode("utf-8", "replace"))
    tile, splits, tail_tiles, tail_splits = (int(v.value) for v in out)
    return tile, splits, tail_tiles, tail_splits


def fused_tile_count(lib: ctypes.CDLL | None = None) -> int:
    """``dcnFusedTileCount``: tile configurations of the fused kernel (``ALGO_FUSED_TILE + i``)."""
    lib = lib or _c.load()
    return int(lib.dcnFusedTileCount())


class _DcnTileInfo(ctypes.Structure):
    """Mirror of ``struct DcnTileInfo`` (plugin_src/core/dcnForward.h)."""

    _fields_ = [
        ("name", ctypes.c_char * 32),
        ("bm", ctypes.c_int32),
        ("bn", ctypes.c_int32),
        ("bk", ctypes.c_int32),
        ("kernel", ctypes.c_int32),
        ("consumerWarps", ctypes.c_int32),
        ("producerWarps", ctypes.c_int32),
        ("stages", ctypes.c_int32),
        ("dtypes", ctypes.c_int32),
        ("fp32Math", ctypes.c_int32),
        ("minComputeCapability", ctypes.c_int32),
        ("splitsK", ctypes.c_int32),
    ]


#: ``DcnTileKernel`` values by name.
TILE_KERNELS = ("nchw", "regs", "async", "tma", "wgmma")
_DTYPE_NAMES = {
    _c.FLOAT32: "float32",
    _c.FLOAT16: "float16",
    _c.BFLOAT16: "bfloat16",
    _c.INT8: "int8",
    _c.FP8E4M3: "fp8e4m3",
}


@dataclass(frozen=True)
class TileInfo:
    """One fused tile configuration as the library describes it (``dcnFusedTileInfo``).

    Attributes:
        index: its ``ALGO_FUSED_TILE`` offset.
        kernel: ``"nchw"``, ``"regs"``, ``"async"``, ``"tma"`` or ``"wgmma"``.
        dtypes: the element types it takes (``"float32"``, ``"float16"``, ``"bfloat16"``; the 8-bit
            tiles ``"int8"``, ``"fp8e4m3"``).
        fp32_math: the FP32 math modes it takes (``MATH_ACCURATE``, ``MATH_TF32``).
        min_cc: the compute capability it needs (80 or 90; ``wgmma`` tiles need 9.x exactly).
        splits_k: whether it may split K.
        run_majors: the compute capability majors (8 to 12) on which this library runs it: its
            architecture and the code the build holds (``dcnFusedTileRuns``).
    """

    index: int
    name: str
    bm: int
    bn: int
    bk: int
    kernel: str
    dtypes: frozenset
    fp32_math: frozenset
    min_cc: int
    splits_k: bool
    run_majors: frozenset = frozenset()

    def takes(self, dtype: str, math: int = _c.MATH_ACCURATE) -> bool:
        """Whether the tile takes ``dtype`` (``"float32"`` with ``math``)."""
        return dtype in self.dtypes and (dtype != "float32" or math in self.fp32_math)

    @property
    def pair(self) -> bool:
        """Whether it is a sample-sharing tile (name ending in ``-pair``): the two channel tiles of a
        pixel tile as one cluster; its unpaired twin is the same name without the suffix."""
        return self.name.endswith("-pair")

    def runs_on(self, cc: int) -> bool:
        """Whether the library runs it on a device of compute capability ``cc`` (e.g. 90)."""
        return cc >= self.min_cc and cc // 10 in self.run_majors


def tile_infos(lib: ctypes.CDLL | None = None) -> list[TileInfo]:
    """Every tile configuration of the fused kernel, from the library (``dcnFusedTileInfo``)."""
    lib = lib or _c.load()
    lib.dcnFusedTileInfo.argtypes = [ctypes.c_int32, ctypes.POINTER(_DcnTileInfo)]
    lib.dcnFusedTileInfo.restype = ctypes.c_int
    lib.dcnFusedTileRuns.argtypes = [ctypes.c_int32, ctypes.c_int32]
    lib.dcnFusedTileRuns.restype = ctypes.c_int32
    out = []
    for i in range(fused_tile_count(lib)):
        info = _DcnTileInfo()
        status = int(lib.dcnFusedTileInfo(i, ctypes.byref(info)))
        if status != _c.SUCCESS:
            _c._raise_status(status, f"dcnFusedTileInfo({i})")
        out.append(TileInfo(
            index=i,
            name=info.name.decode(),
            bm=info.bm,
            bn=info.bn,
            bk=info.bk,
            kernel=TILE_KERNELS[info.kernel],
            dtypes=frozenset(n for v, n in _DTYPE_NAMES.items() if info.dtypes >> v & 1),
            fp32_math=frozenset(m for m in (_c.MATH_ACCURATE, _c.MATH_TF32) if info.fp32Math >> m & 1),
            min_cc=info.minComputeCapability,
            splits_k=bool(info.splitsK),
            run_majors=frozenset(m for m in range(8, 13) if lib.dcnFusedTileRuns(i, m)),
        ))
    return out


def quant_tiles(qtype: str, lib: ctypes.CDLL | None = None) -> list[TileInfo]:
    """The 8-bit tiles (names ending in ``-q8``, or ``-q8-pair`` for the sample-sharing ones) built
    for ``qtype`` (``"int8"``, ``"fp8e4m3"``)."""
    return [t for t in tile_infos(lib) if t.name.endswith(("-q8", "-q8-pair")) and t.takes(qtype)]


def tile_index(name: str, lib: ctypes.CDLL | None = None) -> int:
    """The index of the tile configuration called ``name`` (e.g. ``"regs-128x64"``).

    Raises:
        KeyError: the library has no such tile.
    """
    for tile in tile_infos(lib):
        if tile.name == name:
            return tile.index
    raise KeyError(f"no fused tile named {name!r}")


def tile_indices(spec: str, lib: ctypes.CDLL | None = None) -> list[int]:
    """Tiles named in a comma-separated ``spec`` by name (``"wg-256x64-p16"``, which stays valid when
    the table changes) or by index (``"20"``), in that order.

    Raises:
        KeyError: a name the library has no tile for.
        ValueError: an index outside the library's table.
    """
    count = fused_tile_count(lib)
    out = []
    for item in (t.strip() for t in spec.split(",")):
        if not item:
            continue
        index = int(item) if item.isdigit() else tile_index(item, lib)
        if not 0 <= index < count:
            raise ValueError(f"tile index {index} is outside the library's {count} tiles")
        out.append(index)
    return out
