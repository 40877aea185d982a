"""ir/verify.py: each check on a small IR text that breaks it, with the exact message (XLA's
habit: the reason is text, tests compare it), and `check` as an internal error naming the pass."""

import pytest

from spyrec.errors import InternalError
from spyrec.ir.parser import parse
from spyrec.ir.verify import check, verify
from tests.passes.textir import ir

GOOD = ir("""
    buffer x: input float16[64, 128] device [2, 64, 64] / [64, 128, 1] fp16 @hbm 0
    buffer t: intermediate float16[64, 128] device [2, 64, 64] / [64, 128, 1] fp16 @hbm 16384
    buffer y: output float16[128] device [2, 64] / [64, 1] fp16 @hbm 32768
    op t: t[128*c0 + c1] = exp(x[128*c0 + c1]) over [c0<64, c1<128] cores [c0:32, c1:1]
    op y: y[c0] = sum(t[c0 + 128*r0]) over [c0<128, r0<64] reduce [r0] cores [c0:2, r0:1]
    inputs [x]
    outputs [y]
""")
FACTS = ("layouts", "core_splits", "hbm_addresses")


def problems(old: str, new: str, facts=FACTS) -> list[str]:
    """The verifier's messages for GOOD with one piece of text replaced."""
    assert old in GOOD
    return verify(parse(GOOD.replace(old, new)), facts)


def test_the_good_graph_is_valid():
    assert verify(parse(GOOD), FACTS) == []


@pytest.mark.parametrize("old, new, message", [
    # buffers
    ("x: input float16", "x: input complex64",
     "buffer 'x': host dtype 'complex64' has no device format"),
    ("device [2, 64, 64] / [64, 128, 1] fp16 @hbm 0",
     "device [4, 64, 32] / [32, 128, 1] fp32 @hbm 65536",
     "buffer 'x': layout device dtype fp32 but float16 is stored as fp16"),
    ("[2, 64, 64] / [64, 128, 1] fp16 @hbm 0", "[2, 64, 64] / [64, 100, 1] fp16 @hbm 0",
     "buffer 'x': layout [2, 64, 64] / [64, 100, 1] does not tile host [64, 128]"),
    ("@hbm 32768", "@hbm 32800",
     "buffer 'y': device address 32800 is not a non-negative multiple of 128"),
    # ops
    ("exp(x[128*c0 + c1])", "expo(x[128*c0 + c1])", "op 't': 'expo' is not a device op"),
    ("exp(x[128*c0 + c1])", "exp(x[128*c0 + c1], x[128*c0 + c1])",
     "op 't': exp takes at most 1 operands, has 2"),
    ("reduce [r0] cores [c0:2, r0:1]", "reduce [r1] cores [c0:2, r0:1]",
     "op 'y': reduced variable r1 is not an iteration variable (c0, r0)"),
    ("exp(x[128*c0 + c1])", "exp(z[128*c0 + c1])", "op 't': input 0 z[128*c0 + c1]: no buffer 'z'"),
    ("exp(x[128*c0 + c1])", "exp(x[128*c0 + c2])",
     "op 't': input 0 x[128*c0 + c2]: uses c2, not iteration variables of the op"),
    ("exp(x[128*c0 + c1])", "exp(x[128*c0 + c1 + 1])",
     "op 't': input 0 x[128*c0 + c1 + 1]: reads elements [1, 8192] but x has 8192 "
     "([64, 128])"),
    ("y[c0] = sum", "y[Mod(r0, 64)] = sum",
     "op 'y': output y[Mod(r0, 64)]: the output is indexed by a reduced variable"),
    ("exp(x[128*c0 + c1])", "exp(x[128*c0 + c1 + IndirectAccess('x')])",
     "op 't': input 0 x[128*c0 + c1 + IndirectAccess('x')]: gathers through x, which the op "
     "does not read as an index tensor"),
    ("cores [c0:32, c1:1]", "cores [c0:32]",
     "op 't': cores [c0:32] do not name exactly the iteration variables c0, c1"),
    ("cores [c0:32, c1:1]", "cores [c0:3, c1:1]",
     "op 't': cores [c0:3, c1:1]: 3 slices do not divide c0<64"),
    ("cores [c0:32, c1:1]", "cores [c0:32, c1:2]",
     "op 't': cores [c0:32, c1:2] use 64 cores; the device has 32"),
    ("cores [c0:32, c1:1]", "cores [c0:2, c1:4]",
     "op 't': cores [c0:2, c1:4]: splitting stick variable c1 into 4 slices gives cores "
     "partial sticks of t[128*c0 + c1] (64 per stick)"),
    ("= sum(t[c0 + 128*r0]) over [c0<128, r0<64] reduce [r0] cores [c0:2, r0:1]",
     "= argmax(t[c0 + 128*r0]) over [c0<128, r0<64] reduce [r0] cores [c0:2, r0:2]",
     "op 'y': cores [c0:2, r0:2]: reduced variable r0 of argmax is split across cores, but its "
     "partials do not combine"),
    ("sum(t[c0 + 128*r0])", "sum(t[64*c0 + r0])",   # a reduction along t's sticks
     "op 'y': input 0 t[64*c0 + r0]: its lane (r0) is not stick-compatible with stick "
     "variable c0"),
    ("cores [c0:32, c1:1]", "cores [c0:32, c1:1] loops [2(c2)@g0.0]",
     "op 't': loop 0 tiles c2, not an iteration variable of the op"),
    # the whole graph
    ("inputs [x]", "inputs [x, w]", "program input 'w' is not a buffer"),
    ("inputs [x]", "inputs []", "buffer 'x' has role input but is not a program input"),
    ("op t: t[128*c0", "op y: t[128*c0", "op name 'y' is used by 2 ops"),
])
def test_each_broken_invariant_has_one_message(old, new, message):
    assert problems(old, new) == [message]


