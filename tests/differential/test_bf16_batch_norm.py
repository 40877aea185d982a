"""An eval batch norm on bf16 tensors that no convolution absorbs: its statistics are bf16
constants, stored as their uint16 bits, and the compile-time scale and shift must read them
as numbers (read as integers, every output was -inf: silent wrong output)."""

import pytest
import torch

from tests.differential.harness import run_and_compare


class _Norm(torch.nn.Module):
    def __init__(self, channels: int, affine: bool):
        super().__init__()
        g = torch.Generator().manual_seed(channels)
        self.bn = torch.nn.BatchNorm2d(channels, affine=affine)
        self.bn.running_mean.copy_(torch.randn(channels, generator=g))
        self.bn.running_var.copy_(torch.rand(channels, generator=g) + 0.5)
        if affine:
            self.bn.weight.data.copy_(torch.randn(channels, generator=g))
            self.bn.bias.data.copy_(torch.randn(channels, generator=g))

    def forward(self, x):
        return self.bn(x) * 2


@pytest.mark.parametrize("affine", [True, False])
def test_a_bf16_batch_norm_equals_eager(tmp_path, affine):
    module = _Norm(8, affine).eval().to(torch.bfloat16)
    x = torch.randn(1, 8, 16, 16, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    run_and_compare(tmp_path, module, (x,))
