"""Small deterministic models with one deformable convolution in each exporter form.

Used by the tests and by ``sample_models/generate.py``. Every builder is bit-for-bit reproducible
(seeded ``numpy.random.default_rng``, no timestamps, fixed names).

Graph inputs, per form (weights and bias are initializers; ``paddle2onnx.DeformConv`` feeds its
bias from a ``Constant`` node; ``tao.ModulatedDeformConv2d`` also lists the weight as a graph input,
as TAO exports with ``keep_initializers_as_inputs``):

* modulated forms (mmcv/mmdeploy/legacy ``MMCVModulatedDeformConv2d``, ``onnx.DeformConv``,
  ``onnx.DeformConv.swapped``, ``paddle2onnx.DeformConv``, ``tao.ModulatedDeformConv2d``,
  ``dcnconvert.ModulatedDeformConv2d``, ``centernet.DCNv2``, ``dcnv2_latest.DCNv2_2``,
  ``bevformer.*``, ``paddle-legacy.deformable_conv``): ``x``, ``offset``, ``mask``;
* DCNv1 forms (``*.MMCVDeformConv2d``, ``nonstandard.DeformConv``, ``openvino.DeformableConv2D``):
  ``x``, ``offset``;
* logits forms (``tensorrt_pro.Plugin.DCNv2``, ``eweill.DCNv2_TRT``): ``x``, ``offset_mask``
  (``3*dg*kh*kw`` channels: offsets, then mask logits).

The output is ``y``. With ``dynamic=True`` the dims are named ``N``, ``H``, ``W`` (x) and ``N``,
``OH``, ``OW`` (offset, mask, y); the sizes used at build time are stored in the metadata entry
``dcnconvert.sample.dims`` (JSON), which :func:`input_feeds` reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dcnconvert import schema
from dcnconvert.match.forms import FORM_IDS
from dcnconvert.schema import DcnAttrs

#: Every source form :func:`build` can make (the same ids that :mod:`dcnconvert.match.forms` reports).
FORMS: tuple[str, ...] = FORM_IDS

#: metadata_props keys written by :func:`build`.
META_FORM = "dcnconvert.sample.form"
META_DIMS = "dcnconvert.sample.dims"

_MODULATED, _DCNV1, _LOGITS = "modulated", "dcnv1", "logits"

# form -> (op_type, domain, domain opset, default ONNX opset, mask kind, has bias input,
#          group allowed, square only)
_SPEC: dict[str, tuple] = {
    "mmcv.MMCVModulatedDeformConv2d": ("MMCVModulatedDeformConv2d", "mmcv", 1, 11, _MODULATED, True, True,
                                       False),
    "mmdeploy.MMCVModulatedDeformConv2d": ("MMCVModulatedDeformConv2d", "mmdeploy", 1, 11, _MODULATED, True,
                                           True, False),
    "mmcv-legacy.MMCVModulatedDeformConv2d": ("MMCVModulatedDeformConv2d", "", 0, 11, _MODULATED, True, True,
                                              False),
    "mmcv.MMCVDeformConv2d": ("MMCVDeformConv2d", "mmcv", 1, 11, _DCNV1, False, True, False),
    "mmdeploy.MMCVDeformConv2d": ("MMCVDeformConv2d", "mmdeploy", 1, 11, _DCNV1, False, True, False),
    "mmcv-legacy.MMCVDeformConv2d": ("MMCVDeformConv2d", "", 0, 11, _DCNV1, False, True, False),
    "onnx.DeformConv": ("DeformConv", "", 0, 19, _MODULATED, True, True, False),
    "onnx.DeformConv.swapped": ("DeformConv", "", 0, 19, _MODULATED, True, True, False),
    "paddle2onnx.DeformConv": ("DeformConv", "", 0, 19, _MODULATED, True, True, False),
    "nonstandard.DeformConv": ("DeformConv", "", 0, 17, _DCNV1, True, True, False),
    "openvino.DeformableConv2D": ("DeformableConv2D", "org.openvinotoolkit", 1, 11, _DCNV1, False, True,
                                  False),
    "tao.ModulatedDeformConv2d": ("ModulatedDeformConv2d", "", 0, 17, _MODULATED, True, True, False),
    "dcnconvert.ModulatedDeformConv2d": (schema.PLUGIN_NAME, schema.PLUGIN_DOMAIN,
                                         schema.PLUGIN_DOMAIN_VERSION, 17, _MODULATED, True, True, False),
    "centernet.DCNv2": ("DCNv2", "", 0, 9, _MODULATED, True, True, True),
    "dcnv2_latest.DCNv2_2": ("DCNv2_2", "", 0, 11, _MODULATED, True, False, False),
    "bevformer.ModulatedDeformableConv2dTRT": ("ModulatedDeformableConv2dTRT", "", 0, 13, _MODULATED, True,
                                               True, False),
    "bevformer.ModulatedDeformableConv2dTRT2": ("ModulatedDeformableConv2dTRT2", "", 0, 13, _MODULATED, True,
                                                True, False),
    "tensorrt_pro.Plugin.DCNv2": ("Plugin", "", 0, 11, _LOGITS, True, False, False),
    "eweill.DCNv2_TRT": ("DCNv2_TRT", "", 0, 11, _LOGITS, True, False, False),
    "paddle-legacy.deformable_conv": ("deformable_conv", "custom", 1, 11, _MODULATED, False, True, False),
}

#: Forms whose node takes ONNX-style 4-value begin/end ``pads`` (``build(..., pads=...)``).
PADS_FORMS = ("onnx.DeformConv", "onnx.DeformConv.swapped", "paddle2onnx.DeformConv")


def _pair(value, name: str) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f"{name} must be an int or a pair, got {value}")
    return value  # type: ignore[return-value]


def _params(form: str, n=1, c=4, h=7, w=9, cout=6, kernel=(3, 3), stride=(1, 1), padding=(1, 1),
            dilation=(1, 1), group=1, deformable_group=1, bias=None, seed=0, dynamic=False, opset=None,
            pads=None) -> dict:
    """Check a parameter combination for ``form``; return the normalised parameters."""
    if form not in _SPEC:
        raise ValueError(f"unknown form {form!r}; known: {', '.join(FORMS)}")
    op, domain, dver, default_opset, kind, has_bias, group_ok, square_only = _SPEC[form]
    kh, kw = _pair(kernel, "kernel")
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    padding = _pair(padding, "padding")
    if pads is not None:
        if form not in PADS_FORMS:
            raise ValueError(f"{form} has no 4-value begin/end pads; pads= is for {', '.join(PADS_FORMS)}")
        pads = tuple(int(v) for v in pads)
        if len(pads) != 4:
            raise ValueError("pads must be (h_begin, w_begin, h_end, w_end)")
    else:
        pads = (padding[0], padding[1], padding[0], padding[1])
    if bias is None:
        bias = has_bias
    if bias and not has_bias:
        raise ValueError(f"{form} has no bias input")
    if group != 1 and not group_ok:
        raise ValueError(f"{form} cannot express group = {group} (group 1 only)")
    square = stride[0] == stride[1] and padding[0] == padding[1] and dilation[0] == dilation[1]
    if square_only and not square:
        raise ValueError(f"{form} has scalar attributes: square stride/padding/dilation only")
    for name, value in (("c", c), ("cout", cout), ("n", n), ("h", h), ("w", w), ("group", group),
                        ("deformable_group", deformable_group), ("kh", kh), ("kw", kw)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if c % group or cout % group:
        raise ValueError(f"group {group} must divide c = {c} and cout = {cout}")
    if c % deformable_group:
        raise ValueError(f"deformable_group {deformable_group} must divide c = {c}")
    if min(stride) < 1 or min(dilation) < 1 or min(pads) < 0:
        raise ValueError("stride and dilation must be >= 1 and padding >= 0")
    oh = (h + pads[0] + pads[2] - (dilation[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (w + pads[1] + pads[3] - (dilation[1] * (kw - 1) + 1)) // stride[1] + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"output would be {oh}x{ow}")
    opset = default_opset if opset is None else int(opset)
    if op == "DeformConv" and form != "nonstandard.DeformConv" and opset < 19:
        raise ValueError("DeformConv needs opset >= 19")
    if kind == _DCNV1 and dynamic and opset < 9:
        raise ValueError("dynamic DCNv1 models need opset >= 9")
    return dict(form=form, op=op, domain=domain, dver=dver, opset=opset, kind=kind, n=n, c=c, h=h, w=w,
                cout=cout, kh=kh, kw=kw, stride=stride, padding=padding, dilation=dilation, pads=pads,
                group=group, dg=deformable_group, bias=bool(bias), seed=seed, dynamic=dynamic, oh=oh, ow=ow)


def _has_info(stride, padding, dilation, dg) -> bool:
    return (stride, padding, dilation, dg) != ((1, 1), (1, 1), (1, 1), 1)


def supports(form: str, **kwargs) -> bool:
    """Whether :func:`build` can make ``form`` with these keyword arguments."""
    try:
        _params(form, **kwargs)
    except ValueError:
        return False
    return True


def _attrs(p: dict) -> dict[str, object]:
    """The node attributes of ``p['form']``."""
    form, g, dg = p["form"], p["group"], p["dg"]
    s, pd, d = list(p["stride"]), list(p["padding"]), list(p["dilation"])
    if form.endswith("MMCVModulatedDeformConv2d") or form.startswith("bevformer."):
        return {"stride": s, "padding": pd, "dilation": d, "groups": g, "deform_groups": dg}
    if form == "mmcv.MMCVDeformConv2d":
        return {"stride": s, "padding": pd, "dilation": d, "groups": g, "deform_groups": dg, "bias": 0,
                "im2col_step": 32}
    if form == "mmcv-legacy.MMCVDeformConv2d":
        return {"stride": s, "padding": pd, "dilation": d, "groups": g, "deform_groups": dg, "bias": 0}
    if form == "mmdeploy.MMCVDeformConv2d":
        return {"stride": s, "padding": [pd[0], pd[0], pd[1], pd[1]], "dilation": d, "groups": g,
                "deform_groups": dg}
    if form in ("onnx.DeformConv", "onnx.DeformConv.swapped"):
        return {"dilations": d, "group": g, "offset_group": dg, "pads": list(p["pads"]), "strides": s}
    if form == "paddle2onnx.DeformConv":
        return {"dilations": d, "group": g, "pads": list(p["pads"]), "strides": s}
    if form == "nonstandard.DeformConv":
        return {"stride": s, "padding": pd, "dilation": d, "groups": g, "offset_groups": dg}
    if form == "openvino.DeformableConv2D":
        return {"strides": s, "pads": [pd[0], pd[0], pd[1], pd[1]], "dilations": d, "groups": g,
                "deformable_groups": dg, "kernel_shape": [p["kh"], p["kw"]]}
    if form == "tao.ModulatedDeformConv2d":
        return {"stride": s, "padding": pd, "dilation": d, "group": g, "deformable_group": dg}
    if form == "dcnconvert.ModulatedDeformConv2d":
        return DcnAttrs(tuple(s), tuple(pd), tuple(d), g, dg).node_attrs(schema.TARGET_DCNCONVERT)
    if form == "centernet.DCNv2":
        return {"stride": s[0], "padding": pd[0], "dilation": d[0], "groups": g, "deformable_group": dg}
    if form == "dcnv2_latest.DCNv2_2":
        return {"stride": s, "padding": pd, "dilation": d, "deformable_groups": dg}
    if form == "tensorrt_pro.Plugin.DCNv2":
        info = ""
        if _has_info(p["stride"], p["padding"], p["dilation"], dg):
            info = json.dumps({"stride": s, "padding": pd, "dilation": d, "deformable_groups": dg},
                              sort_keys=True)
        return {"name": "DCNv2", "info": info}
    if form == "eweill.DCNv2_TRT":
        return {"dilation": d, "padding": pd, "stride": s, "deformable_groups": dg, "name": "DCNv2"}
    if form == "paddle-legacy.deformable_conv":
        return {"stride": s, "padding": pd, "dilation": d, "groups": g, "deformable_groups": dg,
                "im2col_step": 1}
    raise AssertionError(form)  # pragma: no cover


def build(
    form: str,
    *,
    n: int = 1,
    c: int = 4,
    h: int = 7,
    w: int = 9,
    cout: int = 6,
    kernel: Sequence[int] = (3, 3),
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (1, 1),
    dilation: Sequence[int] = (1, 1),
    group: int = 1,
    deformable_group: int = 1,
    bias: bool | None = None,
    seed: int = 0,
    dynamic: bool = False,
    opset: int | None = None,
    pads: Sequence[int] | None = None,
) -> onnx.ModelProto:
    """A model with one deformable convolution in ``form`` (see the module docstring for inputs).

    Args:
        form: one of :data:`FORMS`.
        n, c, h, w: input shape; cout: output channels.
        kernel, stride, padding, dilation: (h, w) pairs (ints allowed).
        group, deformable_group: groups.
        bias: with a bias input; None (default) = with bias where the form has one.
        seed: seed of the weights (``numpy.random.default_rng``).
        dynamic: symbolic batch and spatial dims.
        opset: default-domain opset (the form's usual one when None; 19 or 22 for ``DeformConv``).
        pads: (h_begin, w_begin, h_end, w_end) for the forms in :data:`PADS_FORMS` (overrides padding).

    Raises:
        ValueError: the form cannot express this combination (see :func:`supports`).
    """
    p = _params(form, n=n, c=c, h=h, w=w, cout=cout, kernel=kernel, stride=stride, padding=padding,
                dilation=dilation, group=group, deformable_group=deformable_group, bias=bias, seed=seed,
                dynamic=dynamic, opset=opset, pads=pads)
    rng = np.random.default_rng(seed)
    k = p["kh"] * p["kw"]
    dg = p["dg"]
    weight_shape = (p["cout"], p["c"] // p["group"], p["kh"], p["kw"])
    weight = (rng.standard_normal(weight_shape) * 0.5).astype(np.float32)
    bias_values = rng.standard_normal(p["cout"]).astype(np.float32)
    if form == "paddle2onnx.DeformConv" and not p["bias"]:
        bias_values = np.zeros(p["cout"], np.float32)  # Paddle2ONNX always feeds a (zero) bias Constant

    io_dims = ("N", "H", "W", "OH", "OW") if dynamic else (p["n"], p["h"], p["w"], p["oh"], p["ow"])
    nn_, hh, ww, oh, ow = io_dims
    F = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", F, [nn_, p["c"], hh, ww])
    y = helper.make_tensor_value_info("y", F, [nn_, p["cout"], oh, ow])
    inputs = [x]
    if p["kind"] == _LOGITS:
        inputs.append(helper.make_tensor_value_info("offset_mask", F, [nn_, 3 * dg * k, oh, ow]))
    else:
        inputs.append(helper.make_tensor_value_info("offset", F, [nn_, 2 * dg * k, oh, ow]))
        if p["kind"] == _MODULATED:
            inputs.append(helper.make_tensor_value_info("mask", F, [nn_, dg * k, oh, ow]))
    initializers = [numpy_helper.from_array(weight, "weight")]
    nodes = []
    with_bias = p["bias"] or form == "paddle2onnx.DeformConv"
    if with_bias and form != "paddle2onnx.DeformConv":
        initializers.append(numpy_helper.from_array(bias_values, "bias"))
    if form == "paddle2onnx.DeformConv":
        nodes.append(helper.make_node("Constant", [], ["bias"], name="p2o.Constant.0",
                                      value=numpy_helper.from_array(bias_values, "bias_value")))
    b = ["bias"] if with_bias else []
    if form in ("onnx.DeformConv", "paddle2onnx.DeformConv"):
        node_inputs = ["x", "weight", "offset", b[0] if b else "", "mask"]
    elif form == "onnx.DeformConv.swapped":
        node_inputs = ["x", "weight", "offset", "mask"] + b
    elif p["kind"] == _LOGITS:
        node_inputs = ["x", "offset_mask", "weight"] + b
    elif p["kind"] == _DCNV1:
        node_inputs = ["x", "offset", "weight"] + b
    elif form == "paddle-legacy.deformable_conv":
        node_inputs = ["x", "weight", "mask", "offset"]
    else:
        node_inputs = ["x", "offset", "mask", "weight"] + b
    name = "p2o.DeformConv.0" if form == "paddle2onnx.DeformConv" else "dcn0"
    node = helper.make_node(p["op"], node_inputs, ["y"], name=name, domain=p["domain"] or None)
    node.attribute.extend(helper.make_attribute(key, value) for key, value in _attrs(p).items())
    nodes.append(node)
    if form == "tao.ModulatedDeformConv2d":  # keep_initializers_as_inputs=True
        inputs.append(helper.make_tensor_value_info("weight", F, list(weight.shape)))
    graph = helper.make_graph(nodes, f"dcn_{form}", inputs, [y], initializers)
    opsets = [helper.make_opsetid("", p["opset"])]
    if p["domain"]:
        opsets.append(helper.make_opsetid(p["domain"], p["dver"]))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="dcnconvert.samples",
                              producer_version="1")
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    dims = {"N": p["n"], "H": p["h"], "W": p["w"], "OH": p["oh"], "OW": p["ow"]}
    for key, value in ((META_FORM, form), (META_DIMS, json.dumps(dims, sort_keys=True))):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return model


def sample_dims(model: onnx.ModelProto) -> dict[str, int]:
    """The symbolic-dim sizes stored by :func:`build` (empty for other models)."""
    for entry in model.metadata_props:
        if entry.key == META_DIMS:
            return {k: int(v) for k, v in json.loads(entry.value).items()}
    return {}


def shape_args(path) -> list[str]:
    """``--shapes`` options for every dynamic input of the model at ``path``: the dims stored by
    :func:`build`, batch 2 where it is free, 16 for any other unknown dim."""
    from dcnconvert.backend.trt import profiles

    model = onnx.load(str(path), load_external_data=False)
    sizes = {"N": 2, "batch": 2, **{k: v for k, v in sample_dims(model).items() if k != "N"}}
    args = []
    for info in profiles.model_inputs(model):
        if info.is_dynamic:
            dims = [d if isinstance(d, int) and d >= 0 else sizes.get(d, 16) for d in info.dims]
            args += ["--shapes", f"{info.name}:{'x'.join(map(str, dims))}"]
    return args


def input_feeds(
    model: onnx.ModelProto, seed: int = 0, *, dims: dict[str, int] | None = None
) -> dict[str, np.ndarray]:
    """Random inputs for every graph input that is not an initializer.

    ``offset`` ~ N(0, 2) (so some samples leave the image), ``mask`` uniform in (0, 1),
    ``offset_mask`` offsets ~ N(0, 2) then logits ~ N(0, 1), anything else ~ N(0, 1).

    Args:
        model: the model.
        seed: seed of ``numpy.random.default_rng``.
        dims: sizes of symbolic dims (default: those stored by :func:`build`); e.g. ``{"N": 3}``.
    """
    sizes = {**sample_dims(model), **(dims or {})}
    initializers = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        ttype = vi.type.tensor_type
        shape = []
        for d in ttype.shape.dim:
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            elif d.dim_param in sizes:
                shape.append(sizes[d.dim_param])
            else:
                raise ValueError(f"input {vi.name!r}: size of dim {d.dim_param or '?'} unknown; pass dims=")
        dtype = helper.tensor_dtype_to_np_dtype(ttype.elem_type)
        if vi.name == "offset":
            value = rng.standard_normal(shape) * 2.0
        elif vi.name == "mask":
            value = np.clip(rng.uniform(0.0, 1.0, shape), 1e-3, 1 - 1e-3)
        elif vi.name == "offset_mask":
            value = rng.standard_normal(shape)
            value[:, : shape[1] * 2 // 3] *= 2.0
        else:
            value = rng.standard_normal(shape)
        feeds[vi.name] = value.astype(dtype)
    return feeds


def random_initializer(
    rng: np.random.Generator, name: str, shape: Sequence[int], scale: float = 0.3
) -> onnx.TensorProto:
    """An FP32 initializer ``name`` of N(0, scale^2) values."""
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
