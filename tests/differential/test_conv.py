"""Convolutions, pooling and eval batch norm (spyrec/frontend/aten_conv.py) against eager.

Hypothesis draws conv geometries (1-D and 2-D; kernel, stride, padding, dilation, groups
including depthwise, bias on and off, odd sizes, fp32 and fp16) and pooling windows; each
program is exported, compiled on the fast front end, simulated and compared with eager.
Sizes stay small so the file runs in well under a minute on one core.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from spyrec.errors import UnsupportedProgram
from tests.differential.harness import run_and_compare
from tests.programs import compile_pt2, export

SETTINGS = dict(max_examples=10, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
DTYPES = st.sampled_from([torch.float32, torch.float16])


def _fast(out) -> None:
    report = json.loads((out / "report.json").read_text())
    assert report["frontend"]["used"] == "fast"


@st.composite
def conv_geometry(draw, depthwise: bool = True):
    """A valid nn.Conv1d/Conv2d and an input for it (output at least one element)."""
    spatial = draw(st.sampled_from([1, 2]))
    groups = draw(st.sampled_from([1, 1, 2, "depthwise"] if depthwise else [1, 2]))
    cg = draw(st.integers(1, 3))
    cin = cg * (2 if groups == 2 else 1) if groups != "depthwise" else draw(st.integers(2, 6))
    groups = cin if groups == "depthwise" else groups
    cout = cin if groups == cin and draw(st.booleans()) else groups * draw(st.integers(1, 3))
    k = draw(st.integers(1, 3))
    stride, dil = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pad = draw(st.integers(0, (dil * (k - 1)) // 2 + 1))
    size = [draw(st.integers(dil * (k - 1) + 1, 9)) for _ in range(spatial)]
    cls = nn.Conv1d if spatial == 1 else nn.Conv2d
    torch.manual_seed(draw(st.integers(0, 3)))
    conv = cls(cin, cout, k, stride=stride, padding=pad, dilation=dil, groups=groups,
               bias=draw(st.booleans()))
    batch = draw(st.sampled_from([1, 2]))
    return conv, (batch, cin, *size)


# Eager's fp16 depthwise convolution on CPU crashes the process now and then (torch 2.13,
# a segfault inside _conv_forward for small odd planes), so fp16 draws no depthwise conv here;
# test_batch_norm_after_a_conv_is_folded_into_its_weights covers a fp16 depthwise one.
@settings(**SETTINGS)
@given(data=st.data(), dtype=DTYPES)
def test_random_convolutions_equal_eager(tmp_path_factory, data, dtype):
    conv, shape = data.draw(conv_geometry(depthwise=dtype == torch.float32))
    torch.manual_seed(0)
    x = torch.randn(*shape).to(dtype)
    _fast(run_and_compare(tmp_path_factory.mktemp("conv"), conv.to(dtype), (x,),
                          frontend="fast"))


@settings(**SETTINGS)
@given(kind=st.sampled_from(["max", "max_indices", "avg", "avg_no_pad_count"]),
       k=st.integers(1, 3), stride=st.sampled_from([None, 1, 2]), pad=st.integers(0, 1),
       ceil=st.booleans(), h=st.integers(3, 8), w=st.integers(3, 8), dtype=DTYPES)
def test_random_pooling_equals_eager(tmp_path_factory, kind, k, stride, pad, ceil, h, w,
                                     dtype):
    pad = min(pad, k // 2)
    if kind.startswith("max"):
        pool = nn.MaxPool2d(k, stride, pad, ceil_mode=ceil,
                            return_indices=kind == "max_indices")
    else:
        pool = nn.AvgPool2d(k, stride, pad, ceil_mode=ceil,
                            count_include_pad=kind == "avg")
    torch.manual_seed(1)
    x = torch.randn(2, 3, h, w).to(dtype)
    _fast(run_and_compare(tmp_path_factory.mktemp("pool"), pool, (x,), frontend="fast"))


def test_max_pool_indices_pick_the_first_of_equal_maxima(tmp_path):
    """Ties (a constant plane, repeated values) give eager's first position in the window."""
    x = torch.tensor([[[[1.0, 1.0, 0.0, 2.0], [1.0, 0.0, 2.0, 2.0],
                        [3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0]]]])
    run_and_compare(tmp_path, nn.MaxPool2d(2, return_indices=True), (x,), frontend="fast")


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (3, 2)])
def test_adaptive_average_pooling_equals_eager(tmp_path, size):
    torch.manual_seed(2)
    x = torch.randn(2, 3, 7, 5)
    _fast(run_and_compare(tmp_path, nn.AdaptiveAvgPool2d(size), (x,), frontend="fast"))


def _randomized_bn(channels: int, dtype=torch.float32) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 2)
        bn.bias.uniform_(-1, 1)
    return bn.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("depthwise", [False, True])
def test_batch_norm_after_a_conv_is_folded_into_its_weights(tmp_path, dtype, depthwise):
    """conv -> bn -> relu: the batch norm adds no device op and its statistics are not
    stored (folded into the conv's weight and bias at compile time)."""
    torch.manual_seed(3)
    conv = nn.Conv2d(4, 4, 3, padding=1, groups=4 if depthwise else 1, bias=False)
    model = nn.Sequential(conv, _randomized_bn(4), nn.ReLU()).to(dtype)
    out = run_and_compare(tmp_path, model, (torch.randn(1, 4, 6, 6).to(dtype),),
                          frontend="fast")
    manifest = json.loads((out / "manifest.json").read_text())
    names = {t["name"] for t in manifest["tensors"]}
    assert not any("running" in n or n.startswith("p_1_") for n in names), names


def test_batch_norm_alone_is_a_per_channel_affine(tmp_path):
    torch.manual_seed(4)
    _fast(run_and_compare(tmp_path, _randomized_bn(4), (torch.randn(2, 4, 3, 3),),
                          frontend="fast"))


def test_a_conv_with_a_runtime_weight_equals_eager(tmp_path):
    class RuntimeWeight(nn.Module):
        def forward(self, x, w):
            return nn.functional.conv2d(x, w, stride=2, padding=1)

    torch.manual_seed(5)
    run_and_compare(tmp_path, RuntimeWeight(), (torch.randn(1, 3, 7, 7),
                                                torch.randn(5, 3, 3, 3)), frontend="fast")


def test_patch_embedding_reads_the_image_through_a_view(tmp_path):
    """ViT's patch embedding (stride == kernel, no padding): no im2col copy."""
    torch.manual_seed(6)
    out = run_and_compare(tmp_path, nn.Conv2d(3, 16, 4, stride=4), (torch.randn(1, 3, 8, 8),),
                          frontend="fast")
    ops = json.loads((out / "manifest.json").read_text())["kernels"][0]["ops"]
    assert not any("cols" in str(op) for op in ops)


def test_a_transposed_convolution_is_refused_cleanly(tmp_path):
    pt2 = export(tmp_path, nn.ConvTranspose2d(2, 2, 3), (torch.randn(1, 2, 4, 4),))
    with pytest.raises(UnsupportedProgram, match="convolution"):
        compile_pt2(pt2, tmp_path / "out")
