"""TensorRT versions: what each one offers, and the table of TensorRT names dcnconvert uses.

Pure data and version parsing; no TensorRT import (that is :mod:`dcnconvert.backend.trt.adapter`'s job).
:func:`api_for` maps a ``tensorrt.__version__`` to a :class:`TrtApi`:

* TensorRT 10: FP16/BF16 builder flags exist (``precision_path="builder-flag"``); strong typing is
  opt-in; plugin creators are looked up with ``get_creator`` (any creator interface, our IPluginV3
  one included) and then ``get_plugin_creator`` (legacy IPluginCreator), listed with
  ``all_creators`` / ``plugin_creator_list``.
* TensorRT 11: no FP16/BF16/INT8 builder flags (the graph itself is cast, ``"graph-cast"``), every
  network is strongly typed, ``get_plugin_creator`` / ``plugin_creator_list`` are gone.
* TensorRT-RTX 1.x (module ``tensorrt_rtx``, versions numbered from 1): like TensorRT 11 for all of the
  above, and its builder targets the compute capabilities it is given (``compute_capabilities``),
  with or without a GPU.

:data:`TRT_API` lists every TensorRT name that ``trt_adapter.py`` uses with the major versions
whose code path uses it; ``tests/backend/trt/test_adapter.py`` checks it against that module's source and
the TensorRT 10 stubs.
"""

from __future__ import annotations

from dataclasses import dataclass

from dcnconvert.errors import MissingDependencyError

#: The exact install command for TensorRT's Python package.
INSTALL_COMMAND = "pip install 'dcnconvert[trt]'"
INSTALL_HINT = (
    f"install TensorRT on a machine with an NVIDIA GPU: {INSTALL_COMMAND} (the 'tensorrt' wheels; "
    "where they cannot download their libraries, use NVIDIA's own package index as its TensorRT "
    "installation guide describes)"
)
#: Oldest TensorRT dcnconvert supports.
MIN_VERSION = (10, 3)
#: Oldest TensorRT-RTX dcnconvert supports (its parser imports IPluginV3 nodes from 1.7 on, as tried).
RTX_MIN_VERSION = (1, 7)
RTX_INSTALL_COMMAND = "pip install 'dcnconvert[rtx]'"
#: The runtimes ``--runtime`` names, in the order ``auto`` tries them.
RUNTIMES = ("tensorrt", "tensorrt-rtx")
#: The Python module of each runtime.
RUNTIME_MODULES = {"tensorrt": "tensorrt", "tensorrt-rtx": "tensorrt_rtx"}

#: TensorRT names that :mod:`dcnconvert.backend.trt.adapter` and :mod:`dcnconvert.backend.trt.builder`
#: use -> the major versions whose code path uses them (1: TensorRT-RTX 1.x).
#: ``Class.member`` for members, a bare name for module attributes. Names used only through
#: Polygraphy on our behalf (builder flags, the strongly-typed creation flag) are listed too.
TRT_API: dict[str, tuple[int, ...]] = {
    "__version__": (10, 11, 1),
    "get_plugin_registry": (10, 11, 1),
    "init_libnvinfer_plugins": (10, 11),
    "IPluginRegistry.get_creator": (10, 11, 1),
    "IPluginRegistry.get_plugin_creator": (10,),
    "IPluginRegistry.all_creators": (10, 11, 1),
    "IPluginRegistry.load_library": (10, 11, 1),
    "IPluginRegistry.plugin_creator_list": (10,),
    "IPluginCreatorV3One.name": (10, 11, 1),
    "IPluginCreatorV3One.plugin_version": (10, 11, 1),
    "IPluginCreatorV3One.plugin_namespace": (10, 11, 1),
    "MemoryPoolType.WORKSPACE": (10, 11, 1),
    "IProgressMonitor": (10, 11, 1),
    "IProgressMonitor.phase_start": (10, 11, 1),
    "IProgressMonitor.step_complete": (10, 11, 1),
    "IProgressMonitor.phase_finish": (10, 11, 1),
    "OnnxParser": (10, 11, 1),
    "OnnxParser.parse_from_file": (10, 11, 1),
    "OnnxParser.num_errors": (10, 11, 1),
    "OnnxParser.get_error": (10, 11, 1),
    "ParserError.node_name": (10, 11, 1),
    "ParserError.node_operator": (10, 11, 1),
    "ParserError.desc": (10, 11, 1),
    "INetworkDefinition.num_layers": (10, 11, 1),
    "INetworkDefinition.get_layer": (10, 11, 1),
    "ILayer.type": (10, 11, 1),
    "ILayer.name": (10, 11, 1),
    "ILayer.num_inputs": (10, 11, 1),
    "ILayer.get_input": (10, 11, 1),
    "ILayer.num_outputs": (10, 11, 1),
    "ILayer.get_output": (10, 11, 1),
    "LayerType.PLUGIN_V3": (10, 11, 1),
    # TensorRT-RTX only: Polygraphy's CreateConfigRTX has no tf32 option
    "IBuilderConfig.set_flag": (1,),
    "BuilderFlag.TF32": (1,),
    "ICudaEngine.num_io_tensors": (10, 11, 1),
    "ICudaEngine.get_tensor_name": (10, 11, 1),
    "ICudaEngine.get_tensor_mode": (10, 11, 1),
    "ICudaEngine.get_tensor_shape": (10, 11, 1),
    "ICudaEngine.get_tensor_dtype": (10, 11, 1),
    "ICudaEngine.get_tensor_profile_shape": (10, 11, 1),
    "ICudaEngine.num_optimization_profiles": (10, 11, 1),
    "TensorIOMode.INPUT": (10, 11, 1),
    # through Polygraphy: CreateConfig(fp16=True / bf16=True), CreateNetwork(strongly_typed=True)
    "BuilderFlag.FP16": (10,),
    "BuilderFlag.BF16": (10,),
    "NetworkDefinitionCreationFlag.STRONGLY_TYPED": (10,),
}

