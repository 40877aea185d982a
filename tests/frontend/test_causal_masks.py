"""Causal attention masks that do not grow as (queries × keys) constants.

`is_causal` is one compare of two position vectors on the device, never a table: at 32K tokens
a causal table is 32K × 32K fp32 = 4 GB. Each program is compiled, simulated and compared with
eager, and the compiled program's constants are checked to be no larger than a position vector.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spyrec.frontend.fold import MAX_GROWN_CONSTANT_BYTES
from spyrec.frontend.host_dtypes import ITEMSIZE
from tests.differential.harness import run_and_compare
from tests.differential.test_masked_attention import _count
from tests.programs import Lambda, load_json

F = torch.nn.functional


def _qkv(rows: int, keys: int, dtype, heads: int = 4, kv_heads: int = 2, dim: int = 16):
    g = torch.Generator().manual_seed(rows * 1000 + keys)
    return tuple(torch.randn(*shape, generator=g).to(dtype) for shape in
                 ((1, heads, rows, dim), (1, kv_heads, keys, dim), (1, kv_heads, keys, dim)))


def _constants(out) -> dict[str, int]:
    """Constant buffer name -> host element count, from the compiled program's manifest."""
    return {t["name"]: int(np.prod(t["host_shape"], dtype=np.int64))
            for t in load_json(out / "manifest.json")["tensors"] if t["role"] == "constant"}


CAUSAL = Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                   enable_gqa=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("rows,keys", [(24, 24), (9, 40), (40, 9)],
                         ids=["square", "fewer_queries", "more_queries"])
def test_is_causal_equals_eager_without_a_mask_table(tmp_path, rows, keys, dtype):
    """Top-left aligned as eager (keep key j <= query i) for S = L, S < L and S > L, with four
    query heads over two key/value heads; the only constants are the two position vectors and
    the -inf fill, and the plain softmax (no `maximum`) is kept: no row is fully masked."""
    out = run_and_compare(tmp_path, CAUSAL, _qkv(rows, keys, dtype), frontend="fast")
    constants = _constants(out)
    assert sorted(constants.values()) == sorted([1, rows, keys]), constants
    assert max(constants.values()) < rows * keys
    assert _count(out, "lesserequal") == 1 and _count(out, "where3") == 1
    assert _count(out, "maximum") == 0


@pytest.mark.parametrize("additive", [False, True], ids=["bool", "additive"])
def test_is_causal_with_a_mask_applies_both_as_eager(tmp_path, additive):
    """Eager (CPU) applies a given mask and the causal mask together: query 2 keeps only keys
    above the diagonal in the user's mask, so together they mask its whole row, which eager
    gives as 0. The safe softmax (two `maximum` ops) is used whenever a user mask is given."""
    q, k, v = _qkv(6, 8, torch.float32)
    keep = torch.rand(6, 8, generator=torch.Generator().manual_seed(1)) < 0.7
    keep[:, 0] = True
    keep[2, :3] = False
    mask = torch.where(keep, 0.0, float("-inf")) if additive else keep
    module = Lambda(lambda m, q, k, v, mask: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=True, enable_gqa=True))
    with torch.no_grad():
        expected = module(q, k, v, mask)
    assert (expected[:, :, 2] == 0).all() and not expected.isnan().any()
    out = run_and_compare(tmp_path, module, (q, k, v, mask), frontend="fast")
    assert _count(out, "maximum") == 2


def _large_constants(out) -> dict[str, int]:
    """Constant buffers (weights excluded) of at least the folding cap, in host bytes."""
    sizes = {t["name"]: int(np.prod(t["host_shape"], dtype=np.int64)) * ITEMSIZE[t["host_dtype"]]
             for t in load_json(out / "manifest.json")["tensors"]
             if t["role"] == "constant" and not t["name"].startswith("p_")}
    return {name: n for name, n in sizes.items() if n >= MAX_GROWN_CONSTANT_BYTES}


class PositionMasks(torch.nn.Module):
    """A causal sliding-window mask built as Hugging Face builds it: comparisons of aranges,
    `&`, a broadcast to [B, 1, S, S], then sdpa with the boolean mask."""

    def forward(self, q, k, v):
        pos = torch.arange(q.shape[-2])
        keep = (pos[None, :] <= pos[:, None]) & (pos[:, None] - pos[None, :] < 300)
        mask = keep[None, None].expand(q.shape[0], 1, -1, -1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_position_mask_above_the_folding_cap_is_computed_not_stored(tmp_path):
    """At 1,024 tokens the sliding-window mask (1 MiB of bool, 8 MiB of int64 differences)
    stays device ops over the arange: no constant reaches the cap, and the result is eager's."""
    out = run_and_compare(tmp_path, PositionMasks(), _qkv(1024, 1024, torch.float16, 2, 2, 8),
                          frontend="fast")
    assert _large_constants(out) == {}
    assert _count(out, "lesserequal") == 1 and _count(out, "lesserthan") == 1


def test_tiny_llama_prefill_of_1024_tokens_stores_no_mask_table(tmp_path):
    """transformers' own mask code (arange, index, eq, le, `&`, expand) at 1,024 tokens: the
    1 MiB causal mask is computed on the device from position vectors, and the logits equal
    eager's (2 layers, hidden 128, 4 heads over 2 KV heads, as tests/models/hf.py). The one
    mask transformers builds for both layers is computed by each layer's attention, per tile
    inside its key loop: no intermediate holds it whole."""
    pytest.importorskip("transformers")
    from tests.models import hf

    tokens = 1024
    model = hf.long_prefill("llama", tokens)
    ids = torch.randint(0, hf.VOCAB, (1, tokens), generator=torch.Generator().manual_seed(0))
    out = run_and_compare(tmp_path, model, (ids,), frontend="fast")
    assert _large_constants(out) == {}
    assert _count(out, "lesserequal") == 2
    tensors = load_json(out / "manifest.json")["tensors"]
    assert not [t["name"] for t in tensors if t["role"] == "intermediate"
                and t["host_shape"][-2:] == [tokens, tokens]]
