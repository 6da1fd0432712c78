"""The single source of truth for the plugin node that dcnconvert writes.

Everything that names the plugin (op type, version, namespace, ONNX domain, attribute names) is
defined here once. The C++ creator in ``plugin_src/trt`` declares the same values; a contract test
(``tests/test_plugin_contract.py``) reads them out of the C++ source and compares.
"""

from __future__ import annotations

from dataclasses import dataclass

from dcnconvert.errors import UsageError

#: op_type of every rewritten node; also the plugin (creator) name.
PLUGIN_NAME = "ModulatedDeformConv2d"

#: Version of our bundled plugin's creator.
PLUGIN_VERSION = "1"

#: Plugin namespace of our bundled plugin, so it never collides with TensorRT's built-in
#: ``ModulatedDeformConv2d`` (registered in the empty namespace by libnvinfer_plugin).
PLUGIN_NAMESPACE = "dcnconvert"

#: ONNX domain of rewritten nodes. TensorRT's parser ignores the domain; ``onnx.checker`` needs a
#: non-default one for an op it does not know.
PLUGIN_DOMAIN = "dcnconvert"
PLUGIN_DOMAIN_VERSION = 1

#: Node attribute names. INT/INTS attributes become the plugin's int32 fields (the ONNX parser
#: passes only the names that the creator lists in ``getFieldNames``).
ATTR_STRIDE = "stride"
ATTR_PADDING = "padding"
ATTR_DILATION = "dilation"
ATTR_GROUP = "group"
ATTR_DEFORMABLE_GROUP = "deformable_group"
#: Optional INT attribute of our plugin (``dcnconvert`` target only): 1 lets FLOAT32 layers use TF32
#: tensor-core math (operands rounded to a 10-bit mantissa, FP32 accumulation); 0 or absent keeps
#: FP32-accurate math. FLOAT16/BFLOAT16 layers ignore it. The rewrite writes it only when asked
#: (``rewrite --allow-tf32``, ``convert/build --tf32``), so other rewritten models do not change.
ATTR_ALLOW_TF32 = "allow_tf32"
#: Constant weight and bias carried by the node itself (``dcnconvert`` target only): TENSOR
#: attributes, which TensorRT's ONNX parser hands to the creator as fields of the tensor's element
#: type, so the plugin prepares them once when it is created (and serialises them into the engine:
#: an engine is self-contained, but TensorRT's refitter cannot change these weights). ``weight`` is
#: OIHW ``[Cout, C/group, kh, kw]`` and comes with ``weight_shape`` (INTS, the same 4 dims); ``bias``
#: (``[Cout]``) is optional and only allowed with ``weight``. A node with ``weight`` has exactly the
#: inputs ``x, offset, mask``; a node without it takes ``x, offset, mask, weight[, bias]``.
ATTR_WEIGHT = "weight"
ATTR_WEIGHT_SHAPE = "weight_shape"
ATTR_BIAS = "bias"
#: STRING attributes read by the ONNX parser to choose the creator.
ATTR_PLUGIN_VERSION = "plugin_version"
ATTR_PLUGIN_NAMESPACE = "plugin_namespace"

#: The required plugin fields, in the order the creator declares them, with their length. Every
#: rewritten node carries them.
PLUGIN_FIELDS: tuple[tuple[str, int], ...] = (
    (ATTR_STRIDE, 2),
    (ATTR_PADDING, 2),
    (ATTR_DILATION, 2),
    (ATTR_GROUP, 1),
    (ATTR_DEFORMABLE_GROUP, 1),
)

#: The optional fields of our plugin, declared by the creator after the required ones: name, length
#: and the value that applies when the node does not carry the attribute.
OPTIONAL_PLUGIN_FIELDS: tuple[tuple[str, int, int], ...] = ((ATTR_ALLOW_TF32, 1, 0),)

#: The optional fields of embedded weights, declared by the creator after
#: :data:`OPTIONAL_PLUGIN_FIELDS`: name, the ``nvinfer1::PluginFieldType`` the creator declares
#: (``k`` + this), and the length (-1: variable; ``weight`` holds ``prod(weight_shape)`` values,
#: ``bias`` ``weight_shape[0]``). The creator accepts FLOAT32, FLOAT16 and BF16 data for the two
#: tensors (:data:`WEIGHT_DTYPES`), whatever the type declared here.
WEIGHT_FIELDS: tuple[tuple[str, str, int], ...] = (
    (ATTR_WEIGHT, "FLOAT32", -1),
    (ATTR_WEIGHT_SHAPE, "INT32", 4),
    (ATTR_BIAS, "FLOAT32", -1),
)

#: ONNX element types (``TensorProto.DataType`` values FLOAT, FLOAT16, BFLOAT16) an embedded weight or
#: bias may have; the plugin converts it to the layer's type when it prepares it.
WEIGHT_DTYPES: dict[int, str] = {1: "FLOAT", 10: "FLOAT16", 16: "BFLOAT16"}

