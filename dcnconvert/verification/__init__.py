"""Verifying an engine against ONNX Runtime: the run of both (:mod:`.runner`), inputs and saved
Polygraphy JSON files (:mod:`.io`), tolerances and the comparison (:mod:`.compare`).
"""
