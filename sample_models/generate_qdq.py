#!/usr/bin/env python3
"""Q/DQ models with a deformable convolution, in the patterns NVIDIA ModelOpt's ONNX PTQ writes.

The tests (tests/transform/test_quant.py) build them in memory; ``python3 sample_models/generate_qdq.py
--out DIR`` writes every case to ``DIR/<case>.onnx`` to try the CLI on (``dcnconvert rewrite``,
``dcnconvert reference``). They are not committed.

Each model wraps one single-DCN sample (:func:`support.samples.build`) the way ModelOpt 0.40's
``modelopt.onnx.quantization`` does, which drives ONNX Runtime's QDQ quantizer:

* x: ``QuantizeLinear -> DequantizeLinear`` with one FP32 scale and a zero point of the quantized type
  (INT8; FLOAT8E4M3FN for FP8), named as ORT's quantizer names them (``x_QuantizeLinear_Output``, ...).
  Activations are symmetric (``ActivationSymmetric: True``, zero point 0).
* weight: per output channel (axis 0), an INT8/FP8 initializer read by a ``DequantizeLinear``
  (``dq_only``, ModelOpt's default: ``qdq_to_dq``), or ``QuantizeLinear -> DequantizeLinear`` of the
  float initializer (``dq_only=False``).
* output (optional): ``QuantizeLinear -> DequantizeLinear`` after the DCN (custom ops quantize their
  outputs: ``OpTypesToExcludeOutputQuantization`` lists every op but them).
* direct form: what ``--trt_plugins_precision OP:...`` leaves after ``remove_input_dq_and_output_q``:
  the DCN reads the x Q's output and its output feeds a DequantizeLinear; with ``all_inputs`` the
  offset and mask are quantized too (``OP:int8`` quantizes every input).
* FP8 scales are the INT8 ones times 448/127, as ``int8_to_fp8`` converts them; INT8 models have
  default-domain opset 13 (ModelOpt raises a model to 13 for per-channel Q/DQ), FP8 models 19 (the
  first with FP8 Q/DQ; ModelOpt raises FP16 FP8 models to 21).

Cases that cannot become a quantized plugin node (a nonzero zero point, UINT8, per-channel x scale,
weight scales on axis 1, x and weight of different types) are here too; the rewrite keeps them as
float nodes with a warning.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support import samples  # noqa: E402

from dcnconvert.model.quantized import ONNX_TYPE_OF, quantize_values  # noqa: E402

#: The amplitude of x the scales assume (input_feeds draws x ~ N(0, 1)).
X_AMAX = 3.0


@dataclass(frozen=True)
class Case:
    """One Q/DQ model.

    Attributes:
        form: the sample form (:data:`support.samples.FORMS`).
        qtype: ``int8`` or ``fp8e4m3`` (x and weight).
        weight: ``dq`` (quantized initializer + DQ), ``qdq`` (Q -> DQ of the float initializer) or
            ``float`` (no weight quantization).
        output: quantize the output (Q -> DQ, or DQ only in the direct form).
        direct: ModelOpt's direct form for custom ops (no DQ of x, no Q of the output).
        all_inputs: direct form with the offset and mask quantized too.
        honoured: whether the rewrite can make a quantized plugin node of it.
        flaw: what makes it unhonourable: ``zero_point``, ``uint8``, ``x_per_channel``, ``axis1``,
            ``mixed`` (FP8 weight with INT8 x), or ``""``.
        build: keyword arguments of :func:`support.samples.build`.
    """

    form: str
    qtype: str = "int8"
    weight: str = "dq"
    output: bool = False
    direct: bool = False
    all_inputs: bool = False
    honoured: bool = True
    flaw: str = ""
    build: tuple = ()


CASES: dict[str, Case] = {
    "int8_deformconv": Case("onnx.DeformConv"),
    "int8_deformconv_out": Case("onnx.DeformConv", output=True, weight="qdq"),
    "fp8_deformconv_out": Case("onnx.DeformConv", qtype="fp8e4m3", output=True),
    "int8_deformconv_pads": Case("onnx.DeformConv", build=(("pads", (0, 1, 2, 1)),)),
    "fp8_deformconv_pads": Case("onnx.DeformConv", qtype="fp8e4m3", output=True,
                                build=(("pads", (2, 0, 1, 1)),)),
    "int8_mmcv_out": Case("mmcv.MMCVModulatedDeformConv2d", output=True, weight="qdq",
                          build=(("deformable_group", 2), ("group", 2), ("c", 4), ("cout", 6))),
    "fp8_mmcv": Case("mmcv.MMCVModulatedDeformConv2d", qtype="fp8e4m3", build=(("stride", (2, 1)),)),
    "int8_mmcv_dcnv1": Case("mmcv.MMCVDeformConv2d", output=True, build=(("dilation", (1, 2)),)),
    "int8_mmcv_direct": Case("mmcv.MMCVModulatedDeformConv2d", output=True, direct=True),
    "fp8_mmcv_direct_all": Case("mmcv.MMCVModulatedDeformConv2d", qtype="fp8e4m3", output=True, direct=True,
                                all_inputs=True),
    "int8_zero_point": Case("onnx.DeformConv", honoured=False, flaw="zero_point"),
    "uint8_x": Case("mmcv.MMCVModulatedDeformConv2d", honoured=False, flaw="uint8"),
    "int8_x_per_channel": Case("onnx.DeformConv", honoured=False, flaw="x_per_channel"),
    "int8_weight_axis1": Case("onnx.DeformConv", honoured=False, flaw="axis1"),
    "int8_x_fp8_weight": Case("onnx.DeformConv", honoured=False, flaw="mixed"),
    "int8_weight_float": Case("onnx.DeformConv", weight="float", honoured=False),
    "int8_direct_zero_point": Case("mmcv.MMCVModulatedDeformConv2d", output=True, direct=True, honoured=False,
                                   flaw="zero_point"),
}


def x_scale(qtype: str) -> float:
    """The scale of x: INT8 max calibration of X_AMAX; FP8 as ModelOpt converts it (times 448/127)."""
    scale = X_AMAX / 127.0
    return scale * 448.0 / 127.0 if qtype == "fp8e4m3" else scale


class _Graph:
    """The sample's graph, with helpers that add Q/DQ nodes in ORT's quantizer's naming."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.graph = model.graph
        self.inits = {t.name: t for t in self.graph.initializer}

    def add_init(self, array: np.ndarray | TensorProto, name: str) -> str:
        tensor = array if isinstance(array, TensorProto) else numpy_helper.from_array(array, name)
        tensor.name = name
        self.graph.initializer.append(tensor)
        return name

    def zero_point(self, name: str, onnx_type: int, dims: list[int], value: int = 0) -> str:
        count = int(np.prod(dims)) if dims else 1
        return self.add_init(helper.make_tensor(name, onnx_type, dims, [value] * count), name)

    def node(self, op: str, inputs: list[str], output: str, name: str, **attrs) -> onnx.NodeProto:
        node = helper.make_node(op, inputs, [output], name=name, **attrs)
        self.graph.node.append(node)
        return node


