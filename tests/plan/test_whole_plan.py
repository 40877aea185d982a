"""The whole-plan time work division compares the plans with and without K-splits by
(`whole_plan.whole_plan_us`) prices ops alike but for names once: the same totals as
pricing every op, from fewer estimates."""

from samples.models import SAMPLES
from spyrec.plan import core_splits, whole_plan
from spyrec.plan.producers import Producers
from tests.programs import compile_pt2, counting_calls, export


def test_whole_plan_totals_equal_every_ops_sum_from_fewer_estimates(tmp_path, monkeypatch):
    seen = []
    real_whole = whole_plan.whole_plan_us

    def checked(graph, plan, params):
        with counting_calls(whole_plan, "split_estimate") as calls:
            got, fair = real_whole(graph, plan, params)
        priced = calls[0]
        producers = whole_plan.planned_producers(graph, plan)
        every = sum(cost.time_us for _, cost in whole_plan.planned_estimates(
            graph, producers=producers))
        fair_every = sum(cost.time_us for _, cost in whole_plan.planned_estimates(
            graph, whole_plan.fair_share(params), producers))
        assert got == every and fair() == fair_every
        seen.append((len(graph.ops), priced))
        return got, fair

    monkeypatch.setattr(core_splits, "whole_plan_us", checked)
    module, inputs = SAMPLES["decoder_fp32"]()
    compile_pt2(export(tmp_path, module, inputs, "decoder_fp32"), tmp_path / "out")
    assert seen, "the sample takes no K-split: nothing compared"
    assert all(priced < ops for ops, priced in seen), seen


def test_planned_producers_lx_candidates_equal_each_buffer_asked_alone(tmp_path, monkeypatch):
    """`planned_producers` asks `lx_slices_problem` once per buffer and users alike but for
    names (`lx_slices_hold`): the same candidates as asking for every buffer, from fewer
    slice analyses."""
    from spyrec.plan import lx_placement

    seen = []
    real_producers = whole_plan.planned_producers

    def checked(graph, plan, params):
        with counting_calls(lx_placement, "_slice_bytes") as calls:
            got = real_producers(graph, plan, params)
        asked = calls[0]
        every = Producers(graph, intermediates=True, plan=plan)
        want = {name for name in every.lx_candidates if lx_placement.lx_slices_problem(
            graph, graph.buffers[name], users=[every.planned(op) for op in graph.ops
                                               if any(a.buffer == name
                                                      for _, a in op.accesses())]) is None}
        assert got.lx_candidates == want
        seen.append((len(every.lx_candidates), asked))
        return got

    monkeypatch.setattr(whole_plan, "planned_producers", checked)
    module, inputs = SAMPLES["decoder_fp32"]()
    compile_pt2(export(tmp_path, module, inputs, "decoder_fp32"), tmp_path / "out")
    assert seen and all(asked < candidates for candidates, asked in seen), seen
