"""Attention with masks that leave query rows with no key, equal to eager (NaN included).

Eager's `scaled_dot_product_attention` gives 0 for a fully masked row (boolean mask all False,
or an additive mask all -inf); the decomposed `softmax(q @ kᵀ + mask) @ v` gives NaN there.
spyrec must give each what eager gives. Masks are drawn at random with whole rows masked.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from tests.differential.harness import run_and_compare

F = torch.nn.functional


class Sdpa(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              enable_gqa=k.shape[1] != q.shape[1])


class Decomposed(torch.nn.Module):
    def forward(self, q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + mask
        return torch.softmax(scores, dim=-1) @ v


def _mask(rng, batch: int, rows: int, keys: int, masked_rows: list[int]) -> torch.Tensor:
    keep = torch.from_numpy(rng.random((batch, 1, rows, keys)) < 0.6)
    keep[:, :, masked_rows, :] = False
    return keep


def _qkv(rng, batch, heads, kv_heads, rows, keys, dim, dtype):
    def t(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype)
    return t(batch, heads, rows, dim), t(batch, kv_heads, keys, dim), t(batch, kv_heads, keys, dim)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(rows=st.integers(1, 9), keys=st.integers(1, 40), dim=st.sampled_from([8, 16, 33]),
       kv_heads=st.sampled_from([1, 2]), additive=st.booleans(), seed=st.integers(0, 2**16))
def test_sdpa_with_fully_masked_rows_gives_zero_rows_as_eager(tmp_path_factory, rows, keys, dim,
                                                               kv_heads, additive, seed):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, 2, 2, kv_heads, rows, keys, dim, torch.float32)
    masked = sorted({0, int(rng.integers(rows))})
    keep = _mask(rng, 2, rows, keys, masked)
    mask = keep if not additive else torch.where(keep, 0.0, float("-inf"))
    with torch.no_grad():
        expected = Sdpa()(q, k, v, mask)
    assert (expected[:, :, masked] == 0).all()
    run_and_compare(tmp_path_factory.mktemp("sdpa"), Sdpa(), (q, k, v, mask), frontend="fast")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sdpa_fully_masked_rows_fp16_and_fp32(tmp_path, dtype):
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, 1, 4, 2, 8, 70, 16, dtype)
    mask = _mask(rng, 1, 8, 70, [0, 3, 7])
    run_and_compare(tmp_path, Sdpa(), (q, k, v, mask), frontend="fast")


def test_decomposed_softmax_gives_nan_rows_as_eager(tmp_path):
    """The user's own softmax over an all -inf row is NaN in eager; spyrec agrees (NaN only there)."""
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, 1, 2, 2, 6, 20, 16, torch.float32)
    mask = torch.where(_mask(rng, 1, 6, 20, [2]), 0.0, float("-inf"))
    with torch.no_grad():
        expected = Decomposed()(q, k, v, mask)
    assert expected[:, :, 2].isnan().all() and not expected[:, :, [0, 1, 3, 4, 5]].isnan().any()
    run_and_compare(tmp_path, Decomposed(), (q, k, v, mask), frontend="fast")


def test_folded_causal_mask_keeps_the_plain_softmax(tmp_path):
    """A compile-time mask that masks no whole row (causal) costs no extra op: the safe
    softmax's two `maximum` ops appear only where a row can be fully masked."""
    class Causal(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng, 1, 2, 2, 8, 8, 16, torch.float32)
    (tmp_path / "causal").mkdir(), (tmp_path / "masked").mkdir()
    out = run_and_compare(tmp_path / "causal", Causal(), (q, k, v), frontend="fast")
    masked = run_and_compare(tmp_path / "masked", Sdpa(), (q, k, v, _mask(rng, 1, 8, 8, [1])),
                             frontend="fast")
    assert _count(out, "maximum") == 0
    assert _count(masked, "maximum") == 2


def _count(out, op: str) -> int:
    """Device ops named `op` in opspecs.json (loops' bodies included)."""
    from tests.programs import load_json

    def walk(specs):
        for s in specs:
            yield from walk(s["loop"]["body"]) if "loop" in s else [s["op"]]
    kernels = load_json(out / "opspecs.json")["kernels"]
    return sum(o == op for k in kernels for o in walk(k["specs"]))
