"""stick_layout, IR text in and out (no torch): `y = a.t() + x` with a [128, 64] and x [64, 128].
Default input layouts put a's stick on c0 and x's on c1, so one of them is restickified (8192
elements either way; the search copies x); free input layouts need no copy."""

from spyrec.passes.registry import CompileContext
from spyrec.passes.stick_layout import StickLayout
from tests.passes.textir import ir, run_pass

BEFORE = """
    buffer a: input float16[128, 64]
    buffer x: input float16[64, 128]
    buffer y: output float16[64, 128]
    op y: y[128*c0 + c1] = add(a[c0 + 64*c1], x[128*c0 + c1]) over [c0<64, c1<128]
    inputs [a, x]
    outputs [y]
"""


def test_default_input_layouts__restickify_x_to_a_stick_on_c0():
    ctx = CompileContext()
    after = run_pass(StickLayout(input_layouts="default"), BEFORE, ctx)
    # y and the copy of x: stick along host dim 0 (64 lanes of stride 128), rows along dim 1
    assert after == ir("""
    buffer a: input float16[128, 64] device [1, 128, 64] / [64, 64, 1] fp16
    buffer x: input float16[64, 128] device [2, 64, 64] / [64, 128, 1] fp16
    buffer y: output float16[64, 128] device [1, 128, 64] / [8192, 1, 128] fp16
    buffer x__restick: intermediate float16[64, 128] device [1, 128, 64] / [8192, 1, 128] fp16
    op x__restick: x__restick[128*c0 + c1] = ReStickifyOpHBM(x[128*c0 + c1]) over [c0<64, c1<128]
    op y: y[128*c0 + c1] = add(a[c0 + 64*c1], x__restick[128*c0 + c1]) over [c0<64, c1<128]
    inputs [a, x]
    outputs [y]
    """)
    assert (ctx.report["restickify"]["count"], ctx.report["restickify"]["elements"]) == (1, 8192)


def test_free_input_layouts_lay_a_out_along_its_first_dim():
    after = run_pass(StickLayout(input_layouts="free"), BEFORE)
    assert after.splitlines()[:4] == [
        "buffer a: input float16[128, 64] device [2, 64, 64] / [4096, 1, 64] fp16",
        "buffer x: input float16[64, 128] device [2, 64, 64] / [64, 128, 1] fp16",
        "buffer y: output float16[64, 128] device [2, 64, 64] / [64, 128, 1] fp16",
        "op y: y[128*c0 + c1] = add(a[c0 + 64*c1], x[128*c0 + c1]) over [c0<64, c1<128]"]


def test_a_pinned_input_keeps_its_stick():
    ctx = CompileContext(layouts_config={"inputs": {"x": {"stick_dim": 0}}})
    after = run_pass(StickLayout(input_layouts="free"), BEFORE, ctx)
    assert "buffer x: input float16[64, 128] device [1, 128, 64] / [8192, 1, 128] fp16\n" in after
    assert ctx.report["restickify"]["count"] == 0
