"""Loads a plugin library into TensorRT-RTX (module ``tensorrt_rtx``) and, given a model, parses it with
TensorRT-RTX's ONNX parser and builds an engine for compute capability 8.6 (no GPU needed). Prints one
JSON line per step done, flushed at once, so that a parent sees how far a process got that the parser
aborted. Run by ``tests/backend/plugin/test_rtx_runtime.py`` in a process of its own. Usage::

    python rtx_parse_probe.py LIBRARY ROUTE NAME VERSION NAMESPACE [MODEL.onnx]

ROUTE: ``ctypes`` loads the library as Polygraphy's ``--plugins`` does (its constructor registers the
creator), ``load_library`` through the plugin registry (``IPluginRegistry::loadLibrary``, trtexec's
``--dynamicPlugins``), ``early_load_library`` loads it with ctypes before TensorRT-RTX is imported
(its constructor finds no runtime), then through the registry. Needs only the bindings.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import sys


def say(**values) -> None:
    print(json.dumps(values), flush=True)


def main(argv: list[str]) -> int:
    library, route, name, version, namespace = argv[:5]
    model = argv[5] if len(argv) > 5 else None
    if route == "early_load_library":
        ctypes.CDLL(library)
    trt = importlib.import_module("tensorrt_rtx")
    logger = trt.Logger(trt.Logger.WARNING)
    registry = trt.get_plugin_registry()
    if route == "ctypes":
        ctypes.CDLL(library)
    else:
        registry.load_library(library)
    say(step="loaded", creator_found=registry.get_creator(name, version, namespace) is not None)
    if model is None:
        return 0
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    parsed = parser.parse_from_file(model)
    say(step="parsed", ok=bool(parsed), errors=[str(parser.get_error(i)) for i in range(parser.num_errors)])
    if not parsed:
        return 1
    config = builder.create_builder_config()
    config.num_compute_capabilities = 1
    config.set_compute_capability(trt.ComputeCapability.SM86, 0)
    plan = builder.build_serialized_network(network, config)
    say(step="built", plan_bytes=plan.nbytes if plan is not None else 0)
    return 0 if plan is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
