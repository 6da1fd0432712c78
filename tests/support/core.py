"""ctypes binding of the TensorRT-free CUDA core (``build/libdcnconvert_core.so``).

Used by the GPU tests and benchmarks: :class:`DcnParams` mirrors ``plugin_src/core/dcnParams.h``
field for field, :func:`load` opens the library and declares the C signatures, and :func:`forward`
runs ``dcnForward`` on CuPy device arrays on CuPy's current stream. Importing this module needs
only the standard library; NumPy and CuPy are imported by the functions that need them.

BF16 has no CuPy dtype: BF16 tensors are passed as ``uint16`` arrays holding the raw bits
(:func:`float_to_bf16_bits` and :func:`bf16_bits_to_float` convert on the host).
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dcnconvert.errors import DcnConvertError, PluginLoadError, UnsupportedNodeError, ValidationError
from dcnconvert.precision.values import bf16_bits_to_float, float_to_bf16_bits

__all__ = [
    "ALGO_AUTO",
    "ALGO_FUSED",
    "ALGO_FUSED_TILE",
    "ALGO_SIMPLE",
    "ALGO_SPLIT_STEP",
    "ALGO_TAIL_STEP",
    "MAX_SPLITS",
    "BFLOAT16",
    "FLOAT16",
    "FLOAT32",
    "LAYOUT_NCHW",
    "LAYOUT_NHWC",
    "MATH_ACCURATE",
    "MATH_TF32",
    "WEIGHT_OIHW",
    "WEIGHT_PREPARED",
    "DcnParams",
    "bf16_bits_to_float",
    "float_to_bf16_bits",
    "forward",
    "library_path",
    "load",
    "make_params",
    "output_size",
    "prepare_weights",
    "set_split_reduce",
    "prepared_weights_size",
    "validate",
    "workspace_size",
]

# DcnDataType
FLOAT32 = 0
FLOAT16 = 1
BFLOAT16 = 2
INT8 = 3  # a quantized layer's x, weights, or quantized output
FP8E4M3 = 4
QUANT_NONE = 0
QUANT_INT8 = 1
QUANT_FP8 = 2
# DcnStatus
SUCCESS = 0
INVALID_ARGUMENT = 1
CUDA_ERROR = 2
UNSUPPORTED = 3
# DcnAlgo
ALGO_AUTO = 0
ALGO_SIMPLE = 1
ALGO_FUSED = 2
ALGO_FUSED_TILE = 100  # + tile configuration index (benchmarks and tests only)
ALGO_SPLIT_STEP = 1000  # x (K splits - 1), added to ALGO_FUSED_TILE + tile
ALGO_TAIL_STEP = 10000  # x (tail K splits - 1): K split on the second half of the pixel tiles only
MAX_SPLITS = 8
# DcnMath
MATH_ACCURATE = 0
MATH_TF32 = 1
# DcnLayout (x) and DcnWeightLayout
LAYOUT_NCHW = 0
LAYOUT_NHWC = 1
WEIGHT_OIHW = 0
WEIGHT_PREPARED = 1
UINT8 = -1  # not a DcnDataType: the prepared weights' byte buffer, for _check_array

STATUS_NAMES = {
    SUCCESS: "kDCN_SUCCESS",
    INVALID_ARGUMENT: "kDCN_INVALID_ARGUMENT",
    CUDA_ERROR: "kDCN_CUDA_ERROR",
    UNSUPPORTED: "kDCN_UNSUPPORTED",
}

_MSG_LEN = 1024
_REPO = Path(__file__).resolve().parents[2]
#: Environment variable that overrides the library location.
LIBRARY_ENV = "DCNCONVERT_CORE_LIB"


class DcnParams(ctypes.Structure):
    """Mirror of ``struct DcnParams`` (plugin_src/core/dcnParams.h); 136 bytes, 8-byte aligned."""

    _fields_ = [
        ("n", ctypes.c_int64),
        ("c", ctypes.c_int64),
        ("h", ctypes.c_int64),
        ("w", ctypes.c_int64),
        ("cout", ctypes.c_int64),
        ("ho", ctypes.c_int64),
        ("wo", ctypes.c_int64),
        ("kh", ctypes.c_int32),
        ("kw", ctypes.c_int32),
        ("strideH", ctypes.c_int32),
        ("strideW", ctypes.c_int32),
        ("padH", ctypes.c_int32),
        ("padW", ctypes.c_int32),
        ("dilationH", ctypes.c_int32),
        ("dilationW", ctypes.c_int32),
        ("group", ctypes.c_int32),
        ("deformableGroup", ctypes.c_int32),
        ("withBias", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("algo", ctypes.c_int32),
        ("math", ctypes.c_int32),
        ("xLayout", ctypes.c_int32),
        ("weightLayout", ctypes.c_int32),
        ("quant", ctypes.c_int32),
        ("outType", ctypes.c_int32),
        ("xScale", ctypes.c_float),
        ("outScale", ctypes.c_float),
    ]

    def as_dict(self) -> dict:
        """The fields as a plain dict (for messages and test ids)."""
        return {name: getattr(self, name) for name, _ in self._fields_}


def library_path() -> Path:
    """Where the core library is expected: ``$DCNCONVERT_CORE_LIB`` or ``<repo>/build/``."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return Path(env)
    return _REPO / "build" / "libdcnconvert_core.so"


