"""Lowerings of convolutions, 1-D and 2-D (vision and audio front ends).

A convolution is one matmul: out[n, g, p, co] = sum_k cols[n, g, p, k] * W[g, k, co] (p the
output pixel oh*OW + ow, k a (tap, input channel) pair, g the group: groups are the matmul's
batch dim). A 1-D convolution is a 2-D one with a unit height.

- cols is a pure view of the input (no copy) when every window is a disjoint block of it:
  no padding and, per spatial dim, stride == kernel (dilation 1) or kernel 1 — ViT's patch
  embedding, a 1x1 conv.
- Otherwise the input is copied once into a channels-last buffer [N, Hp, Wp, C] (padding
  borders filled, only when the conv pads), and cols [N, OH, OW, G, T*Cg] is materialized by
  one `identity` per tap t = (kh, kw). Why: a sliding window `oh*s + kh` puts two variables at
  one stride and a stride in the lanes, neither of which SuperDSC can address (and
  superdsc_legalize never splits a reduction); with the channels in the lanes every tap is a
  plain shifted, row-strided copy of whole sticks, and k = t*Cg + c keeps K in the lanes.
  HBM traffic (T = KH*KW taps): input read once and written once channels-last, read T times
  by the tap copies, cols written once and read once by the matmul (each T x input), weights
  once, output once: about (2 + 3T) x input + weights + output, against input + weights +
  output compulsory (the price of one big-K matmul per conv; nothing is recomputed).
- Depthwise (one input and one output channel per group): T `mul`s of a tap view by that
  tap's per-channel weight into fp32 partials [T, N, OH, OW, C], then one sum over t
  ((1 + 2T) x input in, 2T x output in fp32): a matmul would put K = T in the lanes and the
  channels above them, so every tap copy would scatter single lanes.
- Weights are rearranged at compile time into a private constant (the parameter is dropped
  when nothing else reads it, so weights are stored once), and an eval batch norm that is the
  conv's only user is folded into that constant and the bias (`aten_batch_norm.py`).

The window geometry, the channels-last copy and the tap views are `windows.py`'s, shared with
pooling (`aten_pooling.py`).
"""

from __future__ import annotations

import numpy as np

from spyrec.bf16 import float32_to_bf16_bits
from spyrec.frontend.aten_batch_norm import folded_batch_norm
from spyrec.frontend.aten_pointwise import binary
from spyrec.frontend.aten_reductions import FP32, matmul, reduce
from spyrec.frontend.context import LoweringContext, iteration_vars, names_of
from spyrec.frontend.host_dtypes import cast
from spyrec.frontend.indexed import constant_numbers
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue
from spyrec.frontend.windows import Geometry, channels_last, pair, tap_view
from spyrec.indexing import const, floordiv, mod, var
from spyrec.ir import Access


@lowering("aten.convolution.default")
def _convolution(ctx, node, x, weight, bias, stride, padding, dilation, transposed,
                 output_padding, groups):
    if transposed:
        ctx.refuse("transposed (ConvTranspose)", "only forward convolutions are supported")
    return convolution(ctx, node, x, weight, bias, stride, padding, dilation, groups)


@lowering("aten.conv1d.default", "aten.conv2d.default", "aten.conv1d.padding",
          "aten.conv2d.padding")
