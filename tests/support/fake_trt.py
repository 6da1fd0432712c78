"""A fake of :mod:`dcnconvert.backend.trt.adapter` for tests without TensorRT.

:class:`FakeAdapter`'s "engine" is the ONNX file that would have been parsed (so the FP16 cast can be
inspected), and "running the engine" runs that ONNX with :func:`support.evaluate.run_model`.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import onnx

from dcnconvert.backend.trt import adapter as trt_adapter
from dcnconvert.errors import BuildError
from support import evaluate


class FakeAdapter:
    """The parts of trt_adapter that build/verify call, without TensorRT."""

    def __init__(self, version: str = "10.16.0", noise: float = 0.0, fail_build: bool = False):
        self.trt = types.SimpleNamespace(__version__=version)
        self.noise = noise
        self.fail_build = fail_build
        self.build_calls = []
        self.loaded = []
        self.profiles = {}

    api_for = staticmethod(trt_adapter.api_for)
    api_of = staticmethod(trt_adapter.api_of)

    def choose_runtime(self, requested=None):
        from dcnconvert.backend.trt.runtimes import RuntimeChoice

        return RuntimeChoice(requested or "tensorrt", self.trt.__version__, "the fake adapter's")

    def load_tensorrt(self, runtime="tensorrt"):
        return self.trt

    def load_plugins(self, trt, libraries, name, version, namespace, builtin=False):
        self.loaded.append((list(libraries), name, version, namespace, builtin))

    def build_engine_bytes(self, trt, onnx_path, **kwargs):
        self.build_calls.append(dict(kwargs, model=onnx.load(str(onnx_path))))
        if self.fail_build:
            raise BuildError("TensorRT could not build the engine: simulated")
        self.last_profiles = kwargs.get("profiles") or []
        self.last_bytes = Path(onnx_path).read_bytes()
        return self.last_bytes

    def build_isolated(self, api, onnx_path, *, plugin_libraries=(), plugin=None, strongly_typed=False,
                       quiet_fields=None, **build):
        """What the real one runs in a child process: load the plugins, then parse and build."""
        if plugin is not None:
            self.load_plugins(self.trt, plugin_libraries, *plugin[:3], builtin=plugin[3])
        self.quiet_fields = dict(quiet_fields or {})
        data = self.build_engine_bytes(self.trt, onnx_path, plugin_libraries=plugin_libraries,
                                       strongly_typed=strongly_typed, **build)
        return {"data": data, "network": {"layers": 0, "plugin_layers": []}, "quieted": {}}

    def engine_inputs(self, trt, engine_path, libraries=()):
        model = onnx.load(str(engine_path))
        profiles = getattr(self, "last_profiles", [])
        out = []
        init = {i.name for i in model.graph.initializer}
        for vi in model.graph.input:
            if vi.name in init:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim]
            prof = None
            if any(d < 0 for d in dims) and profiles:
                prof = [list(s) for s in profiles[0][vi.name]]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name
            out.append({"name": vi.name, "dtype": dtype, "shape": dims, "profile0": prof})
        return out

    def run_engine(self, trt, engine_path, feeds, libraries=(), runner_name="tensorrt"):
        from polygraphy.comparator.struct import RunResults

        model = onnx.load(str(engine_path))
        outs = []
        for feed in feeds:
            result = evaluate.run_model(model, feed, backend="reference")  # FP16/BF16 computed as such
            outs.append({k: (v + self.noise * np.abs(v).max()).astype(v.dtype) for k, v in result.items()})
        results = RunResults()
        results.add(outs, runner_name=runner_name)
        return results

    def install(self, monkeypatch):
        """Replace the real adapter's functions with this fake's."""
        for name in ("choose_runtime", "load_tensorrt", "build_isolated", "engine_inputs", "run_engine"):
            monkeypatch.setattr(trt_adapter, name, getattr(self, name))
        return self
