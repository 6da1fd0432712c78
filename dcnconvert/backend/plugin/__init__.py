"""The plugin library: which one to load and why (:mod:`.library`), and ``dcnconvert plugin build``
(:mod:`.compile`, with nvcc and the architectures from :mod:`.toolchain` and the TensorRT headers found
or fetched by :mod:`.headers`).
"""