@functools.cache
def _load(path: str) -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise PluginLoadError(
            f"cannot load the dcnconvert core library {path}: {exc}",
            hint="build it with `make core` (needs nvcc) or set DCNCONVERT_CORE_LIB",
        ) from exc
    params_p = ctypes.POINTER(DcnParams)
    lib.dcnOutputSize.argtypes = [
        ctypes.c_int64,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_int32,
    ]
    lib.dcnOutputSize.restype = ctypes.c_int64
    lib.dcnValidate.argtypes = [params_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.dcnValidate.restype = ctypes.c_int
    lib.dcnWorkspaceSize.argtypes = [params_p]
    lib.dcnWorkspaceSize.restype = ctypes.c_size_t
    lib.dcnForward.argtypes = [
        params_p,
        ctypes.c_void_p,  # x
        ctypes.c_void_p,  # offset
        ctypes.c_void_p,  # mask
        ctypes.c_void_p,  # weight
        ctypes.c_void_p,  # bias
        ctypes.c_void_p,  # out
        ctypes.c_void_p,  # workspace
        ctypes.c_size_t,  # workspaceSize
        ctypes.c_void_p,  # stream
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.dcnForward.restype = ctypes.c_int
    if hasattr(lib, "dcnSetSplitReduce"):  # absent from libraries older than the cluster reduction
        lib.dcnSetSplitReduce.argtypes = [ctypes.c_int32]
        lib.dcnSetSplitReduce.restype = ctypes.c_int
    if hasattr(lib, "dcnQuantWeightBytes"):
        lib.dcnQuantWeightBytes.argtypes = [params_p]
        lib.dcnQuantWeightBytes.restype = ctypes.c_size_t
        lib.dcnQuantScalesOffset.argtypes = [params_p]
        lib.dcnQuantScalesOffset.restype = ctypes.c_size_t
    lib.dcnPreparedWeightsSize.argtypes = [ctypes.POINTER(DcnParams)]
    lib.dcnPreparedWeightsSize.restype = ctypes.c_size_t
    lib.dcnPrepareWeights.argtypes = [
        ctypes.POINTER(DcnParams),
        ctypes.c_void_p,  # weight
        ctypes.c_void_p,  # prepared
        ctypes.c_size_t,
        ctypes.c_void_p,  # stream
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.dcnPrepareWeights.restype = ctypes.c_int
    lib.dcnFusedTileCount.argtypes = []
    lib.dcnFusedTileCount.restype = ctypes.c_int32
    # p, sms, smemOptin, compute capability (major, or 10 x major + minor), then the int32 outputs
    # (tile, splits[, tailTiles, tailSplits]), msg
    device = [ctypes.POINTER(DcnParams), ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
    out32 = ctypes.POINTER(ctypes.c_int32)
    lib.dcnFusedChoice.argtypes = [*device, out32, out32, ctypes.c_char_p, ctypes.c_size_t]
    lib.dcnFusedChoice.restype = ctypes.c_int
    lib.dcnFusedSplitTail.argtypes = [*device, out32, out32, out32, out32, ctypes.c_char_p, ctypes.c_size_t]
    lib.dcnFusedSplitTail.restype = ctypes.c_int
    return lib


def load(path: os.PathLike | None = None) -> ctypes.CDLL:
    """Open the core library (once per path) and declare its C signatures.

    Args:
        path: the ``.so``; default :func:`library_path`.

    Returns:
        The ``ctypes.CDLL``.

    Raises:
        PluginLoadError: the file is missing or does not load.
    """
    target = Path(path) if path is not None else library_path()
    if not target.is_file():
        raise PluginLoadError(
            f"the dcnconvert core library {target} does not exist",
            hint="build it with `make core` (needs nvcc) or set DCNCONVERT_CORE_LIB",
        )
    return _load(str(target.resolve()))


def output_size(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """``dcnOutputSize`` in Python (same formula; -1 when the kernel does not fit)."""
    if size < 1 or kernel < 1 or stride < 1 or pad < 0 or dilation < 1:
        return -1
    span = dilation * (kernel - 1) + 1
    padded = size + 2 * pad
    if padded < span:
        return -1
    return (padded - span) // stride + 1


def make_params(
    x_shape: Sequence[int],
    weight_shape: Sequence[int],
    *,
    stride: tuple[int, int] = (1, 1),
    padding: tuple[int, int] = (0, 0),
    dilation: tuple[int, int] = (1, 1),
    group: int = 1,
    deformable_group: int = 1,
    with_bias: bool = False,
    dtype: int = FLOAT32,
    algo: int = ALGO_AUTO,
    math: int = MATH_ACCURATE,
) -> DcnParams:
    """Build a :class:`DcnParams` from NCHW / OIHW shapes and (h, w) attribute pairs.

    ``ho``/``wo`` are computed; nothing is validated here (call :func:`validate`).
    """
    n, c, h, w = (int(v) for v in x_shape)
    cout, _, kh, kw = (int(v) for v in weight_shape)
    p = DcnParams()
    p.n, p.c, p.h, p.w, p.cout = n, c, h, w, cout
    p.kh, p.kw = kh, kw
    p.strideH, p.strideW = (int(v) for v in stride)
    p.padH, p.padW = (int(v) for v in padding)
    p.dilationH, p.dilationW = (int(v) for v in dilation)
    p.ho = output_size(h, kh, p.strideH, p.padH, p.dilationH)
    p.wo = output_size(w, kw, p.strideW, p.padW, p.dilationW)
    p.group = int(group)
    p.deformableGroup = int(deformable_group)
    p.withBias = 1 if with_bias else 0
    p.dtype = int(dtype)
    p.algo = int(algo)
    p.math = int(math)
    return p


def validate(params: DcnParams, lib: ctypes.CDLL | None = None) -> tuple[int, str]:
    """``dcnValidate``: returns ``(status, message)``."""
    lib = lib or load()
    buf = ctypes.create_string_buffer(_MSG_LEN)
    status = lib.dcnValidate(ctypes.byref(params), buf, _MSG_LEN)
    return int(status), buf.value.decode("utf-8", "replace")


def workspace_size(params: DcnParams, lib: ctypes.CDLL | None = None) -> int:
    """``dcnWorkspaceSize`` in bytes."""
    lib = lib or load()
    return int(lib.dcnWorkspaceSize(ctypes.byref(params)))


_DTYPE_NAMES = {
    FLOAT32: ("float32",),
    FLOAT16: ("float16",),
    BFLOAT16: ("uint16", "bfloat16"),
    UINT8: ("uint8",),
    INT8: ("int8",),
    FP8E4M3: ("uint8",),  # E4M3 bits
}


def _check_array(name: str, arr: Any, shape: tuple[int, ...], dtype: int) -> None:
    if tuple(arr.shape) != shape:
        raise ValidationError(f"{name} has shape {tuple(arr.shape)}, expected {shape} from DcnParams")
    if str(arr.dtype) not in _DTYPE_NAMES[dtype]:
        raise ValidationError(f"{name} has dtype {arr.dtype}, expected one of {_DTYPE_NAMES[dtype]}")
    if not arr.flags.c_contiguous:
        raise ValidationError(f"{name} must be C-contiguous")


def _raise_status(status: int, message: str) -> None:
    text = f"{STATUS_NAMES.get(status, status)}: {message}"
    if status == INVALID_ARGUMENT:
        raise ValidationError(text)
    if status == UNSUPPORTED:
        raise UnsupportedNodeError(text)
    raise DcnConvertError(text)


#: dcnSetSplitReduce modes: K splits added up in thread-block clusters where they fit (the default),
#: always by the reduction kernel, or always in clusters.
SPLIT_REDUCE_AUTO = 0
SPLIT_REDUCE_KERNEL = 1
SPLIT_REDUCE_CLUSTER = 2  # clusters or kDCN_UNSUPPORTED


def set_split_reduce(mode: int, lib: ctypes.CDLL | None = None) -> None:
    """``dcnSetSplitReduce``: how the fused kernel adds up K splits, for the whole process."""
    lib = lib or load()
    if not hasattr(lib, "dcnSetSplitReduce"):
        raise DcnConvertError(f"dcnSetSplitReduce({mode}): this core library predates the cluster reduction")
    status = int(lib.dcnSetSplitReduce(int(mode)))
    if status != SUCCESS:
        _raise_status(status, f"dcnSetSplitReduce({mode})")


def quant_weight_layout(params: DcnParams, lib: ctypes.CDLL | None = None) -> tuple[int, int]:
    """(``dcnQuantScalesOffset``, ``dcnQuantWeightBytes``) of a quantized layer: where its FP32 weight
    scales start in the weight buffer, and the buffer's size in bytes."""
    lib = lib or load()
    ref = ctypes.byref(params)
    return int(lib.dcnQuantScalesOffset(ref)), int(lib.dcnQuantWeightBytes(ref))


def prepared_weights_size(params: DcnParams, lib: ctypes.CDLL | None = None) -> int:
    """``dcnPreparedWeightsSize``: bytes of the prepared weights of ``params``."""
    lib = lib or load()
    return int(lib.dcnPreparedWeightsSize(ctypes.byref(params)))


def prepare_weights(params: DcnParams, weight: Any, lib: ctypes.CDLL | None = None) -> Any:
    """``dcnPrepareWeights`` on CuPy's current stream: a new ``uint8`` device buffer holding the
    prepared form of the OIHW device weights ``weight``, for a forward with
    ``params.weightLayout = WEIGHT_PREPARED``."""
    import cupy

    lib = lib or load()
    size = prepared_weights_size(params, lib)
    buf = cupy.empty((size,), dtype=cupy.uint8)
    msg = ctypes.create_string_buffer(_MSG_LEN)
    stream = cupy.cuda.get_current_stream().ptr
    status = int(
        lib.dcnPrepareWeights(ctypes.byref(params), weight.data.ptr, buf.data.ptr, size, stream, msg,
                              _MSG_LEN)
    )
    if status != SUCCESS:
        _raise_status(status, msg.value.decode("utf-8", "replace"))
    return buf


def forward(
    params: DcnParams,
    x: Any,
    offset: Any,
    mask: Any,
    weight: Any,
    bias: Any = None,
    out: Any = None,
    *,
    workspace: Any = None,
    lib: ctypes.CDLL | None = None,
    check: bool = True,
) -> Any:
    """Run ``dcnForward`` on CuPy arrays, on CuPy's current stream (asynchronously).

    Args:
        params: the problem; shapes of the arrays must agree with it.
        x, offset, mask, weight, bias: CuPy device arrays (C-contiguous, the dtype of ``params``;
            ``uint16`` bits for BF16). ``bias`` only when ``params.withBias``.
        out: output array to write; allocated (uninitialised) when None.
        workspace: device buffer of at least :func:`workspace_size` bytes; allocated for the call
            when None and needed (pass one when capturing a CUDA graph).
        lib: the loaded library (default :func:`load`).
        check: verify shapes and dtypes before the call.

    Returns:
        ``out``.

    Raises:
        ValidationError: arrays inconsistent with ``params``, or ``kDCN_INVALID_ARGUMENT``.
        UnsupportedNodeError: ``kDCN_UNSUPPORTED``.
        DcnConvertError: ``kDCN_CUDA_ERROR`` (the message names the CUDA error).
    """
    import cupy

    lib = lib or load()
    kk = params.kh * params.kw
    out_shape = (params.n, params.cout, params.ho, params.wo)
    quant = params.quant != QUANT_NONE
    x_type = (INT8 if params.quant == QUANT_INT8 else FP8E4M3) if quant else params.dtype
    out_type = params.outType if quant else params.dtype
    if out is None:
        np_dtype = {FLOAT32: "float32", FLOAT16: "float16", BFLOAT16: "uint16", INT8: "int8",
                    FP8E4M3: "uint8"}
        out = cupy.empty(out_shape, dtype=np_dtype[out_type])
    if check:
        cg = params.c // params.group if params.group > 0 else 0
        x_shape = (params.n, params.h, params.w, params.c) if params.xLayout == LAYOUT_NHWC else (
            params.n, params.c, params.h, params.w)
        _check_array("x", x, x_shape, x_type)
        _check_array(
            "offset", offset, (params.n, 2 * params.deformableGroup * kk, params.ho, params.wo), params.dtype
        )
        _check_array(
            "mask", mask, (params.n, params.deformableGroup * kk, params.ho, params.wo), params.dtype
        )
        if params.weightLayout == WEIGHT_PREPARED:
            _check_array("weight", weight, (prepared_weights_size(params, lib),), UINT8)
        elif quant:
            _check_array("weight", weight, (quant_weight_layout(params, lib)[1],), UINT8)
        else:
            _check_array("weight", weight, (params.cout, cg, params.kh, params.kw), params.dtype)
        if params.withBias:
            if bias is None:
                raise ValidationError("DcnParams.withBias = 1 but no bias array was given")
            _check_array("bias", bias, (params.cout,), params.dtype)
        _check_array("out", out, out_shape, out_type)
    ws_ptr, ws_size = None, 0
    if workspace is None:
        need = workspace_size(params, lib)
        if need:  # allocated here (not inside a CUDA graph capture: pass `workspace` there)
            workspace = cupy.empty((need,), dtype=cupy.uint8)
    if workspace is not None:
        ws_ptr, ws_size = workspace.data.ptr, int(workspace.nbytes)
    buf = ctypes.create_string_buffer(_MSG_LEN)
    stream = cupy.cuda.get_current_stream().ptr
    status = lib.dcnForward(
        ctypes.byref(params),
        x.data.ptr,
        offset.data.ptr,
        mask.data.ptr,
        weight.data.ptr,
        bias.data.ptr if (bias is not None and params.withBias) else None,
        out.data.ptr,
        ws_ptr,
        ws_size,
        stream or None,
        buf,
        _MSG_LEN,
    )
    if status != SUCCESS:
        _raise_status(int(status), buf.value.decode("utf-8", "replace"))
    return out
