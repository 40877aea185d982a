"""Hand-written programs: compile, simulate, equal to eager. Each covers a lowering, a layout
case (broadcast, reduction along each dim, transposes that force a restickify, padded sizes)
or a dtype."""

import math

import pytest
import torch

from tests.differential.harness import run_and_compare
from tests.programs import Lambda


def r(*shape, dtype=torch.float32, seed=0, positive=False):
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return (t.abs() + 0.1 if positive else t).to(dtype)


H, F = torch.float16, torch.float32

PROGRAMS = {
    "broadcast_add_padded": (lambda m, x, b: x + b, (r(4, 100), r(100, seed=1))),
    "scalar_ops": (lambda m, x: (x * 3 - 1) / 2 + (5 - x), (r(8, 70),)),
    "rowwise_mul_fp16": (lambda m, x, s: x * s, (r(128, 256, dtype=H), r(128, 1, dtype=H))),
    "div_max_min": (lambda m, x, y: torch.maximum(x, y) / (torch.minimum(x, y).abs() + 1),
                    (r(16, 64), r(16, 64, seed=1))),
    "compare_where": (lambda m, x, y: torch.where(x > y, x, 0.25) + (x <= 0).float(),
                      (r(10, 33), r(10, 33, seed=1))),
    "clamp": (lambda m, x: torch.clamp(x, -0.5, 0.7) + x.clamp(min=0), (r(9, 130),)),
    "unary_chain": (lambda m, x: torch.exp(x).log() + x.abs().sqrt() + (x.abs() + 1).rsqrt()
                    + torch.tanh(x) + torch.sigmoid(x) + torch.relu(x) + torch.floor(x)
                    - x.neg() + (x.abs() + 1).reciprocal(), (r(12, 96),)),
    "activations_fp16": (lambda m, x: torch.nn.functional.gelu(x)
                         + torch.nn.functional.gelu(x, approximate="tanh")
                         + torch.nn.functional.silu(x), (r(64, 200, dtype=H),)),
    "pow": (lambda m, x: x ** 2 + x.abs() ** 0.5, (r(5, 40),)),
    "casts": (lambda m, x: x.half().float() + x.to(torch.float16).to(torch.float32) * 2,
              (r(16, 80),)),
    "sum_each_dim": (lambda m, x: (x.sum(0), x.sum(1), x.sum(1, keepdim=True), x.sum()),
                     (r(20, 100),)),
    "mean_amax_amin_fp16": (lambda m, x: (x.mean(-1), x.amax(0), x.amin(1, keepdim=True)),
                            (r(32, 128, dtype=H),)),
    "reduce_middle_dim": (lambda m, x: x.sum(1) + x.amax(1), (r(3, 50, 70),)),
    "mm_k_not_multiple_of_64_fp16": (lambda m, x, y: x @ y, (r(55, 100, dtype=H),
                                                               r(100, 70, dtype=H, seed=1))),
    "bmm": (lambda m, x, y: torch.bmm(x, y), (r(3, 20, 40), r(3, 40, 30, seed=1))),
    "matmul_4d_broadcast": (lambda m, x, y: x @ y, (r(2, 3, 16, 8), r(1, 3, 8, 24, seed=1))),
    "transposed_operands": (lambda m, x, y: x.t() @ y.t(), (r(64, 32), r(48, 64, seed=1))),
    "softmax_log_softmax": (lambda m, x: (torch.softmax(x, -1), torch.log_softmax(x, -1),
                                          torch.softmax(x, 0)), (r(6, 150),)),
    "layer_norm_150_fp16": (lambda m, x: torch.nn.functional.layer_norm(x, (150,), m.w, m.b),
                            (r(8, 10, 150, dtype=H),), {"w": r(150, dtype=H, seed=2),
                                                        "b": r(150, dtype=H, seed=3)}),
    "rms_norm": (lambda m, x: torch.nn.functional.rms_norm(x, (96,), m.w, 1e-6),
                 (r(4, 96),), {"w": r(96, seed=2)}),
    "transpose_plus_x_restickify": (lambda m, a, x: a.t() + x, (r(128, 64), r(64, 128, seed=1))),
    "permute_contiguous": (lambda m, x: x.permute(2, 0, 1).contiguous() * 2, (r(4, 6, 70),)),
    "slice_inside_a_stick": (lambda m, x, y: x[:, 32:160] + y, (r(8, 256), r(8, 128, seed=1))),
    "select_unsqueeze_squeeze_expand": (lambda m, x: x.select(0, 2).unsqueeze(0).expand(5, 40)
                                        + x[1:2].squeeze(0), (r(4, 40),)),
    "split": (lambda m, x: tuple(t * (i + 1) for i, t in enumerate(x.split([30, 70], 1))),
              (r(6, 100),)),
    "cat_both_dims": (lambda m, x, y: (torch.cat([x, y], 0), torch.cat([x, y], 1)),
                      (r(5, 40), r(5, 40, seed=1))),
    "reshape_of_transpose": (lambda m, x: x.transpose(0, 1).reshape(-1, 16) + 1, (r(8, 12),)),
    "gather_rows": (lambda m, w, idx: w[idx] * 2, (r(50, 100), torch.tensor([3, 0, 49, 3]))),
    "chain_of_transposes": (lambda m, x: x.t().t().transpose(0, 1) + x.t(), (r(64, 64),)),
    "reduction_feeds_broadcast": (lambda m, x: x - x.mean(-1, keepdim=True)
                                  + x.amax(0, keepdim=True), (r(7, 90),)),
    "padded_3d": (lambda m, x, y: (x * y).sum(-1), (r(3, 5, 70), r(5, 70, seed=1))),
    "linear_addmm": (lambda m, x: torch.nn.functional.linear(x, m.w, m.b),
                     (r(10, 48),), {"w": r(24, 48, seed=2), "b": r(24, seed=3)}),
    # bf16 lives as fp16 on the device, so bf16 intermediates carry fp16 precision: compare
    # bf16 results at bf16 tolerance (a .float() of a bf16 product would differ from eager).
    "bf16_params_and_casts": (lambda m, x: (x * m.w + 1, (x.float() * 2).to(torch.bfloat16)),
                              (r(8, 100, dtype=torch.bfloat16),),
                              {"w": r(100, dtype=torch.bfloat16, seed=4)}),
    "int32_and_bool_casts": (lambda m, x: ((x * 10).to(torch.int32).float() + (x > 0).half(),
                                           (x * 3).to(torch.int32) + 1), (r(6, 70),)),
    "max_min_values": (lambda m, x: (x.max(dim=1).values, x.min(0).values), (r(9, 130),)),
    "attention_scaled": (lambda m, q, k, v: torch.softmax(q @ k.transpose(-1, -2)
                                                          / math.sqrt(32), -1) @ v,
                         (r(2, 2, 20, 32), r(2, 2, 20, 32, seed=1), r(2, 2, 20, 32, seed=2))),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_matches_eager(name, tmp_path):
    fn, inputs, *params = PROGRAMS[name]
    run_and_compare(tmp_path, Lambda(fn, **(params[0] if params else {})), inputs)


@pytest.mark.parametrize("sample", ["mlp_fp32", "mlp_fp16", "attention_fp32", "layernorm_fp16",
                                    "decoder_fp32"])
def test_sample_matches_eager(sample, tmp_path):
    from samples.models import SAMPLES

    module, inputs = SAMPLES[sample]()
    run_and_compare(tmp_path, module, inputs)


@pytest.mark.slow
def test_seed_add_mul_fp16_1024x4096(tmp_path):
    from samples.models import SAMPLES

    module, inputs = SAMPLES["add_mul_fp16"]()
    run_and_compare(tmp_path, module, inputs)
