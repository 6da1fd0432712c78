"""Reading and writing ONNX models: clear errors, external data, atomic writes.

* :func:`load_model` loads a model with its external data (or, for a later
  :func:`load_external_data`, without it) and turns every way a file can be unreadable (missing, a
  folder, truncated, not ONNX, missing external data) into a
  :class:`~dcnconvert.errors.ModelError` with a hint; it checks the graph with
  :func:`dcnconvert.model.check.check_model` (refuses what TensorRT's parser refuses, warns on the
  unusual), so every command that reads a model gets that check.
* :func:`save_model` writes atomically: to a temporary name in the destination folder, renamed
  into place only once everything is written. Models too large for one protobuf (2 GB), or saved
  with ``external_data=True``, get one data file next to the ``.onnx``, named ``<file name>.data``
  (``model.onnx`` -> ``model.onnx.data``), holding the large initializers and the large weights
  embedded in plugin nodes (TENSOR attributes, which ``onnx.load`` and TensorRT's parser read from
  external data too); the data file is renamed first, the ``.onnx`` last.
* :func:`skeleton` makes a cheap copy of a model whose large tensors carry no data, for shape
  inference, matching and checking without duplicating the weights. It and the other tensor
  helpers (:func:`tensor_nbytes`, :func:`model_size_bytes`, :func:`uses_external_data`,
  :func:`check_skeleton`) live in :mod:`dcnconvert.model.tensors` and are re-exported here.

The input file and the ModelProto passed in are never modified.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Union

import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from dcnconvert.errors import ModelError, OutputError
from dcnconvert.model import check as model_check
from dcnconvert.model.tensors import (
    check_skeleton,
    copy_light,
    externalize,
    is_skeleton_tensor,
    iter_tensors,
    model_size_bytes,
    skeleton,
    tensor_nbytes,
    uses_external_data,
)

__all__ = [
    "check_skeleton",
    "file_uses_external_data",
    "is_skeleton_tensor",
    "iter_tensors",
    "load_external_data",
    "load_model",
    "model_size_bytes",
    "save_model",
    "skeleton",
    "tensor_nbytes",
    "uses_external_data",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Largest protobuf that can be serialised in one piece (2 GiB - 1).
PROTOBUF_LIMIT = 2**31 - 1
#: Tensors at least this large (bytes) go to the data file when saving with external data.
EXTERNAL_TENSOR_MIN_BYTES = 1024
#: Offsets in the data file are aligned to this many bytes.
EXTERNAL_ALIGNMENT = 64
#: Single-file saves of models at least this large are written tensor by tensor (no whole-model copy);
#: smaller ones byte-for-byte as ``onnx.save`` writes them.
STREAM_MIN_BYTES = 64 * 2**20


def load_model(path: PathLike, *, check: bool = True, external_data: bool = True) -> onnx.ModelProto:
    """Load an ONNX model and its external data, and check its graph.

    Args:
        path: the ``.onnx`` file.
        check: run :func:`dcnconvert.model.check.check_model` (before the external data is read, so
            a broken graph is refused without reading the weights; its warnings are logged).
        external_data: read the external data; ``False`` leaves the external references for a later
            :func:`load_external_data` (the rewrite then moves embedded weights as references, and
            their data is read once, into the plugin nodes).

    Returns:
        The model, with every external tensor loaded into memory (unless ``external_data=False``).

    Raises:
        ModelError: the file is missing, is a folder, is not ONNX, is truncated, its external
            data cannot be read, or its graph is one TensorRT's parser refuses (a dangling node
            input, a tensor produced twice, a name that is not valid UTF-8, ...).
    """
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model file not found: {path}", hint="check the path")
    if path.is_dir():
        raise ModelError(f"{path} is a folder, not an ONNX model file", hint="pass the .onnx file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except DecodeError as exc:
        raise ModelError(
            f"{path} is not a readable ONNX model (protobuf parse failed: {exc}); "
            "the file is truncated or not ONNX",
            hint="re-export or re-download the model",
        ) from None
    except UnicodeDecodeError as exc:  # protobuf backends that decode strings while parsing
        raise ModelError(f"{path} holds a string that is not valid UTF-8 ({exc.reason}): "
                         f"'{model_check.escape(exc.object[exc.start:exc.end + 16])}'",
                         hint="the file is probably damaged: re-export or re-download the model") from None
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}",
                         hint="check the file's permissions") from None
    _check_looks_like_onnx(model, path)
    if check:
        model_check.check_model(model)
    if external_data:
        load_external_data(model, path)
    return model


def load_external_data(model: onnx.ModelProto, path: PathLike) -> None:
    """Read the external data of every tensor of ``model`` (initializers and TENSOR attributes) from the
    files next to ``path``, the model file it was loaded from; no-op without external data.

    Raises:
        ModelError: a data file is missing or too short.
    """
    path = Path(path)
    external = [t for t in iter_tensors(model) if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return
    try:
        onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        raise ModelError(
            f"cannot load the external data of {path}: {exc}",
            hint="keep the model's data file(s) next to the .onnx file, with their original names",
        ) from None
    for tensor in external:  # onnx sets DEFAULT explicitly; unset, the tensor equals an inline one
        if tensor.data_location == onnx.TensorProto.DEFAULT:
            tensor.ClearField("data_location")


def _check_looks_like_onnx(model: onnx.ModelProto, path: Path) -> None:
    # A truncated or foreign file can still parse as a protobuf; a real model always has a graph,
    # an IR version and (since IR 3) opset imports, which protobuf writes after the graph.
    if not model.HasField("graph") or model.ir_version <= 0:
        raise ModelError(
            f"{path} does not look like an ONNX model (no graph or IR version)",
            hint="check that this is an .onnx file",
        )
    if len(model.opset_import) == 0 and model.ir_version >= 3:
        raise ModelError(
            f"{path} has no opset_import: the file is truncated or damaged",
            hint="re-export or re-download the model",
        )


def file_uses_external_data(path: PathLike) -> bool:
    """Whether the model file at ``path`` keeps (some of) its tensors in external data files.

    Raises:
        ModelError: as :func:`load_model`.
    """
    path = Path(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read {path}: {exc}", hint="check the path") from None
    return uses_external_data(model)


def _inline_chunks(model: onnx.ModelProto) -> Iterator[bytes]:
    """The encoding of ``model`` in pieces: everything but the main graph's nodes and initializers,
    then one piece per node (plugin nodes carry their embedded weights) and one per initializer.

    Protobuf merges repeated occurrences of an embedded message field, so the concatenation parses
    to the same model (node and initializer order kept) without one ``bytes`` holding all the weights.
    """
    head = onnx.ModelProto()
    copy_light(model, head, None, nodes=False)
    yield head.SerializeToString()
    for node in model.graph.node:
        piece = onnx.ModelProto()
        piece.graph.node.add().CopyFrom(node)
        yield piece.SerializeToString()
    for tensor in model.graph.initializer:
        piece = onnx.ModelProto()
        piece.graph.initializer.add().CopyFrom(tensor)
        yield piece.SerializeToString()


def _temp_path(folder: Path, name: str) -> Path:
    return folder / f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _remove_quietly(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:  # pragma: no cover - nothing more can be done
            pass


def save_model(
    model: onnx.ModelProto,
    path: PathLike,
    *,
    external_data: bool | None = None,
    size_limit: int = PROTOBUF_LIMIT,
) -> list[Path]:
    """Write ``model`` to ``path`` atomically; never leaves a partial file behind.

    Args:
        model: the model to write (not modified).
        path: the destination ``.onnx`` file; its folder must exist.
        external_data: ``True`` to store tensors in ``<file name>.data`` next to ``path``, ``False``
            to write one file, ``None`` to decide by size (external when the model is larger than
            ``size_limit``).
        size_limit: size in bytes above which ``external_data=None`` chooses external data (tests
            pass a small value).

    Returns:
        The files written (``path``, and the data file when external data is used).

    Raises:
        OutputError: the destination cannot be written, or the model is too large for one file
            while ``external_data=False``.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"output folder does not exist: {folder}", hint="create it first")
    if path.is_dir():
        raise OutputError(f"output path {path} is a folder", hint="give a file name ending in .onnx")
    if uses_external_data(model):
        raise OutputError(
            "the model still refers to external data that was not loaded",
            hint="load it with dcnconvert.model.io.load_model, which loads external data",
        )
    size = model_size_bytes(model)
    if external_data is None:
        external_data = size > size_limit
    if external_data:
        return _save_external(model, path, folder)
    if size > PROTOBUF_LIMIT:
        raise OutputError(
            f"the model ({size / 2**30:.1f} GiB) is too large for one ONNX file (protobuf's limit is 2 GiB)",
            hint="save it with external data (the default chooses it for models over 2 GB)",
        )
    write_atomic(path, _inline_chunks(model) if size >= STREAM_MIN_BYTES else [model.SerializeToString()])
    return [path]


