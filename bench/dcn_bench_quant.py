"""The 8-bit precisions of the DCNv2 benchmark (bench/dcn_bench.py): INT8 and FP8 E4M3 layers on the
engine path, their inputs, the float64 Q/DQ reference with its error bound, and the name of what
AUTO runs for an engine row. CuPy is imported inside the functions.

A quantized layer (plugin_src/core/dcnParams.h, ``DcnQuant``) takes x and the weights in 8 bits and
offset, mask, bias and output in FP16. Each buffer set holds the float values of the float
precisions' set (dcn_bench_gpu.make_set, same seed), quantized as ModelOpt's max calibration would:
x per tensor with the scale of set 0 (max|x| over the type's largest value; another set saturates
where it exceeds that), the weights per output channel. The layer runs as a TensorRT engine runs the
plugin: x channel-last, the packed weights (values, then FP32 scales) prepared once on a set's first
call, ``DcnParams.algo`` AUTO (an 8-bit tile of the fused kernel, or the simple kernel where none
takes the layer: the row's ``auto`` says which).

Accuracy: against the Q/DQ graph the layer replaces, in float64 (dequantized x and weights, then
the DCN: dcn_bench_gpu.dcn64), with the elementwise bound of tests/support/core_quant.allowed (each
sample's rounding to the 8-bit type, the FP16 output's rounding, FP32 arithmetic). A row reports
``err_over_bound`` = max(|out - ref| / bound) and ``within_bound`` (at most 1).
"""

from __future__ import annotations

import ctypes

import bench_shapes as bs
import fused_choice
import numpy as np
from bench_shapes import Precision, Shape
from support import core, core_fused, core_quant
from support.quant import QMAX

from dcnconvert.errors import UnsupportedNodeError

_FP32 = next(p for p in bs.PRECISIONS if p.name == "fp32")
_TILE_NAMES: dict[int, list[str]] = {}


# ------------------------------------------------------------------------------------------------
# 8-bit values


def e4m3_bits(values):
    """FP8 E4M3FN bits (uint8) of float values: rounded to nearest (ties to even), saturated to +-448
    (the format has no infinity; no finite input gives one of its NaN codes)."""
    import cupy

    v = values.astype(cupy.float64)
    a = cupy.minimum(cupy.abs(v), 448.0)
    _, e = cupy.frexp(a)  # a = m * 2**e with m in [0.5, 1)
    step = cupy.ldexp(1.0, cupy.maximum(e - 1, -6) - 3)  # 3 mantissa bits; subnormal step 2**-9
    q = cupy.rint(a / step) * step  # may round up into the next binade, never past 448
    _, e = cupy.frexp(q)
    normal = q >= 2.0**-6
    exp_field = cupy.where(normal, e - 1 + 7, 0)
    mant = cupy.where(normal, q * cupy.ldexp(1.0, 4 - e) - 8.0, q * 2.0**9)
    sign = cupy.signbit(v).astype(cupy.int32)
    return ((sign << 7) | (exp_field.astype(cupy.int32) << 3) | mant.astype(cupy.int32)).astype(cupy.uint8)


def e4m3_values(bits):
    """float64 values of FP8 E4M3FN bits (the NaN codes 0x7F and 0xFF read as +-480)."""
    import cupy

    b = bits.astype(cupy.int32)
    exp_field, mant = (b >> 3) & 15, (b & 7).astype(cupy.float64)
    mag = cupy.where(exp_field == 0, mant * 2.0**-9, cupy.ldexp(8.0 + mant, exp_field - 10))
    return cupy.where((b & 0x80) != 0, -mag, mag)


def quantize(values, scale, qtype: str):
    """``values / scale`` on the grid of ``qtype`` as the core's bytes: int8, or E4M3 bits (uint8)."""
    import cupy

    v = values.astype(cupy.float64) / scale
    if qtype == "int8":
        return cupy.clip(cupy.rint(v), -128.0, 127.0).astype(cupy.int8)
    return e4m3_bits(v)


def grid_values(q, qtype: str):
    """The float64 values of 8-bit bytes (:func:`quantize`'s inverse on the grid)."""
    return q.astype(np.float64) if qtype == "int8" else e4m3_values(q)


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


# ------------------------------------------------------------------------------------------------
# inputs, the layer, the reference


def make_sets(gpu, shape: Shape, prec: Precision, seed: int, nsets: int) -> list[dict]:
    """``nsets`` buffer sets of ``shape`` in quantized precision ``prec`` (``gpu``: dcn_bench_gpu):
    x (NCHW) and weight (OIHW) 8-bit, ``w_scale`` (FP32, per output channel), ``x_scale`` (one for
    all sets), offset, mask, bias and out FP16."""
    import cupy

    qmax = QMAX[prec.quant]
    sets: list[dict] = []
    x_scale = 0.0
    for i in range(nsets):
        st = gpu.make_set(shape, _FP32, seed + i)
        if i == 0:
            x_scale = float(np.float32(float(cupy.abs(st["x"]).max()) / qmax))
        w_scale = (cupy.abs(st["weight"]).reshape(shape.cout, -1).max(axis=1) / qmax).astype(cupy.float32)
        half = {k: None if st[k] is None else st[k].astype(cupy.float16) for k in ("offset", "mask", "bias")}
        sets.append({
            "x": quantize(st["x"], x_scale, prec.quant),
            "weight": quantize(st["weight"], w_scale.astype(cupy.float64)[:, None, None, None], prec.quant),
            "w_scale": w_scale,
            "x_scale": x_scale,
            **half,
            "out": cupy.empty(st["out"].shape, dtype=cupy.float16),
        })
    return sets


