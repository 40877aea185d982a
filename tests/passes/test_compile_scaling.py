"""Compile-time passes stay linear in the op count (issue 26): the work of the layout search
(layouts copied into branches and compared when merging) and of work_division's slice checks,
counted (not timed: wall time on a shared machine is noise) at three depths of the sample
decoder, must grow by the same amount per added layer. A pass that scans every buffer or op
so far for each op grows by more with every layer. work_division's chain moves may reach
across layers (up to `chain_steps.MAX_OPS_PER_MOVE` ops each), so the steps of a move grow
with depth until that bound; what is counted of them is the candidate scans (`_cheapest`),
the costly part, which are memoized without names so that the layers of a stack share them:
re-scanning per move (as before that memo: 1299, 2809, 5040 at these depths) grows by more
with every layer. bench/compile_scaling.py times the same at transformer scale."""

import pytest
import torch

import spyrec.passes.stick_layout.search as search
import spyrec.plan.chain_steps as chain_steps
import spyrec.plan.producers as producers
from samples.models import decoder
from spyrec.compiler import CompileOptions, plan
from spyrec.frontend import load_program, lower_program
from spyrec.passes.registry import CompileContext

DEPTHS = (2, 4, 6)


def _counted(tmp_path, depth: int, monkeypatch) -> dict[str, int]:
    """Run the default pipeline on decoder(depth); the work counts of its costly passes."""
    counts = {"search": 0, "same_slices": 0, "chain_scans": 0}
    searches = []
    monkeypatch.setattr(search.LayoutSearch, "run", _recording(search.LayoutSearch.run,
                                                              searches))

    def counting(name, f):
        def wrapped(*args, **kwargs):
            counts[name] += 1
            return f(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(producers.Producers, "_same_slices",
                        counting("same_slices", producers.Producers._same_slices))
    monkeypatch.setattr(chain_steps.Move, "_cheapest",
                        counting("chain_scans", chain_steps.Move._cheapest))
    module, inputs = decoder(depth, batch=2, seq=64, d=128)
    pt2 = tmp_path / f"decoder{depth}.pt2"
    torch.export.save(torch.export.export(module, inputs), str(pt2))
    p = plan(pt2, tmp_path / "out", CompileOptions(verbose=-1))
    graph = lower_program(load_program(pt2, "auto"))
    ctx = CompileContext(layouts_config=p.layouts)
    for step in p.pipeline:
        step.run(graph, ctx)
    counts["search"] = searches[0].work
    counts["ops"] = len(graph.ops)
    return counts


def _recording(run, into: list):
    def wrapped(self):
        into.append(self)
        return run(self)
    return wrapped


def test_pass_work_grows_linearly_with_depth(tmp_path, monkeypatch):
    rows = []
    for depth in DEPTHS:
        with monkeypatch.context() as m:
            rows.append(_counted(tmp_path, depth, m))
    ops = [r["ops"] for r in rows]
    assert ops[2] - ops[1] == ops[1] - ops[0]        # the layers are alike
    for name in ("search", "same_slices", "chain_scans"):
        a, b, c = (r[name] for r in rows)
        # the second step of two layers adds no more than the first (+10%, and a little
        # for chain moves that reach one more layer): quadratic work adds more every step
        assert c - b <= 1.1 * (b - a) + 0.02 * c, (name, a, b, c)
        if name != "chain_scans":   # shared between layers: may not grow at all
            assert b - a > 0, (name, a, b, c)
