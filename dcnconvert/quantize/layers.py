"""The quantize stage from a float model to a Q/DQ model: choose the DCN layers, calibrate, insert.

:func:`quantize_model` finds the DCN nodes (:mod:`dcnconvert.match.finder`), keeps those it can
quantize (a node of the main graph with a constant weight input; an x that is already the output
of a per-tensor DequantizeLinear of the same type, as ModelOpt leaves it when a neighbouring Conv
reads the same tensor, is kept with its scale; others are reported and left alone), upgrades the
default-domain opset when the Q/DQ nodes need it, calibrates x and (optionally) the output of each
layer (:mod:`dcnconvert.quantize.calibrate`) and inserts the Q/DQ nodes (:mod:`dcnconvert.quantize.qdq`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from dcnconvert import log, schema
from dcnconvert.errors import ModelError, NoMatchError, UsageError
from dcnconvert.model.opsets import opset_version
from dcnconvert.quantize import calibrate, qdq

__all__ = ["quantize_model", "upgrade_opset"]


def upgrade_opset(model: onnx.ModelProto, qtype: str) -> tuple[onnx.ModelProto, int | None]:
    """``model`` at the default-domain opset the Q/DQ nodes of ``qtype`` need, and the opset it had when
    it was upgraded (None when it was high enough).

    Raises:
        ModelError: ONNX's version converter cannot upgrade the model (e.g. a custom op in the default
            domain).
    """
    need = qdq.required_opset(qtype)
    have = opset_version(model, "")
    if have is not None and have >= need:
        return model, None
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, need), have
    except Exception as exc:  # noqa: BLE001 - the converter raises its C++ assertions as plain exceptions
        raise ModelError(
            f"the model has default-domain opset {have}; {qtype} Q/DQ nodes need opset {need}, and ONNX's "
            f"version converter cannot upgrade it: {' '.join(str(exc).split())[:300]}",
            hint=f"export the model at opset {need} or later, or convert its DCN nodes to standard "
                 "DeformConv first with 'dcnconvert reference'") from None


def _position(node: onnx.NodeProto, name: str) -> int:
    return list(node.input).index(name)


def existing_x_scale(model: onnx.ModelProto, dq: onnx.NodeProto, qtype: str) -> float | None:
    """The scale of a DequantizeLinear that already feeds a DCN's x (ModelOpt shares the Q/DQ pair of
    a tensor among its consumers), when the layer can keep it: a constant positive scalar scale and a
    scalar zero point 0 of ``qtype``; else None."""
    scale = qdq.constant_value(model, dq.input[1]) if len(dq.input) > 1 else None
    zp = qdq.constant_value(model, dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
    if scale is None or scale.size != 1 or not float(scale.reshape(-1)[0]) > 0 or zp is None or zp.size != 1:
        return None
    zp_type = {"int8": np.dtype(np.int8), "fp8e4m3": np.dtype("float8_e4m3fn")}[qtype]
    if zp.dtype != zp_type or float(zp.astype(np.float32).reshape(-1)[0]) != 0.0:
        return None
    return float(scale.reshape(-1)[0])


def _selectable(model: onnx.ModelProto, match: Any, producers: Mapping[str, onnx.NodeProto],
                qtype: str) -> str | None:
    """Why ``match`` cannot get Q/DQ nodes, or None when it can."""
    if match.index < 0:
        return "it is inside a subgraph"
    if not match.convertible:
        return f"it cannot be converted ({match.reason})"
    if "weight" in match.embedded:
        return "its weight is embedded in the node (already rewritten)"
    x, weight = match.inputs.get("x"), match.inputs.get("weight")
    if not x or not weight:
        return "it has no x or no weight input"
    producer = producers.get(x)
    if producer is not None and producer.op_type == "DequantizeLinear" and existing_x_scale(
            model, producer, qtype) is None:
        return (f"its x '{x}' is already the output of DequantizeLinear '{producer.name}', which is not "
                f"per tensor {qtype} with zero point 0")
    if weight in producers and producers[weight].op_type == "DequantizeLinear":
        return f"its weight '{weight}' is already dequantized"
    if qdq.constant_value(model, weight) is None:
        return f"its weight '{weight}' is not a constant"
    return None


def quantize_model(model: onnx.ModelProto, qtype: str, feeds: Sequence[Mapping[str, np.ndarray]], *,
                   quantize_output: bool = False, nodes: Sequence[str] = (),
                   ) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """``model`` with Q/DQ nodes around its DCN layers, calibrated on ``feeds``; and the report
    (``layers``: one row per quantized node, ``skipped``: node and reason, ``opset_upgraded_from``).

    Args:
        qtype: ``int8`` or ``fp8e4m3``.
        feeds: calibration inputs (feed dicts for the model's inputs).
        quantize_output: also quantize each layer's output (the quantized plugin then writes
            ``qtype`` values with an output scale).
        nodes: only these node names (default: every DCN node that can be quantized).

    Raises:
        UsageError: an unknown ``qtype``, or a name in ``nodes`` that is no DCN node.
        NoMatchError: no DCN node can be quantized. ModelError: calibration or opset problems.
    """
    from dcnconvert.match import finder

    if qtype not in schema.QUANT_TYPES:
        raise UsageError(f"unknown quantized type '{qtype}'",
                         hint=f"use one of {', '.join(schema.QUANT_TYPES)}")
    logger = log.get_logger()
    model, upgraded_from = upgrade_opset(model, qtype)
    if upgraded_from is not None:
        logger.warning("upgraded the model from opset %s to %d for the %s Q/DQ nodes", upgraded_from,
                       qdq.required_opset(qtype), qtype)
    matches = list(finder.find_dcn_nodes(model))
    labels = {m.label for m in matches}
    unknown = [n for n in nodes if n not in labels]
    if unknown:
        raise UsageError(f"--node {', '.join(unknown)}: no DCN node of that name",
                         hint=f"the model's DCN nodes are {sorted(labels)}")
    producers = {o: n for n in model.graph.node for o in n.output}
    chosen, skipped = [], []
    for m in matches:
        if nodes and m.label not in nodes:
            continue
        reason = _selectable(model, m, producers, qtype)
        if reason is None:
            chosen.append(m)
        else:
            skipped.append({"node": m.label, "reason": reason})
            logger.warning("DCN node '%s' is left in float: %s", m.label, reason)
    if not chosen:
        why = "; ".join(f"{s['node']}: {s['reason']}" for s in skipped)
        raise NoMatchError("no DCN node of the model can be quantized" + (f" ({why})" if why else ""),
                           hint="quantize a float model with DCN nodes whose weights are constants")
    names = sorted({m.inputs["x"] for m in chosen} | {m.output for m in chosen if quantize_output})
    amax = calibrate.collect_amax(model, feeds, names)
    plans = []
    for m in chosen:
        node = model.graph.node[m.index]
        x, weight = m.inputs["x"], m.inputs["weight"]
        if amax[x] == 0.0:
            logger.warning("DCN node '%s': x '%s' is 0 on every calibration input; its scale is 1",
                           m.label, x)
        w_value = qdq.constant_value(model, weight)
        assert w_value is not None  # checked by _selectable
        producer = producers.get(x)
        shared = (existing_x_scale(model, producer, qtype)
                  if producer is not None and producer.op_type == "DequantizeLinear" else None)
        plan = qdq.LayerPlan(node_name=m.label, index=m.index, x=x, x_pos=_position(node, x),
                             x_scale=float(qdq.scale_from_amax(amax[x], qtype)) if shared is None else shared,
                             weight=weight, w_pos=_position(node, weight),
                             w_scale=qdq.weight_scales(w_value, qtype), x_quantized=shared is not None)
        if quantize_output:
            plan.output, plan.output_scale = m.output, float(qdq.scale_from_amax(amax[m.output], qtype))
        plans.append(plan)
    out = qdq.insert_qdq(model, plans, qtype)
    logger.info("%d DCN node(s) quantized to %s, %d left in float", len(plans), qtype, len(skipped))
    report = {"quant_type": qtype, "layers": [p.to_dict() for p in plans], "skipped": skipped,
              "amax": amax, "calibration_inputs": len(feeds), "opset_upgraded_from": upgraded_from}
    return out, report
