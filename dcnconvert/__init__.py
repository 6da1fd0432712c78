"""dcnconvert: deformable convolutions in ONNX models -> TensorRT plugin nodes and engines.

Importing the package is cheap and needs only the standard library; each module imports what it
needs (numpy, onnx, onnx-graphsurgeon, polygraphy, tensorrt) itself.
"""

__version__ = "0.1.0"
