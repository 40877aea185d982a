"""split_outputs, IR text in and out: a fused projection read only in separate column blocks
becomes one op per block, each writing its own buffer that its readers read whole; anything
else is left alone. That the pieces compute what the fused op did is proven by simulation
(the differential test at the end, and every decoder/HF model test)."""

import numpy as np
import pytest
import torch

from spyrec.passes.registry import CompileContext
from spyrec.passes.split_outputs import SplitOutputs
from tests.passes.textir import run_pass

# q | k | v side by side in one [4, 96] fp32 product; three readers take a third each
FUSED = """
    buffer x: input float32[4, 64]
    buffer w: input float32[96, 64]
    buffer qkv: intermediate float32[4, 96]
    buffer q2: output float32[4, 32]
    buffer kv: output float32[4, 32]
    op qkv: qkv[96*c0 + c1] = batchmatmul(x[64*c0 + r0], w[64*c1 + r0]) over [c0<4, c1<96, r0<64] reduce [r0]
    op q2: q2[32*c0 + c1] = mul(qkv[96*c0 + c1], qkv[96*c0 + c1]) over [c0<4, c1<32]
    op kv: kv[32*c0 + c1] = add(qkv[96*c0 + c1 + 32], qkv[96*c0 + c1 + 64]) over [c0<4, c1<32]
    inputs [x, w]
    outputs [q2, kv]
"""


def test_a_product_read_in_thirds_becomes_three_products():
    ctx = CompileContext()
    after = run_pass(SplitOutputs(), FUSED, ctx)
    assert ctx.report["split_outputs"] == [{"buffer": "qkv",
                                            "blocks": [[0, 32], [32, 64], [64, 96]]}]
    ops = [line for line in after.splitlines() if line.startswith("op ")]
    assert ops == [
        "op qkv__cols0_32: qkv__cols0_32[32*c0 + c1] = batchmatmul(x[64*c0 + r0], "
        "w[64*c1 + r0]) over [c0<4, c1<32, r0<64] reduce [r0]",
        "op qkv__cols32_64: qkv__cols32_64[32*c0 + c1] = batchmatmul(x[64*c0 + r0], "
        "w[64*c1 + r0 + 2048]) over [c0<4, c1<32, r0<64] reduce [r0]",
        "op qkv__cols64_96: qkv__cols64_96[32*c0 + c1] = batchmatmul(x[64*c0 + r0], "
        "w[64*c1 + r0 + 4096]) over [c0<4, c1<32, r0<64] reduce [r0]",
        "op q2: q2[32*c0 + c1] = mul(qkv__cols0_32[32*c0 + c1], qkv__cols0_32[32*c0 + c1]) "
        "over [c0<4, c1<32]",
        "op kv: kv[32*c0 + c1] = add(qkv__cols32_64[32*c0 + c1], qkv__cols64_96[32*c0 + c1]) "
        "over [c0<4, c1<32]",
    ]
    assert "buffer qkv:" not in after and \
        "buffer qkv__cols32_64: intermediate float32[4, 32]" in after


@pytest.mark.parametrize("change, why", [
    ("qkv[96*c0 + c1 + 64]) over", "two readers overlap: columns 48..79 and 64..95"),
    ("qkv[96*c0 + c1 + 40]) over", "a block that does not start on a stick (fp32: 32 lanes)"),
])
def test_overlapping_or_unaligned_blocks_are_left_whole(change, why):
    text = FUSED.replace("qkv[96*c0 + c1 + 64]) over", change)
    if "48" in why:
        text = text.replace("qkv[96*c0 + c1 + 32]", "qkv[96*c0 + c1 + 48]")
    ctx = CompileContext()
    after = run_pass(SplitOutputs(), text, ctx)
    assert ctx.report["split_outputs"] == [], why
    assert "op qkv: qkv[96*c0 + c1]" in after


def test_a_buffer_the_program_returns_is_left_whole():
    text = FUSED.replace("buffer qkv: intermediate", "buffer qkv: output") \
        .replace("outputs [q2, kv]", "outputs [q2, kv, qkv]")
    ctx = CompileContext()
    run_pass(SplitOutputs(), text, ctx)
    assert ctx.report["split_outputs"] == []


def test_disabled_leaves_the_graph_alone():
    ctx = CompileContext()
    after = run_pass(SplitOutputs(enabled=False), FUSED, ctx)
    assert "op qkv: qkv[96*c0 + c1]" in after and "__cols" not in after
    assert ctx.report["split_outputs"] == []


def test_gpt2_style_fused_attention_equals_eager_and_reads_no_third_from_hbm(tmp_path):
    """c_attn -> split -> heads -> attention, as GPT-2 writes it: the projection is split in
    three, the program equals eager, and no op reads a third through HBM any more."""
    from tests.differential.harness import run_and_compare
    from tests.programs import load_json

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = torch.nn.Linear(128, 384)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.c_attn(x).split(d, dim=2)
            q, k, v = (t.reshape(b, s, 2, 64).transpose(1, 2) for t in (q, k, v))
            return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v

    g = torch.Generator().manual_seed(0)
    module = Attn()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    x = torch.randn(4, 64, 128, generator=g)
    out = run_and_compare(tmp_path, module, (x,))
    report = load_json(out / "report.json")
    # Linear with a bias lowers to a matmul and an add: the add splits first, which makes
    # the matmul read in thirds too, so it splits next
    thirds = [[0, 128], [128, 256], [256, 384]]
    assert [(r["buffer"], r["blocks"]) for r in report["split_outputs"]] == \
        [("linear__1", thirds), ("linear", thirds)]
    assert np.isfinite(report["cost"]["totals"]["time_us"])
