"""8-bit weight-only linears as users export them (issue 60), built from tiny configs.

`QuantLinear` holds its weight as float8_e4m3fn / float8_e5m2 / int8 and a scale, and its
forward dequantizes it (`w.to(dtype) * scale`) before `F.linear`: the form compressed-tensors'
FP8 weight-only checkpoints and hand-written modules export to on CPU. Scale layouts (`FORMS`):

- `fp8_tensor`:  float8_e4m3fn, one scale                       (scale shape [])
- `fp8_channel`: float8_e4m3fn, a scale per output channel      ([N, 1])
- `fp8_block`:   float8_e4m3fn, a scale per 128 x 128 block     ([N/128, K/128])
- `int8_channel`: int8, a scale per output channel              ([N, 1])
- `int8_group<G>`: int8, a scale per group of G inputs           ([N, K/G]), G = 32, 64, 128

`quantize(model, form)` replaces every `nn.Linear` under `model.model.layers` (the decoder
layers of a Hugging Face causal LM; the tied embedding and lm_head stay 16-bit) by its
quantized form, with scales from the weight's own absolute maxima (round to nearest, as
torch's conversions round).
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0
FORMS = ("fp8_tensor", "fp8_channel", "fp8_block", "int8_channel", "int8_group32",
         "int8_group64", "int8_group128")


class QuantLinear(torch.nn.Module):
    """A linear whose weight is 8-bit with a scale, dequantized in forward."""

    def __init__(self, linear: torch.nn.Linear, form: str, dtype: torch.dtype):
        super().__init__()
        self.form, self.dtype = form, dtype
        w = linear.weight.detach().to(torch.float32)
        qweight, scale = _quantized(w, form)
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale.to(dtype))
        self.bias = None if linear.bias is None else torch.nn.Parameter(
            linear.bias.detach().to(dtype), requires_grad=False)

    def dequantized(self) -> torch.Tensor:
        n, k = self.qweight.shape
        w = self.qweight.to(self.dtype)
        if self.form == "fp8_block":
            s = self.scale
            return (w.view(s.shape[0], n // s.shape[0], s.shape[1], k // s.shape[1])
                    * s[:, None, :, None]).view(n, k)
        if self.form.startswith("int8_group"):
            groups = self.scale.shape[1]
            return (w.view(n, groups, k // groups) * self.scale.unsqueeze(-1)).view(n, k)
        return w * self.scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.dequantized(), self.bias)


def _quantized(w: torch.Tensor, form: str) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = w.shape
    if form.startswith("fp8"):
        fmt, top = torch.float8_e4m3fn, E4M3_MAX
    else:
        fmt, top = torch.int8, 127.0
    if form.endswith("_tensor"):
        scale = w.abs().amax().clamp(min=1e-8) / top
        full = scale
    elif form.endswith("_channel"):
        scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / top
        full = scale
    elif form == "fp8_block":       # 128 x 128, or the whole dim where it is shorter
        bn, bk = min(128, n), min(128, k)
        blocks = w.view(n // bn, bn, k // bk, bk).abs().amax(dim=(1, 3)).clamp(min=1e-8) / top
        scale, full = blocks, blocks.repeat_interleave(bn, 0).repeat_interleave(bk, 1)
    else:
        g = int(form.removeprefix("int8_group"))
        scale = w.view(n, k // g, g).abs().amax(dim=2).clamp(min=1e-8) / top
        full = scale.repeat_interleave(g, 1)
    q = w / full
    q = q.to(fmt) if fmt != torch.int8 else q.round().clamp(-127, 127).to(torch.int8)
    return q, scale


def quantize(model: torch.nn.Module, form: str, dtype: torch.dtype = torch.float16
             ) -> torch.nn.Module:
    """`model` with every nn.Linear of its decoder layers replaced by `QuantLinear(form)`."""
    layers = model.get_submodule("model.layers") if _has(model, "model.layers") else model
    for name, child in list(layers.named_modules()):
        for attr, sub in list(child.named_children()):
            if isinstance(sub, torch.nn.Linear):
                setattr(child, attr, QuantLinear(sub, form, dtype))
    return model


def _has(model: torch.nn.Module, path: str) -> bool:
    try:
        model.get_submodule(path)
        return True
    except AttributeError:
        return False


class Linears(torch.nn.Module):
    """x -> two quantized linears with a SiLU between: the smallest MLP (tests)."""

    def __init__(self, form: str, k: int = 256, n: int = 256, seed: int = 0,
                 dtype: torch.dtype = torch.float16):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        first, second = torch.nn.Linear(k, n, bias=False), torch.nn.Linear(n, k, bias=True)
        with torch.no_grad():
            for lin in (first, second):
                lin.weight.copy_(torch.randn(lin.weight.shape, generator=g) / k ** 0.5)
                if lin.bias is not None:
                    lin.bias.copy_(torch.randn(lin.bias.shape, generator=g) / 10)
        self.up, self.down = QuantLinear(first, form, dtype), QuantLinear(second, form, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.silu(self.up(x)))
