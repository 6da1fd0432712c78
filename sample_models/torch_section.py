"""The README section on the torch exports, written from ``torch_exports.json`` (no torch needed).

``export_torch.py`` writes the manifest; ``generate.py`` puts this section at the end of README.md, so
``make samples`` and the torch export agree on one README.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Written by export_torch.py: the torch exports, the versions that made them, what was measured.
TORCH_MANIFEST = "torch_exports.json"

TORCH_HEAD = """
## Real exporter output: torch dynamo

The `torch_dynamo_*` files are not made by `generate.py`: `export_torch.py` exports torchvision's
`DeformConv2d` with `torch.onnx.export(..., dynamo=True)` and checks each export against torch
through dcnconvert. Regenerate them with `python3 sample_models/export_torch.py` (needs torch,
torchvision and onnxscript; not part of `make samples`). They were made with {versions}.

The exporter writes the standard ONNX `DeformConv` in the default domain (inputs X, W, offset, B,
mask; no `kernel_shape`; weights and biases are initializers, a module without bias gets a zero
one). The files are saved as exported, less the per-node `{stripped}` metadata (absolute paths of
the exporting machine). Another torch version may export a different graph: they are reproducible
bit for bit only with the same versions.

`<name>.npz` holds fixed inputs and torch's output `y` under the keys `<case>.<name>` (`0.x`,
`0.y`, ...). `{manifest}` lists every file with its inputs, cases, dynamic profile (min/opt/max),
DCN nodes and the max abs errors against torch of, in this order: the export in ONNX Runtime, the
rewritten model with the NumPy plugin reference, `dcnconvert reference` of the rewritten model in
ONNX Runtime.

| file | opset | what | inputs | DCN nodes (`DeformConv` attributes) | max abs error vs torch |
|---|---|---|---|---|---|
"""


def _dims(dims: list) -> str:
    return ", ".join(str(d) for d in dims)


def render_torch_section(folder: Path) -> str:
    """The README section on the torch exports, from ``folder``'s manifest ("" without one)."""
    path = folder / TORCH_MANIFEST
    if not path.exists():
        return ""
    manifest = json.loads(path.read_text(encoding="utf-8"))
    versions = ", ".join(f"{k} {v}" for k, v in manifest["versions"].items())
    rows = []
    for entry in manifest["models"]:
        inputs = ", ".join(f"`{k}` [{_dims(v)}]" for k, v in entry["inputs"].items())
        nodes = "; ".join(
            f"`{n['node']}`: " + ", ".join(f"{k} {v}" for k, v in n["attributes"].items())
            for n in entry["dcn_nodes"]
        )
        errors = " / ".join(f"{v:.2g}" for v in entry["max_abs_error"].values())
        opset = entry["opsets"]["ai.onnx"]
        rows.append(f"| `{entry['file']}` | {opset} | {entry['what']} | {inputs} | {nodes} | {errors} |")
    head = TORCH_HEAD.format(
        versions=versions, stripped=manifest["stripped_metadata"], manifest=TORCH_MANIFEST
    )
    return head + "\n".join(rows) + "\n"
