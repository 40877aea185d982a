"""superdsc_legalize, IR text in and out: an op SuperDSC cannot address (two 32-wide heads in
one 64-lane stick, a variable cut inside a stick) becomes ops it can; an op it can address is
left alone; an op that needs more pieces than allowed is refused naming op and source line.
Whether the pieces equal the op is proven by the differential and model tests (every program
equals eager); here the exact rewrite is pinned."""

import pytest

from spyrec.errors import UnsupportedProgram
from spyrec.ir.parser import parse
from spyrec.passes.registry import CompileContext
from spyrec.passes.superdsc_legalize import SuperdscLegalize
from spyrec.plan.sdsc_dims import why_not_expressible
from tests.passes.textir import ir, run_pass

# GPT-2's head split: addmm [32, 384] (q|k|v, 6 heads of 64... read as 4 heads of 32), each head
# restickified to its own [32 rows, 32 lanes] tile; two heads share one 64-lane stick of addmm.
HEADS = """
    buffer addmm: input float16[32, 384] device [6, 32, 64] / [64, 384, 1] fp16
    buffer heads: output float16[4, 32, 32] device [32, 1, 4, 64] / [32, 64, 1024, 1] fp16
    op heads: heads[1024*c1 + 32*c2 + r0] = ReStickifyOpHBM(addmm[32*c1 + 384*c2 + r0]) over [c1<4, c2<32, r0<32] source "model.py:7"
    inputs [addmm]
    outputs [heads]
"""

# GPT-2's head merge: sdpa [1, 4, 32, 32] (32-lane sticks) into [32, 128] rows: r0 < 128 is
# cut every 32 lanes of a 64-lane stick.
MERGE = """
    buffer sdpa: input float16[1, 4, 32, 32] device [4, 32, 1, 1, 64] / [1024, 32, 64, -1, 1] fp16
    buffer merged: output float16[32, 128] device [2, 32, 64] / [64, 128, 1] fp16
    op merged: merged[128*c0 + r0] = ReStickifyOpHBM(sdpa[32*c0 + 1024*floor(r0/32) + Mod(r0, 32)]) over [c0<32, r0<128] source "model.py:9"
    inputs [sdpa]
    outputs [merged]
"""


def test_two_heads_in_one_stick_become_one_op_per_head_of_the_stick():
    ctx = CompileContext()
    after = run_pass(SuperdscLegalize(), HEADS, ctx, facts=("layouts",))
    assert after.splitlines()[2:4] == [
        'op heads.c3_0: heads[2048*c0 + 32*c2 + r0] = ReStickifyOpHBM(addmm[64*c0 + 384*c2 + '
        'r0]) over [c0<2, c2<32, r0<32] source "model.py:7"',
        'op heads.c3_1: heads[2048*c0 + 32*c2 + r0 + 1024] = ReStickifyOpHBM(addmm[64*c0 + '
        '384*c2 + r0 + 32]) over [c0<2, c2<32, r0<32] source "model.py:7"']
    row, = ctx.report["superdsc_legalize"]["list"]
    assert row["reason"].startswith("lane coordinate r0 + 32*Mod(c1, 2) is not a whole stick")
    assert (row["ops"], ctx.report["superdsc_legalize"]["ops_added"]) == (2, 1)
    graph = parse(after)
    assert [why_not_expressible(graph, op) for op in graph.ops] == [None, None]


def test_a_var_cut_inside_its_stick_is_split_and_each_half_shifted():
    ctx = CompileContext()
    graph = parse(run_pass(SuperdscLegalize(), MERGE, ctx, facts=("layouts",)))
    assert [op.ranges for op in graph.ops] == [(("c0", 32), ("r0", 2), ("r2", 32))] * 2
    assert [why_not_expressible(graph, op) for op in graph.ops] == [None, None]
    assert ctx.report["superdsc_legalize"]["list"][0]["reason"] == (
        "lane coordinate Mod(r0, 32) is not a whole stick of one variable (an offset inside "
        "the stick needs a relayout first)")


def test_an_expressible_op_is_left_alone():
    text = HEADS.replace("1024*c1 + 32*c2 + r0", "1024*c1 + 32*c2 + r0").replace(
        "addmm[32*c1 + 384*c2 + r0]", "addmm[64*c1 + 384*c2 + r0]")
    ctx = CompileContext()
    assert run_pass(SuperdscLegalize(), text, ctx, facts=("layouts",)) == ir(text)
    assert ctx.report["superdsc_legalize"] == {"count": 0, "ops_added": 0, "list": []}


def test_too_many_pieces_is_refused_naming_the_op_and_its_source():
    with pytest.raises(UnsupportedProgram, match=r"no SuperDSC form found for op heads "
                       r"\(model.py:7\): lane coordinate r0 \+ 32\*Mod\(c1, 2\)"):
        run_pass(SuperdscLegalize(max_pieces=1), HEADS, facts=("layouts",))
