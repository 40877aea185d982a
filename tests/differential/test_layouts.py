"""Programs that stress layouts, simulated under both input-layout policies: every restickify
or copied view the layout pass inserts must preserve the numbers."""

import pytest
import torch

from tests.differential.harness import run_and_compare
from tests.programs import Lambda, load_json


def r(*shape, dtype=torch.float16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


PROGRAMS = {
    "slice_inside_a_stick_then_matmul": (lambda m, x, y: x[:, 40:140] @ y,
                                         (r(16, 200), r(100, 24, seed=1))),
    "padded_transpose_add": (lambda m, a, x: a.t() + x, (r(70, 100), r(100, 70, seed=1))),
    "padded_transpose_fp32": (lambda m, a, x: (a.t() * x).sum(0),
                              (r(33, 150, dtype=torch.float32), r(150, 33, seed=1,
                                                                  dtype=torch.float32))),
    "reduction_feeds_broadcast_across_rows": (lambda m, x: x / x.sum(0, keepdim=True)
                                              - x.amax(1, keepdim=True), (r(100, 64),)),
    "chain_of_transposes_3d": (lambda m, x: x.transpose(0, 2).transpose(1, 2) + 1
                               + x.permute(2, 1, 0).transpose(1, 2), (r(5, 70, 64),)),
    "transposed_reduction": (lambda m, x, y: x.t().sum(1, keepdim=True) * y,
                             (r(128, 64), r(64, 128, seed=1))),
    "shared_restickify": (lambda m, a, x, y: (a.t() + x, a.t() * y, (a.t() - x) @ y),
                          (r(64, 64), r(64, 64, seed=1), r(64, 64, seed=2))),
    "sum_of_transposes_matmul": (lambda m, a, b, c, e: (a + b.t() + c.t()) @ e,
                                 tuple(r(64, 64, seed=i) for i in range(4))),
}


@pytest.mark.parametrize("input_layouts", ["free", "default"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_layouts_preserve_numbers(name, input_layouts, tmp_path):
    fn, inputs = PROGRAMS[name]
    out = run_and_compare(tmp_path, Lambda(fn), inputs,
                          sets=[f"stick_layout.input_layouts={input_layouts}"])
    report = load_json(out / "report.json")
    assert report["layout_search"]["estimated_elements"] == report["restickify"]["elements"]


def test_a_slice_of_a_fused_projection_is_copied_not_the_whole_tensor(tmp_path):
    """Attention over a fused qkv projection: only k needs its stick on the sequence, so the
    layout pass copies k's view (4 x 64 x 128 = 32,768 elements), not the [4, 64, 384] tensor
    (98,304): a restickify moves the whole source, a view copy only what it reads."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 64, 128, generator=g), torch.randn(128, 384, generator=g)

    def attention(m, x, w):
        q, k, v = (x @ w).split(128, dim=-1)
        return (q @ k.transpose(-1, -2)).softmax(-1) @ v

    (tmp_path / "fused").mkdir()
    out = run_and_compare(tmp_path / "fused", Lambda(attention), (x, w),
                          sets=["split_outputs.enabled=false"])
    (copy,) = load_json(out / "report.json")["restickify"]["list"]
    assert (copy["copy"], copy["elements"], copy["consumers"]) == \
        ("matmul__view", 4 * 64 * 128, ["matmul_1"])
    # by default split_outputs makes k a tensor of its own first: the same bytes restickified
    (tmp_path / "split").mkdir()
    out = run_and_compare(tmp_path / "split", Lambda(attention), (x, w))
    (copy,) = load_json(out / "report.json")["restickify"]["list"]
    assert (copy["copy"], copy["elements"], copy["consumers"]) == \
        ("matmul__cols128_256__restick", 4 * 64 * 128, ["matmul_1"])
