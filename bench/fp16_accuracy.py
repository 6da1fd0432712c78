"""FP16 accuracy at large coordinates (issue 3 acceptance) and a rough timing for context.

Problem: x 1x32x512x512 ~ N(0, 1), weight 32x32x3x3 ~ N(0, 1/288), 3x3, stride 1, pad 1, one
deformable group, offsets ~ N(0, 2^2) (std 2), mask ~ U(0, 1), no bias. The "true" inputs are float64;
the reference is support.reference (float64) on them. For each reduced dtype:

* floor   = error of exact float64 math on the inputs rounded to the dtype (input rounding alone);
* ours    = error of our core (AUTO; x NCHW, and x channel-last with prepared weights as a
            TensorRT engine runs it) on those rounded inputs (output in the dtype);
* ratio   = ours / floor; the acceptance is ratio <= 3 for FP16.

Errors are ||out - ref|| / ||ref||. torchvision.ops.deform_conv2d is measured on the same rounded
inputs where it runs (FP16, FP32). Prints a table; --json writes every number.

    python3 bench/fp16_accuracy.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from cuda_timing import median_us
from support import core
from support.core_cases import ensure_core_built, from_device, round_to, to_device
from support.reference import modulated_deform_conv2d

N, C, H, W, COUT, K = 1, 32, 512, 512, 32, 3
DTYPES = {"float32": core.FLOAT32, "float16": core.FLOAT16, "bfloat16": core.BFLOAT16}


def rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the numbers here")
    parser.add_argument("--seed", type=int, default=20240604)
    args = parser.parse_args()

    import cupy

    lib = core.load(ensure_core_built())
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((N, C, H, W))
    offset = rng.standard_normal((N, 2 * K * K, H, W)) * 2.0
    mask = rng.uniform(0.0, 1.0, (N, K * K, H, W))
    weight = rng.standard_normal((COUT, C, K, K)) / np.sqrt(C * K * K)
    attrs = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "group": 1, "deformable_group": 1}

    t0 = time.time()
    ref = modulated_deform_conv2d(x, offset, mask, weight, None, **attrs)
    ref_seconds = time.time() - t0
    rows = []
    results = {
        "problem": f"x {N}x{C}x{H}x{W}, weight {COUT}x{C}x{K}x{K}, stride 1, pad 1, dilation 1, "
        "offsets N(0, std 2), mask U(0, 1), no bias",
        "seed": args.seed,
        "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "reference_seconds": ref_seconds,
        "rows": rows,
    }
    params = {}
    for dtype, code in DTYPES.items():
        r = {
            name: round_to(v, dtype)
            for name, v in (("x", x), ("offset", offset), ("mask", mask), ("weight", weight))
        }
        floor = rel(modulated_deform_conv2d(r["x"], r["offset"], r["mask"], r["weight"], None, **attrs), ref)
        p = core.make_params(x.shape, weight.shape, stride=(1, 1), padding=(1, 1), dtype=code)
        params[dtype] = p
        dev = {k: to_device(v, dtype) for k, v in r.items()}
        # The core's AUTO choice twice: x NCHW with the weights as given (the prep pass permutes
        # them per call), and the TensorRT engine's path (x channel-last, weights prepared once).
        pe = core.DcnParams.from_buffer_copy(p)
        pe.xLayout, pe.weightLayout = core.LAYOUT_NHWC, core.WEIGHT_PREPARED
        engine_in = dict(dev)
        engine_in["x"] = cupy.ascontiguousarray(dev["x"].transpose(0, 2, 3, 1))
        engine_in["weight"] = core.prepare_weights(p, dev["weight"], lib)
        for label, pp, inputs in (
            ("dcnconvert core", p, dev),
            ("dcnconvert core (engine path)", pe, engine_in),
        ):
            args_in = (inputs["x"], inputs["offset"], inputs["mask"], inputs["weight"], None)
            out = core.forward(pp, *args_in, lib=lib)
            cupy.cuda.get_current_stream().synchronize()
            ours = rel(from_device(out, dtype), ref)
            us = median_us(
                lambda pp=pp, args_in=args_in, out=out: core.forward(pp, *args_in, out, lib=lib, check=False),
                reps=30,
            )
            rows.append(
                {
                    "impl": label,
                    "dtype": dtype,
                    "rel_l2": ours,
                    "floor": floor,
                    "ratio": ours / floor,
                    "median_us": us,
                }
            )
    try:
        import torch
        import torchvision.ops

        for dtype in ("float32", "float16", "bfloat16"):
            tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
            t = {
                name: torch.from_numpy(round_to(v, dtype)).to("cuda", tdt)
                for name, v in (("x", x), ("offset", offset), ("mask", mask), ("weight", weight))
            }
            floor = next(row["floor"] for row in rows if row["dtype"] == dtype)

            def call(t=t):
                return torchvision.ops.deform_conv2d(
                    t["x"], t["offset"], t["weight"], None, stride=1, padding=1, mask=t["mask"]
                )

            try:
                tv = call().double().cpu().numpy()
            except Exception as exc:  # e.g. no BF16 kernel
                rows.append(
                    {
                        "impl": "torchvision.ops.deform_conv2d",
                        "dtype": dtype,
                        "error": f"{type(exc).__name__}: {exc}"[:200],
                    }
                )
                continue
            torch.cuda.synchronize()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(3):
                call()
            times = []
            for _ in range(30):
                start.record()
                call()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop) * 1e3)
            ours_err = rel(tv, ref)
            rows.append(
                {
                    "impl": "torchvision.ops.deform_conv2d",
                    "dtype": dtype,
                    "rel_l2": ours_err,
                    "floor": floor,
                    "ratio": ours_err / floor,
                    "median_us": float(np.median(times)),
                    "version": torchvision.__version__,
                }
            )
    except ImportError as exc:
        results["torchvision"] = f"not importable: {exc}"

    fp16 = max(
        (row for row in rows if row["impl"].startswith("dcnconvert") and row["dtype"] == "float16"),
        key=lambda row: row["ratio"],
    )
    results["acceptance"] = {"fp16_ratio": fp16["ratio"], "limit": 3.0, "pass": fp16["ratio"] <= 3.0}
    print(f"\nFP16 accuracy at large coordinates on {results['device']}: {results['problem']}")
    print(
        f"{'implementation':31s} {'dtype':9s} {'rel L2 err':>11s} {'floor':>10s} {'ratio':>8s} "
        f"{'median us':>10s}"
    )
    for row in rows:
        if "error" in row:
            print(f"{row['impl']:31s} {row['dtype']:9s} {row['error']}")
            continue
        print(
            f"{row['impl']:31s} {row['dtype']:9s} {row['rel_l2']:11.3e} {row['floor']:10.3e} "
            f"{row['ratio']:8.2f} {row['median_us']:10.1f}"
        )
    verdict = "PASS" if results["acceptance"]["pass"] else "FAIL"
    print(f"acceptance (ours FP16 <= 3 x floor): ratio {fp16['ratio']:.2f} -> {verdict}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if results["acceptance"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
