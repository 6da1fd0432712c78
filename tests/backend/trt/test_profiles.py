"""Shape options -> optimization profiles (dcnconvert.backend.trt.profiles)."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from dcnconvert.backend.trt import profiles as shapes
from dcnconvert.backend.trt.profiles import InputInfo
from dcnconvert.errors import UsageError

X_DYN = InputInfo("x", ("N", 3, "H", "W"))
X_STATIC = InputInfo("x", (1, 3, 8, 8))
Y_DYN = InputInfo("y", (None, 4))


class TestParse:
    @pytest.mark.parametrize(
        "text, dims",
        [
            ("1x3x512x512", (1, 3, 512, 512)),
            ("[1,3,512,512]", (1, 3, 512, 512)),
            ("1,3,5,7", (1, 3, 5, 7)),
            ("[ 2, 3 ]", (2, 3)),
            ("", ()),
            ("[]", ()),
        ],
    )
    def test_dims(self, text, dims):
        assert shapes.parse_dims(text) == dims

    @pytest.mark.parametrize("text", ["1x3xHx4", "a", "1.5x2", "-1x3", "[1;2]"])
    def test_bad_dims(self, text):
        with pytest.raises(UsageError, match="cannot read the dimensions"):
            shapes.parse_dims(text)

    def test_values_and_profiles(self):
        got = shapes.parse_shape_values(
            ["x:1x3x8x8", "y:[2, 4]", "x:1x3x16x16 y:3x4", "input:0:1x2"], "--min-shapes"
        )
        assert got == [
            {"x": (1, 3, 8, 8), "y": (2, 4)},
            {"x": (1, 3, 16, 16), "y": (3, 4), "input:0": (1, 2)},
        ]

    @pytest.mark.parametrize("value", ["1x3x8x8", ":1x3"])
    def test_missing_name(self, value):
        with pytest.raises(UsageError, match="has no input name"):
            shapes.parse_shape_values([value], "--shapes")


class TestBuildProfiles:
    def test_static_model_needs_nothing(self):
        assert shapes.build_profiles([X_STATIC]) == []

    def test_static_shapes(self):
        (prof,) = shapes.build_profiles([X_DYN], shapes=["x:2x3x64x32"])
        assert prof.shapes == {"x": ((2, 3, 64, 32),) * 3}
        assert prof.to_dict() == {"x": {"min": [2, 3, 64, 32], "opt": [2, 3, 64, 32], "max": [2, 3, 64, 32]}}

    def test_ranges_opt_defaults_to_max(self):
        (prof,) = shapes.build_profiles([X_DYN], min_shapes=["x:1x3x32x32"], max_shapes=["x:4x3x128x128"])
        assert prof.shapes["x"] == ((1, 3, 32, 32), (4, 3, 128, 128), (4, 3, 128, 128))

    def test_two_profiles_plus_static_input(self):
        profs = shapes.build_profiles(
            [X_DYN, Y_DYN],
            shapes=["y:5x4"],
            min_shapes=["x:1x3x8x8", "x:1x3x64x64"],
            opt_shapes=["x:1x3x16x16", "x:2x3x64x64"],
            max_shapes=["x:1x3x32x32 x:4x3x128x128"],
        )
        assert len(profs) == 2
        assert profs[1].shapes["x"] == ((1, 3, 64, 64), (2, 3, 64, 64), (4, 3, 128, 128))
        assert all(p.shapes["y"] == ((5, 4),) * 3 for p in profs)

    def test_dynamic_without_shapes_lists_inputs(self):
        with pytest.raises(UsageError) as info:
            shapes.build_profiles([X_DYN, InputInfo("z", (1, 2)), Y_DYN])
        text = str(info.value)
        assert "x ['N',3,'H','W']" in text and "y [?,4]" in text and "z" not in text
        assert "--shapes 'x:Nx3xNxN y:Nx4'" in info.value.hint

    def test_dynamic_missing_in_second_profile(self):
        with pytest.raises(UsageError, match="profile 1: y"):
            shapes.build_profiles(
                [X_DYN, Y_DYN],
                min_shapes=["x:1x3x8x8 y:1x4", "x:1x3x8x8"],
                max_shapes=["x:1x3x8x8 y:1x4", "x:1x3x8x8"],
            )

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"shapes": ["q:1x2"]}, "no input named 'q'"),
            ({"shapes": ["x:1x3x8"]}, "rank 4"),
            ({"shapes": ["x:1x4x8x8"]}, "fixed dimension 3 at axis 1"),
            ({"shapes": ["x:1x3x8x8", "x:1x3x9x9"]}, "given more than once"),
            ({"min_shapes": ["x:1x3x8x8"]}, "--min-shapes was given without --max-shapes"),
            ({"max_shapes": ["x:1x3x8x8"]}, "--max-shapes was given without --min-shapes"),
            ({"opt_shapes": ["x:1x3x8x8"]}, "without --min-shapes"),
            ({"min_shapes": ["x:2x3x8x8"], "max_shapes": ["x:1x3x8x8"]}, "min <= opt <= max"),
            (
                {"min_shapes": ["x:1x3x8x8"], "opt_shapes": ["x:1x3x9x9"], "max_shapes": ["x:1x3x8x9"]},
                "min <= opt <= max",
            ),
            (
                {"min_shapes": ["x:1x3x8x8", "x:1x3x8x8"], "max_shapes": ["x:1x3x8x8"]},
                "describe 2, 1 and 1 profiles",
            ),
            (
                {"shapes": ["x:1x3x8x8"], "min_shapes": ["x:1x3x8x8"], "max_shapes": ["x:1x3x8x8"]},
                "both in --shapes",
            ),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(UsageError, match=message):
            shapes.build_profiles([X_DYN], **kwargs)

    def test_profile_names_must_agree(self):
        with pytest.raises(UsageError, match=r"--min-shapes names \['x', 'y'\]") as info:
            shapes.build_profiles([X_DYN, Y_DYN], min_shapes=["x:1x3x8x8 y:1x4"], max_shapes=["x:1x3x8x8"])
        assert "name the same inputs" in info.value.hint


class TestModelInputs:
    def test_reads_graph_inputs_without_initializers(self):
        graph = helper.make_graph(
            [helper.make_node("Add", ["a", "w"], ["b"])],
            "g",
            [
                helper.make_tensor_value_info("a", TensorProto.FLOAT16, ["batch", 3, -1]),
                helper.make_tensor_value_info("w", TensorProto.FLOAT16, [3]),
            ],
            [helper.make_tensor_value_info("b", TensorProto.FLOAT16, None)],
            [helper.make_tensor("w", TensorProto.FLOAT16, [3], [1, 2, 3])],
        )
        (info,) = shapes.model_inputs(helper.make_model(graph))
        assert info == InputInfo("a", ("batch", 3, None), TensorProto.FLOAT16)
        assert info.is_dynamic and info.static_shape is None


class TestConcreteShapes:
    def test_sources_in_order(self):
        profs = shapes.build_profiles(
            [X_DYN, Y_DYN],
            min_shapes=["x:1x3x8x8 y:1x4"],
            opt_shapes=["x:2x3x16x16 y:2x4"],
            max_shapes=["x:4x3x32x32 y:4x4"],
        )
        got = shapes.concrete_shapes([X_DYN, Y_DYN, InputInfo("s", (2, 2))], profs)
        assert got == {"x": (2, 3, 16, 16), "y": (2, 4), "s": (2, 2)}
        assert shapes.concrete_shapes([Y_DYN], [], {"y": (7, 4)}) == {"y": (7, 4)}

    def test_missing(self):
        with pytest.raises(UsageError, match="dynamic inputs without shapes: y"):
            shapes.concrete_shapes([Y_DYN])
