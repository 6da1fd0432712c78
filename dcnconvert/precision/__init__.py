"""The FP16/BF16 graph cast: the driver (:mod:`.cast`), the per-node type plan (:mod:`.plan`), value
conversion and ``Cast`` insertion (:mod:`.values`).
"""