def _conv(ctx, node, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return convolution(ctx, node, x, weight, bias, stride, padding, dilation, groups)


def convolution(ctx: LoweringContext, node, x: TensorValue, weight: TensorValue, bias,
                stride, padding, dilation, groups: int) -> TensorValue:
    """A 1-D or 2-D convolution (batched or not): one matmul over its input columns (viewed or
    copied), or per-tap products and one sum for a depthwise one."""
    spatial = weight.rank - 2
    if spatial not in (1, 2):
        ctx.refuse(f"with {spatial} spatial dims", "only 1-D and 2-D convolutions are supported")
    shape, dtype = ctx.out_meta()
    stride, dilation = pair(stride, spatial), pair(dilation, spatial)
    padding = _padding(ctx, padding, weight.shape[2:], dilation, spatial)
    if x.rank == spatial + 1:
        x = x.unsqueeze(0)
    if spatial == 1:
        x, weight = x.unsqueeze(2), weight.unsqueeze(2)
        stride, padding, dilation = [1] + stride, [0] + padding, [1] + dilation
    n, c, h, w = x.shape
    co, cg, kh, kw = weight.shape
    g = Geometry(h, w, (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1,
                 (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1,
                 (kh, kw), tuple(stride), tuple(padding), tuple(dilation))
    fold = folded_batch_norm(ctx, node)
    if cg == 1 and co == groups and not _is_direct(g):
        y = _depthwise(ctx, node, x, weight, bias, g, fold, dtype)
        return y.reshape(shape) if y.shape != tuple(shape) else y
    direct = _is_direct(g)
    cols = _direct_cols(x, g, groups) if direct else _im2col(ctx, x, g, groups)
    wm, b = _weights(ctx, node, weight, bias, groups, direct, fold, dtype)
    y = _conv_matmul(ctx, cols, wm, g, dtype if b is None else FP32)   # [N, G, P, Cog]
    if co == groups:                  # one channel per group: [N, G, P, 1] is NCHW already
        y = y.reshape([n, co, g.oh, g.ow])
        if b is not None:
            y = binary(ctx, "add", y, b.reshape([co, 1, 1]), out_dtype=dtype)
    else:
        if b is not None:
            y = binary(ctx, "add", y, b.reshape([groups, 1, co // groups]), out_dtype=dtype)
        y = y.permute([0, 1, 3, 2]).reshape([n, co, g.oh, g.ow])
    return y.reshape(shape) if y.shape != tuple(shape) else y


def _padding(ctx, padding, kernel, dilation, spatial: int) -> list[int]:
    """Explicit padding, or conv*.padding's "valid" / "same" (same: stride 1, the total
    d*(k-1) split evenly; an odd total needs an asymmetric pad, which is refused)."""
    if padding == "valid":
        return [0] * spatial
    if padding == "same":
        total = [d * (k - 1) for d, k in zip(dilation, kernel)]
        if any(t % 2 for t in total):
            ctx.refuse("with padding='same' and an even kernel (asymmetric padding)",
                       "pad explicitly with F.pad, or use an odd kernel")
        return [t // 2 for t in total]
    return pair(padding, spatial)


def _is_direct(g: Geometry) -> bool:
    """Whether every window is a disjoint block of the input (a pure view suffices)."""
    return g.pad == (0, 0) and all(
        k == 1 or (d == 1 and s == k) for k, s, d in zip(g.kernel, g.stride, g.dil))


def _direct_cols(x: TensorValue, g: Geometry, groups: int) -> TensorValue:
    """cols[n, g, p, k] = x[n, g*Cg + c, oh*s + kh, ow*s + kw] with k = (c, kh, kw) row-major
    (the weight's own order): a view."""
    n, c = x.shape[:2]
    kh, kw = g.kernel
    v2, v3 = var("v2"), var("v3")
    cin = var("v1").scale(c // groups) + floordiv(v3, kh * kw)
    ih = floordiv(v2, g.ow).scale(g.stride[0]) + mod(floordiv(v3, kw), kh)
    iw = mod(v2, g.ow).scale(g.stride[1]) + mod(v3, kw)
    return x.remap([n, groups, g.oh * g.ow, (c // groups) * kh * kw], [var("v0"), cin, ih, iw])



def _im2col(ctx: LoweringContext, x: TensorValue, g: Geometry, groups: int) -> TensorValue:
    """cols[n, oh, ow, gr, t*Cg + c] (t = kh*KW + kw) materialized by one copy per tap from
    the channels-last padded input; returned as the matmul's view [N, G, P, K]."""
    n, c = x.shape[:2]
    cg = c // groups
    xp = channels_last(ctx, x, g, 0.0)
    taps = g.taps
    cols = ctx.new_value([n, g.oh, g.ow, groups, len(taps) * cg], x.dtype, role="cols")
    cv = iteration_vars(range(5))
    for t, (kh, kw) in enumerate(taps):
        src = tap_view(xp, g, kh, kw).at([cv[0], cv[1], cv[2], cv[3].scale(cg) + cv[4]])
        ctx.emit("identity", cols, list(zip(names_of(cv), [n, g.oh, g.ow, groups, cg])),
                 [Access(xp.buffer, src)], cols.at(cv[:4] + [cv[4] + t * cg]))
    k = len(taps) * cg
    return cols.reshape([n, g.oh * g.ow, groups, k]).permute([0, 2, 1, 3])


def _conv_matmul(ctx, cols: TensorValue, wm: TensorValue, g: Geometry,
                 dtype: str) -> TensorValue:
    """out[n, g, p, co] = sum_k cols[n, g, p, k] * wm[g, k, co]. With one output channel per
    group the matmul's N would be a unit dim in the lanes, which the layout passes cannot
    place when the result is viewed as NCHW: then it is a product (fp32) and a sum over k
    whose result is already [N, G, OH, OW]."""
    if wm.shape[-1] != 1:
        return matmul(ctx, cols, wm, dtype)
    n, groups, _, k = cols.shape
    w = wm.squeeze([-1]).unsqueeze(1)                                 # [G, 1, K]
    prod = ctx.pointwise("mul", [cols, w], out_dtype=FP32, shape=cols.shape)
    y = reduce(ctx, "sum", prod.reshape([n, groups, g.oh, g.ow, k]), [4], False, dtype)
    return y.reshape([n, groups, g.oh * g.ow, 1])


def _depthwise(ctx, node, x: TensorValue, weight: TensorValue, bias, g: Geometry, fold,
               dtype: str) -> TensorValue:
    """One channel per group: part[t] = tap_t(x) * w[:, t] (fp32, channels in the lanes, one
    `mul` per tap), then one sum over the taps and the bias. A matmul would put K = taps in
    the lanes and the channels above them, so each tap copy would scatter single lanes."""
    n, c = x.shape[:2]
    xp = channels_last(ctx, x, g, 0.0)
    taps = g.taps
    wvals = constant_numbers(ctx, weight)
    wt, b = _depthwise_weights(ctx, node, weight, bias, wvals, fold, dtype)
    part = ctx.new_value([len(taps), n, g.oh, g.ow, c], FP32, role="taps")
    cv = iteration_vars(range(4))
    for t, (kh, kw) in enumerate(taps):
        ctx.emit("mul", part, list(zip(names_of(cv), [n, g.oh, g.ow, c])),
                 [Access(xp.buffer, tap_view(xp, g, kh, kw).at(cv)),
                  Access(wt.buffer, wt.at([const(t), cv[3]]))], part.at([const(t)] + cv))
    y = reduce(ctx, "sum", part, [0], False, dtype if b is None else FP32)
    if b is not None:
        y = binary(ctx, "add", y, b, out_dtype=dtype)
    return y.permute([0, 3, 1, 2])


def _depthwise_weights(ctx, node, weight, bias, wvals, fold, dtype: str):
    """The taps' weights as [T, C] (channels in the lanes) and the bias, with a batch norm
    folded in when `fold` says so."""
    c = weight.shape[0]
    bvals = None if bias is None else constant_numbers(ctx, bias)
    if wvals is None:
        return weight.reshape([c, -1]).permute([1, 0]), bias
    if fold is not None and (bias is None or bvals is not None):
        wvals = wvals.astype(np.float64) * fold.scale.reshape(-1, 1, 1, 1)
        bvals = (np.zeros(c) if bvals is None else bvals.astype(np.float64)) * fold.scale \
            + fold.shift
        ctx.folded_batch_norms.add(fold.node)
    wt = ctx.new_constant(_cast(wvals.reshape(c, -1).T, FP32), FP32, "weight")
    ctx.release_parameter(node, weight)
    if bvals is None:
        return wt, bias
    if bias is not None:
        ctx.release_parameter(node, bias)
    return wt, ctx.new_constant(_cast(bvals, FP32), FP32, "bias")


def _weights(ctx, node, weight: TensorValue, bias, groups: int, direct: bool, fold,
             dtype: str):
    """W as [G, K, Cog] in the order of cols' k, and the bias (None when there is none and
    no batch norm folds into it). Constant weights are rearranged (and batch norm folded) at
    compile time; runtime weights are read through a view."""
    co, cg, kh, kw = weight.shape
    cog = co // groups
    values = constant_numbers(ctx, weight)
    bvals = None if bias is None else constant_numbers(ctx, bias)
    if fold is not None and values is not None and (bias is None or bvals is not None):
        scale, shift = fold
        values = values.astype(np.float64) * scale.reshape(-1, 1, 1, 1)
        bvals = (np.zeros(co) if bvals is None else bvals.astype(np.float64)) * scale + shift
        ctx.folded_batch_norms.add(fold.node)
    if values is None:
        order = [0, 1, 2, 3] if direct else [0, 2, 3, 1]       # (c, kh, kw) or (kh, kw, c)
        wm = weight.permute(order).reshape([groups, cog, -1]).permute([0, 2, 1])
        return wm, bias
    order = (0, 1, 2, 3) if direct else (0, 2, 3, 1)
    mat = values.reshape(co, cg, kh, kw).transpose(order).reshape(groups, cog, -1)
    wm = ctx.new_constant(_cast(np.ascontiguousarray(mat.transpose(0, 2, 1)), dtype),
                          weight.dtype, "weight")
    ctx.release_parameter(node, weight)
    if bvals is None:
        return wm, bias
    b = ctx.new_constant(_cast(bvals, bias.dtype if bias is not None else dtype),
                         bias.dtype if bias is not None else dtype, "bias")
    if bias is not None:
        ctx.release_parameter(node, bias)
    return wm, b


def _cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """`values` rounded to `dtype` in the form a constant of that dtype is stored (bf16 as
    its uint16 bits, as every bf16 constant)."""
    out = np.ascontiguousarray(cast(np.asarray(values, dtype=np.float64), dtype))
    return float32_to_bf16_bits(out) if dtype == "bfloat16" else out
