"""The quantize stage: calibrate the DCN layers of a float model and give them Q/DQ nodes.

:mod:`dcnconvert.quantize.calibrate` runs the float model in ONNX Runtime (CPU) on calibration
inputs and records the largest magnitude (amax) of each DCN's x input and output.
:mod:`dcnconvert.quantize.qdq` turns those into scales and inserts QuantizeLinear/DequantizeLinear
nodes in the pattern NVIDIA ModelOpt's ONNX PTQ uses for convolutions: x per tensor, the constant
weight per output channel (``axis=0``), offset, mask and bias left in float, the output optionally
quantized. ``dcnconvert rewrite`` turns that pattern into quantized plugin nodes.

ModelOpt quantizes a standard ``DeformConv`` only on request and then quantizes every input per
tensor, offsets and masks included, and it cannot calibrate the mmcv forms without TensorRT
(docs/quantize.md); this stage covers exactly the DCN layers, in every form ONNX Runtime can run
through :func:`dcnconvert.transform.standard.to_standard_model`.
"""

from __future__ import annotations

__all__ = ["calibrate", "qdq"]
