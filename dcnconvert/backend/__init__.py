"""What runs engines: TensorRT (:mod:`.trt`) and the plugin library it loads (:mod:`.plugin`).
"""
