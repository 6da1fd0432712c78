"""Calibration: the largest magnitude (amax) of chosen tensors over calibration inputs.

The float model runs in ONNX Runtime (CPU) as ``verify`` runs its reference: every DCN form as a
standard ``DeformConv`` (:func:`dcnconvert.transform.standard.to_standard_model`), which keeps the
names of the DCNs' x inputs and outputs. The tensors to calibrate become extra graph outputs;
amax is the maximum of ``|value|`` over every element of every calibration input (max calibration,
per tensor). Inputs come from ``.npz`` files (one feed dict each, as ``verify --inputs`` reads them,
or samples stacked on the batch axis as ModelOpt's ``--calibration_data_path`` takes them) or are
random (:func:`dcnconvert.verification.io.make_inputs`, uniform in [-1, 1)).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from dcnconvert.errors import ModelError, UsageError

__all__ = ["calibration_feeds", "collect_amax", "split_stacked"]


def calibration_feeds(model: onnx.ModelProto, files: Sequence[Path] = (), samples: int = 8, seed: int = 0,
                      shapes: Sequence[str] = ()) -> list[dict[str, np.ndarray]]:
    """The calibration inputs: one feed dict per file, or ``samples`` random ones (seeds ``seed``,
    ``seed + 1``, ...) with the shapes the model fixes or ``shapes`` gives (``NAME:DIMS``).

    Raises:
        UsageError: a file that does not match the model's inputs, ``samples < 1``, or a dynamic
            input without a shape. ModelError: an unreadable file.
    """
    from dcnconvert.backend.trt import profiles
    from dcnconvert.verification import io as vio

    infos = profiles.model_inputs(model)
    if files:
        feeds = []
        for path in files:
            for feed in split_stacked(infos, vio.load_inputs(Path(path))):
                try:
                    vio.check_feeds(infos, feed)
                except UsageError as exc:
                    exc.message = f"{path}: {exc.message}"
                    raise
                feeds.append(feed)
        return feeds
    if samples < 1:
        raise UsageError(f"--samples {samples}: at least one calibration input is needed",
                         hint="give --samples 1 or more, or calibration files with --inputs")
    built = profiles.build_profiles(infos, list(shapes)) if shapes else []
    concrete = profiles.concrete_shapes(infos, built)
    return [vio.make_inputs(infos, concrete, seed + i) for i in range(samples)]


def split_stacked(infos: Sequence[Any], feed: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """``feed`` as ``k`` feed dicts when every input has a fixed batch ``b`` and every array holds
    ``k * b`` rows (ModelOpt's ``--calibration_data_path`` layout: samples stacked on axis 0), else
    ``[feed]``."""
    ks = set()
    for info in infos:
        arr = feed.get(info.name)
        b = info.dims[0] if info.dims else None
        if arr is None or arr.ndim == 0 or not isinstance(b, int) or b <= 0 or arr.shape[0] % b:
            return [feed]
        ks.add(arr.shape[0] // b)
    if len(ks) != 1 or ks == {1} or set(feed) != {i.name for i in infos}:
        return [feed]
    k = ks.pop()
    return [{i.name: np.array_split(feed[i.name], k, axis=0)[j] for i in infos} for j in range(k)]


def collect_amax(model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]],
                 names: Sequence[str]) -> dict[str, float]:
    """``name -> max |value|`` of each tensor in ``names`` over every feed dict in ``feeds``.

    ``model`` may hold any DCN form: it runs as its reference model (standard ``DeformConv``).

    Raises:
        ModelError: ONNX Runtime cannot run the model, a tensor is not in it, or a value is not
            finite (an amax from NaN/Inf gives no usable scale).
    """
    import onnxruntime as ort

    from dcnconvert.model import io as onnx_io
    from dcnconvert.transform import standard

    std = standard.to_standard_model(model)
    produced = {o for n in std.graph.node for o in n.output} | {i.name for i in std.graph.input}
    missing = [n for n in names if n not in produced]
    if missing:
        raise ModelError(f"tensors {missing} are not in the model ONNX Runtime runs for calibration",
                         hint="this is a bug in dcnconvert; please report it with the model")
    have = {o.name for o in std.graph.output}
    for name in names:
        if name not in have:
            std.graph.output.append(onnx.ValueInfoProto(name=name))
    amax = dict.fromkeys(names, 0.0)
    with tempfile.TemporaryDirectory(prefix="dcnconvert-calib-") as tmp:
        path = Path(tmp) / "calibration.onnx"
        onnx_io.save_model(std, path)
        try:
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            for feed in feeds:
                values = session.run(list(names), dict(feed))
                for name, value in zip(names, values, strict=True):
                    v = np.asarray(value, dtype=np.float64)
                    if v.size and not np.isfinite(v).all():
                        raise ModelError(f"tensor '{name}' holds NaN or Inf on a calibration input",
                                         hint="calibrate with inputs the float model computes finite "
                                              "values for")
                    if v.size:
                        amax[name] = max(amax[name], float(np.max(np.abs(v))))
        except ModelError:
            raise
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime's exception classes are not importable by name
            raise ModelError(
                f"ONNX Runtime {ort.__version__} cannot run the model for calibration: "
                f"{' '.join(str(exc).split())}",
                hint="every node besides the DCNs must run in ONNX Runtime (CPU); DeformConv needs "
                     "onnxruntime >= 1.25") from None
    return amax
