"""Work division asks for each op's stick vars and greedy split once per op alike but for
names (`split_choice.sticks_and_greedy`): the same answers as asking for every op, from
fewer calls."""

from samples.models import SAMPLES
from spyrec.plan import core_splits, split_choice
from tests.programs import compile_pt2, counting_calls, export


def test_memoized_greedy_splits_equal_fresh_ones_from_fewer_calls(tmp_path, monkeypatch):
    real_memoized, real_greedy = split_choice.sticks_and_greedy, split_choice.greedy_split
    asked = [0]

    def checked(graph, op, cores, memo):
        asked[0] += 1
        sticks, greedy = real_memoized(graph, op, cores, memo)
        fresh_sticks = split_choice.stick_vars(graph, op)
        assert (sticks, greedy) == (fresh_sticks, real_greedy(graph, op, fresh_sticks, cores))
        return sticks, greedy

    monkeypatch.setattr(core_splits, "sticks_and_greedy", checked)
    module, inputs = SAMPLES["decoder_fp32"]()
    with counting_calls(split_choice, "greedy_split") as calls:
        compile_pt2(export(tmp_path, module, inputs, "decoder_fp32"), tmp_path / "out")
    assert 0 < calls[0] < asked[0] / 2, (calls, asked)