#: Quantized nodes (``dcnconvert`` target, embedded weights only). ``quant_type`` (STRING) names the
#: type of x and of the weights: x arrives quantized (the QuantizeLinear in front of the node stays in
#: the graph) with the per-tensor scale ``x_scale`` (FLOAT); ``weight`` holds the quantized values
#: (:data:`QUANT_WEIGHT_DTYPES`) and ``weight_scale`` (FLOAT tensor) one scale per output channel.
#: With ``output_scale`` (FLOAT) the output is quantized to the same type; without it the output has
#: the offset's float type. Offset, mask and bias are never quantized. The kernels round each
#: modulated sample to the quantized type before the product (plugin_src/core/dcnParams.h).
ATTR_QUANT_TYPE = "quant_type"
ATTR_X_SCALE = "x_scale"
ATTR_WEIGHT_SCALE = "weight_scale"
ATTR_OUTPUT_SCALE = "output_scale"

#: ``quant_type`` values and the core's ``DcnQuant`` code of each.
QUANT_TYPES: dict[str, int] = {"int8": 1, "fp8e4m3": 2}

#: The ONNX element type (``TensorProto.DataType``) of a quantized node's ``weight`` tensor per
#: ``quant_type``: INT8 as INT8; FP8 E4M3 values as FLOAT16, which holds each of them exactly (the
#: ONNX parser passes no FP8 or UINT8 tensor as a plugin field).
QUANT_WEIGHT_DTYPES: dict[str, int] = {"int8": 3, "fp8e4m3": 10}

#: The optional quantization fields, declared by the creator after :data:`WEIGHT_FIELDS`: name, the
#: ``nvinfer1::PluginFieldType`` (``k`` + this) and the length (-1: variable; ``quant_type`` is a
#: NUL-terminated string, ``weight_scale`` holds ``weight_shape[0]`` values).
QUANT_FIELDS: tuple[tuple[str, str, int], ...] = (
    (ATTR_QUANT_TYPE, "CHAR", -1),
    (ATTR_X_SCALE, "FLOAT32", 1),
    (ATTR_WEIGHT_SCALE, "FLOAT32", -1),
    (ATTR_OUTPUT_SCALE, "FLOAT32", 1),
)

#: Plugin input order.
INPUT_NAMES: tuple[str, ...] = ("x", "offset", "mask", "weight", "bias")
#: The inputs of a node whose weight (and bias) are embedded attributes.
EMBEDDED_INPUT_NAMES: tuple[str, ...] = INPUT_NAMES[:3]


@dataclass(frozen=True)
class Target:
    """Where a rewritten node is meant to run.

    Attributes:
        name: the ``--target`` value.
        plugin_version: value of the node's ``plugin_version`` attribute.
        plugin_namespace: value of the node's ``plugin_namespace`` attribute.
        square_only: refuse non-square stride/padding/dilation (TensorRT's built-in plugin applies
            element 0 of each pair to the width axis).
        needs_plugin_library: whether our bundled library must be loaded to build an engine.
        has_allow_tf32: whether the plugin has the optional ``allow_tf32`` field (TensorRT's
            built-in plugin has none).
        has_embedded_weights: whether the plugin takes a constant weight and bias as fields
            (:data:`WEIGHT_FIELDS`) instead of inputs (TensorRT's built-in plugin needs inputs).
    """

    name: str
    plugin_version: str
    plugin_namespace: str
    square_only: bool
    needs_plugin_library: bool
    has_allow_tf32: bool = False
    has_embedded_weights: bool = False


TARGET_DCNCONVERT = Target("dcnconvert", PLUGIN_VERSION, PLUGIN_NAMESPACE, square_only=False,
                           needs_plugin_library=True, has_allow_tf32=True, has_embedded_weights=True)
TARGET_TRT_BUILTIN = Target("trt-builtin", "2", "", square_only=True, needs_plugin_library=False,
                            has_allow_tf32=False, has_embedded_weights=False)

#: ``--weights`` values: ``embed`` puts constant weights into the plugin node, ``input`` keeps them
#: as node inputs.
WEIGHTS_MODES: tuple[str, ...] = ("embed", "input")

TARGETS: dict[str, Target] = {t.name: t for t in (TARGET_DCNCONVERT, TARGET_TRT_BUILTIN)}
DEFAULT_TARGET = TARGET_DCNCONVERT.name


def target_of_node_attrs(attrs: dict[str, object]) -> Target | None:
    """Return the target a plugin node's ``plugin_version``/``plugin_namespace`` attributes select."""
    version = attrs.get(ATTR_PLUGIN_VERSION, "1")
    namespace = attrs.get(ATTR_PLUGIN_NAMESPACE, "")
    for target in TARGETS.values():
        if (target.plugin_version, target.plugin_namespace) == (version, namespace):
            return target
    return None


