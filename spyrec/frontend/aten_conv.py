"""Lowerings of convolutions, pooling and inference batch norm (vision and audio front ends).

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
  conv's only user is folded into that constant and the bias (its statistics are dropped
  too); any other eval batch norm is a per-channel affine (mul, add).

Pooling stacks the window taps the same way ([T, N, OH, OW, C], padding filled with -inf for
max and 0 for avg) and reduces over t: max, argmax for max_pool2d's indices (the tap of the
first maximum, turned into eager's flat ih*W + iw with integer ops), mean or sum / divisor.
adaptive_avg_pool2d is one mean over a reshape view when the sizes divide, else separable
means over each output row's and column's window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.aten_pointwise import binary
from spyrec.frontend.aten_reductions import FP32, matmul, reduce
from spyrec.frontend.context import LoweringContext, Scalar, Unlowered, iteration_vars, names_of
from spyrec.frontend.host_dtypes import cast
from spyrec.frontend.indexed import constant_values
from spyrec.frontend.program import Ref
from spyrec.frontend.registry import lowering
from spyrec.frontend.sources import source_for_message
from spyrec.frontend.views import TensorValue
from spyrec.indexing import const, floordiv, mod, var
from spyrec.ir import Access

BATCH_NORMS = ("aten.batch_norm.default",
               "aten._native_batch_norm_legit_no_training.default")


def _refuse(ctx: LoweringContext, what: str, hint: str):
    raise UnsupportedProgram(f"{ctx.node.name}: {ctx.node.target} {what} "
                             f"({source_for_message(ctx.node)}); {hint}")


def _pair(v, n: int) -> list[int]:
    """An int or a list as `n` ints (torch repeats a single value over the spatial dims)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(x) for x in (v * n if len(v) == 1 else v)]


@dataclass(frozen=True)
class Geometry:
    """A 2-D convolution or pooling window: sizes (H, W in, OH, OW out) and per-dim kernel,
    stride, padding and dilation."""

    h: int
    w: int
    oh: int
    ow: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    dil: tuple[int, int]

    @property
    def taps(self) -> list[tuple[int, int]]:
        return [(i, j) for i in range(self.kernel[0]) for j in range(self.kernel[1])]


# --- convolution -----------------------------------------------------------------------------