#: Names TensorRT 11 removed; no name here may be on the 11 code path (checked by the tests).
TRT11_REMOVED = frozenset({
    "BuilderFlag.FP16", "BuilderFlag.BF16", "BuilderFlag.INT8",
    "IPluginRegistry.get_plugin_creator", "IPluginRegistry.plugin_creator_list",
})


@dataclass(frozen=True)
class TrtApi:
    """What one TensorRT version offers (see the module docstring)."""

    version: str
    major: int
    precision_flags: bool
    always_strongly_typed: bool
    creator_lookup: tuple[str, ...]
    creator_listing: tuple[str, ...]
    runtime: str = "tensorrt"
    #: The builder takes target compute capabilities (TensorRT-RTX's ahead-of-time builds).
    compute_capabilities: bool = False

    @property
    def label(self) -> str:
        """``TensorRT 10.16.0`` or ``TensorRT-RTX 1.7.1.116``."""
        return f"{'TensorRT-RTX' if self.runtime == 'tensorrt-rtx' else 'TensorRT'} {self.version}"


def version_tuple(version: str) -> tuple[int, ...]:
    """The leading numeric parts of a version string (``"10.16.0.post1"`` -> ``(10, 16, 0)``)."""
    parts = []
    for piece in str(version).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def api_for(version: str, runtime: str = "tensorrt") -> TrtApi:
    """The :class:`TrtApi` of TensorRT ``version`` (e.g. ``"10.16.0"``, ``"11.1.0.5"``), or of
    TensorRT-RTX ``version`` when ``runtime`` is ``"tensorrt-rtx"``.

    Raises:
        MissingDependencyError: an unreadable version or one older than :data:`MIN_VERSION`
            (:data:`RTX_MIN_VERSION`).
    """
    parts = version_tuple(version)
    if runtime == "tensorrt-rtx":
        if not parts or parts[:2] < RTX_MIN_VERSION:
            raise MissingDependencyError(
                f"TensorRT-RTX {version or '(unknown version)'} is not supported; dcnconvert needs "
                f"TensorRT-RTX >= {RTX_MIN_VERSION[0]}.{RTX_MIN_VERSION[1]}",
                hint=f"upgrade it: {RTX_INSTALL_COMMAND} --upgrade")
        return TrtApi(version, parts[0], False, True, ("get_creator",), ("all_creators",),
                      runtime="tensorrt-rtx", compute_capabilities=True)
    if not parts or parts[:2] < MIN_VERSION:
        raise MissingDependencyError(
            f"TensorRT {version or '(unknown version)'} is not supported; dcnconvert needs TensorRT >= "
            f"{MIN_VERSION[0]}.{MIN_VERSION[1]}",
            hint=f"upgrade TensorRT: {INSTALL_COMMAND} --upgrade",
        )
    if parts[0] >= 11:
        return TrtApi(version, parts[0], False, True, ("get_creator",), ("all_creators",))
    return TrtApi(version, parts[0], True, False, ("get_creator", "get_plugin_creator"),
                  ("all_creators", "plugin_creator_list"))