def _q_type(case: Case, role: str) -> int:
    if case.flaw == "uint8" and role == "x":
        return TensorProto.UINT8
    if case.flaw == "mixed" and role == "weight":
        return TensorProto.FLOAT8E4M3FN
    return ONNX_TYPE_OF[case.qtype]


def _qdq(g: _Graph, case: Case, tensor: str, scale: float, role: str) -> tuple[str, str]:
    """Q (and DQ) of an activation; returns (Q output, DQ output)."""
    qtype = _q_type(case, role)
    zp_value = 3 if case.flaw == "zero_point" and role == "x" else 0
    dims = []
    scale_values = np.array(scale, np.float32)
    if case.flaw == "x_per_channel" and role == "x":
        channels = 4
        scale_values, dims = np.full(channels, scale, np.float32), [channels]
    s = g.add_init(scale_values, f"{tensor}_scale")
    z = g.zero_point(f"{tensor}_zero_point", qtype, dims, zp_value)
    q = g.node("QuantizeLinear", [tensor, s, z], f"{tensor}_QuantizeLinear_Output",
               f"{tensor}_QuantizeLinear")
    q_out = q.output[0]
    dq = g.node("DequantizeLinear", [q_out, s, z], f"{tensor}_DequantizeLinear_Output",
                f"{tensor}_DequantizeLinear")
    return q_out, dq.output[0]


