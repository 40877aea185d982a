"""length_shares, IR text in and out: a projection over x[1, S, 512], S = 64 * s81 from 128
to 512 tokens, sized by the length (`lengths [c1=s81]`) and split over the tokens. The pass
replaces the minimum share per busy core coarse_tiling planned (16 rows at every length) by
a step per length from the cost model: few busy cores read the 2 MiB weight once, every core
computes faster, and the best trade moves with the length (`plan/length_shares.py`). The
estimates behind each step are in the report; tests/sim/test_sized_lengths.py runs such a
program at every length."""

import pytest

from spyrec.passes.length_shares import LengthShares
from spyrec.passes.registry import CompileContext
from tests.passes.textir import ir, run_pass

W = "float16[2048, 512] device [32, 512, 64] / [32768, 1, 512] fp16"
X = "float16[1, 512, 512] device [512, 8, 1, 64] / [512, 64, -1, 1] fp16"
OUT = "float16[1, 512, 2048] device [512, 32, 1, 64] / [2048, 64, -1, 1] fp16"
PROJECT = "y[2048*c1 + c2] = batchmatmul(x[512*c1 + r0], w[512*c2 + r0])"
SPACE = "over [c1<512, c2<2048, r0<512] reduce [r0]"
SYMBOL = "symbol s81 128..512 by 64{} at [x:1, y:1]"
FACTS = ("layouts", "core_splits")


def projection(cores: str, share: str) -> str:
    """The sized projection split `cores`, its symbol's minimum shares `share`."""
    return f"""
    buffer w: constant {W}
    buffer x: input {X}
    buffer y: output {OUT}
    op y: {PROJECT} {SPACE} cores [{cores}] lengths [c1=s81]
    inputs [x]
    outputs [y]
    {SYMBOL.format(share)}
"""


PLANNED = " share [16 to 512]"      # coarse_tiling's one share for every length


def test_tokens_split_16_ways_get_a_share_per_length():
    """At 128 tokens, 16 rows per busy core (8 of 16 busy); 24 to 192 tokens; 32 beyond,
    every core busy from 512. The estimates: 128 tokens cost 23.68 us with no floor (16 busy
    token slices), 13.44 with a floor of 16 (8 busy)."""
    ctx = CompileContext()
    cores = "c1:16, c2:2, r0:1"
    assert run_pass(LengthShares(), projection(cores, PLANNED), ctx, FACTS) == \
        ir(projection(cores, " share [16 to 128, 24 to 192, 32 to 512]"))
    (row,) = ctx.report["length_shares"]
    assert row["symbol"] == "s81" and row["min_shares"] == [[128, 16], [192, 24], [512, 32]]
    assert row["estimates_us"]["128"]["0"] == pytest.approx(23.68)
    assert row["estimates_us"]["128"]["16"] == pytest.approx(13.44)


def test_a_split_whose_cores_all_share_the_weight_needs_no_floor():
    """Split 8 ways over the tokens, the shortest length already gives each core 16 rows:
    every floor costs the same, and a tie keeps none."""
    ctx = CompileContext()
    cores = "c1:8, c2:4, r0:1"
    assert run_pass(LengthShares(), projection(cores, PLANNED), ctx, FACTS) == \
        ir(projection(cores, ""))
    assert ctx.report["length_shares"][0]["min_shares"] == []


def test_disabled_keeps_the_planned_share():
    ctx = CompileContext()
    text = projection("c1:16, c2:2, r0:1", PLANNED)
    assert run_pass(LengthShares(enabled=False), text, ctx, FACTS) == ir(text)
    assert "length_shares" not in ctx.report
