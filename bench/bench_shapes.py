"""Shapes, precisions and sizing rules of the DCNv2 benchmark (bench/dcn_bench.py); pure Python.

The shapes are the real layers of research note dcn_perf.md §3: ResNet-50-DCN (mmdetection,
pytorch style, 800x1344, batch 1: the stride-1 blocks of c3/c4/c5 and the stride-2 first block of
c3), BEVFormer-base R101-DCN c4 (caffe style, 6 cameras), the CenterNet DLA-34 IDAUp layers
(512x512; duplicates dropped), DBNet/DBNet++ c3-c5 (1824x1024) and TAO OCDNet ResNet-18
layer2-4 (736x1280). All are 3x3, pad 1, dilation 1, group 1, deformable group 1; mmdetection's
ResNet and OCDNet use bias=False, CenterNet's DCN has a bias.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import asdict, dataclass

# DcnDataType / DcnMath / DcnQuant codes (plugin_src/core/dcnParams.h; same values as support.core).
FLOAT32, FLOAT16, BFLOAT16 = 0, 1, 2
MATH_ACCURATE, MATH_TF32 = 0, 1
#: DcnQuant codes by the quantized precision's name.
QUANT_CODES = {"int8": 1, "fp8e4m3": 2}

#: fused: AUTO with NCHW x and OIHW weights (its prep pass makes both layouts each call);
#: fused-engine: AUTO as a TensorRT engine with constant weights and a channel-last neighbour runs it
#: (x as NHWC, the weights prepared once by dcnPrepareWeights: no prep pass).
IMPLS = ("fused", "fused-engine", "simple", "baseline", "torchvision")


@dataclass(frozen=True)
class Shape:
    """One DCN layer; NCHW input, OIHW weight, symmetric 3x3 attributes unless given."""

    name: str
    model: str
    n: int
    c: int
    h: int
    w: int
    cout: int
    stride: int = 1
    bias: bool = False
    kernel: int = 3
    pad: int = 1
    dilation: int = 1
    group: int = 1
    dg: int = 1

    @property
    def ho(self) -> int:
        return (self.h + 2 * self.pad - self.dilation * (self.kernel - 1) - 1) // self.stride + 1

    @property
    def wo(self) -> int:
        return (self.w + 2 * self.pad - self.dilation * (self.kernel - 1) - 1) // self.stride + 1

    @property
    def flop(self) -> int:
        """Multiply-adds x 2 of the GEMM: 2 * N * Cout * Ho * Wo * Cin/group * kh * kw."""
        return 2 * self.n * self.cout * self.ho * self.wo * (self.c // self.group) * self.kernel**2

    @property
    def desc(self) -> str:
        """``NxCin->Cout@HoxWo`` plus ``s2 from HxW`` for strided layers and ``+b`` with bias."""
        text = f"{self.n}x{self.c}->{self.cout}@{self.ho}x{self.wo}"
        if self.stride != 1:
            text += f" s{self.stride} from {self.h}x{self.w}"
        return text + (" +b" if self.bias else "")

    def elements(self) -> dict[str, int]:
        """Element counts of every tensor of one call (bias 0 when absent)."""
        kk = self.kernel**2
        pix = self.ho * self.wo
        return {
            "x": self.n * self.c * self.h * self.w,
            "offset": self.n * 2 * self.dg * kk * pix,
            "mask": self.n * self.dg * kk * pix,
            "weight": self.cout * (self.c // self.group) * kk,
            "bias": self.cout if self.bias else 0,
            "out": self.n * self.cout * pix,
        }

    def set_bytes(self, itemsize: int) -> int:
        """Bytes of one buffer set (every input and the output) at ``itemsize`` bytes per element."""
        return itemsize * sum(self.elements().values())

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(ho=self.ho, wo=self.wo, flop=self.flop, desc=self.desc)
        return d


def _dla(name: str, cin: int, cout: int, hw: int) -> Shape:
    return Shape(name, "CenterNet DLA-34", 1, cin, hw, hw, cout, bias=True)


SHAPES: tuple[Shape, ...] = (
    Shape("r50-c3", "R50-DCN c3", 1, 128, 100, 168, 128),
    Shape("r50-c3-s2", "R50-DCN c3 first block", 1, 128, 200, 336, 128, stride=2),
    Shape("r50-c4", "R50-DCN c4", 1, 256, 50, 84, 256),
    Shape("r50-c5", "R50-DCN c5", 1, 512, 25, 42, 512),
    Shape("bev-c4", "BEVFormer-base R101 c4", 6, 256, 58, 100, 256),
    _dla("dla-ida0-proj", 512, 256, 16),
    _dla("dla-ida0-node", 256, 256, 32),
    _dla("dla-ida1-proj", 256, 128, 32),
    _dla("dla-ida1-node", 128, 128, 64),
    _dla("dla-ida2-proj", 128, 64, 64),
    _dla("dla-ida2-node", 64, 64, 128),
    _dla("dla-up-proj", 256, 64, 32),
    Shape("dbnet-c3", "DBNet R50 c3", 1, 128, 128, 228, 128),
    Shape("dbnet-c4", "DBNet R50 c4", 1, 256, 64, 114, 256),
    Shape("dbnet-c5", "DBNet R50 c5", 1, 512, 32, 57, 512),
    Shape("ocd-l2", "OCDNet R18 layer2", 1, 128, 92, 160, 128),
    Shape("ocd-l3", "OCDNet R18 layer3", 1, 256, 46, 80, 256),
    Shape("ocd-l4", "OCDNet R18 layer4", 1, 512, 23, 40, 512),
)


@dataclass(frozen=True)
class Precision:
    """One precision row kind: element type, matrix arithmetic and which implementations run.

    A quantized precision (``quant``: "int8" or "fp8e4m3", the plugin node's ``quant_type``) has 8-bit
    x and weights (``itemsize`` 1) and ``dtype``/``storage`` FP16 offset, mask, bias and output.
    """

    name: str
    dtype: int  # DcnDataType (of the float tensors, for a quantized precision)
    math: int  # DcnMath
    itemsize: int
    storage: str  # CuPy dtype of the float buffers (BF16 travels as uint16 bits)
    impls: tuple[str, ...]
    compare_to: str  # whose baseline / simple / torchvision rows the ratios use
    quant: str = ""

    @property
    def peak_key(self) -> str:
        return self.name

    def set_bytes(self, shape: Shape) -> int:
        """Bytes of one buffer set of ``shape`` (a quantized layer: 8-bit x and weights, FP32 weight
        scales, the rest in ``storage``)."""
        if not self.quant:
            return shape.set_bytes(self.itemsize)
        e = shape.elements()
        return e["x"] + e["weight"] + 4 * shape.cout + 2 * (e["offset"] + e["mask"] + e["bias"] + e["out"])


PRECISIONS: tuple[Precision, ...] = (
    Precision("fp32", FLOAT32, MATH_ACCURATE, 4, "float32", IMPLS, "fp32"),
    Precision("tf32", FLOAT32, MATH_TF32, 4, "float32", ("fused", "fused-engine"), "fp32"),
    Precision("fp16", FLOAT16, MATH_ACCURATE, 2, "float16", IMPLS, "fp16"),
    Precision("bf16", BFLOAT16, MATH_ACCURATE, 2, "uint16", IMPLS, "bf16"),
    # Quantized layers: only the engine path (channel-last x, prepared weights) takes 8-bit x.
    Precision("int8", FLOAT16, MATH_ACCURATE, 1, "float16", ("fused-engine",), "int8", quant="int8"),
    Precision("fp8e4m3", FLOAT16, MATH_ACCURATE, 1, "float16", ("fused-engine",), "fp8e4m3", quant="fp8e4m3"),
)
#: What --precisions selects when not given: the float precisions (the 8-bit ones on request).
DEFAULT_PRECISIONS = ",".join(p.name for p in PRECISIONS if not p.quant)


def select(items: tuple, patterns: str | None, what: str) -> list:
    """Items whose ``name`` matches any comma-separated glob pattern (all when ``patterns`` is empty).

    Raises:
        ValueError: a pattern matches nothing (the message lists the names).
    """
    if not patterns:
        return list(items)
    chosen = []
    for pat in (p.strip() for p in patterns.split(",")):
        if not pat:
            continue
        hits = [it for it in items if fnmatch.fnmatchcase(it.name, pat)]
        if not hits:
            names = ", ".join(it.name for it in items)
            raise ValueError(f"no {what} matches {pat!r}; known: {names}")
        chosen.extend(it for it in hits if it not in chosen)
    return [it for it in items if it in chosen]  # table order


def buffer_sets(set_bytes: int, l2_bytes: int, *, factor: float = 2.0, lo: int = 2, hi: int = 256) -> int:
    """Buffer sets to rotate so that they total more than ``factor`` x the L2 (at least ``lo``)."""
    if set_bytes <= 0:
        raise ValueError("set_bytes must be positive")
    need = math.floor(factor * l2_bytes / set_bytes) + 1
    return max(lo, min(hi, need))


def calls_per_graph(sets: int, min_calls: int = 16) -> int:
    """Calls captured in one graph: whole passes over the sets, at least ``min_calls`` calls."""
    if sets < 1:
        raise ValueError("sets must be >= 1")
    return sets * max(1, math.ceil(min_calls / sets))


def replays_for(replay_s: float, budget_s: float, lo: int, hi: int) -> int:
    """Timed replays: as many as fit in ``budget_s`` seconds, clamped to [lo, hi]."""
    if replay_s <= 0 or not math.isfinite(replay_s):
        return hi
    return max(lo, min(hi, int(budget_s / replay_s)))


def tflops(flop: int, us: float | None) -> float | None:
    """TFLOP/s of ``flop`` operations in ``us`` microseconds (None without a time)."""
    if us is None or us <= 0:
        return None
    return flop / us / 1e6
