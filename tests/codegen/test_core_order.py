"""A var cut into several SuperDSC labels keeps its slices in core order (codegen/superdsc.py
`_core_slices`).

GQA's repeated keys: `x[:, :, None].expand(1, 2, 2, S, D).reshape(1, 4, S, D)` reads head h of
the [1, 4, S, D] result at x's head h // 2, so the op computing `k * 2` cuts h into two labels
(h // 2 and h % 2). Split over 4 cores along h, both labels are split. ir/lx.py plans the LX
buffer of `k * 2` with core c holding the c-th contiguous slice of h, as its reader (which has
h as one label) runs it; HEAD's core map walks labels in order, the first split one fastest,
and would give core 1 the slice h = 2: each core would read another core's LX slice. The map
in the file walks a var's labels least significant first; these tests pin that the buffer is in
LX and equals eager, and that HEAD's order in the same file is caught by the simulator. The
per-core list of opspecs.json is in the same order (its core c is the file's core c).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from spyrec.errors import SimulatorFault
from spyrec.sim import simulate
from tests.programs import compile_pt2, export, op_documents


class RepeatedHeads(torch.nn.Module):
    def forward(self, x):
        k = x[:, :, None].expand(1, 2, 2, 64, 64).reshape(1, 4, 64, 64)
        return k * 2.0 + 1.0


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("core_order")
    x = torch.randn(1, 2, 64, 64, dtype=torch.float16)
    pt2 = export(tmp, RepeatedHeads(), (x,), "gqa")
    # the fixed-order split: batch 1, heads 4, rows 8 (32 cores), the same for both ops
    out = compile_pt2(pt2, tmp / "out", sets=["work_division.strategy=greedy"])
    return out, x


def _wrapper(out, index: int) -> tuple[dict, dict]:
    """The one-op document and wrapper of op `index`: its file's, or its member's in a
    fused file (docs/formats.md, Fused SuperDSCs)."""
    doc = op_documents(out)[index]
    return doc, next(iter(doc.values()))


def test_the_repeated_heads_stay_in_lx_and_equal_eager(compiled):
    out, x = compiled
    manifest = json.loads((out / "manifest.json").read_text())
    mul = next(t for t in manifest["tensors"] if t["name"] == "mul")
    assert mul["hbm_address"] is None and mul["lx_bytes_per_core"] == 4 * 64 * 64 * 2 // 32
    _, writer = _wrapper(out, 0)
    split = [label for label, k in writer["numWkSlicesPerDim_"].items() if k > 1]
    assert len(split) == 3            # h's two labels and the rows
    result = simulate(out, {"x": x.numpy()})
    with torch.no_grad():
        eager = RepeatedHeads()(x).numpy()
    np.testing.assert_array_equal(result.outputs[0], eager)


def test_heads_order_of_the_core_map_is_caught(tmp_path, monkeypatch):
    """Emitted with HEAD's map instead (labels in order, the first split fastest; the file
    consistent otherwise), cores read each other's LX slices: the simulator's per-core LX
    tags name it."""
    import spyrec.codegen.superdsc as superdsc

    x = torch.randn(1, 2, 64, 64, dtype=torch.float16)
    pt2 = export(tmp_path, RepeatedHeads(), (x,), "gqa")
    monkeypatch.setattr(superdsc, "_least_significant_first", list)
    out = compile_pt2(pt2, tmp_path / "out", sets=["work_division.strategy=greedy"])
    with pytest.raises(SimulatorFault, match=r"core 1 reads LX arg 'mul' .* holds stick 128 "
                       r"of the tile, not stick 64: the op that wrote it split the tile"):
        simulate(out, {"x": x.numpy()})


def test_opspec_cores_are_the_superdsc_cores(tmp_path):
    """opspecs.json lists each op's cores in its SuperDSC file's order: core c's start address
    of every HBM arg is the file's for core c (decoder_fp32: ops split over batch x heads,
    batch x columns and one var alone)."""
    from samples.models import SAMPLES

    module, inputs = SAMPLES["decoder_fp32"]()
    out = compile_pt2(export(tmp_path, module, inputs, "decoder"), tmp_path / "out")
    specs = json.loads((out / "opspecs.json").read_text())["kernels"][0]["specs"]
    multi = 0
    for index, spec in enumerate(specs):
        _, wrapper = _wrapper(out, index)
        (dsc,) = wrapper["dscs_"][0].values()
        multi += sum(1 for _, k in spec["iteration_space"].values() if k > 1) > 1
        for arg, node in enumerate(dsc["scheduleTree_"]):
            if node["component_"] != "hbm":
                continue
            theirs = {int(key.strip("[]").split(",")[0]): int(address) for key, address
                      in node["startAddressCoreCorelet_"]["data_"].items()}
            ours = {c["core"]: c["arg_start_bytes"][arg] for c in spec["cores"]}
            assert ours == theirs, (spec["name"], arg)
    assert multi >= 10                  # ops split over two vars or more