def _quantize_weight(g: _Graph, case: Case, name: str) -> str:
    """The weight's DQ (per output channel, axis 0); returns its output."""
    w = onnx.numpy_helper.to_array(g.inits[name]).astype(np.float32)
    qtype = _q_type(case, "weight")
    kind = {TensorProto.INT8: "int8", TensorProto.FLOAT8E4M3FN: "fp8e4m3"}[qtype]
    cout = w.shape[0]
    amax = np.abs(w.reshape(cout, -1)).max(axis=1)
    scale = (amax / 127.0).astype(np.float32)
    if kind == "fp8e4m3":
        scale = (scale * np.float32(448.0 / 127.0)).astype(np.float32)
    axis = 1 if case.flaw == "axis1" else 0
    if axis == 1:
        scale = np.full(w.shape[1], scale.max(), np.float32)
    s = g.add_init(scale, f"{name}_scale")
    z = g.zero_point(f"{name}_zero_point", qtype, [scale.size])
    if case.weight == "qdq":
        q = g.node("QuantizeLinear", [name, s, z], f"{name}_QuantizeLinear_Output", f"{name}_QuantizeLinear",
                   axis=axis)
        source = q.output[0]
    else:  # dq_only: the initializer itself becomes the quantized values
        shape = (-1,) + (1,) * (w.ndim - 1) if axis == 0 else (1, -1, 1, 1)
        grid = quantize_values(w, scale.reshape(shape), kind)
        if kind == "int8":
            tensor = numpy_helper.from_array(grid.astype(np.int8), name)
        else:
            tensor = helper.make_tensor(name, TensorProto.FLOAT8E4M3FN, list(w.shape), grid.ravel().tolist())
        g.inits[name].CopyFrom(tensor)
        source = name
    dq = g.node("DequantizeLinear", [source, s, z], f"{name}_DequantizeLinear_Output",
                f"{name}_DequantizeLinear", axis=axis)
    return dq.output[0]


def _output_scale(model: onnx.ModelProto, qtype: str) -> float:
    """Max calibration of the float model's output on one input of :func:`support.samples.input_feeds`."""
    import onnxruntime as ort

    from dcnconvert.transform.standard import to_standard_model

    std = to_standard_model(model)
    session = ort.InferenceSession(std.SerializeToString(), providers=["CPUExecutionProvider"])
    y = session.run(None, samples.input_feeds(model, seed=1234))[0]
    scale = float(np.abs(y).max()) / 127.0
    return scale * 448.0 / 127.0 if qtype == "fp8e4m3" else scale


def _rename_input(node: onnx.NodeProto, old: str, new: str) -> None:
    for i, name in enumerate(node.input):
        if name == old:
            node.input[i] = new


def build(name: str, seed: int = 0) -> onnx.ModelProto:
    """The Q/DQ model of case ``name`` (weights seeded with ``seed``)."""
    case = CASES[name]
    opset = 19 if case.qtype == "fp8e4m3" or case.flaw == "mixed" or case.form.startswith("onnx.") else 13
    model = samples.build(case.form, seed=seed, opset=opset, **dict(case.build))
    out_scale = _output_scale(model, case.qtype) if case.output else None
    g = _Graph(model)
    dcn = next(n for n in model.graph.node if "eform" in n.op_type)
    dcn_inputs = list(dcn.input)
    del model.graph.node[:]  # rebuilt: Q/DQ nodes, then the DCN, then the output Q/DQ
    roles = {"x": "x", "offset": "offset", "mask": "mask"}
    for role, tensor in roles.items():
        if tensor not in dcn_inputs or (role != "x" and not case.all_inputs):
            continue
        scale = x_scale(case.qtype) if role == "x" else (6.0 if role == "offset" else 1.0) / 127.0
        q_out, dq_out = _qdq(g, case, tensor, scale, role)
        _rename_input(dcn, tensor, q_out if case.direct else dq_out)
        if case.direct:  # remove_input_dq_and_output_q drops the DQ
            del g.graph.node[-1]
    if case.weight != "float":
        _rename_input(dcn, "weight", _quantize_weight(g, case, "weight"))
    if out_scale is not None:
        dcn.output[0] = "y_pre" if not case.direct else "y_QuantizeLinear_Output"
    g.graph.node.append(dcn)  # a copy: dcn is final here
    if out_scale is not None:
        qtype = ONNX_TYPE_OF[case.qtype]
        s = g.add_init(np.array(out_scale, np.float32), "y_scale")
        z = g.zero_point("y_zero_point", qtype, [], 3 if case.direct and case.flaw == "zero_point" else 0)
        if not case.direct:
            g.node("QuantizeLinear", ["y_pre", s, z], "y_QuantizeLinear_Output", "y_QuantizeLinear")
        g.node("DequantizeLinear", ["y_QuantizeLinear_Output", s, z], "y", "y_DequantizeLinear")
    model.producer_name = "dcnconvert sample_models/generate_qdq.py"
    model.ir_version = max(model.ir_version, 9)
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write <case>.onnx into")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        onnx.save_model(build(name), args.out / f"{name}.onnx")
        print(args.out / f"{name}.onnx")


if __name__ == "__main__":
    main()
