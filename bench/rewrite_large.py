#!/usr/bin/env python3
"""Benchmark ``dcnconvert rewrite`` on a large synthetic model (≈1 GB of weights, 100 DCN nodes).

The model is a chain of ``--nodes`` blocks, each an offset/mask ``Conv`` (C -> 3·k·k channels), a
``Slice`` + ``Sigmoid`` for the mask and an mmcv ``MMCVModulatedDeformConv2d`` (C -> C, k×k, with
bias). With C = 512, k = 3 each block holds 9.4 MB of DCN weights and 0.5 MB of Conv weights:
100 blocks ≈ 1.0 GB. The model is saved with external data (one ``.data`` file) in a temporary
folder, then ``python -m dcnconvert rewrite MODEL -o OUT --json`` runs in a subprocess; its wall
time and peak resident memory (``ru_maxrss`` of that subprocess, from ``os.wait4``)
are reported, together with dcnconvert's own step timings (load / rewrite / save).

Usage::

    python bench/rewrite_large.py                   # the documented benchmark (needs ~3 GB disk)
    python bench/rewrite_large.py --nodes 10 --json # smaller, machine-readable

Goal (issue 2): < 5 s and peak RSS < 1.5x the model size. Results: docs/rewrite_large.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build_model(nodes: int, channels: int, kernel: int, spatial: int, seed: int = 0) -> onnx.ModelProto:
    """A chain of ``nodes`` mmcv modulated-DCN blocks (weights random float32, deterministic)."""
    rng = np.random.default_rng(seed)
    k2 = kernel * kernel
    pad = kernel // 2
    inits, graph_nodes = [], []
    prev = "input"
    for i in range(nodes):
        w_om = (rng.standard_normal((3 * k2, channels, kernel, kernel), dtype=np.float32) * 0.01)
        w_dcn = rng.standard_normal((channels, channels, kernel, kernel), dtype=np.float32)
        w_dcn *= np.float32(1.0 / np.sqrt(channels * k2))
        b_dcn = rng.standard_normal((channels,), dtype=np.float32) * np.float32(0.01)
        inits += [
            numpy_helper.from_array(w_om, f"blk{i}.om.weight"),
            numpy_helper.from_array(w_dcn, f"blk{i}.dcn.weight"),
            numpy_helper.from_array(b_dcn, f"blk{i}.dcn.bias"),
        ]
        graph_nodes += [
            helper.make_node("Conv", [prev, f"blk{i}.om.weight"], [f"blk{i}.om"], name=f"blk{i}.om_conv",
                             pads=[pad] * 4, kernel_shape=[kernel, kernel]),
            helper.make_node("Slice", [f"blk{i}.om", "c0", "c2k", "axis1"], [f"blk{i}.offset"],
                             name=f"blk{i}.offset_slice"),
            helper.make_node("Slice", [f"blk{i}.om", "c2k", "c3k", "axis1"], [f"blk{i}.mask_logits"],
                             name=f"blk{i}.mask_slice"),
            helper.make_node("Sigmoid", [f"blk{i}.mask_logits"], [f"blk{i}.mask"], name=f"blk{i}.sigmoid"),
            helper.make_node(
                "MMCVModulatedDeformConv2d",
                [prev, f"blk{i}.offset", f"blk{i}.mask", f"blk{i}.dcn.weight", f"blk{i}.dcn.bias"],
                [f"blk{i}.out"], name=f"blk{i}.dcn", domain="mmcv",
                stride=[1, 1], padding=[pad, pad], dilation=[1, 1], groups=1, deform_groups=1,
            ),
        ]
        prev = f"blk{i}.out"
    inits += [
        numpy_helper.from_array(np.array([0], np.int64), "c0"),
        numpy_helper.from_array(np.array([2 * k2], np.int64), "c2k"),
        numpy_helper.from_array(np.array([3 * k2], np.int64), "c3k"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
    ]
    graph = helper.make_graph(
        graph_nodes, "rewrite_large",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", channels, spatial, spatial])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["N", channels, spatial, spatial])],
        initializer=inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("mmcv", 1)],
        producer_name="dcnconvert-bench",
    )


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def run_rewrite(model: Path, out: Path, extra: list[str]) -> dict:
    """Run ``python -m dcnconvert rewrite`` in a child; its wall time, peak RSS (``wait4``) and JSON."""
    cmd = [sys.executable, "-m", "dcnconvert", "rewrite", str(model), "-o", str(out), "--json", *extra]
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read(), err_f.read()
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        report = None
    return {"cmd": cmd, "rc": proc.returncode, "wall_s": wall, "peak_rss_bytes": usage.ru_maxrss * 1024,
            "report": report, "stderr_tail": stderr[-2000:]}


def baseline_import_time() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import dcnconvert.cli.main, onnx, onnx_graphsurgeon"], check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100, help="number of DCN blocks (default 100)")
    parser.add_argument("--channels", type=int, default=512, help="channels of every DCN (default 512)")
    parser.add_argument("--kernel", type=int, default=3, help="kernel size (default 3)")
    parser.add_argument("--spatial", type=int, default=64, help="declared H = W of the input (default 64)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the files here (default: temp)")
    parser.add_argument("--target", default=None, help="pass --target to rewrite")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--inline", action="store_true",
                        help="save the model as one protobuf file instead of .onnx + .data")
    parser.add_argument("--generate-only", type=Path, default=None, metavar="PATH",
                        help="only write the model to PATH (the benchmark runs this in a child process)")
    args = parser.parse_args()
    if args.generate_only:
        model = build_model(args.nodes, args.channels, args.kernel, args.spatial)
        if args.inline:
            onnx.save_model(model, args.generate_only)
        else:
            onnx.save_model(model, args.generate_only, save_as_external_data=True,
                            all_tensors_to_one_file=True, location=args.generate_only.name + ".data",
                            size_threshold=1024)
        return 0

    work = args.workdir or Path(tempfile.mkdtemp(prefix="dcnconvert-bench-"))
    src_dir, out_dir = work / "in", work / "out"
    for d in (src_dir, out_dir):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    try:
        t0 = time.perf_counter()
        path = src_dir / "large.onnx"
        # Generated in a child: Linux carries a parent's peak RSS over fork+exec into the child's
        # ru_maxrss, so this process must stay small for the measurement below to be the rewrite's.
        subprocess.run([sys.executable, __file__, "--generate-only", str(path), "--nodes", str(args.nodes),
                        "--channels", str(args.channels), "--kernel", str(args.kernel),
                        "--spatial", str(args.spatial)] + (["--inline"] if args.inline else []), check=True)
        gen_s = time.perf_counter() - t0
        model_bytes = folder_size(src_dir)
        print(f"generated {path} ({model_bytes / 2**20:.0f} MiB) in {gen_s:.1f} s", file=sys.stderr)

        import_s = baseline_import_time()
        extra = ["--target", args.target] if args.target else []
        res = run_rewrite(path, out_dir / "large.rewritten.onnx", extra)
        out_bytes = folder_size(out_dir)
        result = {
            "layout": "inline" if args.inline else "external data",
            "nodes": args.nodes,
            "channels": args.channels,
            "model_bytes": model_bytes,
            "output_bytes": out_bytes,
            "rc": res["rc"],
            "wall_s": round(res["wall_s"], 3),
            "python_import_s": round(import_s, 3),
            "peak_rss_bytes": res["peak_rss_bytes"],
            "peak_rss_over_model": round(res["peak_rss_bytes"] / model_bytes, 3),
            "steps_s": (res["report"] or {}).get("timings"),
            "rewritten": len(((res["report"] or {}).get("rewrite") or {}).get("rewritten") or []),
            "goal_met": bool(res["rc"] == 0 and res["wall_s"] < 5.0
                             and res["peak_rss_bytes"] < 1.5 * model_bytes),
            "cpu_count": os.cpu_count(),
        }
        if res["rc"] != 0:
            result["stderr_tail"] = res["stderr_tail"]
        if args.json:
            print(json.dumps(result))
        else:
            print(f"model          : {args.nodes} DCN blocks, {model_bytes / 2**20:.0f} MiB, "
                  f"{result['layout']} (output {out_bytes / 2**20:.0f} MiB)")
            print(f"rewrite        : rc={res['rc']}, {res['wall_s']:.2f} s wall "
                  f"(python+imports alone: {import_s:.2f} s), {result['rewritten']} node(s) rewritten")
            print(f"steps          : {result['steps_s']}")
            print(f"peak RSS       : {res['peak_rss_bytes'] / 2**20:.0f} MiB "
                  f"= {result['peak_rss_over_model']:.2f}x the model")
            print(f"goal (<5 s, <1.5x): {'met' if result['goal_met'] else 'NOT met'}")
            if res["rc"] != 0:
                print(res["stderr_tail"], file=sys.stderr)
        return 0 if res["rc"] == 0 else 1
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