def write_atomic(path: PathLike, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to ``path`` through a temporary file in the same folder, then a rename: the file
    is there whole or not at all (models, engines, JSON files alike).

    Raises:
        OutputError: the folder does not exist or cannot be written.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"the folder of {path} does not exist", hint=f"create it first: mkdir -p {folder}")
    tmp = _temp_path(folder, path.name)
    try:
        _write_file(tmp, chunks)
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}",
                          hint="check the folder's permissions") from None
    except BaseException:
        _remove_quietly(tmp)
        raise


def _write_file(path: Path, chunks) -> None:
    with open(path, "wb") as handle:
        handle.writelines(chunks)
        handle.flush()
        os.fsync(handle.fileno())


def _tensor_bytes(tensor: onnx.TensorProto) -> bytes:
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    return numpy_helper.to_array(tensor).tobytes()


def _save_external(model: onnx.ModelProto, path: Path, folder: Path) -> list[Path]:
    data_path = folder / f"{path.name}.data"
    tmp_onnx = _temp_path(folder, path.name)
    tmp_data = _temp_path(folder, data_path.name)
    renamed_data = False
    try:
        light = onnx.ModelProto()
        with open(tmp_data, "wb") as handle:
            offset = 0

            def write(tensor: onnx.TensorProto, into: onnx.TensorProto) -> None:
                nonlocal offset
                data = _tensor_bytes(tensor)
                pad = (-offset) % EXTERNAL_ALIGNMENT
                if pad:
                    handle.write(b"\0" * pad)
                    offset += pad
                handle.write(data)
                externalize(tensor, into, data_path.name, offset, len(data))
                offset += len(data)

            def route(tensor: onnx.TensorProto, into: onnx.TensorProto) -> None:
                if tensor_nbytes(tensor) >= EXTERNAL_TENSOR_MIN_BYTES:
                    write(tensor, into)
                else:
                    into.CopyFrom(tensor)

            copy_light(model, light, route)
            handle.flush()
            os.fsync(handle.fileno())
        _write_file(tmp_onnx, [light.SerializeToString()])
        os.replace(tmp_data, data_path)
        renamed_data = True
        os.replace(tmp_onnx, path)
    except OSError as exc:
        _remove_quietly(tmp_onnx)
        _remove_quietly(tmp_data)
        if renamed_data:
            _remove_quietly(data_path)
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}",
                          hint="check the folder's permissions and free space") from None
    except BaseException:
        _remove_quietly(tmp_onnx)
        _remove_quietly(tmp_data)
        if renamed_data:
            _remove_quietly(data_path)
        raise
    return [path, data_path]
