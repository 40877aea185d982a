"""Stored-graph ops the fast front end lowers itself: compiled without torch, equal to eager."""

import numpy as np
import pytest
import torch

from spyrec.errors import SimulatorFault, UnsupportedProgram
from spyrec.sim.runner import simulate
from tests.differential.harness import run_and_compare
from tests.programs import Lambda, compile_pt2, export, load_json

F = torch.nn.functional


def r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


PROGRAMS = {
    "dropout_eval": (lambda m, x: F.dropout(x, 0.2, training=False) * 2
                     + F.dropout1d(x.unsqueeze(0), 0.1, training=False).squeeze(0),
                     (r(8, 40),)),
    "flatten_unflatten": (lambda m, x: x.flatten(1).unflatten(1, (6, 5)) + 1, (r(4, 3, 10),)),
    "square": (lambda m, x: torch.square(x) - x, (r(5, 70),)),
    "sdpa": (lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v),
             (r(2, 4, 16, 32), r(2, 4, 20, 32, seed=1), r(2, 4, 20, 32, seed=2))),
    "sdpa_causal_scaled": (lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True, scale=0.3), (r(1, 2, 24, 16), r(1, 2, 24, 16, seed=1),
                                              r(1, 2, 24, 16, seed=2))),
    "sdpa_bool_mask": (lambda m, q, k, v, mask: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask), (r(1, 2, 8, 16), r(1, 2, 12, 16, seed=1),
                                   r(1, 2, 12, 16, seed=2), r(8, 12, seed=3) > -1.0)),
    "sdpa_float_mask": (lambda m, q, k, v, mask: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask), (r(1, 2, 8, 16), r(1, 2, 12, 16, seed=1),
                                   r(1, 2, 12, 16, seed=2), r(1, 1, 8, 12, seed=3))),
    "sdpa_gqa_causal_fp16": (lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True),
        (r(1, 4, 16, 32).half(), r(1, 2, 16, 32, seed=1).half(), r(1, 2, 16, 32, seed=2).half())),
    "to_variants": (lambda m, x, y: x.to(torch.float16).to(y) + x.type_as(y)
                    + x.to("cpu", torch.float32), (r(6, 64), r(6, 64, seed=1))),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_training_op_lowered_directly(tmp_path, name):
    fn, inputs = PROGRAMS[name]
    out = run_and_compare(tmp_path, Lambda(fn), inputs, frontend="fast")
    assert load_json(out / "report.json")["frontend"]["used"] == "fast"


def test_training_mode_dropout_is_refused_with_what_to_do(tmp_path):
    module = Lambda(lambda m, x: F.dropout(x, 0.5, training=True))
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(module.train(), (r(4, 8),)), str(pt2))
    with pytest.raises(UnsupportedProgram, match=r"train=True .* export the model in eval mode"):
        compile_pt2(pt2, tmp_path / "out", frontend="fast")


def test_cos_sin_rotary_tables_equal_eager(tmp_path):
    """Rotary embeddings: cos/sin of positions times inverse frequencies, fp32 and fp16."""
    def rotary(m, pos, inv):
        freqs = pos[:, None] * inv[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos(), emb.sin(), emb.half().cos()
    pos = torch.arange(40, dtype=torch.float32) * 3.5
    inv = 1.0 / (10000 ** (torch.arange(0, 32, 2, dtype=torch.float32) / 32))
    run_and_compare(tmp_path, Lambda(rotary), (pos, inv), frontend="fast")


def test_transpose_of_a_0d_tensor_is_itself(tmp_path):
    """Stored graphs keep `transpose(x, 0, 0)` on a 0-d tensor (torch's decomposition dropped
    it); the OpInfo sweep found it."""
    run_and_compare(tmp_path, Lambda(lambda m, x: x.transpose(0, 0) * 2 + x.t()),
                    (torch.tensor(1.5),), frontend="fast")


def test_unbind_and_index_select_equal_eager(tmp_path):
    run_and_compare(tmp_path, Lambda(lambda m, x, i: torch.stack(x.unbind(1), 0).sum(0)
                                     + x.index_select(0, i)[:, :4].sum()),
                    (r(6, 4), torch.tensor([5, 0, 2, 2, 1, 3])), frontend="fast")


def test_gathering_along_a_dim_of_size_one_equals_eager_and_checks_every_index(tmp_path):
    """The gathered coordinate is always 0, so it leaves the read; the index check stays."""
    x = r(1, 8)
    pt2 = export(tmp_path, Lambda(lambda m, x, i: x[i] * 2), (x, torch.tensor([0, -1])))
    out = compile_pt2(pt2, tmp_path / "out", frontend="fast")
    got = simulate(out, {"args_0": x.numpy(), "args_1": np.array([0, -1])}).outputs[0]
    np.testing.assert_array_equal(got, (x[torch.tensor([0, -1])] * 2).numpy())
    with pytest.raises(SimulatorFault,
                       match=r"'args_1' \(used by index\): the value 1 at position \[0\]"):
        simulate(out, {"args_0": x.numpy(), "args_1": np.array([1, 0])})


def test_torch_gather_along_each_dim_equals_eager(tmp_path):
    x = r(5, 7, 6)
    idx0 = torch.randint(0, 5, (3, 7, 6), generator=torch.Generator().manual_seed(1))
    idx2 = torch.randint(0, 6, (5, 7, 2), generator=torch.Generator().manual_seed(2))
    run_and_compare(tmp_path, Lambda(lambda m, x, a, b: (torch.gather(x, 0, a) * 2,
                                                         torch.gather(x, 2, b))),
                    (x, idx0, idx2), frontend="fast")


def test_boolean_mask_logic_on_runtime_data_equals_eager(tmp_path):
    def masked(m, x, keep, pos):
        causal = pos[:, None] >= pos[None, :]
        mask = (keep[None, :] & causal) | ~(pos[None, :] < 0)
        mask = mask ^ (pos[:, None] == 100)
        return torch.where(torch.logical_and(mask, ~torch.logical_not(keep[None, :])), x, 0.0)
    run_and_compare(tmp_path, Lambda(masked),
                    (r(6, 6), torch.tensor([1, 1, 0, 1, 0, 1], dtype=torch.bool),
                     torch.arange(6)), frontend="fast")
