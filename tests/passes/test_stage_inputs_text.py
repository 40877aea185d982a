"""stage_inputs, IR text in and out: an RMSNorm-like block reads its input x four times, each
core the same 2 rows every time (all split [c0:32]), so one `identity` copies x into
`x__staged` first and those reads read the copy (scratchpad_planning then keeps it in LX). A
read split differently takes other slices on each core and keeps reading x; nothing is staged
when disabled or when the slice is over the budget. That staging pays is
tests/passes/test_stage_inputs.py's (simulated) job."""

import pytest

from spyrec.passes.registry import CompileContext
from spyrec.passes.stage_inputs import StageInputs
from tests.passes.textir import ir, run_pass

F16 = "float16[64, 256] device [4, 64, 64] / [64, 256, 1] fp16"
X = "[256*c0 + c1]"
SPLIT = "over [c0<64, c1<256] cores [c0:32, c1:1]"
SUMS = "over [c0<64, r0<256] reduce [r0] cores [c0:32, r0:1]"
ROW_SUMS = "float16[64, 1] device [1, 1, 64, 64] / [-1, -1, 1, -1] fp16"
FACTS = ("layouts", "core_splits")


def norm(x: str, residual_split: str = SPLIT) -> str:
    """The block, reading its input through `x` (x itself, or its staged copy), its last op
    (the residual add) split `residual_split`: split otherwise, it always reads x."""
    residual = x if residual_split == SPLIT else "x"
    return f"""
    buffer x: input {F16}
    buffer sq: intermediate {F16}
    buffer ss: intermediate {ROW_SUMS}
    buffer scaled: intermediate {F16}
    buffer y: output {F16}
    op sq: sq{X} = mul({x}{X}, {x}{X}) {SPLIT}
    op ss: ss[c0] = sum(sq[256*c0 + r0]) {SUMS}
    op scaled: scaled{X} = mul(ss[c0], {x}{X}) {SPLIT}
    op y: y{X} = add(scaled{X}, {residual}{X}) {residual_split}
    inputs [x]
    outputs [y]
"""


def staged(text: str) -> str:
    """`text` with the staged copy's buffer and op added where the pass puts them."""
    lines = ir(text).splitlines(keepends=True)
    first_op = next(i for i, line in enumerate(lines) if line.startswith("op "))
    return "".join(lines[:first_op] + [
        f"buffer x__staged: intermediate {F16}\n",
        f"op x__staged: x__staged{X} = identity(x{X}) {SPLIT}\n"] + lines[first_op:])


def test_an_input_read_alike_four_times_is_copied_once():
    ctx = CompileContext()
    assert run_pass(StageInputs(), norm("x"), ctx, FACTS) == staged(norm("x__staged"))
    assert ctx.report["stage_inputs"] == [{"input": "x", "buffer": "x__staged", "reads": 4,
                                           "split": {"c0": 32, "c1": 1},
                                           "bytes_per_core": 1024}]


def test_a_read_split_otherwise_keeps_reading_the_input():
    """The residual add split over columns ([c0:1, c1:4]) gives each core other elements of
    x than the copy holds there, so it reads x; the other three reads are staged."""
    other = "over [c0<64, c1<256] cores [c0:1, c1:4]"
    ctx = CompileContext()
    assert run_pass(StageInputs(), norm("x", other), ctx, FACTS) == \
        staged(norm("x__staged", other))
    assert [(r["reads"], r["bytes_per_core"]) for r in ctx.report["stage_inputs"]] == [(3, 1024)]


@pytest.mark.parametrize("options", [{"enabled": False}, {"max_fraction": 1e-4}])
def test_disabled_or_over_the_budget_stages_nothing(options):
    ctx = CompileContext()
    assert run_pass(StageInputs(**options), norm("x"), ctx, FACTS) == ir(norm("x"))
    assert ctx.report["stage_inputs"] == []
