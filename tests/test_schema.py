"""schema: the plugin node's attributes per target, the optional allow_tf32 field, target lookup."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dcnconvert import schema
from dcnconvert.errors import EXIT_USAGE, UsageError

ATTRS = schema.DcnAttrs(stride=(2, 1), padding=(1, 0), dilation=(1, 3), group=2, deformable_group=4)


class TestNodeAttrs:
    @pytest.mark.parametrize("target", list(schema.TARGETS.values()), ids=list(schema.TARGETS))
    def test_default_has_exactly_the_required_fields(self, target: schema.Target) -> None:
        attrs = ATTRS.node_attrs(target)
        assert list(attrs) == [name for name, _ in schema.PLUGIN_FIELDS] + [
            schema.ATTR_PLUGIN_VERSION,
            schema.ATTR_PLUGIN_NAMESPACE,
        ]
        assert attrs["stride"] == [2, 1] and attrs["padding"] == [1, 0] and attrs["dilation"] == [1, 3]
        assert attrs["group"] == 2 and attrs["deformable_group"] == 4
        assert attrs["plugin_version"] == target.plugin_version
        assert attrs["plugin_namespace"] == target.plugin_namespace

    def test_allow_tf32_for_dcnconvert(self) -> None:
        tf32 = replace(ATTRS, allow_tf32=True)
        attrs = tf32.node_attrs(schema.TARGET_DCNCONVERT)
        assert list(attrs) == [
            "stride",
            "padding",
            "dilation",
            "group",
            "deformable_group",
            "allow_tf32",
            "plugin_version",
            "plugin_namespace",
        ]
        assert attrs["allow_tf32"] == 1 and type(attrs["allow_tf32"]) is int  # an INT attribute
        without = dict(attrs)
        del without["allow_tf32"]
        assert without == ATTRS.node_attrs(schema.TARGET_DCNCONVERT)

    def test_allow_tf32_for_trt_builtin_is_a_usage_error(self) -> None:
        tf32 = schema.DcnAttrs(allow_tf32=True)
        with pytest.raises(UsageError) as info:
            tf32.node_attrs(schema.TARGET_TRT_BUILTIN)
        assert info.value.exit_code == EXIT_USAGE
        assert "target trt-builtin" in str(info.value) and "has no allow_tf32 field" in str(info.value)
        assert "target dcnconvert" in info.value.hint

    def test_allow_tf32_is_not_part_of_the_geometry(self) -> None:
        assert schema.DcnAttrs().allow_tf32 is False
        tf32 = replace(ATTRS, allow_tf32=True)
        assert tf32 != ATTRS and tf32.output_hw(9, 8, 3, 3) == ATTRS.output_hw(9, 8, 3, 3)
        assert tf32.is_square == ATTRS.is_square


class TestFields:
    def test_optional_fields(self) -> None:
        """allow_tf32: INT x1, default 0, a name of its own (not a required field, not a STRING attribute)."""
        assert schema.OPTIONAL_PLUGIN_FIELDS == ((schema.ATTR_ALLOW_TF32, 1, 0),)
        assert schema.ATTR_ALLOW_TF32 == "allow_tf32"
        required = {name for name, _ in schema.PLUGIN_FIELDS}
        strings = {schema.ATTR_PLUGIN_VERSION, schema.ATTR_PLUGIN_NAMESPACE}
        for name, length, default in schema.OPTIONAL_PLUGIN_FIELDS:
            assert name not in required | strings and length == 1 and default == 0

    def test_only_our_plugin_has_allow_tf32(self) -> None:
        assert {t.name for t in schema.TARGETS.values() if t.has_allow_tf32} == {"dcnconvert"}
        assert schema.TARGETS[schema.DEFAULT_TARGET].has_allow_tf32

    @pytest.mark.parametrize(
        ("option", "expect_message", "expect_hint"),
        [
            ("--allow-tf32", "--allow-tf32 asks for TF32 math", "use --target dcnconvert"),
            ("allow_tf32=True", "but target trt-builtin", "use target dcnconvert"),
        ],
    )
    def test_tf32_target_error_names_the_option_and_the_fix(
        self, option: str, expect_message: str, expect_hint: str
    ) -> None:
        error = schema.tf32_target_error(schema.TARGET_TRT_BUILTIN, option)
        assert isinstance(error, UsageError)
        assert expect_message in str(error) and "plugin version '2'" in str(error)
        assert expect_hint in error.hint and f"drop {option}" in error.hint


class TestTargets:
    @pytest.mark.parametrize("target", list(schema.TARGETS.values()), ids=list(schema.TARGETS))
    def test_node_attrs_select_their_target(self, target: schema.Target) -> None:
        assert schema.target_of_node_attrs(ATTRS.node_attrs(target)) is target

    def test_unknown_pair_selects_nothing(self) -> None:
        attrs = {schema.ATTR_PLUGIN_VERSION: "7", schema.ATTR_PLUGIN_NAMESPACE: "other"}
        assert schema.target_of_node_attrs(attrs) is None


class TestEmbeddedWeights:
    def test_fields_and_inputs(self) -> None:
        assert schema.WEIGHT_FIELDS == (("weight", "FLOAT32", -1), ("weight_shape", "INT32", 4),
                                        ("bias", "FLOAT32", -1))
        names = (schema.ATTR_WEIGHT, schema.ATTR_WEIGHT_SHAPE, schema.ATTR_BIAS)
        assert names == ("weight", "weight_shape", "bias")
        assert schema.EMBEDDED_INPUT_NAMES == ("x", "offset", "mask") == schema.INPUT_NAMES[:3]
        assert set(schema.WEIGHT_DTYPES.values()) == {"FLOAT", "FLOAT16", "BFLOAT16"}
        names = {f for f, _ in schema.PLUGIN_FIELDS} | {f for f, _, _ in schema.OPTIONAL_PLUGIN_FIELDS}
        assert not names & {f for f, _, _ in schema.WEIGHT_FIELDS}

    def test_only_our_plugin_takes_them(self) -> None:
        assert {t.name for t in schema.TARGETS.values() if t.has_embedded_weights} == {"dcnconvert"}

    @pytest.mark.parametrize(("weights", "target", "expected"), [
        (None, schema.TARGET_DCNCONVERT, True), ("embed", schema.TARGET_DCNCONVERT, True),
        ("input", schema.TARGET_DCNCONVERT, False), (None, schema.TARGET_TRT_BUILTIN, False),
        ("input", schema.TARGET_TRT_BUILTIN, False)])
    def test_resolve_weights(self, weights, target, expected) -> None:
        assert schema.resolve_weights(weights, target) is expected

    def test_embed_for_trt_builtin_is_a_usage_error(self) -> None:
        with pytest.raises(UsageError) as info:
            schema.resolve_weights("embed", schema.TARGET_TRT_BUILTIN)
        assert info.value.exit_code == EXIT_USAGE
        assert str(info.value) == ("--weights embed puts the weight and bias into the plugin node, but "
                                   "--target trt-builtin (plugin version '2', namespace '') takes them as "
                                   "inputs only")
        assert info.value.hint == ("use --target dcnconvert (our bundled plugin) to embed them, or --weights "
                                   "input (or leave it out) for trt-builtin")
        library = schema.weights_target_error(schema.TARGET_TRT_BUILTIN, "weights='embed'")
        assert "but target=trt-builtin" in str(library) and "weights='input'" in library.hint

    def test_unknown_value(self) -> None:
        with pytest.raises(UsageError, match="--weights 'both' is not one of embed, input"):
            schema.resolve_weights("both", schema.TARGET_DCNCONVERT)
