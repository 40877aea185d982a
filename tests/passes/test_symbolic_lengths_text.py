"""symbolic_lengths, IR text in and out: `relu(x) * 2` over a token dim of 128..256 by 64
(symbol s81). `mode: sized` leaves each op one execution over the whole length (`lengths
[c1=s81]`) and the symbol one minimum share per busy core; `mode: tiled` puts both ops in a loop
of 64-token tiles whose trip count is bound to the length. That either form computes what the
static program does at every length is the simulator's job (tests/sim/test_sized_lengths.py,
tests/sim/test_symbolic_run.py)."""

from spyrec.passes.registry import CompileContext, get_pass
from tests.passes.textir import ir, run_pass

SEED = """
    buffer x: input float32[1, 256, 64] device [256, 2, 1, 32] / [64, 32, -1, 1] fp32
    buffer relu: intermediate float32[1, 256, 64] device [256, 2, 1, 32] / [64, 32, -1, 1] fp32
    buffer mul: output float32[1, 256, 64] device [256, 2, 1, 32] / [64, 32, -1, 1] fp32
    op relu: relu[64*c1 + c2] = relufwd(x[64*c1 + c2]) over [c1<256, c2<64] node relu
    op mul: mul[64*c1 + c2] = mul(relu[64*c1 + c2]) over [c1<256, c2<64] attrs {"scalar": 2.0, "scalar_side": "rhs"} node mul
    inputs [x]
    outputs [mul]
    symbol s81 128..256 by 64 at [x:1, mul:1]
"""

SIZED = """
    buffer x: input float32[1, 256, 64] device [256, 2, 1, 32] / [64, 32, -1, 1] fp32
    buffer relu: intermediate float32[1, 256, 64] device [256, 2, 1, 32] / [64, 32, -1, 1] fp32
    buffer mul: output float32[1, 256, 64] device [256, 2, 1, 32] / [64, 32, -1, 1] fp32
    op relu: relu[64*c1 + c2] = relufwd(x[64*c1 + c2]) over [c1<256, c2<64] lengths [c1=s81] node relu
    op mul: mul[64*c1 + c2] = mul(relu[64*c1 + c2]) over [c1<256, c2<64] attrs {"scalar": 2.0, "scalar_side": "rhs"} lengths [c1=s81] node mul
    inputs [x]
    outputs [mul]
    symbol s81 128..256 by 64 share [16 to 256] at [x:1, mul:1]
"""


def test_sized_ops_run_the_whole_length():
    ctx = CompileContext()
    got = run_pass(get_pass("symbolic_lengths")(mode="sized"), SEED, ctx, facts=("layouts",))
    assert got == ir(SIZED)
    assert ctx.report["symbolic_tiling"]["mode"] == "sized"
    (row,) = ctx.report["symbols"]
    assert (row["symbol"], row["minimum"], row["maximum"], row["granularity"]) == \
        ("s81", 128, 256, 64)
    assert (row["sized_ops"], row["loops"]) == (2, [])


def test_tiled_ops_run_in_a_loop_bound_by_the_length():
    ctx = CompileContext()
    got = run_pass(get_pass("symbolic_lengths")(mode="tiled"), SEED, ctx, facts=("layouts",))
    ops = [line for line in got.splitlines() if line.startswith("op ")]
    assert len(ops) == 2 and all(
        "over [c1<64, c2<64]" in op and "loops [4(c1)@g0.0 bound(s81/64)]" in op for op in ops), ops
    (group,) = ctx.report["symbolic_tiling"]["groups"]
    assert group["loops"] == [{"dim": "s81", "count": 4}]
    (row,) = ctx.report["symbols"]
    assert row["loops"] == [{"loop": "g0.0", "count_at_maximum": 4, "per_trip": 64}]