def params(gpu, shape: Shape, prec: Precision, x_scale: float, engine: bool) -> core.DcnParams:
    """The quantized layer's DcnParams (AUTO, FP16 output); ``engine``: x channel-last, weights
    prepared."""
    p = gpu.params_for(shape, prec, core.ALGO_AUTO)
    p.quant, p.xScale = bs.QUANT_CODES[prec.quant], x_scale
    p.outType, p.outScale = core.FLOAT16, 0.0
    if engine:
        p.xLayout, p.weightLayout = core.LAYOUT_NHWC, core.WEIGHT_PREPARED
    return p


def packed_weights(p: core.DcnParams, st: dict, lib: ctypes.CDLL):
    """The OIHW weight buffer of a quantized layer: the 8-bit values, then the FP32 scales."""
    import cupy

    scales_at, total = core.quant_weight_layout(p, lib)
    buf = cupy.zeros((total,), dtype=cupy.uint8)
    values = st["weight"].reshape(-1).view(cupy.uint8)
    buf[: values.size] = values
    buf[scales_at:] = st["w_scale"].view(cupy.uint8)
    return buf


def core_impl(gpu, lib: ctypes.CDLL, shape: Shape, prec: Precision, x_scale: float):
    """The engine path of our core for a quantized layer: call(set) enqueues one forward; a set's
    channel-last x and prepared weights are made on its first (warm-up) call."""
    import cupy

    p = params(gpu, shape, prec, x_scale, engine=True)
    status, msg = core.validate(p, lib)
    if status == core.UNSUPPORTED:
        raise gpu.ImplError("unsupported", msg)
    if status != core.SUCCESS:
        raise gpu.ImplError("error", f"dcnValidate: {core.STATUS_NAMES.get(status, status)}: {msg}")
    need = core.workspace_size(p, lib)
    ws = cupy.empty((need,), dtype=cupy.uint8) if need else None

    def call(st: dict) -> None:
        if "x_nhwc" not in st:
            st["x_nhwc"] = cupy.ascontiguousarray(st["x"].transpose(0, 2, 3, 1))
            oihw = params(gpu, shape, prec, x_scale, engine=False)
            st["prepared"] = core.prepare_weights(oihw, packed_weights(oihw, st, lib), lib)
        args = (st[k] for k in ("x_nhwc", "offset", "mask", "prepared", "bias", "out"))
        try:
            core.forward(p, *args, workspace=ws, lib=lib, check=False)
        except UnsupportedNodeError as exc:
            raise gpu.ImplError("unsupported", str(exc)) from exc

    return call


def reference(gpu, shape: Shape, prec: Precision, st: dict) -> dict:
    """The Q/DQ model's float64 output of set ``st`` (``qdq`` on the GPU, ``qdq_host``) and its
    elementwise error bound (``bound``, host; core_quant.allowed for an FP16 output)."""
    import cupy

    w_q = grid_values(st["weight"], prec.quant)
    w_scale = st["w_scale"].astype(cupy.float64)
    f64 = {
        "x": grid_values(st["x"], prec.quant) * st["x_scale"],
        "offset": st["offset"].astype(cupy.float64),
        "mask": st["mask"].astype(cupy.float64),
        "weight": w_q * w_scale[:, None, None, None],
        "bias": None if st["bias"] is None else st["bias"].astype(cupy.float64),
    }
    ref = gpu.dcn64(shape, f64)
    host = _host(ref)
    inputs = {"w_q": _host(w_q), "w_scale": _host(w_scale), "x_scale": st["x_scale"]}
    return {"qdq": ref, "qdq_host": host, "bound": core_quant.allowed(prec.quant, "float16", inputs, host)}


def errors(gpu, out64, ref: dict) -> dict:
    """dcn_bench_gpu.errors against the Q/DQ model, plus ``err_over_bound`` (max |out - ref| / bound)
    and ``within_bound`` (False with non-finite outputs)."""
    acc = gpu.errors(out64, ref["qdq"])
    if acc["nonfinite"]:
        return {**acc, "err_over_bound": None, "within_bound": False}
    over = float((np.abs(_host(out64) - ref["qdq_host"]) / ref["bound"]).max())
    return {**acc, "err_over_bound": over, "within_bound": over <= 1.0}


# ------------------------------------------------------------------------------------------------
# what AUTO runs


def engine_params(gpu, shape: Shape, prec: Precision, x_scale: float = 1.0) -> core.DcnParams:
    """The problem an engine row runs: the fused kernel (float) or AUTO (quantized), x channel-last,
    weights prepared."""
    if prec.quant:
        return params(gpu, shape, prec, x_scale, engine=True)
    p = gpu.params_for(shape, prec, core.ALGO_FUSED)
    p.xLayout, p.weightLayout = core.LAYOUT_NHWC, core.WEIGHT_PREPARED
    return p


def auto_name(lib: ctypes.CDLL, p: core.DcnParams, meta: dict) -> str | None:
    """What AUTO runs for ``p`` on the run's GPU (``meta``: SMs, opt-in shared memory, compute
    capability) in bench/fused_choice.py's notation; None where the library cannot say."""
    try:
        if id(lib) not in _TILE_NAMES:
            _TILE_NAMES[id(lib)] = [t.name for t in core_fused.tile_infos(lib)]
        device = (int(meta["sm_count"]), int(meta["smem_optin"]), int(str(meta["cc"]).split(".")[0]))
        return fused_choice.choice_name(p, device, lib, _TILE_NAMES[id(lib)])
    except Exception:  # noqa: BLE001 - the name is a label: a library without it leaves it out
        return None
