"""The ``quantize`` command (added by :func:`register`): a thin click layer over
:func:`dcnconvert.api.quantize`, with the conventions of :mod:`dcnconvert.cli.common`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dcnconvert.cli.common import common_options, run_command
from dcnconvert.report import format_summary


def _render(result: dict[str, Any]) -> str:
    report = result.get("quantize") or {}
    lines = []
    for row in report.get("layers", []):
        out = f", output scale {row['output_scale']:.6g}" if row.get("output_scale") is not None else ""
        lines.append(f"{row['node']}: x scale {row['x_scale']:.6g}, weight scales "
                     f"{row['weight_scale_min']:.6g}..{row['weight_scale_max']:.6g}{out}")
    for row in report.get("skipped", []):
        lines.append(f"{row['node']}: left in float ({row['reason']})")
    summary = format_summary(result)
    return "\n".join(lines + ([summary] if summary else []))


def register(group: click.Group) -> None:
    """Add the ``quantize`` command to ``group``."""

    @group.command("quantize")
    @click.argument("model", type=click.Path(exists=True, dir_okay=False, path_type=Path))
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
                  help="Path of the Q/DQ model.")
    @click.option("--type", "quant_type", type=click.Choice(["int8", "fp8e4m3"]), default="int8",
                  show_default=True, help="int8: symmetric INT8 (scale amax/127); fp8e4m3: FP8 E4M3FN "
                  "(scale amax/448; the plugin runs it on sm_89 and later).")
    @click.option("--inputs", "inputs", multiple=True, metavar="FILE.npz",
                  type=click.Path(exists=True, dir_okay=False, path_type=Path),
                  help="A calibration input: an .npz holding one array per model input (repeatable; "
                  "the format of 'verify --inputs'). Default: --samples random inputs.")
    @click.option("--samples", type=int, default=8, show_default=True,
                  help="Random calibration inputs (uniform in [-1, 1)) when no --inputs is given.")
    @click.option("--seed", type=int, default=0, show_default=True, help="Seed of the first random input.")
    @click.option("--shapes", multiple=True, metavar="NAME:DIMS",
                  help="Shapes of the random inputs for dynamic model inputs, e.g. x:1x3x64x64.")
    @click.option("--quantize-output", is_flag=True,
                  help="Quantize each DCN's output too (Q/DQ after the node, scale from its calibrated "
                  "amax).")
    @click.option("--node", "nodes", multiple=True, metavar="NAME",
                  help="Quantize only this DCN node (repeatable; default: every DCN node that can be).")
    @common_options
    def quantize(model: Path, output: Path, quant_type: str, inputs: tuple[Path, ...], samples: int,
                 seed: int, shapes: tuple[str, ...], quantize_output: bool, nodes: tuple[str, ...],
                 json_mode: bool) -> None:
        """Calibrate the DCN layers of the float MODEL and write it with Q/DQ nodes to OUTPUT.

        The float model runs in ONNX Runtime (CPU) on the calibration inputs; the largest magnitude
        of each DCN's x input (and output, with --quantize-output) gives its per-tensor scale, the
        constant weights get one scale per output channel. Q/DQ nodes follow ModelOpt's pattern:
        x -> QuantizeLinear -> DequantizeLinear -> DCN, weight -> QuantizeLinear -> DequantizeLinear
        (axis 0); offset, mask and bias stay float. 'dcnconvert rewrite' or 'convert' turns each
        quantized DCN into a quantized plugin node. DCN nodes that cannot be quantized (weight not a
        constant, x already dequantized) are left in float with a warning.
        """

        def work() -> dict[str, Any]:
            from dcnconvert import api

            return api.quantize(model, output, quant_type=quant_type, inputs=inputs, samples=samples,
                                seed=seed, shapes=shapes, quantize_output=quantize_output, nodes=nodes)

        run_command("quantize", json_mode, work, render=_render, inputs={"model": str(model)})