@dataclass(frozen=True)
class DcnAttrs:
    """Canonical attributes of one deformable convolution, pairs in ``(h, w)`` order.

    ``allow_tf32`` is not part of the convolution's meaning: it is our plugin's opt-in to TF32 math
    for FLOAT32 tensors (:data:`ATTR_ALLOW_TF32`); every other form reads as False.
    """

    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    group: int = 1
    deformable_group: int = 1
    allow_tf32: bool = False

    @property
    def is_square(self) -> bool:
        return all(p[0] == p[1] for p in (self.stride, self.padding, self.dilation))

    def node_attrs(self, target: Target) -> dict[str, object]:
        """The plugin node's attributes for ``target`` (python ints/lists/strs, as onnx.helper types them).

        ``allow_tf32`` is written (as INT 1, after the required fields) only when it is True, so a
        node that does not ask for TF32 is exactly what it was before the field existed.

        Raises:
            UsageError: ``allow_tf32`` is True and ``target``'s plugin has no such field.
        """
        attrs: dict[str, object] = {
            ATTR_STRIDE: [int(v) for v in self.stride],
            ATTR_PADDING: [int(v) for v in self.padding],
            ATTR_DILATION: [int(v) for v in self.dilation],
            ATTR_GROUP: int(self.group),
            ATTR_DEFORMABLE_GROUP: int(self.deformable_group),
        }
        if self.allow_tf32:
            if not target.has_allow_tf32:
                raise tf32_target_error(target, ATTR_ALLOW_TF32)
            attrs[ATTR_ALLOW_TF32] = 1
        attrs[ATTR_PLUGIN_VERSION] = target.plugin_version
        attrs[ATTR_PLUGIN_NAMESPACE] = target.plugin_namespace
        return attrs

    def output_hw(self, h: int, w: int, kh: int, kw: int) -> tuple[int, int]:
        """Output spatial size for an ``h x w`` input and a ``kh x kw`` kernel."""
        sh, sw = self.stride
        ph, pw = self.padding
        dh, dw = self.dilation
        ho = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
        wo = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
        return ho, wo


def tf32_target_error(target: Target, option: str) -> UsageError:
    """The usage error for asking ``target`` for TF32 math through ``option``.

    Args:
        target: a target whose plugin has no ``allow_tf32`` field.
        option: how the user asked (``--allow-tf32``, or the attribute name for library callers).
    """
    usable = next(t.name for t in TARGETS.values() if t.has_allow_tf32)
    flag = "--target " if option.startswith("--") else "target "
    return UsageError(
        f"{option} asks for TF32 math in the DCN plugin, but {flag}{target.name} (plugin version "
        f"'{target.plugin_version}', namespace '{target.plugin_namespace}') has no {ATTR_ALLOW_TF32} field",
        hint=f"use {flag}{usable} (our bundled plugin) for TF32, or drop {option}",
    )


def weights_target_error(target: Target, option: str) -> UsageError:
    """The usage error for asking ``target`` to embed the weights through ``option``.

    Args:
        target: a target whose plugin takes the weight as an input only.
        option: how the user asked (``--weights embed``, or ``weights='embed'`` for library callers).
    """
    usable = next(t.name for t in TARGETS.values() if t.has_embedded_weights)
    flag = "--target " if option.startswith("--") else "target="
    other = "--weights input" if option.startswith("--") else "weights='input'"
    return UsageError(
        f"{option} puts the weight and bias into the plugin node, but {flag}{target.name} (plugin version "
        f"'{target.plugin_version}', namespace '{target.plugin_namespace}') takes them as inputs only",
        hint=f"use {flag}{usable} (our bundled plugin) to embed them, or {other} (or leave it out) "
        f"for {target.name}",
    )


def resolve_weights(weights: str | None, target: Target, option: str = "--weights") -> bool:
    """Whether to embed constant weights, for a ``--weights`` value (None: the target's default).

    Raises:
        UsageError: an unknown value, or ``embed`` for a target that takes weights as inputs only.
    """
    if weights is None:
        return target.has_embedded_weights
    if weights not in WEIGHTS_MODES:
        raise UsageError(f"{option} {weights!r} is not one of {', '.join(WEIGHTS_MODES)}",
                         hint="embed: constant weights in the plugin node; input: weights as node inputs")
    if weights == "embed" and not target.has_embedded_weights:
        shown = f"{option} embed" if option.startswith("--") else f"{option}='embed'"
        raise weights_target_error(target, shown)
    return weights == "embed"


def is_plugin_node(node: object) -> bool:
    """Whether an ONNX node (``onnx.NodeProto`` or anything with ``op_type``/``domain``) is our plugin node.

    TAO's ``ModulatedDeformConv2d`` in the default domain is a source form, not a plugin node.
    """
    return getattr(node, "op_type", None) == PLUGIN_NAME and getattr(node, "domain", None) == PLUGIN_DOMAIN
