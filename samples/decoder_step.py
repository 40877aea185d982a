"""A small decoder step: every indexing form a decoder uses, in one program.

One token at runtime position `pos`: its embedding (a gather from the table), rotary cos/sin
gathered from precomputed tables at `pos`, the new key and value written into static KV caches
with `index_copy_` (registered buffers: they come back in the outputs under their FQNs), and
attention over the whole cache with a mask of the positions written so far.

    python samples/decoder_step.py OUT_DIR    # writes decoder_step.pt2 and decoder_step.npz
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

F = nn.functional


class DecoderStep(nn.Module):
    def __init__(self, vocab: int = 96, d: int = 64, heads: int = 2, max_len: int = 16):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.emb = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = torch.outer(torch.arange(max_len).float(), inv)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos_table", angles.cos())
        self.register_buffer("sin_table", angles.sin())
        self.register_buffer("k_cache", torch.zeros(1, heads, max_len, self.head_dim))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_len, self.head_dim))
        self.register_buffer("positions", torch.arange(max_len))

    def _rotate(self, x, cos, sin):
        half = self.head_dim // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def forward(self, ids, pos):
        h = self.emb(ids)                                       # [1, 1, d]
        q, k, v = self.qkv(h).split(h.shape[-1], dim=-1)
        q, k, v = (t.view(1, 1, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        cos, sin = self.cos_table[pos], self.sin_table[pos]     # [1, head_dim], gathered
        q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        mask = self.positions[None, :] <= pos[:, None]          # keys written so far
        att = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask,
                                             scale=1.0 / math.sqrt(self.head_dim))
        y = self.out(att.transpose(1, 2).reshape(1, 1, -1))
        return y @ self.emb.weight.t()                          # logits [1, 1, vocab]


def make(seed: int = 0, pos: int = 5) -> tuple[nn.Module, tuple]:
    """The module (weights and a cache already holding `pos` earlier tokens) and its inputs."""
    g = torch.Generator().manual_seed(seed)
    module = DecoderStep().eval()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        module.k_cache[:, :, :pos] = torch.randn(1, 2, pos, 32, generator=g)
        module.v_cache[:, :, :pos] = torch.randn(1, 2, pos, 32, generator=g)
    return module, (torch.tensor([[17]]), torch.tensor([pos]))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: decoder_step.py OUT_DIR")
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    module, inputs = make()
    torch.export.save(torch.export.export(module, inputs), str(out_dir / "decoder_step.pt2"))
    np.savez(out_dir / "decoder_step.npz", ids=inputs[0].numpy(), pos=inputs[1].numpy())
    print(out_dir / "decoder_step.pt2")
