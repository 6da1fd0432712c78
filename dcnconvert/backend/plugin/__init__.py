"""The plugin library: which one to load and why (:mod:`.library`), and ``dcnconvert plugin build``
(:mod:`.compile`, with the TensorRT headers found or fetched by :mod:`.headers`).
"""