@lowering("aten.convolution.default")
def _convolution(ctx, node, x, weight, bias, stride, padding, dilation, transposed,
                 output_padding, groups):
    if transposed:
        _refuse(ctx, "transposed (ConvTranspose)", "only forward convolutions are supported")
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
        _refuse(ctx, f"with {spatial} spatial dims", "only 1-D and 2-D convolutions are "
                "supported")
    shape, dtype = ctx.out_meta()
    stride, dilation = _pair(stride, spatial), _pair(dilation, spatial)
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
    fold = _folded_batch_norm(ctx, node)
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
            _refuse(ctx, "with padding='same' and an even kernel (asymmetric padding)",
                    "pad explicitly with F.pad, or use an odd kernel")
        return [t // 2 for t in total]
    return _pair(padding, spatial)


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


def channels_last(ctx: LoweringContext, x: TensorValue, g: Geometry, fill: float,
                  size: tuple[int, int] | None = None) -> TensorValue:
    """x [N, C, H, W] copied to a fresh [N, Hp, Wp, C] buffer at offset `pad`, the border
    filled with `fill` (border regions only). Channels last puts the channels in the lanes,
    so every tap below reads whole sticks whatever its stride (a stride in the lanes has no
    SuperDSC form), and the matmul's K (channels) is already the stick dim."""
    n, c, h, w = x.shape
    hp, wp = size or (h + 2 * g.pad[0], w + 2 * g.pad[1])
    out = ctx.new_value([n, hp, wp, c], x.dtype, role="padded")
    cv = iteration_vars(range(4))
    p0, p1 = g.pad
    for (r0, r1), (c0, c1) in (((0, p0), (0, wp)), ((p0 + h, hp), (0, wp)),
                               ((p0, p0 + h), (0, p1)), ((p0, p0 + h), (p1 + w, wp))):
        if r1 > r0 and c1 > c0:
            ctx.emit("fill", out, list(zip(names_of(cv), [n, r1 - r0, c1 - c0, c])), [],
                     out.at([cv[0], cv[1] + r0, cv[2] + c0, cv[3]]), constants={"value": fill})
    ctx.emit("identity", out, list(zip(names_of(cv), [n, h, w, c])),
             [Access(x.buffer, x.at([cv[0], cv[3], cv[1], cv[2]]))],
             out.at([cv[0], cv[1] + p0, cv[2] + p1, cv[3]]))
    return out


def tap_view(xp: TensorValue, g: Geometry, kh: int, kw: int) -> TensorValue:
    """What tap (kh, kw) reads of the channels-last padded input: a view [N, OH, OW, C]."""
    n, _, _, c = xp.shape
    return xp.remap([n, g.oh, g.ow, c],
                    [var("v0"), var("v1").scale(g.stride[0]) + kh * g.dil[0],
                     var("v2").scale(g.stride[1]) + kw * g.dil[1], var("v3")])


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
    wvals = constant_values(ctx, weight)
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
    bvals = None if bias is None else constant_values(ctx, bias)
    if wvals is None:
        return weight.reshape([c, -1]).permute([1, 0]), bias
    if fold is not None and (bias is None or bvals is not None):
        wvals = wvals.astype(np.float64) * fold.scale.reshape(-1, 1, 1, 1)
        bvals = (np.zeros(c) if bvals is None else bvals.astype(np.float64)) * fold.scale \
            + fold.shift
        ctx.folded_batch_norms = getattr(ctx, "folded_batch_norms", set()) | {fold.node}
    wt = ctx.new_constant(_cast(wvals.reshape(c, -1).T, FP32), FP32, "weight")
    _release(ctx, node, weight)
    if bvals is None:
        return wt, bias
    if bias is not None:
        _release(ctx, node, bias)
    return wt, ctx.new_constant(_cast(bvals, FP32), FP32, "bias")


def _weights(ctx, node, weight: TensorValue, bias, groups: int, direct: bool, fold,
             dtype: str):
    """W as [G, K, Cog] in the order of cols' k, and the bias (None when there is none and
    no batch norm folds into it). Constant weights are rearranged (and batch norm folded) at
    compile time; runtime weights are read through a view."""
    co, cg, kh, kw = weight.shape
    cog = co // groups
    values = constant_values(ctx, weight)
    bvals = None if bias is None else constant_values(ctx, bias)
    if fold is not None and values is not None and (bias is None or bvals is not None):
        scale, shift = fold
        values = values.astype(np.float64) * scale.reshape(-1, 1, 1, 1)
        bvals = (np.zeros(co) if bvals is None else bvals.astype(np.float64)) * scale + shift
        ctx.folded_batch_norms = getattr(ctx, "folded_batch_norms", set()) | {fold.node}
    if values is None:
        order = [0, 1, 2, 3] if direct else [0, 2, 3, 1]       # (c, kh, kw) or (kh, kw, c)
        wm = weight.permute(order).reshape([groups, cog, -1]).permute([0, 2, 1])
        return wm, bias
    order = (0, 1, 2, 3) if direct else (0, 2, 3, 1)
    mat = values.reshape(co, cg, kh, kw).transpose(order).reshape(groups, cog, -1)
    wm = ctx.new_constant(_cast(np.ascontiguousarray(mat.transpose(0, 2, 1)), dtype),
                          weight.dtype, "weight")
    _release(ctx, node, weight)
    if bvals is None:
        return wm, bias
    b = ctx.new_constant(_cast(bvals, bias.dtype if bias is not None else dtype),
                         bias.dtype if bias is not None else dtype, "bias")
    if bias is not None:
        _release(ctx, node, bias)
    return wm, b


def _cast(values: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(cast(np.asarray(values, dtype=np.float64), dtype))


def _release(ctx: LoweringContext, node, value: TensorValue) -> None:
    """Drop a parameter that only this node reads (it was rearranged or folded into a new
    constant), so the output directory stores the weights once."""
    name = value.buffer
    buf = ctx.graph.buffers.get(name)
    if buf is None or buf.role != "constant" or name not in ctx.graph.constants:
        return
    program = ctx.program
    users = program.users(name) if any(nd.name == name for nd in program.nodes) else [None]
    target = next((s.target for s in program.inputs if s.name == name), None)
    tied = [s for s in program.inputs if s.name != name and s.target is not None
            and program.aliases.get(s.target, s.target) ==
            program.aliases.get(target, target)]
    if users != [node] or tied or any(a.buffer == name for op in ctx.graph.ops
                                      for a in op.reads()):
        return
    del ctx.graph.constants[name]
    del ctx.graph.buffers[name]


# --- batch norm ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fold:
    node: str
    scale: np.ndarray
    shift: np.ndarray

    def __iter__(self):
        return iter((self.scale, self.shift))


def _folded_batch_norm(ctx: LoweringContext, node):
    """(scale, shift) per output channel of an eval batch norm that is this conv's only
    user and has constant statistics and affine parameters, else None."""
    users = ctx.program.users(node.name)
    if len(users) != 1 or users[0].target not in BATCH_NORMS:
        return None
    bn = users[0]
    args = _bn_args(bn)
    if args is None or args["input"] != Ref(node.name):
        return None
    arrays = {}
    for key in ("weight", "bias", "mean", "var"):
        ref = args[key]
        arrays[key] = None if ref is None else _parameter(ctx, ref)
        if ref is not None and arrays[key] is None:
            return None
    if arrays["mean"] is None or arrays["var"] is None:
        return None
    scale = 1.0 / np.sqrt(arrays["var"].astype(np.float64) + float(args["eps"]))
    if arrays["weight"] is not None:
        scale = scale * arrays["weight"].astype(np.float64)
    shift = -arrays["mean"].astype(np.float64) * scale
    if arrays["bias"] is not None:
        shift = shift + arrays["bias"].astype(np.float64)
    return _Fold(bn.name, scale, shift)


def _bn_args(bn) -> dict | None:
    """The arguments of a batch norm node by meaning (both schemas), or None in training."""
    names = ("input", "weight", "bias", "mean", "var", "training", "momentum", "eps") \
        if bn.target == "aten.batch_norm.default" else \
        ("input", "weight", "bias", "mean", "var", "momentum", "eps")
    args = dict(zip(names, bn.args))
    args.update(bn.kwargs)
    if args.get("training", False):
        return None
    args.setdefault("eps", 1e-5)
    return args


def _parameter(ctx: LoweringContext, ref) -> np.ndarray | None:
    """The stored value of a parameter or buffer placeholder, or None."""
    if not isinstance(ref, Ref):
        return None
    spec = next((s for s in ctx.program.inputs if s.name == ref.name), None)
    if spec is None or spec.kind == "user_input" or spec.target is None:
        return None
    fqn = ctx.program.aliases.get(spec.target, spec.target)
    value = ctx.program.state.get(fqn)
    if value is None or ctx.program.state_dtypes.get(fqn) == "bfloat16":
        return None
    return np.asarray(value)


@lowering("aten.batch_norm.default")
def _batch_norm(ctx, node, x, weight, bias, running_mean, running_var, training, momentum,
                eps, cudnn_enabled=True):
    if training:
        _refuse(ctx, "in training mode", "export the model in eval mode (model.eval())")
    return batch_norm(ctx, node, x, weight, bias, running_mean, running_var, eps)


@lowering("aten._native_batch_norm_legit_no_training.default")
def _batch_norm_no_training(ctx, node, x, weight, bias, running_mean, running_var, momentum,
                            eps):
    y = batch_norm(ctx, node, x, weight, bias, running_mean, running_var, eps)
    unused = Unlowered(f"{node.name}: the saved statistics of a batch norm (empty in eval)")
    return (y, unused, unused)


def batch_norm(ctx: LoweringContext, node, x: TensorValue, weight, bias, mean, var_,
               eps: float) -> TensorValue:
    """y = (x - mean) / sqrt(var + eps) * weight + bias per channel (dim 1). Folded into the
    preceding conv when it could be (that conv already wrote y); else a per-channel affine
    y = x * scale + shift, the scale and shift computed at compile time when the statistics
    are constants, on the device otherwise."""
    if node.name in getattr(ctx, "folded_batch_norms", set()):
        for t in (weight, bias, mean, var_):
            if isinstance(t, TensorValue):
                _release(ctx, node, t)
        return x
    dtype = ctx.out_meta()[1]
    chan = [1] * x.rank
    chan[1 if x.rank > 1 else 0] = x.shape[1 if x.rank > 1 else 0]
    stats = [constant_values(ctx, t) if isinstance(t, TensorValue) else None
             for t in (mean, var_)]
    if all(s is not None for s in stats) and all(
            t is None or constant_values(ctx, t) is not None for t in (weight, bias)):
        scale = 1.0 / np.sqrt(stats[1].astype(np.float64) + float(eps))
        if weight is not None:
            scale = scale * constant_values(ctx, weight).astype(np.float64)
        shift = -stats[0].astype(np.float64) * scale
        if bias is not None:
            shift = shift + constant_values(ctx, bias).astype(np.float64)
        s = ctx.new_constant(scale.astype(np.float32).reshape(chan), FP32, "scale")
        b = ctx.new_constant(shift.astype(np.float32).reshape(chan), FP32, "shift")
        for t in (weight, bias, mean, var_):
            if isinstance(t, TensorValue):
                _release(ctx, node, t)
        y = ctx.pointwise("mul", [x, s], out_dtype=FP32, shape=x.shape)
        return ctx.pointwise("add", [y, b], out_dtype=dtype, shape=x.shape)
    xc = ctx.pointwise("sub", [x, mean.reshape(chan)], out_dtype=FP32, shape=x.shape)
    ve = ctx.pointwise("add", [var_.reshape(chan), Scalar(eps)], out_dtype=FP32,
                       constants={"scalar": float(eps), "scalar_side": "rhs"}, shape=chan)
    r = ctx.pointwise("rsqrt", [ve], out_dtype=FP32, shape=chan)
    last = weight is None and bias is None
    y = ctx.pointwise("mul", [xc, r], out_dtype=dtype if last else FP32, shape=x.shape)
    steps = [(op, t) for op, t in (("mul", weight), ("add", bias)) if t is not None]
    for i, (op, t) in enumerate(steps):
        y = ctx.pointwise(op, [y, t.reshape(chan)], shape=x.shape,
                          out_dtype=dtype if i == len(steps) - 1 else FP32)
    return y


# --- pooling ---------------------------------------------------------------------------------


def _pool_geometry(ctx, x: TensorValue, kernel, stride, padding, dilation, ceil_mode,
                   spatial: int = 2) -> Geometry:
    kernel = _pair(kernel, spatial)
    stride = _pair(stride, spatial) if stride not in (None, [], ()) else kernel
    padding, dilation = _pair(padding, spatial), _pair(dilation, spatial)
    h, w = x.shape[-2:]
    out = []
    for size, k, s, p, d in zip((h, w), kernel, stride, padding, dilation):
        span = size + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= size + p:   # the last window must start inside
            o -= 1
        out.append(o)
    return Geometry(h, w, out[0], out[1], tuple(kernel), tuple(stride), tuple(padding),
                    tuple(dilation))


def _as_4d(x: TensorValue, one_d: bool) -> TensorValue:
    """[N, C, H, W] of a pooling input: 1-D gets a unit height, an unbatched one N = 1."""
    if one_d:
        x = x.unsqueeze(-2)
    return x.unsqueeze(0) if x.rank == 3 else x


def _tap_stack(ctx, x: TensorValue, g: Geometry, fill: float) -> TensorValue:
    """[T, N, OH, OW, C]: every window tap, one copy each from the channels-last input
    (padded with `fill` where a window reaches outside it), so that a pooling is one
    reduction over the outer dim t and argmax over t names the tap."""
    need = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in
            zip((g.oh, g.ow), g.stride, g.dil, g.kernel)]
    size = (max(need[0], g.h + g.pad[0]), max(need[1], g.w + g.pad[1]))
    xp = channels_last(ctx, x, g, fill, size)
    n, c = x.shape[:2]
    taps = g.taps
    stack = ctx.new_value([len(taps), n, g.oh, g.ow, c], x.dtype, role="taps")
    cv = iteration_vars(range(4))
    for t, (kh, kw) in enumerate(taps):
        ctx.emit("identity", stack, list(zip(names_of(cv), [n, g.oh, g.ow, c])),
                 [Access(xp.buffer, tap_view(xp, g, kh, kw).at(cv))],
                 stack.at([const(t)] + cv))
    return stack


def _pool_args(node, kernel_size, stride, padding, dilation=1):
    """1-D pooling arguments as 2-D ones (a unit kernel over the unit height)."""
    if str(node.target).endswith("1d.default"):
        stride = kernel_size if stride in (None, [], ()) else stride
        return ([1] + _pair(kernel_size, 1), [1] + _pair(stride, 1), [0] + _pair(padding, 1),
                [1] + _pair(dilation, 1))
    return kernel_size, stride, padding, dilation


def _finish(y: TensorValue, shape) -> TensorValue:
    """[N, OH, OW, C] back to the eager result's shape (NCHW, NCL or unbatched)."""
    y = y.permute([0, 3, 1, 2])
    return y.reshape(shape) if y.shape != tuple(shape) else y


@lowering("aten.max_pool2d.default", "aten.max_pool2d_with_indices.default",
          "aten.max_pool1d.default")
def _max_pool(ctx, node, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over each window (padding is -inf, never chosen over a real element); the
    indices, when the graph reads them, are the flat position ih*W + iw of the window's first
    maximum in the unpadded input plane, as eager's."""
    shape, dtype = ctx.out_meta()
    kernel_size, stride, padding, dilation = _pool_args(node, kernel_size, stride, padding,
                                                        dilation)
    x4 = _as_4d(x, str(node.target).endswith("1d.default"))
    g = _pool_geometry(ctx, x4, kernel_size, stride, padding, dilation, ceil_mode)
    stack = _tap_stack(ctx, x4, g, -math.inf)
    values = _finish(reduce(ctx, "max", stack, [0], False, dtype), shape)
    if str(node.target) != "aten.max_pool2d_with_indices.default":
        return values
    used = {u.args[1] for u in ctx.program.users(node.name) if len(u.args) == 2}
    indices = _finish(_max_indices(ctx, stack, g), shape) if 1 in used else \
        Unlowered(f"{node.name}: max_pool2d indices that nothing reads")
    return (values, indices)


def _max_indices(ctx, stack: TensorValue, g: Geometry) -> TensorValue:
    """ih*W + iw of the window's first maximum: argmax t over the taps (row-major in kh, kw),
    then base(oh, ow) + (t // KW) * (dh*W) + (t % KW) * dw on the device."""
    t = reduce(ctx, "argmax", stack, [0], False, "int64")            # [N, OH, OW, C]
    kw = g.kernel[1]
    th = binary(ctx, "floordiv", t, kw, out_dtype="int64")
    tw = binary(ctx, "remainder", t, kw, out_dtype="int64")
    ph = binary(ctx, "mul", th, g.dil[0] * g.w, out_dtype="int64")
    pw = binary(ctx, "mul", tw, g.dil[1], out_dtype="int64")
    oh = np.arange(g.oh).reshape(-1, 1) * g.stride[0] - g.pad[0]
    ow = np.arange(g.ow).reshape(1, -1) * g.stride[1] - g.pad[1]
    base = ctx.new_constant((oh * g.w + ow).astype(np.int64).reshape(g.oh, g.ow, 1), "int64",
                            "window_base")
    s = binary(ctx, "add", ph, pw, out_dtype="int64")
    return binary(ctx, "add", s, base, out_dtype="int64")


@lowering("aten.avg_pool2d.default", "aten.avg_pool1d.default")
def _avg_pool(ctx, node, x, kernel_size, stride=None, padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    """Mean over each window. The divisor is the window size, or (count_include_pad=False,
    ceil_mode overhang, divisor_override) a per-position constant: eager's rule, computed at
    compile time."""
    shape, dtype = ctx.out_meta()
    kernel_size, stride, padding, _ = _pool_args(node, kernel_size, stride, padding)
    x4 = _as_4d(x, str(node.target).endswith("1d.default"))
    g = _pool_geometry(ctx, x4, kernel_size, stride, padding, 1, ceil_mode)
    stack = _tap_stack(ctx, x4, g, 0.0)
    divisor = _avg_divisors(g, count_include_pad, divisor_override)
    if np.all(divisor == len(g.taps)):
        return _finish(reduce(ctx, "mean", stack, [0], False, dtype), shape)
    y = reduce(ctx, "sum", stack, [0], False, FP32)
    d = ctx.new_constant(divisor.astype(np.float32).reshape(g.oh, g.ow, 1), FP32, "divisor")
    return _finish(binary(ctx, "realdiv", y, d, out_dtype=dtype), shape)


def _avg_divisors(g: Geometry, count_include_pad: bool, override) -> np.ndarray:
    """eager's avg_pool2d divisor per output position (aten/native/cpu/AvgPoolKernel.cpp)."""
    if override:
        return np.full((g.oh, g.ow), float(override))
    sizes = []
    for dim, (size, out) in enumerate(((g.h, g.oh), (g.w, g.ow))):
        k, s, p = g.kernel[dim], g.stride[dim], g.pad[dim]
        start = np.arange(out) * s - p
        end = np.minimum(start + k, size + p)
        pool = end - start
        start, end = np.maximum(start, 0), np.minimum(end, size)
        sizes.append(pool if count_include_pad else end - start)
    return np.outer(sizes[0], sizes[1]).astype(np.float64)


@lowering("aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default",
          "aten.adaptive_avg_pool1d.default")
def _adaptive_avg_pool(ctx, node, x, output_size):
    """Mean over eager's adaptive windows [floor(i*H/OH), ceil((i+1)*H/OH)). When OH divides
    H (and OW W) the windows are disjoint blocks: one mean over a reshape view. Otherwise it is
    separable: per output row one mean over its rows (fp32), then per output column one mean."""
    shape, dtype = ctx.out_meta()
    one_d = str(node.target) == "aten.adaptive_avg_pool1d.default"
    if one_d:
        x = x.unsqueeze(-2)
        output_size = [1] + _pair(output_size, 1)
    oh, ow = [x.shape[-2 + i] if o is None else int(o)
              for i, o in enumerate(_pair(output_size, 2))]
    h, w = x.shape[-2:]
    lead = list(x.shape[:-2])
    if h % oh == 0 and w % ow == 0:
        win = x.reshape(lead + [oh, h // oh, ow, w // ow])
        r = len(lead)
        y = reduce(ctx, "mean", win, [r + 1, r + 3], False, dtype)
        return y.reshape(shape) if y.shape != tuple(shape) else y
    rows = _adaptive_dim(ctx, x, x.rank - 2, oh, FP32)
    y = _adaptive_dim(ctx, rows, x.rank - 1, ow, dtype)
    return y.reshape(shape) if y.shape != tuple(shape) else y


def _adaptive_dim(ctx, x: TensorValue, dim: int, out: int, dtype: str) -> TensorValue:
    size = x.shape[dim]
    if size == out:
        return x if x.dtype == dtype else ctx.pointwise("identity", [x], out_dtype=dtype,
                                                        shape=x.shape)
    shape = list(x.shape)
    shape[dim] = out
    y = ctx.new_value(shape, dtype, role="adaptive")
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        part = x.slice(dim, start, end)
        cv = iteration_vars(range(x.rank))
        kept = [v for j, v in enumerate(cv) if j != dim]
        rv = iteration_vars([0], prefix="r")[0]
        idx = list(cv)
        idx[dim] = rv
        src = part.at(idx)
        dst_idx = list(cv)
        dst_idx[dim] = const(i)
        ranges = [(names_of([v])[0], n) for j, (v, n) in enumerate(zip(cv, x.shape))
                  if j != dim] + [("r0", end - start)]
        del kept
        ctx.emit("mean", y, ranges, [Access(x.buffer, src)], y.at(dst_idx), reduced=["r0"],
                 constants={"scaling_factor": 1.0 / (end - start)})
    return y
