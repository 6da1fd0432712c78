"""Drives the plugin library inside a real TensorRT runtime (``tensorrt_lean_bindings``, or
``tensorrt_rtx``), as the ONNX parser and the engine deserializer would, and prints what happened as one
JSON object on stdout.

Run by ``tests/backend/plugin/test_lean_runtimes.py`` in a subprocess whose ``PYTHONPATH`` holds one
lean runtime (a folder made by ``pip install --target``), and by ``test_rtx_runtime.py`` with
TensorRT-RTX, so that each runtime gets a process of its own and a crash is seen as an exit status,
never as the test process dying. Usage::

    python lean_probe.py SPEC.json

SPEC: ``{"module" (default "tensorrt_lean_bindings"), "library", "route": "load_library" | "ctypes",
"name", "version", "namespace", "cases": [{"id", "fields": [[name, "int32" | "int64" | "float32" |
"float16" | "int8", [values...]] or [name, "char", "text"], ...]}]}`` (a "char" field is the text with
its NUL, as the ONNX parser passes a STRING attribute). For each case a plugin is created in the BUILD
and the RUNTIME phase. Needs only numpy and the bindings.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import sys
from types import ModuleType

import numpy as np

trt: ModuleType  # the runtime's Python module, imported by main() as the spec says
DTYPES: dict = {}


def matching(registry, name: str) -> list[list[str]]:
    """(name, version, namespace) of every registered creator called ``name``."""
    return [[c.name, c.plugin_version, c.plugin_namespace] for c in registry.all_creators if c.name == name]


def create(creator, case: dict, phase) -> dict:
    """One create_plugin call; the field arrays stay referenced until it returns (PluginField does not
    keep them alive)."""
    arrays, fields = [], []
    for name, kind, values in case["fields"]:
        dtype, field_type = DTYPES[kind]
        if kind == "char":
            arrays.append(np.frombuffer(values.encode() + b"\0", dtype=np.int8).copy())
        else:
            arrays.append(np.array(values, dtype=dtype))
        fields.append(trt.PluginField(name, arrays[-1], field_type))
    try:
        plugin = creator.create_plugin(case["id"], trt.PluginFieldCollection(fields), phase)
    except Exception as exc:  # noqa: BLE001 - reported, and a test asserts there is none
        return {"created": False, "exception": f"{type(exc).__name__}: {exc}"}
    out: dict = {"created": plugin is not None, "exception": None}
    if plugin is not None:
        core = plugin.get_capability_interface(trt.PluginCapabilityType.CORE)
        out["identity"] = [core.plugin_name, core.plugin_version, core.plugin_namespace]
    del arrays
    return out


def main(spec_path: str) -> int:
    global trt
    spec = json.loads(open(spec_path).read())
    trt = importlib.import_module(spec.get("module", "tensorrt_lean_bindings"))
    DTYPES.update(int32=(np.int32, trt.PluginFieldType.INT32), int64=(np.int64, trt.PluginFieldType.INT64),
                  float32=(np.float32, trt.PluginFieldType.FLOAT32),
                  float16=(np.float16, trt.PluginFieldType.FLOAT16), int8=(np.int8, trt.PluginFieldType.INT8),
                  char=(np.int8, trt.PluginFieldType.CHAR))
    registry = trt.get_plugin_registry()
    result: dict = {"tensorrt_version": trt.__version__, "route": spec["route"]}
    if spec["route"] == "ctypes":
        ctypes.CDLL(spec["library"])  # what Polygraphy's --plugins and dcnconvert do
        result["after_ctypes"] = matching(registry, spec["name"])
    handle = registry.load_library(spec["library"])  # what trtexec --dynamicPlugins does
    result["load_library_handle"] = handle is not None
    result["registered"] = matching(registry, spec["name"])
    creator = registry.get_creator(spec["name"], spec["version"], spec["namespace"])
    result["creator_found"] = creator is not None
    result["cases"] = {}
    if creator is not None:
        result["field_names"] = [[f.name, str(f.type).rsplit(".", 1)[-1]] for f in creator.field_names]
        phases = (("build", trt.TensorRTPhase.BUILD), ("runtime", trt.TensorRTPhase.RUNTIME))
        for case in spec.get("cases", []):
            result["cases"][case["id"]] = {name: create(creator, case, phase) for name, phase in phases}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
