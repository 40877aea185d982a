"""work_division, IR text in and out: output vars outermost first take the largest divisor the
remaining cores allow (the greedy split, kept whenever no other split is estimated faster); a
stick var splits only into whole sticks; a reduced var splits only where the estimate says the
partial sums pay (a K-split)."""

from spyrec.passes.registry import CompileContext
from spyrec.passes.work_division import WorkDivision
from tests.passes.textir import ir, run_pass

BUFFERS = """
    buffer x: input float16[64, 256] device [4, 64, 64] / [64, 256, 1] fp16
    buffer b: input float16[3, 256] device [4, 3, 64] / [64, 256, 1] fp16
    buffer c: input float16[2, 100] device [2, 2, 64] / [64, 100, 1] fp16
    buffer y: output float16[64, 256] device [4, 64, 64] / [64, 256, 1] fp16
    buffer z: output float16[3, 256] device [4, 3, 64] / [64, 256, 1] fp16
    buffer w: output float16[2, 100] device [2, 2, 64] / [64, 100, 1] fp16
    buffer s: output float16[256] device [4, 64] / [64, 1] fp16
"""
SIGNATURE = """
    inputs [x, b, c]
    outputs [y, z, w, s]
"""


def test_splits_rows_then_whole_sticks_and_never_reduced_vars():
    before = ir(BUFFERS) + ir("""
    op y: y[256*c0 + c1] = exp(x[256*c0 + c1]) over [c0<64, c1<256]
    op z: z[256*c0 + c1] = neg(b[256*c0 + c1]) over [c0<3, c1<256]
    op w: w[100*c0 + c1] = abs(c[100*c0 + c1]) over [c0<2, c1<100]
    op s: s[c0] = sum(x[c0 + 256*r0]) over [c0<256, r0<64] reduce [r0]
    """) + ir(SIGNATURE)
    # 64 rows: 32 cores. 3 rows: 3 cores, 10 left, c1's 4 whole sticks take 4. 100 lanes are
    # not whole sticks: c1 stays on one core. s's 256 results are 4 sticks (c0 is its stick
    # var), so c0 splits in 4; on 4 cores each reads 8 KiB of x at one core's own 36 GB/s
    # (0.228 us), so the reduced r0 splits in 2: 4 KiB each at the card's 204.8 / 8 GB/s
    # (0.160 us) plus one ring hop of 256 partial sums (0.036 us). In 4 it would pay 3 hops.
    assert run_pass(WorkDivision(), before, facts=("layouts",)) == ir(BUFFERS) + ir("""
    op y: y[256*c0 + c1] = exp(x[256*c0 + c1]) over [c0<64, c1<256] cores [c0:32, c1:1]
    op z: z[256*c0 + c1] = neg(b[256*c0 + c1]) over [c0<3, c1<256] cores [c0:3, c1:4]
    op w: w[100*c0 + c1] = abs(c[100*c0 + c1]) over [c0<2, c1<100] cores [c0:2, c1:1]
    op s: s[c0] = sum(x[c0 + 256*r0]) over [c0<256, r0<64] reduce [r0] cores [c0:4, r0:2]
    """) + ir(SIGNATURE)


def test_cores_option_caps_the_product():
    before = ir(BUFFERS) + ir("""
    op z: z[256*c0 + c1] = neg(b[256*c0 + c1]) over [c0<3, c1<256]
    """) + ir(SIGNATURE)
    out = run_pass(WorkDivision(cores=8), before, facts=("layouts",))
    # 3 rows take 3 cores; 8 // 3 = 2 left, and c1's 4 sticks split in 2
    assert "over [c0<3, c1<256] cores [c0:3, c1:2]\n" in out


def test_matmul_never_splits_k_and_keeps_the_greedy_split_on_a_tie():
    text = """
    buffer a: input float16[4, 64] device [1, 4, 64] / [64, 64, 1] fp16
    buffer m: input float16[64, 128] device [2, 64, 64] / [64, 128, 1] fp16
    buffer o: output float16[4, 128] device [2, 4, 64] / [64, 128, 1] fp16
    op o: o[128*c0 + c1] = batchmatmul(a[64*c0 + r0], m[128*r0 + c1]) over [c0<4, c1<128, r0<64] reduce [r0]
    inputs [a, m]
    outputs [o]
    """
    ctx = CompileContext()
    out = run_pass(WorkDivision(), text, ctx, facts=("layouts",))
    # greedy: c0 takes all 4 rows, leaving 8 cores; c1's 2 sticks take 2 of them. Each core
    # reads 1 stick of a (shared with the other c1 core: half each), a 64-row half of m
    # (shared by the 4 c0 cores: a quarter each) and writes 1 stick: 0.5 + 16 + 1 = 17.5
    # sticks = 2240 B, 17920 B in all, 0.0875 us at 204.8 GB/s (compute 4096 MACs at
    # 1.536 TMAC/s x sqrt(1/8): 0.0075 us). One core moves 4 + 128 + 8 sticks = 17920 B,
    # the same 0.0875 us (compute 0.0603 us): a tie, so the greedy split stays. K is never
    # split by either.
    assert out.splitlines()[3].endswith("reduce [r0] cores [c0:4, c1:2, r0:1]")
    (row,) = ctx.report["work_division"]["ops"]
    assert row == {"op": "o", "node": None, "split": "[c0:4, c1:2, r0:1]",
                   "greedy_split": "[c0:4, c1:2, r0:1]", "time_us": 0.0875,
                   "greedy_time_us": 0.0875, "hbm_bytes_per_core": 2240,
                   "greedy_hbm_bytes_per_core": 2240, "cores": 8}