def test_read_before_write():
    text = GOOD.replace("op t: t[128*c0 + c1] = exp(x[128*c0 + c1]) over [c0<64, c1<128] "
                        "cores [c0:32, c1:1]\n", "")
    assert verify(parse(text), FACTS) == [
        "op 'y': reads t[c0 + 128*r0] before any op writes t"]


def test_a_layout_one_tile_short_does_not_tile_its_host_tensor():
    text = ir("""
    buffer x: input float16[2, 64] device [1, 2, 64] / [64, 64, 1] fp16
    buffer y: output float16[2, 64] device [1, 2, 64] / [64, 64, 1] fp16
    op y: y[64*c0 + c1] = neg(x[64*c0 + c1]) over [c0<2, c1<64]
    inputs [x]
    outputs [y]
    """)
    assert verify(parse(text)) == []
    broken = text.replace("x: input float16[2, 64] device [1, 2, 64]",
                          "x: input float16[2, 64] device [1, 1, 64]")
    assert verify(parse(broken)) == [
        "buffer 'x': layout [1, 1, 64] / [64, 64, 1] does not tile host [2, 64]"]


def test_facts_established_by_earlier_passes_must_hold():
    text = GOOD.replace(" @hbm 32768", "").replace(" cores [c0:2, r0:1]", "")
    text = text.replace("buffer t: intermediate float16[64, 128] device [2, 64, 64] / "
                        "[64, 128, 1] fp16 @hbm 16384", "buffer t: intermediate float16[64, 128]")
    assert verify(parse(text), ()) == []
    assert verify(parse(text), FACTS) == [
        "buffer 't': no device layout, though an earlier pass laid out every buffer",
        "op 'y': no core splits, though an earlier pass split every op",
        "buffer 't': no device address, though an earlier pass addressed every buffer",
        "buffer 'y': no device address, though an earlier pass addressed every buffer"]


def test_live_buffers_must_not_share_device_bytes():
    # t (16384 bytes at 16384) and y (256 bytes) are both live while op y runs
    assert problems("@hbm 32768", "@hbm 32640") == [
        "buffers 't' and 'y' are live at the same time and share device bytes [32640, 32768)"]


def test_buffers_live_at_different_times_may_share_bytes():
    text = ir("""
    buffer x: input float16[64] device [1, 64] / [64, 1] fp16 @hbm 0
    buffer a: intermediate float16[64] device [1, 64] / [64, 1] fp16 @hbm 128
    buffer b: intermediate float16[64] device [1, 64] / [64, 1] fp16 @hbm 256
    buffer c: intermediate float16[64] device [1, 64] / [64, 1] fp16 @hbm 128
    buffer y: output float16[64] device [1, 64] / [64, 1] fp16 @hbm 384
    op a: a[c0] = neg(x[c0]) over [c0<64]
    op b: b[c0] = neg(a[c0]) over [c0<64]
    op c: c[c0] = neg(b[c0]) over [c0<64]
    op y: y[c0] = neg(c[c0]) over [c0<64]
    inputs [x]
    outputs [y]
    """)
    assert verify(parse(text)) == []   # a dies at op b, c is born at op c
    early = text.replace("op b: b[c0] = neg(a[c0])", "op b: b[c0] = add(a[c0], a[c0])") \
        .replace("op c: c[c0] = neg(b[c0])", "op c: c[c0] = add(b[c0], a[c0])")
    assert verify(parse(early)) == [
        "buffers 'a' and 'c' are live at the same time and share device bytes [128, 256)"]


def test_check_is_an_internal_error_naming_the_pass():
    broken = parse(GOOD.replace("cores [c0:32, c1:1]", "cores [c0:3, c1:1]"))
    with pytest.raises(InternalError) as e:
        check(broken, "work_division", FACTS)
    assert str(e.value) == (
        "the IR is not valid after work_division: op 't': cores [c0:3, c1:1]: 3 slices do not "
        "divide c0<64; this is a spyrec bug, please report it with the command and input")
    assert e.value.exit_code == 70


def test_a_k_split_is_valid_into_hbm_and_refused_into_lx():
    """A sum's partials combine where they meet (issue 10 §2); in LX each core would hold
    only its own partial."""
    text = GOOD.replace("cores [c0:2, r0:1]", "cores [c0:2, r0:2]")
    assert verify(parse(text), FACTS) == []
    graph = parse(text.replace(
        "buffer y: output float16[128] device [2, 64] / [64, 1] fp16 @hbm 32768",
        "buffer y: intermediate float16[128] device [2, 64] / [64, 1] fp16 @lx 0"))
    assert "op 'y': cores [c0:2, r0:2]: reduced variable r0 is split across cores, but the " \
        "output is in LX, where each core would hold only its partial" in verify(graph, FACTS)
