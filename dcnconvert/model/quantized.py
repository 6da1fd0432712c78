"""Values of quantized tensors: INT8 and FP8 E4M3FN rounding in NumPy, and their ONNX element types.

The rewrite of a Q/DQ model (:mod:`dcnconvert.match.qdq`, :mod:`dcnconvert.transform.quant`) folds a
``QuantizeLinear`` of a constant weight with :func:`quantize_values` (ONNX QuantizeLinear with zero
point 0: ``round(x / scale)``, ties to even, saturated) and stores FP8 values in a FLOAT16 tensor
(:func:`weight_tensor`), which holds every E4M3 value exactly (:data:`dcnconvert.schema.QUANT_WEIGHT_DTYPES`).
E4M3FN has 3 mantissa bits, exponents -6..8 (subnormal step 2**-9), no infinity and a largest
magnitude of 448; it is computed here without an FP8 library.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper

from dcnconvert import schema

#: ONNX element type of each quantized type -> the plugin's ``quant_type``.
QUANT_ONNX_TYPES: dict[int, str] = {TensorProto.INT8: "int8", TensorProto.FLOAT8E4M3FN: "fp8e4m3"}
#: ``quant_type`` -> the ONNX element type of the quantized tensors.
ONNX_TYPE_OF: dict[str, int] = {v: k for k, v in QUANT_ONNX_TYPES.items()}
#: The largest magnitude of each type (INT8 also reaches -128).
QUANT_MAX: dict[str, float] = {"int8": 127.0, "fp8e4m3": 448.0}


def to_e4m3(values: np.ndarray, saturate: bool = True) -> np.ndarray:
    """``values`` rounded to the nearest FP8 E4M3FN value (ties to even), as float64.

    With ``saturate`` magnitudes beyond 448 become +-448 (ONNX's default); without it they become NaN
    (E4M3FN has no infinity). NaN stays NaN.
    """
    v = np.asarray(values, dtype=np.float64)
    mag = np.abs(v)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    step = np.exp2(np.maximum(exponent, -6.0) - 3.0)  # 3 mantissa bits; subnormals below 2**-6
    rounded = np.rint(v / step) * step
    limit = QUANT_MAX["fp8e4m3"]
    over = np.abs(rounded) > limit
    if saturate:
        rounded = np.where(over, np.sign(v) * limit, rounded)
    else:
        rounded = np.where(over, np.nan, rounded)
    return rounded


def to_grid(values: np.ndarray, qtype: str, saturate: bool = True) -> np.ndarray:
    """``values`` on the grid of ``qtype`` (``int8``: round half to even, saturate to [-128, 127])."""
    if qtype == "int8":
        return np.clip(np.rint(np.asarray(values, dtype=np.float64)), -128.0, 127.0)
    if qtype == "fp8e4m3":
        return to_e4m3(values, saturate)
    raise ValueError(f"unknown quantized type {qtype!r} (expected one of {', '.join(schema.QUANT_TYPES)})")


def quantize_values(values: np.ndarray, scale: np.ndarray | float, qtype: str,
                    saturate: bool = True) -> np.ndarray:
    """ONNX QuantizeLinear with zero point 0: ``values / scale`` on the grid of ``qtype``, as float64.

    ``scale`` broadcasts against ``values`` (a per-channel scale of an OIHW weight has shape
    ``[Cout, 1, 1, 1]``). The division is done in float32, as QuantizeLinear does it.
    """
    ratio = np.asarray(values, dtype=np.float32) / np.asarray(scale, dtype=np.float32)
    return to_grid(ratio.astype(np.float64), qtype, saturate)


def weight_tensor(grid_values: np.ndarray, qtype: str, name: str) -> TensorProto:
    """The ``weight`` TENSOR of a quantized plugin node: INT8, or FP8 values as FLOAT16."""
    dtype = {"int8": np.int8, "fp8e4m3": np.float16}[qtype]
    tensor = numpy_helper.from_array(np.asarray(grid_values).astype(dtype), name)
    assert tensor.data_type == schema.QUANT_WEIGHT_DTYPES[qtype]
    return tensor


def dequantized(tensor: TensorProto) -> np.ndarray:
    """The values of a quantized plugin weight (INT8 or FLOAT16) or of an INT8/FP8 tensor, as float64."""
    return np.asarray(numpy_helper.to_array(tensor)).astype(np.float64)
