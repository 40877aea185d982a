"""Replicated producers (ir/lx.py): an op computed alike on several core groups so that a
reader split over a var its input does not use still reads that input from its own LX.

Program: RMSNorm of x [8, 127, 1024] fp32 (batch 8, 127 rows: the rows split only over the
batch), then h @ W with W [1024, 256]. On the batch alone the matmul (compute-bound: 266M
MACs) runs on 8 cores; split
batch 8 x N 4 it runs on 32, but each of the 4 N-cores of a batch needs that batch's whole
rows of h. The chain move replicates the norm 4 ways (`rep:4`, the copy index slowest in
core order: core b + 8 * copy holds batch b, as the matmul's core b + 8 * n reads it).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from spyrec.errors import InternalError, SimulatorFault
from spyrec.sim import simulate
from tests.programs import compile_pt2, export

ONE_OP = ["fusion.enabled=false"]    # the work_division plans priced as they are planned

X_SHAPE = (8, 127, 1024)


class NormLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w = torch.nn.Parameter(torch.randn(1024, 256, generator=g) / 32)

    def forward(self, x):
        h = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)
        return h @ self.w


@pytest.fixture(scope="module")
def pt2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replicas")
    x = torch.randn(*X_SHAPE, generator=torch.Generator().manual_seed(5))
    return export(tmp, NormLinear().eval(), (x,), "p"), x


def _report(out) -> dict:
    return json.loads((out / "report.json").read_text())


def _splits(report: dict) -> dict[str, str]:
    return {row["op"]: row["split"] for row in report["work_division"]["ops"]}


def _run(out, x) -> np.ndarray:
    return simulate(out, {"x": x.numpy()}).outputs[0]


def test_the_norm_is_replicated_for_the_n_split_matmul(pt2, tmp_path):
    path, x = pt2
    out = compile_pt2(path, tmp_path / "on")
    splits = _splits(_report(out))
    assert splits["matmul"] == "[c0:8, c1:1, c2:4, r0:1]"
    norm = [op for op in splits if op != "matmul" and "staged" not in op]
    assert norm and all(splits[op].endswith("rep:4]") for op in norm), splits
    # h never crosses HBM: the matmul reads x's norm from LX, only W and x come from HBM
    lx = {row["buffer"]: row["placed"] for row in _report(out)["scratchpad"]["buffers"]}
    assert all(lx.values()), lx
    eager = NormLinear().eval()(x).detach().numpy()
    got = _run(out, x)
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-4)


def test_replicas_beat_the_batch_split(pt2, tmp_path):
    path, _ = pt2
    # one-op SuperDSCs, as work_division prices them (fusion, after it, re-times the chains)
    on = _report(compile_pt2(path, tmp_path / "on", sets=ONE_OP))["cost"]["totals"]
    off = _report(compile_pt2(path, tmp_path / "off",
                              sets=["work_division.replicas=false"] + ONE_OP))
    off = off["cost"]["totals"]
    # the matmul: 8 cores at 21.7 us of compute -> 32 cores, memory-bound at 10.2 us
    # (W and the output); the norm's per-core work is the same on every copy
    assert off["time_us"] - on["time_us"] == pytest.approx(11.47, abs=0.05), (on, off)
    # the copies read x as one broadcast per batch slice (4 cores share it): HBM bytes equal
    assert (on["hbm_read_bytes"], on["hbm_write_bytes"]) == \
        (off["hbm_read_bytes"], off["hbm_write_bytes"])


def _drop_norm_replicas(monkeypatch):
    """A planner bug: the norm loses its copies after its output was placed in LX."""
    from spyrec.ir.lx import set_replicas
    from spyrec.plan import lx_placement

    def drop(graph, rows):
        for op in graph.ops:
            if op.replicas > 1:
                set_replicas(op, 1)
    monkeypatch.setattr(lx_placement, "_unreplicate_hbm_writers", drop)


def test_the_verifier_refuses_a_reader_without_its_copies(pt2, tmp_path, monkeypatch):
    path, _ = pt2
    _drop_norm_replicas(monkeypatch)
    with pytest.raises(InternalError, match="divides it across cores unlike its writer"):
        compile_pt2(path, tmp_path / "bad")


def test_the_simulator_catches_a_core_reading_a_copy_never_written(pt2, tmp_path,
                                                                   monkeypatch):
    path, x = pt2
    _drop_norm_replicas(monkeypatch)
    out = compile_pt2(path, tmp_path / "bad", verify_each=False)
    with pytest.raises(SimulatorFault, match=r"core (\d+) reads LX arg .* that no op wrote "
                                             r"on this core"):
        _run(out, x)


def test_moves_that_win_only_by_overlap_are_an_option(tmp_path):
    """A decoder block: sending the MLP's hidden through HBM lets gate and up use 32 cores
    (their norm replicated), a lower estimated time only because the added 4.9 MB overlap
    with compute. By default chain moves keep only moves whose serial time (compute +
    memory) does not grow; `overlap_moves` keeps those too. Both equal eager."""
    from samples.models import decoder
    from tests.differential.harness import run_and_compare

    module, inputs = decoder(1)
    totals = {}
    for overlap in (False, True):
        (tmp_path / str(overlap)).mkdir()
        out = run_and_compare(tmp_path / str(overlap), module, inputs,
                              sets=[f"work_division.overlap_moves={str(overlap).lower()}"]
                              + ONE_OP)
        t = json.loads((out / "report.json").read_text())["cost"]["totals"]
        totals[overlap] = (round(t["time_us"], 3), round(t["serial_us"], 3),
                           t["hbm_read_bytes"] + t["hbm_write_bytes"])
    assert totals == {False: (91.792, 109.936, 6_788_096), True: (87.355, 114.045, 11_739_136)}


def test_an_op_computing_once_sends_an_lx_input_it_no_longer_reads_alike_back_to_hbm(tmp_path):
    """topk of 2 values: the NaN test `x != x` is replicated twice, copies fastest (cores 0-1
    hold value 0, cores 2-3 value 1), and stage_inputs stages x for it and for the
    comparisons. Its output goes to HBM, so it computes once, on cores 0-1 holding values
    0 and 1: core 1 would read value 1 where the staged copy left value 0. The staged copy
    goes back to HBM (its writer then computes once too), and the report says why."""
    class TopK(torch.nn.Module):
        def forward(self, x):
            return tuple(torch.topk(x, 1, dim=0, largest=False, sorted=False))
    x = torch.tensor([-7.0, -6.0])
    out = compile_pt2(export(tmp_path, TopK(), (x,)), tmp_path / "out", frontend="fast")
    rows = {b["buffer"]: b for b in
            json.loads((out / "report.json").read_text())["scratchpad"]["buffers"]}
    staged = rows["x__staged"]
    assert (staged["placed"], staged["lx_address"], staged["replicas_dropped"]) == (False, None, 2)
    assert staged["reason"].startswith("after 'topk__4' computes once: op 'topk__4' divides "
                                       "it across cores as [c0:2], its writer")
    values, indices = simulate(out, {"x": x.numpy()}).outputs
    assert values.tolist() == [-7.0] and indices.tolist() == [0]
