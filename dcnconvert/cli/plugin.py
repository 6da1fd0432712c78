"""The ``plugin`` command group: ``dcnconvert plugin build`` (added by :func:`register`).

A thin click layer over :func:`dcnconvert.backend.plugin.compile.build_plugin`, with the conventions of
:mod:`dcnconvert.cli.common` (``-v/-q/--json``, one JSON object, exit codes, logs and make's progress on
stderr). The library path goes to stdout, so that ``$(dcnconvert plugin build -q)`` is the path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dcnconvert import log
from dcnconvert.cli.common import add_output, common_options, run_command


def register(group: click.Group) -> None:
    """Add the ``plugin`` group (``plugin build``) to ``group``."""

    @group.group("plugin")
    def plugin() -> None:
        """Build the plugin library (for source installs, and TensorRT versions no wheel carries)."""

    @plugin.command("build")
    @click.option("--runtime", type=click.Choice(["auto", "tensorrt", "tensorrt-rtx"]), default="auto",
                  show_default=True, help="The runtime the library registers in: TensorRT (built with the "
                  "headers of its major), or TensorRT-RTX 1.5+ (built with TensorRT 11's headers, its ABI). "
                  "auto: TensorRT if it is installed, else TensorRT-RTX if it is.")
    @click.option("--tensorrt-version", default=None, metavar="VERSION",
                  help="The TensorRT to build for, e.g. 10.16.1.11 (default: the installed one); with "
                  "--runtime tensorrt-rtx, the TensorRT-RTX version, e.g. 1.7.1.116.")
    @click.option("--arch", "archs", multiple=True, metavar="SM",
                  help="GPU architecture to build SASS for: sm_90, 90 or 9.0 (repeatable or comma separated; "
                  "default: this machine's GPUs). PTX of the newest one is embedded too.")
    @click.option("--headers", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
                  help="TensorRT's include/ folder (holding NvInfer.h), used as given (default: the usual "
                  "install places, then headers fetched into the cache).")
    @click.option("--headers-source", default=None, metavar="SOURCE",
                  help="Where to fetch headers from: a URL template with {tag} (default: the NVIDIA/TensorRT "
                  "GitHub tarball), a git clone, or a folder holding <tag>/include "
                  "(also $DCNCONVERT_HEADERS_SOURCE).")
    @click.option("--force", is_flag=True, help="Rebuild everything even if the cache has this library.")
    @click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Parallel make jobs (default: the number of CPUs).")
    @common_options
    def build(runtime: str, tensorrt_version: str | None, archs: tuple[str, ...], headers: Path | None,
              headers_source: str | None, force: bool, jobs: int | None, json_mode: bool) -> None:
        """Compile the plugin library for a TensorRT (or TensorRT-RTX) version and cache it; print its path.

        The cache (~/.cache/dcnconvert, or $DCNCONVERT_CACHE_DIR) keeps one library per runtime and
        version, CUDA version and architectures; the same build again is a cache hit. 'plugin-path'
        and the engine commands find the library there. Needs nvcc ($NVCC, PATH or the CUDA folders)
        and make; the TensorRT headers are fetched from the TensorRT OSS repository if none are found.
        """

        def work() -> dict[str, Any]:
            from dcnconvert.backend.plugin import compile as plugin_build
            from dcnconvert.backend.plugin.library import default_runtime

            chosen = runtime
            if runtime == "auto":
                chosen, why = default_runtime(tensorrt_version)
                log.get_logger().info("runtime: %s (%s; choose with --runtime)", chosen, why)
            result = plugin_build.build_plugin(tensorrt_version, archs, headers, headers_source, force, jobs,
                                               runtime=chosen)
            log.get_logger().info("plugin library: %s (%s)", result.library,
                                  "cache hit" if result.cache_hit else f"built in {result.seconds:.1f} s")
            add_output("plugin_library", str(result.library))
            return result.to_dict()

        run_command("plugin build", json_mode, work, render=lambda r: r.get("plugin_library"),
                    inputs={"runtime": runtime, "tensorrt_version": tensorrt_version, "archs": list(archs)})


__all__ = ["register"]
