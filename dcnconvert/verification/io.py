"""Inputs and saved files of ``dcnconvert verify`` (:mod:`dcnconvert.verification.runner`).

Feeds are generated (:func:`make_inputs`: seeded uniform random values, never all zeros) or read
from a file (:func:`load_inputs`: an ``.npz`` or Polygraphy's JSON list of feed dicts), checked
against the model's inputs (:func:`check_feeds`) and cast to the engine's input types
(:func:`cast_feeds`). :func:`save_inputs` / :func:`save_run_results` write Polygraphy's JSON
formats (``--load-inputs`` / ``--load-outputs``) atomically. Needs no GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dcnconvert.backend.trt import profiles as shapes
from dcnconvert.errors import ModelError, UsageError


def make_inputs(
    inputs: Sequence[shapes.InputInfo], concrete: Mapping[str, Sequence[int]], seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded random feeds: floats uniform in [-1, 1), integers in [0, 4), booleans at random.

    Args:
        inputs: the model's inputs (name, dims, ONNX element type).
        concrete: a shape for every input (:func:`dcnconvert.backend.trt.profiles.concrete_shapes`).
        seed: the random seed (the same seed gives the same feeds).

    Raises:
        ModelError: an input type NumPy cannot hold (e.g. bfloat16).
    """
    from onnx import helper

    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in inputs:
        shape = tuple(int(d) for d in concrete[info.name])
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(info.elem_type))
        except (KeyError, TypeError, ValueError):
            raise ModelError(f"input '{info.name}' has element type {info.elem_type}, which NumPy cannot "
                             "hold",
                             hint="give the inputs in a file with --inputs") from None
        if dtype.kind == "f" and dtype.itemsize >= 2 and dtype.name in ("float16", "float32", "float64"):
            feeds[info.name] = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[info.name] = rng.integers(0, 4, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[info.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise ModelError(f"input '{info.name}' has dtype {dtype}, for which no random data is generated",
                             hint="give the inputs in a file with --inputs")
    return feeds


def load_inputs(path: Path) -> dict[str, np.ndarray]:
    """Feeds from ``.npz`` (name -> array) or Polygraphy JSON (a list of feed dicts; the first is used).

    Raises:
        ModelError: the file cannot be read or holds no feed dict.
    """
    path = Path(path)
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return {k: np.asarray(data[k]) for k in data.files}
        from polygraphy.json import from_json

        obj = from_json(path.read_text())
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise ModelError(f"cannot read inputs from {path}: {exc}",
                         hint="give an .npz file or a Polygraphy JSON inputs file "
                         "(polygraphy run --save-inputs)") from None
    if isinstance(obj, list) and obj and isinstance(obj[0], Mapping):
        obj = obj[0]
    if not isinstance(obj, Mapping):
        raise ModelError(f"{path} holds no feed dict", hint="expected a list of {input name: array} dicts")
    return {str(k): np.asarray(v) for k, v in obj.items()}


def check_feeds(inputs: Sequence[shapes.InputInfo], feeds: Mapping[str, np.ndarray]) -> None:
    """Every model input is fed, nothing else, with the model's rank and fixed dims.

    Raises:
        UsageError: a missing, unknown or misshapen feed.
    """
    names = [i.name for i in inputs]
    missing = [n for n in names if n not in feeds]
    extra = sorted(set(feeds) - set(names))
    if missing or extra:
        raise UsageError(f"the inputs file does not match the model: missing {missing}, unknown {extra}",
                         hint=f"the model's inputs are {names}")
    for info in inputs:
        arr = feeds[info.name]
        if info.dims and (arr.ndim != len(info.dims) or any(
                isinstance(d, int) and d >= 0 and d != s for d, s in zip(info.dims, arr.shape, strict=True))):
            raise UsageError(f"input '{info.name}' has shape {list(arr.shape)}, the model wants "
                             f"{shapes.format_dims(info.dims)}")


def _to_json_text(obj: Any) -> str:
    from polygraphy.json import to_json

    return to_json(obj)


def save_inputs(path: Path, feeds: Mapping[str, np.ndarray]) -> None:
    """Save feeds as Polygraphy's inputs JSON (``--load-inputs``), atomically."""
    from collections import OrderedDict

    from dcnconvert.model.io import write_atomic

    write_atomic(Path(path), [_to_json_text([OrderedDict(feeds)]).encode()])


def save_run_results(path: Path, results: Any) -> None:
    """Save Polygraphy ``RunResults`` as JSON (``--load-outputs``), atomically."""
    from dcnconvert.model.io import write_atomic

    write_atomic(Path(path), [_to_json_text(results).encode()])


def cast_feeds(
    feeds: Mapping[str, np.ndarray], engine_inputs: Sequence[Mapping[str, Any]]
) -> dict[str, np.ndarray]:
    """Feeds in the engine's input dtypes (an FP16-I/O engine gets FP16 arrays).

    Raises:
        UsageError: an engine input in a type NumPy cannot hold (bfloat16).
    """
    out = dict(feeds)
    for info in engine_inputs:
        name, dtype = info["name"], info["dtype"]
        if name not in out:
            continue
        try:
            if dtype == "bfloat16":
                raise TypeError(dtype)
            np_dtype = np.dtype(dtype)
        except TypeError:
            raise UsageError(f"engine input '{name}' is {dtype}, which NumPy cannot feed",
                             hint="build with --io-precision fp32 (the default) to verify the engine",
                             ) from None
        out[name] = out[name].astype(np_dtype)
    return out
