"""samples: deterministic builders for every form, supports(), input feeds."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from dcnconvert.match.finder import find_dcn_nodes
from support import samples

INPUTS = {"modulated": ["x", "offset", "mask"], "dcnv1": ["x", "offset"], "logits": ["x", "offset_mask"]}


@pytest.mark.parametrize("form", samples.FORMS)
def test_build_is_bit_for_bit_reproducible(form):
    a = samples.build(form, seed=5, dynamic=True).SerializeToString()
    b = samples.build(form, seed=5, dynamic=True).SerializeToString()
    assert a == b
    assert samples.build(form, seed=6).SerializeToString() != samples.build(form, seed=5).SerializeToString()


@pytest.mark.parametrize("form", samples.FORMS)
def test_inputs_outputs_and_metadata(form):
    model = samples.build(form, n=2, h=6, w=5)
    initializers = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in initializers]
    assert names == INPUTS[samples._SPEC[form][4]]
    assert [o.name for o in model.graph.output] == ["y"]
    meta = {e.key: e.value for e in model.metadata_props}
    assert meta[samples.META_FORM] == form
    assert json.loads(meta[samples.META_DIMS]) == {"N": 2, "H": 6, "W": 5, "OH": 6, "OW": 5}
    weight = onnx.numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "weight"))
    assert np.all(weight != 0)
    if samples._SPEC[form][1]:  # custom domains pass the checker
        onnx.checker.check_model(model)


@pytest.mark.parametrize("opset", [19, 22])
def test_standard_form_runs_in_onnxruntime(opset):
    model = samples.build("onnx.DeformConv", opset=opset, dynamic=True, deformable_group=2)
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (1, 3):
        (y,) = sess.run(None, samples.input_feeds(model, seed=n, dims={"N": n}))
        assert y.shape == (n, 6, 7, 9) and np.isfinite(y).all()


class TestSupports:
    @pytest.mark.parametrize("form,kwargs", [
        ("centernet.DCNv2", dict(stride=(2, 1))),
        ("centernet.DCNv2", dict(padding=(0, 1))),
        ("dcnv2_latest.DCNv2_2", dict(group=2)),
        ("tensorrt_pro.Plugin.DCNv2", dict(group=2)),
        ("eweill.DCNv2_TRT", dict(group=2)),
        ("mmcv.MMCVDeformConv2d", dict(bias=True)),
        ("paddle-legacy.deformable_conv", dict(bias=True)),
        ("mmcv.MMCVModulatedDeformConv2d", dict(pads=(0, 1, 1, 0))),
        ("onnx.DeformConv", dict(opset=18)),
        ("mmcv.MMCVModulatedDeformConv2d", dict(group=3)),
        ("mmcv.MMCVModulatedDeformConv2d", dict(deformable_group=3)),
        ("mmcv.MMCVModulatedDeformConv2d", dict(h=1, padding=(0, 0))),
        ("mmcv.MMCVModulatedDeformConv2d", dict(stride=(0, 1))),
        ("no.such.form", dict()),
    ])
    def test_unsupported_combinations(self, form, kwargs):
        assert not samples.supports(form, **kwargs)
        with pytest.raises(ValueError):
            samples.build(form, **kwargs)

    @pytest.mark.parametrize("form", samples.FORMS)
    def test_defaults_are_supported(self, form):
        assert samples.supports(form)
        assert samples.supports(form, stride=(2, 2), dilation=2, deformable_group=2)

    def test_bias_default_follows_the_form(self):
        assert find_dcn_nodes(samples.build("mmcv.MMCVModulatedDeformConv2d"))[0].with_bias
        assert not find_dcn_nodes(samples.build("mmcv.MMCVModulatedDeformConv2d", bias=False))[0].with_bias
        assert not find_dcn_nodes(samples.build("mmcv.MMCVDeformConv2d"))[0].with_bias

    def test_trt_pro_info_is_empty_for_the_plugin_defaults(self):
        def info(**kw):
            node = samples.build("tensorrt_pro.Plugin.DCNv2", **kw).graph.node[0]
            return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}["info"]

        assert info() == b""
        assert json.loads(info(stride=(2, 2))) == {"deformable_groups": 1, "dilation": [1, 1],
                                                    "padding": [1, 1], "stride": [2, 2]}


class TestFeeds:
    def test_distributions(self):
        model = samples.build("mmcv.MMCVModulatedDeformConv2d", n=4, h=20, w=20)
        feeds = samples.input_feeds(model, seed=1)
        assert set(feeds) == {"x", "offset", "mask"}
        assert all(v.dtype == np.float32 for v in feeds.values())
        assert 1.8 < feeds["offset"].std() < 2.2 and 0.9 < feeds["x"].std() < 1.1
        assert (feeds["offset"].max() > 7) and (feeds["offset"].min() < -7)  # some samples leave the image
        assert 0 < feeds["mask"].min() and feeds["mask"].max() < 1

    def test_logits(self):
        model = samples.build("eweill.DCNv2_TRT", n=4, h=20, w=20)
        om = samples.input_feeds(model, seed=1)["offset_mask"]
        assert om.shape == (4, 27, 20, 20)
        assert 1.8 < om[:, :18].std() < 2.2 and 0.9 < om[:, 18:].std() < 1.1

    def test_deterministic_and_seeded(self):
        model = samples.build("mmcv.MMCVDeformConv2d")
        a, b, c = (samples.input_feeds(model, seed=s) for s in (3, 3, 4))
        assert all(np.array_equal(a[k], b[k]) for k in a)
        assert not np.array_equal(a["x"], c["x"])

    def test_dynamic_dims(self):
        model = samples.build("mmcv.MMCVDeformConv2d", dynamic=True, n=2, h=6, w=8, stride=(2, 2))
        feeds = samples.input_feeds(model)
        assert feeds["x"].shape == (2, 4, 6, 8) and feeds["offset"].shape == (2, 18, 3, 4)
        assert samples.input_feeds(model, dims={"N": 5})["x"].shape == (5, 4, 6, 8)

    def test_unknown_dim_needs_dims(self):
        model = samples.build("mmcv.MMCVDeformConv2d", dynamic=True)
        del model.metadata_props[:]
        with pytest.raises(ValueError, match="pass dims="):
            samples.input_feeds(model)
        assert samples.sample_dims(model) == {}
