"""TensorRT: every call into it (:mod:`.adapter`), what each version offers (:mod:`.versions`), shapes
and optimization profiles (:mod:`.profiles`), and the engine build steps (:mod:`.engine`).
"""
