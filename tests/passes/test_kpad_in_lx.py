"""A buffer with two writers in LX: matmul_padding's `v__kpad` (attention_fp32: softmax(q k^T)
@ v, batch 2 x 4 heads, 100 tokens, K padded 100 -> 128 rows of 64 fp32 lanes).

The copy of v writes rows 0..99 and the zero fill rows 100..127 of each (batch, head); split
over batch x heads, each core's slice is one whole [128, 64] block (32 KiB), the copy starts
at the slice and the fill 100 rows (25,600 bytes) into it: one LX start address per op, the
same on every core. Before, the two writers' different boxes kept the buffer in HBM (a 1.53x
traffic program); now the program moves exactly its compulsory bytes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from samples.models import SAMPLES
from spyrec.sim import simulate
from tests.programs import compile_pt2, export, op_documents

ROW_BYTES = 64 * 4                 # one K row of v: 64 fp32 = 2 sticks


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kpad")
    module, inputs = SAMPLES["attention_fp32"]()
    return export(tmp, module, inputs, "attention"), module, inputs


def _start(out, name: str, arg: int) -> set[int]:
    """The start addresses of arg `arg` of the op named `name`, over its cores."""
    spec = json.loads((out / "opspecs.json").read_text())
    index = next(i for i, s in enumerate(spec["kernels"][0]["specs"]) if s["name"] == name)
    wrapper = op_documents(out)[index]
    (dsc,) = next(iter(wrapper.values()))["dscs_"][0].values()
    node = dsc["scheduleTree_"][arg]
    assert node["component_"] == "lx"
    return {int(a) for a in node["startAddressCoreCorelet_"]["data_"].values()}


def test_both_writers_share_one_lx_slice_per_core(sample, tmp_path):
    pt2, module, inputs = sample
    out = compile_pt2(pt2, tmp_path / "out")
    manifest = json.loads((out / "manifest.json").read_text())
    kpad = next(t for t in manifest["tensors"] if t["name"] == "v__kpad")
    assert kpad["hbm_address"] is None and kpad["lx_bytes_per_core"] == 128 * ROW_BYTES
    base = kpad["lx_address"]
    assert _start(out, "v__kpad.1", 1) == {base}                      # the copy: rows 0..99
    assert _start(out, "v__kpad", 0) == {base + 100 * ROW_BYTES}      # the fill: 100..127
    totals = json.loads((out / "report.json").read_text())["cost"]["totals"]
    assert totals["hbm_read_bytes"] + totals["hbm_write_bytes"] == 876_544   # compulsory
    result = simulate(out, {n: t.numpy() for n, t in zip(manifest["inputs"], inputs)})
    with torch.no_grad():
        eager = module(*inputs).numpy()
    np.testing.assert_allclose(result.outputs[0], eager, rtol=1e-4, atol=1e-5)


def test_writers_split_apart_keep_it_in_hbm(sample, tmp_path, monkeypatch):
    """Without work_division aligning the fill's split to the copy's, the fill splits its 28
    rows over cores the copy does not: no core holds one slice, so the buffer stays in HBM
    and the report says why."""
    from spyrec.plan import core_splits

    monkeypatch.setattr(core_splits, "align_cowriters",
                        lambda graph, producers, rows, cores: producers.plan)
    pt2, _, _ = sample
    out = compile_pt2(pt2, tmp_path / "out")
    rows = {r["buffer"]: r for r in
            json.loads((out / "report.json").read_text())["scratchpad"]["buffers"]}
    assert rows["v__kpad"]["placed"] is False
    assert "does not give each core a separate whole slice" in rows["v__kpad"]["reason"] or \
        "do not write parts of one slice per core" in rows["v__kpad"]["reason"]
