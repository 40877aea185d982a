"""`torch._scaled_mm` (issue 60): activations quantized to float8_e4m3fn in forward, times an
8-bit weight with per-tensor scales, with and without a bias, equal to eager: the conversion
to fp8 on the device rounds and saturates as torch's does (spyrec/fp8.py), the matmul reads
both operands 8-bit."""

from __future__ import annotations

import pytest
import torch

from tests.differential.harness import run_and_compare
from tests.programs import load_json


class ScaledMM(torch.nn.Module):
    def __init__(self, bias: bool, fmt=torch.float8_e4m3fn):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.register_buffer("w", torch.randn(256, 128, generator=g).to(fmt))
        self.register_buffer("ws", torch.tensor(0.25))
        self.bias = torch.nn.Parameter(torch.randn(256, generator=g).half(),
                                       requires_grad=False) if bias else None

    def forward(self, x):
        xs = x.abs().amax().float() / 448
        xq = (x.float() / xs).to(torch.float8_e4m3fn)
        return torch._scaled_mm(xq, self.w.t(), scale_a=xs, scale_b=self.ws, bias=self.bias,
                                out_dtype=torch.float16)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("fmt", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_scaled_mm_equals_eager(tmp_path, bias, fmt):
    x = torch.randn(16, 128, generator=torch.Generator().manual_seed(1)).half() * 3
    out = run_and_compare(tmp_path, ScaledMM(bias, fmt), (x,))
    tensors = {t["source"]: t for t in load_json(out / "manifest.json")["tensors"]}
    assert tensors["w"]["device_dtype"] == {torch.float8_e4m3fn: "fp8_e4m3",
                                            torch.float8_e5m2: "fp8_e5m2"}[fmt]
