"""stage_inputs: an input several accesses read with one per-core slicing is copied once into
an intermediate that scratchpad_planning keeps in LX (inside a loop: a per-tile copy each
trip), so it crosses HBM once; the programs still equal eager (simulated, LX modelled per
core)."""

import torch

from tests.differential.harness import run_and_compare
from tests.programs import Lambda, load_json


def _rms_residual(m, x):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) + x


def _compile(tmp_path, name, *sets):
    x = torch.randn(8, 127, 256, generator=torch.Generator().manual_seed(0))
    (tmp_path / name).mkdir()
    out = run_and_compare(tmp_path / name, Lambda(_rms_residual), (x,), sets=list(sets))
    return load_json(out / "report.json")


def test_an_input_read_four_times_crosses_hbm_once(tmp_path):
    staged = _compile(tmp_path, "staged")
    whole = _compile(tmp_path, "whole", "stage_inputs.enabled=false")
    (row,) = staged["stage_inputs"]
    # x * x reads x twice, x * rsqrt(..) once, + x once: one slicing (8 batch rows per core)
    assert row == {"input": "args_0", "buffer": "args_0__staged", "reads": 4,
                   "split": {"c0": 8, "c1": 1, "c2": 1}, "bytes_per_core": 130_048}
    assert {b["buffer"]: b["placed"] for b in staged["scratchpad"]["buffers"]}["args_0__staged"]
    x_bytes = 8 * 127 * 256 * 4
    reads = [r["cost"]["totals"]["hbm_read_bytes"] for r in (staged, whole)]
    assert reads == [x_bytes, 4 * x_bytes]           # the output write is the rest
    assert whole["stage_inputs"] == []


def test_a_slice_too_large_for_its_share_of_lx_is_not_staged(tmp_path):
    report = _compile(tmp_path, "small", "stage_inputs.max_fraction=0.01")
    assert report["stage_inputs"] == []
    assert report["cost"]["totals"]["hbm_read_bytes"] == 4 * 8 * 127 * 256 * 4


def test_a_copy_lx_would_not_hold_is_not_made(tmp_path):
    """The staged copy exists only if scratchpad_planning would place it: with a 100,000-byte
    budget the 130,048-byte slice does not fit, so x is read from HBM four times as before
    (a copy left in HBM would add a write and a read)."""
    report = _compile(tmp_path, "tight", "stage_inputs.budget_bytes=100000")
    assert report["stage_inputs"] == []
    assert report["cost"]["totals"]["hbm_read_bytes"] == 4 * 8 * 127 * 256 * 4


def test_a_tiled_softmax_reads_each_row_tile_once(tmp_path):
    """configs/tiling/softmax_rows.yaml: 4 tiles of 64 rows of x [256, 512] fp16. The max pass
    and the subtract read the same tile every trip, so an in-loop copy writes it into a
    per-tile LX buffer (64 rows x 8 sticks / 32 cores = 2 KiB each) and both read that: x
    crosses HBM once, 786,432 -> 524,288 bytes, which is compulsory (x in, softmax out)."""
    from pathlib import Path

    from samples.tiling import TILING_SAMPLES

    module, inputs = TILING_SAMPLES["softmax_rows"]()
    config = Path(__file__).resolve().parents[2] / "configs/tiling/softmax_rows.yaml"
    moved = []
    for on in (True, False):
        (tmp_path / str(on)).mkdir()
        out = run_and_compare(tmp_path / str(on), module, inputs, tiling=config,
                              sets=[f"stage_inputs.enabled={str(on).lower()}"])
        report = load_json(out / "report.json")
        totals = report["cost"]["totals"]
        moved.append(totals["hbm_read_bytes"] + totals["hbm_write_bytes"])
        if on:
            (row,) = report["stage_inputs"]
            assert row == {"input": "x", "buffer": "x__tile", "reads": 2,
                           "split": {"c0": 32, "c1": 1}, "bytes_per_core": 2048,
                           "per_tile": True}
            body = load_json(out / "opspecs.json")["kernels"][0]["specs"][0]["loop"]["body"]
            assert [s["name"] for s in body][:2] == ["x__tile", "softmax__1"]
            assert ("  x -> x__tile: 2 reads each trip (a per-tile copy in the loop), 2048 "
                    "bytes/core, cores [c0:32, c1:1]") in (out / "report.txt").read_text()
    assert moved == [524_288, 786_432]
