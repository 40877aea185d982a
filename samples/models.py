"""Sample programs: small PyTorch models and their example inputs.

`SAMPLES[name]()` returns `(module, example_inputs)`; `samples/export.py` saves them as `.pt2`
plus an `.npz` of inputs, and the tests compile and simulate every one against eager.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=_gen(seed)).to(dtype)


class AddMul(nn.Module):
    """The seed document's (a + b) * c."""

    def forward(self, a, b, c):
        return (a + b) * c


class MLP(nn.Module):
    def __init__(self, d_in=256, d_hidden=512, d_out=256):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class SoftmaxAttention(nn.Module):
    def forward(self, q, k, v):
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-1) @ v


class LayerNormModel(nn.Module):
    def __init__(self, d=150):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(x)


class DecoderBlock(nn.Module):
    """RMSNorm, multi-head self-attention, RMSNorm, SwiGLU MLP, two residuals."""

    def __init__(self, d=256, heads=4, d_ff=512):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(d, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.norm2 = nn.RMSNorm(d, eps=1e-6)
        self.gate = nn.Linear(d, d_ff, bias=False)
        self.up = nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, h, d // h).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // h), dim=-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        y = self.norm2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(y)) * self.up(y))


class Decoder(nn.Module):
    def __init__(self, depth=2, **kw):
        super().__init__()
        self.layers = nn.ModuleList(DecoderBlock(**kw) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _init(module: nn.Module, seed: int = 0) -> nn.Module:
    g = _gen(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(max(p.shape[-1], 1))))
    return module.eval()


SAMPLES = {
    "add_mul_fp16": lambda: (AddMul(), tuple(_randn(1024, 4096, dtype=torch.float16, seed=i)
                                             for i in range(3))),
    "mlp_fp32": lambda: (_init(MLP()), (_randn(64, 256),)),
    "mlp_fp16": lambda: (_init(MLP()).half(), (_randn(64, 256, dtype=torch.float16),)),
    "attention_fp32": lambda: (SoftmaxAttention(), tuple(_randn(2, 4, 100, 64, seed=i)
                                                         for i in range(3))),
    "layernorm_fp16": lambda: (_init(LayerNormModel()).half(),
                               (_randn(8, 100, 150, dtype=torch.float16),)),
    "decoder_fp32": lambda: (_init(Decoder(depth=1)), (_randn(2, 127, 256),)),
}


def decoder(depth: int, batch: int = 8, seq: int = 127, d: int = 256):
    """The benchmark decoder: `depth` blocks, input (batch, seq, d), fp32."""
    return _init(Decoder(depth=depth, d=d)), (_randn(batch, seq, d),)
