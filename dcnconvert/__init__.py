"""dcnconvert: deformable convolutions in ONNX models -> TensorRT plugin nodes and engines.

The pipeline's stages are subpackages: :mod:`~dcnconvert.model` (ONNX files), :mod:`~dcnconvert.match`
(finding DCN nodes), :mod:`~dcnconvert.transform` (plugin nodes, standard ONNX), :mod:`~dcnconvert.precision`
(the FP16/BF16 cast), :mod:`~dcnconvert.backend` (TensorRT and the plugin library),
:mod:`~dcnconvert.verification` and :mod:`~dcnconvert.cli`. The functions of :mod:`dcnconvert.api`
(``inspect``, ``rewrite``, ``reference``, ``build``, ``convert``, ``verify``) are available here too.

Importing the package is cheap and needs only the standard library: the API is imported on first use,
and each module imports what it needs (numpy, onnx, onnx-graphsurgeon, polygraphy, tensorrt) itself.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = ("Result", "build", "convert", "inspect", "reference", "rewrite", "verify")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from dcnconvert import api

        return getattr(api, name)
    raise AttributeError(f"module 'dcnconvert' has no attribute {name!r}")
