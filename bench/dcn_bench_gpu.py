"""GPU helpers of the DCNv2 benchmark (bench/dcn_bench.py): inputs, float64 reference, errors,
implementations as callables and graph timing (the matmul peaks: dcn_bench_peak.py). CuPy and
PyTorch are imported inside the functions, so importing this module needs neither.

Inputs (per buffer set i, seeded by the shape and i, identical for every implementation and, up to
rounding, for every precision): x ~ N(0, 1), offset ~ N(0, 2^2) (standard deviation 2 pixels),
mask ~ U(0, 1), weight ~ N(0, 1) / sqrt(Cin/group * kh * kw), bias ~ N(0, 1).
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable

import bench_shapes as bs
from bench_shapes import Precision, Shape
from support import core

from dcnconvert.errors import UnsupportedNodeError

OFFSET_STD = 2.0
MSG_LEN = 1024


class ImplError(Exception):
    """An implementation could not run; ``status`` is "unsupported", "n/a" or "error"."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------------------------
# inputs and accuracy


def to_storage(v, prec: Precision):
    """FP32 CuPy array -> the buffer dtype of ``prec`` (BF16: round to nearest even, uint16 bits)."""
    import cupy

    if prec.dtype == bs.FLOAT32:
        return v
    if prec.dtype == bs.FLOAT16:
        return v.astype(cupy.float16)
    b = v.view(cupy.uint32)
    return ((b + cupy.uint32(0x7FFF) + ((b >> 16) & cupy.uint32(1))) >> 16).astype(cupy.uint16)


def to_float(v, prec: Precision, dtype: str = "float64"):
    """Buffer of ``prec`` -> float64 (or float32) CuPy array, exactly."""
    import cupy

    if prec.dtype == bs.BFLOAT16:
        return (v.astype(cupy.uint32) << 16).view(cupy.float32).astype(dtype)
    return v.astype(dtype)


