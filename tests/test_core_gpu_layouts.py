"""Channel-last x and prepared weights (``DcnParams.xLayout``, ``weightLayout``, dcnPrepareWeights).

The fused kernels read x channel-last and the weights in their K order either way: a call with
x already channel-last, with the weights prepared once, or both (no prep pass at all) must give
the bits of the call that prepares both itself, on every tile (forced), AUTO and the simple kernel,
in every element type and math, and stay within the float64 reference's bound. Kernels that read
NCHW (the NCHW tiles, the simple kernel) get an NCHW copy of channel-last x."""

from __future__ import annotations

import numpy as np
import pytest
from support import core, core_fused
from support.core_cases import (
    DTYPES,
    U_TF32,
    Case,
    check_close,
    device_has_fused,
    ensure_core_built,
    inputs_refs,
    record_summary,
    run_core,
)

LAYOUT_CASES: list[Case] = [
    # 64 channels: every channel-vectorised tile; stride 2 and non-square padding
    Case("l_c64_s2", 2, 64, 14, 11, 96, (3, 3), (2, 1), (1, 0), off_scale=2.5),
    # 2 groups, 2 deformable groups, non-square dilation; 128 channels for the 64-channel chunks
    Case("l_c128_g2_dg2", 1, 128, 12, 9, 64, (3, 3), (1, 1), (2, 1), (2, 1), group=2, dg=2, off_scale=3.0),
    # 40 channels: the channel-vectorised kernel does not apply (NCHW tiles, simple kernel)
    Case("l_c40", 2, 40, 9, 13, 24, (3, 3), padding=(1, 1), off_scale=2.0),
]
PATHS = ((True, False), (False, True), (True, True))  # (channel_last, prepared)


@pytest.fixture(scope="module")
def lib():
    return core.load(ensure_core_built())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [*DTYPES, "tf32"])
@pytest.mark.parametrize("case", LAYOUT_CASES, ids=[c.name for c in LAYOUT_CASES])
def test_layouts_give_the_bits_of_the_default_path(lib, case: Case, dtype: str) -> None:
    from dcnconvert.errors import UnsupportedNodeError

    data_type = "float32" if dtype == "tf32" else dtype
    math = core.MATH_TF32 if dtype == "tf32" else core.MATH_ACCURATE
    inputs, ref, absref = inputs_refs(case, data_type)
    algos = [core.ALGO_AUTO, core.ALGO_SIMPLE]
    if device_has_fused():
        algos += [core.ALGO_FUSED_TILE + t.index for t in core_fused.tile_infos(lib)]
    ran = 0
    for algo in algos:
        try:
            base = run_core(lib, case, data_type, inputs, algo, math=math)
        except UnsupportedNodeError:
            continue  # a tile that does not take the case (test_core_gpu_fused checks the reasons)
        ran += 1
        if dtype == "tf32" and algo != core.ALGO_SIMPLE:
            check_close(base, ref, "float32", absref, u_operand=2 * U_TF32 + U_TF32**2)
        elif data_type == "float32" or algo == core.ALGO_SIMPLE:
            check_close(base, ref, data_type)
        else:
            numbers = check_close(base, ref, data_type, absref)
            record_summary({"test": "layouts", "case": case.name, "dtype": dtype, "algo": algo, **numbers})
        for channel_last, prepared in PATHS:
            out = run_core(lib, case, data_type, inputs, algo, math=math, channel_last=channel_last,
                           prepared=prepared)
            assert np.array_equal(out, base), (
                f"algo {algo}, channel_last={channel_last}, prepared={prepared}: "
                f"max |diff| {np.max(np.abs(out - base))} against the default path")
    assert ran >= 2, f"only {ran} algorithms took the case"


@pytest.mark.gpu
def test_prepared_weights_serve_every_batch_and_plane(lib) -> None:
    """One prepared buffer (made for one shape) serves the same layer at other batch and spatial
    sizes: dcnPreparedWeightsSize depends on the weights, the element type and the math only."""
    sizes = set()
    for n, h, w in ((1, 9, 9), (3, 20, 7), (2, 33, 40)):
        p = core.make_params((n, 128, h, w), (64, 64, 3, 3), padding=(1, 1), group=2, dtype=core.FLOAT16)
        sizes.add(core.prepared_weights_size(p, lib))
    assert len(sizes) == 1 and next(iter(sizes)) >= 2 * 64 * 64 * 9 * 2, sizes


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_misaligned_channel_last_x_and_prepared_weights_fall_back(lib, dtype: str) -> None:
    """The fused kernel reads channel-last x and prepared weights in 16-byte vectors: buffers 2 or 4
    bytes off alignment make it refuse (forced tile) and AUTO run the simple kernel, within the
    reference's bound."""
    import cupy
    from support.core_cases import from_device, params_for, poisoned_output, to_device

    from dcnconvert.errors import UnsupportedNodeError

    case = LAYOUT_CASES[0]
    inputs, ref, absref = inputs_refs(case, dtype)
    dev = {k: (None if v is None else to_device(v, dtype)) for k, v in inputs.items()}
    x = cupy.ascontiguousarray(dev["x"].transpose(0, 2, 3, 1))
    shifted_x = cupy.empty(x.size + 1, dtype=x.dtype)[1:].reshape(x.shape)
    shifted_x[...] = x
    tile = core_fused.tile_index("regs-128x32", lib)
    for algo in (core.ALGO_AUTO, core.ALGO_FUSED_TILE + tile):
        p = params_for(case, dtype, algo)
        prepared = core.prepare_weights(p, dev["weight"], lib)
        shifted_w = cupy.empty(prepared.size + 4, dtype=cupy.uint8)[4:]
        shifted_w[...] = prepared
        p.xLayout = core.LAYOUT_NHWC
        p.weightLayout = core.WEIGHT_PREPARED
        for xs, ws in ((shifted_x, prepared), (x, shifted_w)):
            _, out = poisoned_output((p.n, p.cout, p.ho, p.wo), dtype)
            if algo != core.ALGO_AUTO:
                with pytest.raises(UnsupportedNodeError, match="16-byte aligned"):
                    core.forward(p, xs, dev["offset"], dev["mask"], ws, dev["bias"], out, lib=lib)
                continue
            core.forward(p, xs, dev["offset"], dev["mask"], ws, dev["bias"], out, lib=lib)
            cupy.cuda.get_current_stream().synchronize()
            check_close(from_device(out, dtype), ref, dtype)
