"""Test-only helpers (never shipped): the float64 NumPy DCN reference, a CPU evaluator for graphs with
plugin nodes, builders of sample models of every form, and the ctypes binding of the CUDA core.
"""
