"""split_padding, IR text in and out: an lm_head over a vocabulary of 6,211 (97 sticks and 3
elements, fp16) cannot split N (a core split of a stick var needs whole sticks), so unpadded
it splits K 8 ways; padded with zero weight rows to 6,272 (98 sticks), N splits 14 ways, and
a copy moves the 6,211 real columns into the output. The pass chooses by the split estimate
(32.1 us padded against 37.9 unpadded at one token). That the padded program equals eager is
tests/passes/test_split_padding.py's (differential) job."""

import numpy as np
import pytest

from spyrec.ir.parser import parse
from spyrec.ir.values import PaddedConstant
from spyrec.passes.registry import CompileContext
from spyrec.passes.split_padding import SplitPadding
from tests.passes.textir import ir, run_pass

X = "float16[1, 512] device [8, 1, 64] / [64, -1, 1] fp16"
K_ROWS = "device [98, 512, 64] / [32768, 1, 512] fp16"      # the weight [N, K]: N in lanes
N_LANES = "device [98, 1, 64] / [64, -1, 1] fp16"
HEAD = f"""
    buffer x: input {X}
    buffer w: constant float16[6211, 512] {K_ROWS}
    buffer logits: output float16[1, 6211] {N_LANES}
    op logits: logits[c1] = batchmatmul(x[r0], w[512*c1 + r0]) over [c1<6211, r0<512] reduce [r0]
    inputs [x]
    outputs [logits]
"""
W = np.zeros((6211, 512), np.float16)


def test_a_vocabulary_of_partial_sticks_is_padded_when_more_cores_then_pay():
    ctx = CompileContext()
    padded = "over [c1<6272, r0<512] reduce [r0]"
    assert run_pass(SplitPadding(), HEAD, ctx, ("layouts",), {"w": W}) == ir(f"""
    buffer x: input {X}
    buffer logits: output float16[1, 6211] {N_LANES}
    buffer w__npad: constant float16[6272, 512] {K_ROWS}
    buffer logits__npad: intermediate float16[1, 6272] {N_LANES}
    op logits: logits__npad[c1] = batchmatmul(x[r0], w__npad[512*c1 + r0]) {padded}
    op logits__unpad: logits[c1] = identity(logits__npad[c1]) over [c1<6211]
    inputs [x]
    outputs [logits]
    """)
    (row,) = ctx.report["split_padding"]["list"]
    assert {k: row[k] for k in ("weight", "n", "n_padded", "padded", "split", "unpadded_split")} \
        == {"weight": "w", "n": 6211, "n_padded": 6272, "padded": "w__npad",
            "split": "[c1:14, r0:1] + [c1:1]", "unpadded_split": "[c1:1, r0:8]"}
    assert row["time_us"] == pytest.approx(32.13, abs=0.01)
    assert row["unpadded_time_us"] == pytest.approx(37.94, abs=0.01)


def test_the_padded_weight_is_the_weight_and_61_zero_rows():
    """The values stay the weight's: the padded constant is written from it at write time
    (`ir/values.py`), and the unpadded weight, read by nothing now, is dropped."""
    graph = parse(ir(HEAD), {"w": W})
    SplitPadding().run(graph, CompileContext())
    padded = graph.constants["w__npad"]
    assert isinstance(padded, PaddedConstant) and padded.base is W and padded.pad == (61, 0)
    assert "w" not in graph.constants and "w" not in graph.buffers


@pytest.mark.parametrize("vocab, enabled, why", [
    (6211, False, "enabled: false"),
    (96 * 64, True, "96 whole sticks already divide over the 32 cores"),
])
def test_nothing_is_padded_when_disabled_or_when_n_already_divides(vocab, enabled, why):
    text = HEAD.replace("6211", str(vocab)).replace("[98,", f"[{-(-vocab // 64)},")
    ctx = CompileContext()
    after = run_pass(SplitPadding(enabled=enabled), text, ctx, ("layouts",),
                     {"w": np.zeros((vocab, 512), np.float16)})
    assert after == ir(text), why
    assert ctx.report["split_padding"] == {"count": 0, "list": []}
