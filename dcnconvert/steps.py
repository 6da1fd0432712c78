"""Model steps shared by the dcnconvert commands (``cli.py`` and ``cli_engine.py``).

Each step runs inside a recording (:mod:`dcnconvert.recording`: the CLI's or the API's): it is
timed (``timings``), logs an INFO line, and records the files it reads or writes in the running
command's result.
:func:`check_output_path` refuses to overwrite the input; :func:`load_model_timed` /
:func:`save_model_timed` wrap :mod:`dcnconvert.model.io` (an output keeps its input's external
data layout); :func:`rewrite_in_memory` loads and rewrites a model and returns the rewrite report.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dcnconvert import errors, log
from dcnconvert.recording import add_output, add_warning, timed
from dcnconvert.report import rewrite_report_to_dict

__all__ = ["check_output_path", "load_model_timed", "rewrite_in_memory", "save_model_timed"]


def check_output_path(model: Path, output: Path, option: str = "-o", *, derived: bool = False) -> None:
    """Refuse an output path that is the input, a folder, or in a folder that does not exist.

    ``derived``: ``output`` is the rewritten model that ``convert`` puts next to the engine named by
    ``option`` (``OUT.onnx`` for ``-o OUT.engine``), so the fix is another engine name.

    Raises:
        UsageError: ``output`` is the input model (the input is never modified).
        OutputError: the output's folder does not exist or ``output`` is a directory.
    """
    same = os.path.realpath(model) == os.path.realpath(output)
    if not same and output.exists():
        try:
            same = os.path.samefile(model, output)
        except OSError:
            same = False
    if same:
        if derived:
            other = output.with_name(output.stem + "_dcn")
            what = f"the rewritten model {output} (the engine's path with suffix .onnx)"
            hint = (f"name the engine differently, e.g. {option} {other}.engine "
                    f"(writes {other}.onnx beside it)")
        else:
            what = f"{option} {output}"
            alt = output.with_name(output.stem + ".out" + output.suffix)
            hint = f"write to another file, e.g. {option} {alt}"
        raise errors.UsageError(f"{what} is the input model; dcnconvert never overwrites its input",
                                hint=hint)
    if output.is_dir():
        raise errors.OutputError(f"output path {output} is a directory", hint="give a file name")
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise errors.OutputError(
            f"the folder of the output {output} does not exist", hint=f"create it first: mkdir -p {parent}"
        )


def load_model_timed(model: Path, external_data: bool = True) -> Any:
    """``onnx_io.load_model`` with a ``load`` timing and an INFO line."""
    from dcnconvert.model import io as onnx_io

    with timed("load", f"Loading {model}"):
        return onnx_io.load_model(model, external_data=external_data)


#: An input .onnx larger than this keeps its weights inline; it is not parsed again to find out.
_SMALL_ONNX_BYTES = 64 * 2**20


def _keeps_external_data(path: Path) -> bool:
    from dcnconvert.model import io as onnx_io

    try:
        small = path.stat().st_size < _SMALL_ONNX_BYTES
    except OSError:
        return False
    return small and onnx_io.file_uses_external_data(path)


def save_model_timed(proto: Any, output: Path, role: str = "onnx", *, like: Path | None = None) -> None:
    """``onnx_io.save_model`` (atomic) with a ``save`` timing; records ``outputs[role]``.

    Args:
        proto: the model.
        output: the destination ``.onnx``.
        role: key in the result's ``outputs``.
        like: the input model; when it keeps its weights in external data, so does the output
            (otherwise external data is used only above 2 GB).
    """
    from dcnconvert.model import io as onnx_io

    external = True if like is not None and _keeps_external_data(like) else None
    with timed("save", f"Saving {output}"):
        written = onnx_io.save_model(proto, output, external_data=external)
    add_output(role, str(output))
    for extra in written[1:]:
        add_output(f"{role}_data", str(extra))


def rewrite_in_memory(model_path: Path | Any, target: str, require_match: bool,
                      allow_tf32: bool = False, embed_weights: bool = True) -> tuple[Any, dict[str, Any]]:
    """Load ``model_path`` (or take an ``onnx.ModelProto``) and rewrite it for ``target``; returns
    ``(model, payload)``.

    The payload is ``{"rewrite": RewriteReport.to_dict()}``. A model without DCN nodes gives a
    warning (``NoMatchError`` with ``require_match``). A model loaded here is rewritten in place (it
    is ours), before its external data is read, so a large model is held in memory once, embedded
    weights included; a given ModelProto is copied, never changed.
    ``allow_tf32`` writes the plugin attribute ``allow_tf32 = 1`` on every DCN node;
    ``embed_weights`` puts constant weights into the plugin nodes where the target takes them (see
    :func:`dcnconvert.transform.plugin.rewrite_model`).
    """
    import onnx

    from dcnconvert.model import io as onnx_io
    from dcnconvert.transform import plugin as rewrite_mod

    given = isinstance(model_path, onnx.ModelProto)
    # A loaded file's external data is read after the rewrite: embedded weights move as references, and
    # their data is then read once, straight into the plugin nodes (no second copy in memory).
    proto = model_path if given else load_model_timed(model_path, external_data=False)
    if not given and rewrite_mod.quant.has_qdq(proto):  # quantizing a weight reads its values
        with timed("load"):
            onnx_io.load_external_data(proto, model_path)
    tf32 = " (allow_tf32 = 1)" if allow_tf32 else ""
    with timed("rewrite", f"Rewriting DCN nodes for target '{target}'{tf32}"):
        new_model, rep = rewrite_mod.rewrite_model(proto, target, require_match=require_match,
                                                   inplace=not given, allow_tf32=allow_tf32,
                                                   embed_weights=embed_weights)
    if not given:
        with timed("load"):
            onnx_io.load_external_data(new_model, model_path)
    info = rewrite_report_to_dict(rep)
    for text in info["warnings"]:
        add_warning(text)
    known = [m for m in info["matches"] if m.get("form") != "unknown"]
    if not known:
        if require_match:  # rewrite_model raises already; kept for other implementations
            raise errors.NoMatchError(
                f"no deformable convolution node found in {'the model' if given else model_path}",
                hint="check the model with 'dcnconvert inspect'; drop --require-match to accept it",
            )
        log.get_logger().info("no DCN node: the model is written unchanged")
    log.get_logger().info(
        "%d DCN node(s): %d rewritten, %d already in plugin form, %d skipped; %d with embedded weights",
        len(known), len(info["rewritten"]), len(info.get("unchanged") or []), len(info["skipped"]),
        len(info.get("embedded") or []),
    )
    return new_model, {"rewrite": info}
