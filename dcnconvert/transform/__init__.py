"""Graph transforms: every DCN form into our plugin node (:mod:`.plugin`, onnx-graphsurgeon), and every
form into standard ONNX ``DeformConv`` for the ONNX Runtime reference (:mod:`.standard`).
"""
