"""Codegen's looped output (h-tilecg: tiled IR written by hand, then work division, LX and HBM
planning and the real emitters) simulated end to end: every layout case of
tests/codegen/test_tiled_codegen.py gives the numbers numpy gives, and the seed example moves
exactly the compulsory HBM bytes with y only in LX (issue 8 §4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spyrec.sim import simulate
from tests.codegen.test_tiled_codegen import LAYOUTS, SEED, _default_device, compile_text


def write(files: dict, out: Path) -> Path:
    """The directory `compile_text` wrote (its texts, as written, are `files`)."""
    assert (out / "manifest.json").read_text() == files["manifest.json"]
    return out


def test_seed_example_moves_the_compulsory_bytes_and_keeps_y_in_lx(tmp_path):
    files, _ = compile_text(SEED, tmp_path)
    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal((1024, 4096)).astype(np.float16) for _ in range(3))
    result = simulate(write(files, tmp_path / "out"), {"a": a, "b": b, "c": c})
    want = ((a.astype(np.float32) + b).astype(np.float16).astype(np.float32) * c)
    assert np.array_equal(result.outputs[0], want.astype(np.float16))
    totals = result.cost["totals"]
    assert totals["executions"] == 16
    assert totals["hbm_read_bytes"] + totals["hbm_write_bytes"] == 33_554_432   # 4 x 8 MiB
    assert totals["lx_write_bytes"] == totals["lx_read_bytes"] == 8 * 2**20     # y, once each


@pytest.mark.parametrize("case", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_every_layout_case_simulates_to_numpy(case, tmp_path):
    _, xline, opline, loops, zshape, *_ = case
    dtype = "float32" if "fp32" in xline.split("device")[1] else "float16"
    files, _ = compile_text(f"""
    {xline}
    buffer z: output {dtype}{list(zshape)} {_default_device(zshape, dtype)}
    op z: {opline} loops {loops}
    inputs [x]
    outputs [z]
    """, tmp_path)
    xshape = [int(n) for n in xline.split("[", 1)[1].split("]")[0].split(",")]
    x = np.random.default_rng(5).standard_normal(xshape).astype(dtype)
    z = simulate(write(files, tmp_path / "out"), {"x": x}).outputs[0]
    assert np.array_equal(z, x.T if "transposed" in case[0] else x)


def test_a_bias_that_advances_only_under_the_column_loop(tmp_path):
    files, _ = compile_text("""
    buffer x: input float16[256, 128] device [2, 256, 64] / [64, 128, 1] fp16
    buffer bias: input float16[128] device [2, 1, 64] / [64, -1, 1] fp16
    buffer z: output float16[256, 128] device [2, 256, 64] / [64, 128, 1] fp16
    op z: z[128*c0 + c1] = add(x[128*c0 + c1], bias[c1]) over [c0<128, c1<64] \\
    loops [2(c0)@g0.0, 2(c1)@g0.1]
    inputs [x, bias]
    outputs [z]
    """, tmp_path, cores=4)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((256, 128)).astype(np.float16)
    bias = rng.standard_normal(128).astype(np.float16)
    z = simulate(write(files, tmp_path / "out"), {"x": x, "bias": bias}).outputs[0]
    assert np.array_equal(z, (x.astype(np.float32) + bias).astype(np.float16))
