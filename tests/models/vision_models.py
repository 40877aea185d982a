"""Tiny vision and audio models built in code (no downloads), for the convolution lowerings.

- `resnet`: a ResNet-style CNN: conv-bn-relu stem, max pool, one residual basic block
  (conv-bn-relu-conv-bn + identity, relu), adaptive average pool, linear head; image 16x16.
- `vit`: transformers' `ViTModel` (image 32, patch 8, hidden 64, 2 layers, 4 heads), no pooler;
  its patch embedding is a stride == kernel convolution. Output: last hidden state.
- `whisper_encoder`: transformers' `WhisperEncoder` (d_model 64, 2 layers, 16 mel bins,
  32 source positions: 64 input frames, conv1d k=3 pad=1, then stride 2). Output: last
  hidden state.
- `convnext_block`: depthwise 7x7 conv, layer norm over channels (channels last), MLP x4
  with GELU, residual; input 1x16x8x8.

Every name has an fp16 variant `<name>_fp16` (the module `.half()`, fp16 inputs).
`FAMILIES = {name: builder}`; a builder returns `(module, example_inputs)`.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

SEED = 0


def _randomize_batch_norms(module: nn.Module) -> None:
    """Non-trivial running statistics, so a folded batch norm is really tested."""
    g = torch.Generator().manual_seed(SEED + 7)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.rand(n, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.rand(n, generator=g) - 0.5)


class BasicBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class TinyResNet(nn.Module):
    def __init__(self, channels: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, stride=1, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.block = BasicBlock(channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn(self.stem(x))))
        x = self.block(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pw2(nn.functional.gelu(self.pw1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class LastHiddenState(nn.Module):
    """`model(x).last_hidden_state` of a transformers encoder."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).last_hidden_state


def _input(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(SEED + 1))


def resnet():
    torch.manual_seed(SEED)
    model = TinyResNet()
    _randomize_batch_norms(model)
    return model.eval(), (_input(1, 3, 16, 16),)


def vit():
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(SEED)
    config = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                       num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    model = ViTModel(config, add_pooling_layer=False).eval()
    return LastHiddenState(model).eval(), (_input(1, 3, 32, 32),)


def whisper_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(SEED)
    config = WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=4,
                           encoder_ffn_dim=128, decoder_layers=1, decoder_attention_heads=4,
                           decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32,
                           max_target_positions=32, vocab_size=128)
    model = WhisperEncoder(config).eval()
    return LastHiddenState(model).eval(), (_input(1, 16, 64),)


def convnext_block():
    torch.manual_seed(SEED)
    return ConvNeXtBlock().eval(), (_input(1, 16, 8, 8),)


def _half(builder):
    def build():
        module, inputs = builder()
        return module.half(), tuple(t.half() for t in inputs)
    return build


BUILDERS = {"resnet": resnet, "vit": vit, "whisper_encoder": whisper_encoder,
            "convnext_block": convnext_block}

FAMILIES: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    **BUILDERS, **{f"{name}_fp16": _half(b) for name, b in BUILDERS.items()}}
