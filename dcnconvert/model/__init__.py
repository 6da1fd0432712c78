"""ONNX models as files and protobufs: loading and atomic saving with external data, tensor helpers
and weight-less copies, the structural check on load, names and strings, opset lookups.
"""