def make_set(shape: Shape, prec: Precision, seed: int) -> dict:
    """One buffer set: every input of one call (in ``prec``'s storage) and an output buffer."""
    import cupy

    rs = cupy.random.RandomState(seed)
    kk = shape.kernel**2
    f32 = cupy.float32
    pix = (shape.ho, shape.wo)
    vals = {
        "x": rs.standard_normal((shape.n, shape.c, shape.h, shape.w), dtype=f32),
        "offset": rs.standard_normal((shape.n, 2 * shape.dg * kk, *pix), dtype=f32) * f32(OFFSET_STD),
        "mask": rs.uniform(0.0, 1.0, (shape.n, shape.dg * kk, *pix), dtype=f32),
        "weight": rs.standard_normal(
            (shape.cout, shape.c // shape.group, shape.kernel, shape.kernel), dtype=f32
        )
        / f32(math.sqrt(shape.c // shape.group * kk)),
        "bias": rs.standard_normal((shape.cout,), dtype=f32) if shape.bias else None,
    }
    out = {k: (None if v is None else to_storage(v, prec)) for k, v in vals.items()}
    out["out"] = cupy.empty((shape.n, shape.cout, *pix), dtype=prec.storage)
    return out


def poison(arr, prec: Precision) -> None:
    """Fill an output with NaN (its bit pattern for BF16) so that unwritten elements show."""
    if prec.dtype == bs.BFLOAT16:
        arr.fill(0x7FC0)
    else:
        arr.fill(float("nan"))


def reference(shape: Shape, prec: Precision, st: dict):
    """float64 output on the GPU: :func:`dcn64` on float64 copies of the set."""
    return dcn64(shape, {k: None if v is None else to_float(v, prec) for k, v in st.items() if k != "out"})


def dcn64(shape: Shape, f64: dict):
    """torchvision.ops.deform_conv2d of float64 CuPy arrays (x, offset, mask, weight, bias)."""
    import cupy
    import torch

    t = {k: None if v is None else torch.as_tensor(v, device="cuda") for k, v in f64.items()}
    return cupy.asarray(torchvision_impl(shape)(t))


def errors(out64, ref64) -> dict:
    """max|out - ref| / max|ref|, ||out - ref|| / ||ref|| and the count of non-finite outputs."""
    import cupy

    nonfinite = int((~cupy.isfinite(out64)).sum())
    if nonfinite:
        return {"max_rel_err": None, "rel_l2": None, "nonfinite": nonfinite}
    diff = out64 - ref64
    max_ref = float(cupy.abs(ref64).max())
    l2_ref = float(cupy.linalg.norm(ref64.ravel()))
    return {
        "max_rel_err": float(cupy.abs(diff).max()) / max_ref if max_ref else None,
        "rel_l2": float(cupy.linalg.norm(diff.ravel())) / l2_ref if l2_ref else None,
        "nonfinite": 0,
    }


def clear_cuda_error() -> None:
    """Reset the runtime's last error after a failed launch or capture (so it is not blamed later)."""
    import cupy

    fn = getattr(cupy.cuda.runtime, "getLastError", None)
    if fn is not None:
        try:
            fn()
        except Exception:  # noqa: BLE001 - the point is to swallow it
            pass


# ------------------------------------------------------------------------------------------------
# implementations: each returns call(set) that enqueues one forward on the current stream


def params_for(shape: Shape, prec: Precision, algo: int) -> core.DcnParams:
    return core.make_params(
        (shape.n, shape.c, shape.h, shape.w),
        (shape.cout, shape.c // shape.group, shape.kernel, shape.kernel),
        stride=(shape.stride, shape.stride),
        padding=(shape.pad, shape.pad),
        dilation=(shape.dilation, shape.dilation),
        group=shape.group,
        deformable_group=shape.dg,
        with_bias=shape.bias,
        dtype=prec.dtype,
        algo=algo,
        math=prec.math,
    )


def core_impl(
    lib: ctypes.CDLL, shape: Shape, prec: Precision, algo: int, engine: bool = False
) -> Callable[[dict], None]:
    """Our core library (fused, fused tile i or simple) through support.core.forward. ``engine``: x
    channel-last and the weights prepared once (``DcnParams.xLayout``/``weightLayout``), as a TensorRT
    engine with constant weights and a channel-last producer of x runs the plugin; each set's NHWC x
    and prepared weights are made on its first (warm-up) call, outside the timed calls."""
    import cupy

    p = params_for(shape, prec, algo)
    if engine:
        p.xLayout = core.LAYOUT_NHWC
        p.weightLayout = core.WEIGHT_PREPARED
    status, msg = core.validate(p, lib)
    if status == core.UNSUPPORTED:
        raise ImplError("unsupported", msg)
    if status != core.SUCCESS:
        raise ImplError("error", f"dcnValidate: {core.STATUS_NAMES.get(status, status)}: {msg}")
    need = core.workspace_size(p, lib)
    ws = cupy.empty((max(need, 1),), dtype=cupy.uint8) if need else None

    def call(st: dict) -> None:
        if engine and "x_nhwc" not in st:
            st["x_nhwc"] = cupy.ascontiguousarray(st["x"].transpose(0, 2, 3, 1))
            oihw = params_for(shape, prec, algo)
            st["prepared"] = core.prepare_weights(oihw, st["weight"], lib)
        keys = ("x_nhwc", "offset", "mask", "prepared", "bias", "out") if engine else (
            "x", "offset", "mask", "weight", "bias", "out")
        try:
            core.forward(
                p,
                *(st[k] for k in keys),
                workspace=ws,
                lib=lib,
                check=False,
            )
        except UnsupportedNodeError as exc:
            raise ImplError("unsupported", str(exc)) from exc

    return call


def load_baseline(path: str) -> ctypes.CDLL:
    """Open build/libdcn_baseline.so and declare its C signatures."""
    lib = ctypes.CDLL(path)
    pp = ctypes.POINTER(core.DcnParams)
    lib.baselineWorkspaceSize.argtypes = [pp, ctypes.POINTER(ctypes.c_size_t)]
    lib.baselineWorkspaceSize.restype = ctypes.c_int
    lib.baselineCublasVersion.argtypes = []
    lib.baselineCublasVersion.restype = ctypes.c_int
    # params; x, offset, mask, weight, bias, out, workspace; workspaceSize; stream; msg, msgLen
    lib.baselineForward.argtypes = [pp] + [ctypes.c_void_p] * 7 + [ctypes.c_size_t, ctypes.c_void_p]
    lib.baselineForward.argtypes += [ctypes.c_char_p, ctypes.c_size_t]
    lib.baselineForward.restype = ctypes.c_int
    return lib


def baseline_impl(lib: ctypes.CDLL, shape: Shape, prec: Precision) -> Callable[[dict], None]:
    """The im2col + cuBLAS baseline (FP32 rows always Sgemm: TF32 maps to the FP32 row)."""
    import cupy

    p = params_for(shape, prec, core.ALGO_AUTO)
    p.math = bs.MATH_ACCURATE
    size = ctypes.c_size_t(0)
    rc = lib.baselineWorkspaceSize(ctypes.byref(p), ctypes.byref(size))
    if rc != 0:
        raise ImplError("unsupported" if rc == core.UNSUPPORTED else "error", f"baselineWorkspaceSize: {rc}")
    ws = cupy.empty((max(size.value, 16),), dtype=cupy.uint8)
    buf = ctypes.create_string_buffer(MSG_LEN)

    def call(st: dict) -> None:
        stream = cupy.cuda.get_current_stream().ptr
        bias = st["bias"].data.ptr if st["bias"] is not None else None
        ptrs = [st[k].data.ptr for k in ("x", "offset", "mask", "weight")]
        rc = lib.baselineForward(
            ctypes.byref(p),
            *ptrs,
            bias,
            st["out"].data.ptr,
            ws.data.ptr,
            ws.nbytes,
            stream or None,
            buf,
            MSG_LEN,
        )
        if rc != 0:
            status = "unsupported" if rc == core.UNSUPPORTED else "error"
            raise ImplError(status, f"baselineForward: {rc}: {buf.value.decode('utf-8', 'replace')}")

    return call


def torch_sets(sets: list[dict], prec: Precision) -> list[dict]:
    """Torch views (FP32/FP16, zero-copy) or exact BF16 copies of the CuPy sets."""
    import torch

    out = []
    for st in sets:
        t = {}
        for k, v in st.items():
            if k == "out" or v is None:
                t[k] = None
            elif prec.dtype == bs.BFLOAT16:
                t[k] = torch.as_tensor(to_float(v, prec, "float32"), device="cuda").to(torch.bfloat16)
            else:
                t[k] = torch.as_tensor(v, device="cuda")
        out.append(t)
    return out


def torchvision_impl(shape: Shape) -> Callable[[dict], object]:
    """torchvision.ops.deform_conv2d on a torch set; returns the output tensor."""
    import torchvision.ops

    def call(t: dict):
        return torchvision.ops.deform_conv2d(
            t["x"],
            t["offset"],
            t["weight"],
            t["bias"],
            stride=(shape.stride, shape.stride),
            padding=(shape.pad, shape.pad),
            dilation=(shape.dilation, shape.dilation),
            mask=t["mask"],
        )

    return call


# ------------------------------------------------------------------------------------------------
# timing


def _summary(per_call_us: list[float], calls: int, replays: int, graph: str | None, capture_error) -> dict:
    s = sorted(per_call_us)
    mid = s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])
    res = {"us": mid, "us_p10": s[int(0.1 * (len(s) - 1))], "us_p90": s[int(round(0.9 * (len(s) - 1)))]}
    res.update(calls=calls, replays=replays, method=graph or "events")
    if capture_error is not None:
        res["capture_error"] = f"{type(capture_error).__name__}: {capture_error}"[:300]
    return res


def _replays(run: Callable[[], None], sync: Callable[[], None], new_event, budget: dict) -> list[tuple]:
    """Warm-up, one replay to size the count, then ``n`` replays each between two events (recorded
    on the current stream); returns the event pairs, completed."""
    for _ in range(budget["warmup"]):
        run()
    sync()
    t0 = time.perf_counter()
    run()
    sync()
    n = bs.replays_for(time.perf_counter() - t0, budget["seconds"], budget["lo"], budget["hi"])
    events = [(new_event(), new_event()) for _ in range(n)]
    for start, stop in events:
        start.record()
        run()
        stop.record()
    sync()
    return events


def time_cupy(call: Callable[[dict], None], sets: list[dict], calls: int, budget: dict) -> dict:
    """Median per-call device time of ``calls`` calls rotating over ``sets``, captured in one CuPy
    graph and replayed; back-to-back calls between two events if the capture fails."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    nsets = len(sets)
    with stream:
        for r in range(min(calls, nsets)):
            call(sets[r % nsets])
        stream.synchronize()
        graph, err = None, None
        stream.begin_capture()
        try:
            for r in range(calls):
                call(sets[r % nsets])
        except Exception as exc:  # noqa: BLE001 - any failure means: no graph
            err = exc
        try:
            graph = stream.end_capture()
        except Exception as exc:  # noqa: BLE001
            err = err or exc
        if err is not None:
            graph = None
            clear_cuda_error()

        def run() -> None:
            if graph is not None:
                graph.launch(stream)
            else:
                for r in range(calls):
                    call(sets[r % nsets])

        events = _replays(run, stream.synchronize, cupy.cuda.Event, budget)
    per_call = [cupy.cuda.get_elapsed_time(a, b) * 1e3 / calls for a, b in events]
    return _summary(per_call, calls, len(events), "graph" if graph is not None else None, err)


def time_torch(call: Callable[[dict], object], tsets: list[dict], calls: int, budget: dict) -> dict:
    """As :func:`time_cupy` for a PyTorch callable: torch.cuda.CUDAGraph (its outputs kept alive, so
    each call writes its own buffer), else back-to-back calls between events."""
    import torch

    nsets = len(tsets)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for r in range(min(calls, nsets)):
            call(tsets[r % nsets])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph, keep, err = torch.cuda.CUDAGraph(), [], None
    try:
        with torch.cuda.graph(graph):
            for r in range(calls):
                keep.append(call(tsets[r % nsets]))
    except Exception as exc:  # noqa: BLE001
        graph, keep, err = None, [], exc
        torch.cuda.synchronize()

    def run() -> None:
        if graph is not None:
            graph.replay()
        else:
            for r in range(calls):
                call(tsets[r % nsets])

    events = _replays(run, torch.cuda.synchronize, lambda: torch.cuda.Event(enable_timing=True), budget)
    per_call = [a.elapsed_time(b) * 1e3 / calls for a, b in events]
    keep.clear()
    return _summary(per_call, calls, len(events), "torch-graph" if graph is not None else None, err)
