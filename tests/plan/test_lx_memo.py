"""stage_inputs asks the LX placement once per copy it tries, with a memo of each buffer's
slice analysis kept across the asks while it inserts copies and re-points reads: every
placement with the memo equals the one without it (addresses, report rows and peak)."""

import pytest
import torch

from spyrec.plan import lx_placement, staging
from tests.models import hf
from tests.programs import compile_pt2, counting_calls, export


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_placements_with_the_memo_equal_those_without(tmp_path, monkeypatch, dtype):
    asked = []
    real = lx_placement.place_lx

    def both(graph, budget, intermediates=True, enabled=True, memo=None):
        got = real(graph, budget, intermediates, enabled, memo)
        fresh = real(graph, budget, intermediates, enabled)
        assert got.addresses == fresh.addresses and got.rows == fresh.rows
        assert got.peak == fresh.peak
        asked.append(memo is not None and len(memo))
        return got

    monkeypatch.setattr(staging, "place_lx", both)
    module, inputs = hf.prefill("llama", dtype)
    compile_pt2(export(tmp_path, module, inputs, "llama"), tmp_path / "out")
    assert len(asked) >= 3 and all(asked), asked   # asked several times, with the memo


def test_an_op_changed_in_place_misses_the_memo(tmp_path, monkeypatch):
    """The memo's key holds every field of the ops using a buffer: splits changed in place
    (what work division's moves and a replica do) give the placement a fresh graph gives."""
    graphs = []
    real = lx_placement.place_lx

    def keep(graph, budget, intermediates=True, enabled=True, memo=None):
        graphs.append((graph, budget))
        return real(graph, budget, intermediates, enabled, memo)

    monkeypatch.setattr(staging, "place_lx", keep)
    module, inputs = hf.prefill("llama", torch.float32)
    compile_pt2(export(tmp_path, module, inputs, "llama"), tmp_path / "out")
    graph, budget = graphs[-1]
    memo: dict = {}
    before = real(graph, budget, memo=memo)
    changed = 0
    for op in graph.ops:
        if op.output.buffer in before.addresses and op.core_splits and \
                max(op.core_splits.values()) > 1:
            op.core_splits = {v: 1 for v in op.core_splits}     # every op on one core
            changed += 1
    after, fresh = real(graph, budget, memo=memo), real(graph, budget)
    assert changed and after.rows == fresh.rows and after.addresses == fresh.addresses
    assert after.rows != before.rows


def test_buffers_alike_but_for_names_share_an_analysis_without_a_problem(tmp_path,
                                                                          monkeypatch):
    """A buffer whose slices hold (no reason) is analysed once for every buffer and users
    alike but for names (the layers of a stack): scratchpad planning's placement of a
    two-layer decoder equals the one without the memo, from fewer analyses."""
    from spyrec.passes import scratchpad_planning

    seen = []
    real = lx_placement.place_lx

    def both(graph, budget, intermediates=True, enabled=True, memo=None):
        with counting_calls(lx_placement, "_slice_bytes") as calls:
            got = real(graph, budget, intermediates, enabled, memo)
        analysed = calls[0]
        with counting_calls(lx_placement, "_slice_bytes") as calls:
            fresh = real(graph, budget, intermediates, enabled)
        every = calls[0]
        assert got.addresses == fresh.addresses and got.rows == fresh.rows
        seen.append((sum(r["reason"] is None for r in fresh.rows.values()), analysed, every))
        return got

    monkeypatch.setattr(scratchpad_planning, "place_lx", both)
    module, inputs = hf.prefill("llama", torch.float32)
    compile_pt2(export(tmp_path, module, inputs, "llama"), tmp_path / "out")
    (fitting, analysed, every), = seen
    assert fitting > 4 and analysed < every, seen
