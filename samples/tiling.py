"""Sample programs for the tiling configs in `configs/tiling/` (one per config, same name).

`TILING_SAMPLES[name]()` returns `(module, example_inputs)` like `samples/models.py`;
`configs/tiling/<name>.yaml` tiles the program exported from it. Export one with
`python samples/export.py NAME OUT_DIR`, then
`spyrec compile OUT_DIR/NAME.pt2 -o OUT --tiling configs/tiling/NAME.yaml`.
The input names (`a`, `x`) and module paths (`mlp`, `proj`) are what the configs refer to, so
keep them in step with the YAML files (tests/passes/test_tiling_config.py resolves each pair).
"""

from __future__ import annotations

import torch
from torch import nn

from samples.models import AddMul, _init, _randn


class SoftmaxRows(nn.Module):
    """softmax over the last dim: rows are independent, so they tile."""

    def forward(self, x):
        return torch.softmax(x, dim=-1)


class SwiGLU(nn.Module):
    """A decoder block's MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.gate = nn.Linear(d, d_ff, bias=False)
        self.up = nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


class DecoderMLP(nn.Module):
    """The MLP half of a decoder block: x + mlp(norm(x)); tokens are the rows of x."""

    def __init__(self, d: int = 256, d_ff: int = 512):
        super().__init__()
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.mlp = SwiGLU(d, d_ff)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class MatmulK(nn.Module):
    """x @ proj.weight.T with a long reduction (K = 512): tiling K needs an accumulator."""

    def __init__(self, k: int = 512, n: int = 256):
        super().__init__()
        self.proj = nn.Linear(k, n, bias=False)

    def forward(self, x):
        return self.proj(x)


TILING_SAMPLES = {
    "seed_add_mul": lambda: (AddMul(), tuple(_randn(1024, 4096, dtype=torch.float16, seed=i)
                                             for i in range(3))),
    "softmax_rows": lambda: (SoftmaxRows(), (_randn(256, 512, dtype=torch.float16),)),
    "decoder_mlp_tokens": lambda: (_init(DecoderMLP()).half(),
                                   (_randn(256, 256, dtype=torch.float16),)),
    "matmul_k": lambda: (_init(MatmulK()).half(), (_randn(64, 512, dtype=torch.float16),)),
}
