"""matmul_padding, IR text in and out: a K that is not a whole number of sticks is zero-padded
on the operand that carries N (a fill and a copy into `<y>_kpad`); x and the op's K range are
left alone; a K of whole sticks changes nothing."""

from spyrec.passes.matmul_padding import MatmulPadding
from spyrec.passes.registry import CompileContext
from tests.passes.textir import ir, run_pass

BUFFERS = """
    buffer x: input float16[64, 100] device [2, 64, 64] / [64, 100, 1] fp16
    buffer y: input float16[100, 128] device [2, 100, 64] / [64, 128, 1] fp16
    buffer out: output float16[64, 128] device [2, 64, 64] / [64, 128, 1] fp16
"""
MATMUL = ("op out: out[128*c0 + c1] = batchmatmul(x[100*c0 + r0], {y}) "
          "over [c0<64, c1<128, r0<100] reduce [r0] source \"model.py:3\"\n")
SIGNATURE = """
    inputs [x, y]
    outputs [out]
"""


def test_k_of_100_is_padded_to_two_sticks_on_y():
    """The fill writes zeros only in the 28 padding rows (from row 100: 12,800 elements in),
    the copy the other 100."""
    ctx = CompileContext()
    before = ir(BUFFERS) + MATMUL.format(y="y[c1 + 128*r0]") + ir(SIGNATURE)
    after = run_pass(MatmulPadding(), before, ctx, facts=("layouts",))
    assert after == ir(BUFFERS) + ir("""
    buffer y__kpad: intermediate float16[128, 128] device [2, 128, 64] / [64, 128, 1] fp16 source "model.py:3"
    op y__kpad: y__kpad[c1 + 128*r0 + 12800] = fill() over [r0<28, c1<128] attrs {"value": 0.0} source "model.py:3"
    op y__kpad.1: y__kpad[c1 + 128*r0] = identity(y[c1 + 128*r0]) over [r0<100, c1<128] source "model.py:3"
    """) + MATMUL.format(y="y__kpad[c1 + 128*r0]") + ir(SIGNATURE)
    assert ctx.report["matmul_padding"] == {
        "count": 1, "elements": 128 * 128,
        "list": [{"tensor": "y", "padded": "y__kpad", "k": 100, "k_padded": 128,
                  "elements": 128 * 128, "op": "out"}]}


def test_a_transposed_y_is_padded_into_k_major_order():
    """y read as y.t() (index 100*c1 + r0), laid out with its stick on N as stick_layout
    leaves it: the padded copy is [K_pad, N], so the copy also transposes."""
    before = ir("""
    buffer x: input float16[64, 100] device [2, 64, 64] / [64, 100, 1] fp16
    buffer y: input float16[128, 100] device [2, 100, 64] / [6400, 1, 100] fp16
    buffer out: output float16[64, 128] device [2, 64, 64] / [64, 128, 1] fp16
    """) + MATMUL.format(y="y[100*c1 + r0]") + ir(SIGNATURE)
    after = run_pass(MatmulPadding(), before, facts=("layouts",)).splitlines()
    assert after[3:6] == [
        'buffer y__kpad: intermediate float16[128, 128] device [2, 128, 64] / [64, 128, 1] fp16 '
        'source "model.py:3"',
        'op y__kpad: y__kpad[c1 + 128*r0 + 12800] = fill() over [r0<28, c1<128] attrs {"value": 0.0} '
        'source "model.py:3"',
        'op y__kpad.1: y__kpad[c1 + 128*r0] = identity(y[100*c1 + r0]) over [r0<100, c1<128] '
        'source "model.py:3"']


def test_k_of_whole_sticks_is_left_alone():
    ctx = CompileContext()
    text = ir("""
    buffer x: input float16[64, 128] device [2, 64, 64] / [64, 128, 1] fp16
    buffer y: input float16[128, 64] device [1, 128, 64] / [64, 64, 1] fp16
    buffer out: output float16[64, 64] device [1, 64, 64] / [64, 64, 1] fp16
    op out: out[64*c0 + c1] = batchmatmul(x[128*c0 + r0], y[c1 + 64*r0]) over [c0<64, c1<64, r0<128] reduce [r0]
    inputs [x, y]
    outputs [out]
    """)
    assert run_pass(MatmulPadding(), text, ctx, facts=("layouts",)) == text
    assert ctx.report["matmul_padding"]["count"] == 0


def test_a_matrix_vector_product_pads_the_vector_alone():
    """y = v has no N: its padded copy is [K_pad], not v broadcast over M (which was [K_pad, M]
    with M in the lanes, not stick-compatible with the stick-sparse output; ir/verify.py)."""
    before = ir("""
    buffer a: input float16[12, 40] device [1, 12, 64] / [64, 40, 1] fp16
    buffer v: input float16[40] device [1, 64] / [64, 1] fp16
    buffer out: output float16[12] device [1, 12, 64] / [-1, 1, -1] fp16
    op out: out[c0] = batchmatmul(a[40*c0 + r0], v[r0]) over [c0<12, r0<40] reduce [r0]
    inputs [a, v]
    outputs [out]
    """)
    after = run_pass(MatmulPadding(), before, facts=("layouts",)).splitlines()
    assert after[3:7] == [
        "buffer v__kpad: intermediate float16[64] device [1, 64] / [64, 1] fp16",
        'op v__kpad: v__kpad[r0] = fill() over [r0<64] attrs {"value": 0.0}',
        "op v__kpad.1: v__kpad[r0] = identity(v[r0]) over [r0<40]",
        "op out: out[c0] = batchmatmul(a[40*c0 + r0], v__kpad[r0]) over [c0<12, r0<40] "
        "reduce [r0]"]


def test_a_stick_sparse_vector_is_padded_stick_sparse():
    """addmv into a dense output: stick_layout reads v one element per stick; a dense padded
    copy would put K in the lanes where the output's stick var c0 is expected."""
    before = ir("""
    buffer a: input float16[12, 40] device [1, 12, 64] / [64, 40, 1] fp16
    buffer v: input float16[40] device [1, 40, 64] / [-1, 1, -1] fp16
    buffer out: output float16[12] device [1, 64] / [64, 1] fp16
    op out: out[c0] = batchmatmul(a[40*c0 + r0], v[r0]) over [c0<12, r0<40] reduce [r0]
    inputs [a, v]
    outputs [out]
    """)
    after = run_pass(MatmulPadding(), before, facts=("layouts",)).splitlines()
    assert after[3] == "buffer v__kpad: intermediate float16[64] device [1, 64, 64] / [-1, 1, -1] fp16"
