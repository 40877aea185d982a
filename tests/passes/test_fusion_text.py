"""fusion, IR text in and out: a linear layer's matmul, bias add and GELU pass their values
through LX on 32 cores (2 rows each), so they become one fused SuperDSC (`fused mm`: a PT op
and two SFP ops) and their two intermediates (32 KiB each) never travel through HBM; the op
after them reads none of their values and stays alone. An intermediate left in HBM ends the
chain; `enabled: false` fuses nothing. That fused files simulate bit
for bit like the unfused ones is tests/passes/test_fusion.py's job."""

import pytest

from spyrec.passes.fusion import Fusion
from spyrec.passes.registry import CompileContext
from tests.passes.textir import ir, run_pass

F16 = "float16[64, 256] device [4, 64, 64] / [64, 256, 1] fp16"
W = "float16[256, 256] device [4, 256, 64] / [64, 256, 1] fp16"
ROWS = "cores [c0:32, c1:1]"
FACTS = ("layouts", "core_splits")


def block(h_lx: str = " @lx 0", fused: tuple[str, ...] = ()) -> str:
    """x @ w + b, GELU, then x * x; `fused`: the suffix of each of the four ops."""
    mark = list(fused) + [""] * (4 - len(fused))
    return f"""
    buffer x: input {F16}
    buffer w: constant {W}
    buffer b: constant float16[256] device [4, 64] / [64, 1] fp16
    buffer h: intermediate {F16}{h_lx}
    buffer hb: intermediate {F16} @lx 1024
    buffer y: output {F16}
    buffer z: output {F16}
    op mm: h[256*c0 + c1] = batchmatmul(x[256*c0 + r0], w[c1 + 256*r0]) over [c0<64, c1<256, r0<256] reduce [r0] cores [c0:32, c1:1, r0:1]{mark[0]}
    op bias: hb[256*c0 + c1] = add(h[256*c0 + c1], b[c1]) over [c0<64, c1<256] {ROWS}{mark[1]}
    op act: y[256*c0 + c1] = gelufwd(hb[256*c0 + c1]) over [c0<64, c1<256] {ROWS}{mark[2]}
    op sq: z[256*c0 + c1] = mul(x[256*c0 + c1], x[256*c0 + c1]) over [c0<64, c1<256] {ROWS}{mark[3]}
    inputs [x]
    outputs [y, z]
"""


def test_a_matmul_its_bias_and_gelu_become_one_superdsc_of_three_compute_ops():
    ctx = CompileContext()
    out = run_pass(Fusion(), block(), ctx, FACTS)
    assert out == ir(block(fused=(" fused mm",) * 3))
    (row,) = ctx.report["fusion"]
    # h and hb, 32 KiB each, written once and read once: 128 KiB of HBM traffic kept in LX
    assert row == {"name": "mm", "ops": ["mm", "bias", "act"], "units": ["pt", "sfp", "sfp"],
                   "kept": ["h", "hb"], "hbm_bytes_kept": 4 * 64 * 256 * 2}


def test_an_intermediate_in_hbm_ends_the_chain():
    """h without an LX address: the bias add reads it from HBM, so the matmul stays alone
    and the chain starts at the bias add (hb is in LX)."""
    ctx = CompileContext()
    out = run_pass(Fusion(), block(h_lx=""), ctx, FACTS)
    assert out == ir(block(h_lx="", fused=("", " fused bias", " fused bias")))
    assert [r["ops"] for r in ctx.report["fusion"]] == [["bias", "act"]]


@pytest.mark.parametrize("text", [block(), block(h_lx="")])
def test_disabled_fuses_nothing(text):
    ctx = CompileContext()
    assert run_pass(Fusion(enabled=False), text, ctx, FACTS) == ir(text)
    assert ctx.report["fusion"] == []


def test_an_op_that_only_feeds_the_chain_joins_it():
    """x * x, kept in LX and read by the bias add only (as a causal mask computed in the K/V
    loop feeds the flash body's `where`), reads no member's value but joins the group it
    feeds: one SuperDSC of four compute ops."""
    text = f"""
    buffer x: input {F16}
    buffer w: constant {W}
    buffer s: intermediate {F16} @lx 2048
    buffer h: intermediate {F16} @lx 0
    buffer hb: intermediate {F16} @lx 1024
    buffer y: output {F16}
    op sq: s[256*c0 + c1] = mul(x[256*c0 + c1], x[256*c0 + c1]) over [c0<64, c1<256] {ROWS}{{f}}
    op mm: h[256*c0 + c1] = batchmatmul(x[256*c0 + r0], w[c1 + 256*r0]) over [c0<64, c1<256, r0<256] reduce [r0] cores [c0:32, c1:1, r0:1]{{f}}
    op bias: hb[256*c0 + c1] = add(h[256*c0 + c1], s[256*c0 + c1]) over [c0<64, c1<256] {ROWS}{{f}}
    op act: y[256*c0 + c1] = gelufwd(hb[256*c0 + c1]) over [c0<64, c1<256] {ROWS}{{f}}
    inputs [x]
    outputs [y]
"""
    ctx = CompileContext()
    assert run_pass(Fusion(), text.replace("{f}", ""), ctx, FACTS) == \
        ir(text.replace("{f}", " fused sq"))
    (row,) = ctx.report["fusion"]
    assert row["units"] == ["sfp", "pt", "sfp", "sfp"] and row["kept"] == ["h", "s", "hb"]
    assert row["hbm_bytes_kept"] == (2 + 2 + 2) * 64 * 256 * 2


H_IN_HBM = ("h: intermediate float16[64, 256] device [4, 64, 64] / [64, 256, 1] fp16 @lx 0",
            "h: intermediate float16[64, 256] device [4, 64, 64] / [64, 256, 1] fp16")


@pytest.mark.parametrize("text, problem", [
    (ir(block(fused=(" fused mm",) * 3)).replace(*H_IN_HBM),
     "fused SuperDSC 'mm': op 'bias' reads 'h', which a member writes, from HBM"),
    (ir(block(fused=(" fused mm", " fused mm", "", " fused mm"))),
     "fused SuperDSC 'mm': op 'sq' is not next to its members"),
])
def test_the_verifier_holds_a_fused_group_to_its_form(text, problem):
    from spyrec.ir.parser import parse
    from spyrec.ir.verify import verify

    assert any(problem in p for p in verify(parse(text))), verify(parse(text))
