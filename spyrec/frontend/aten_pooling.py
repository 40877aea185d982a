"""Lowerings of pooling (vision and audio front ends): max, avg and adaptive avg, 1-D and 2-D.

Pooling stacks the window taps ([T, N, OH, OW, C], one copy per tap from the channels-last
input of `windows.py`, padding filled with -inf for max and 0 for avg) and reduces over t: max,
argmax for max_pool2d's indices (the tap of the first maximum, turned into eager's flat
ih*W + iw with integer ops), mean or sum / divisor. adaptive_avg_pool2d is one mean over a
reshape view when the sizes divide, else separable means over each output row's and column's
window.
"""

from __future__ import annotations

import math

import numpy as np

from spyrec.frontend.aten_pointwise import binary
from spyrec.frontend.aten_reductions import FP32, reduce
from spyrec.frontend.context import Unlowered, iteration_vars, names_of
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue
from spyrec.frontend.windows import Geometry, channels_last, pair, tap_view
from spyrec.indexing import const
from spyrec.ir import Access


def _pool_geometry(ctx, x: TensorValue, kernel, stride, padding, dilation, ceil_mode,
                   spatial: int = 2) -> Geometry:
    kernel = pair(kernel, spatial)
    stride = pair(stride, spatial) if stride not in (None, [], ()) else kernel
    padding, dilation = pair(padding, spatial), pair(dilation, spatial)
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
        return ([1] + pair(kernel_size, 1), [1] + pair(stride, 1), [0] + pair(padding, 1),
                [1] + pair(dilation, 1))
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
        output_size = [1] + pair(output_size, 1)
    oh, ow = [x.shape[-2 + i] if o is None else int(o)
              for i, o in enumerate(pair(output_size, 2))]
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
        rv = iteration_vars([0], prefix="r")[0]
        idx = list(cv)
        idx[dim] = rv
        src = part.at(idx)
        dst_idx = list(cv)
        dst_idx[dim] = const(i)
        ranges = [(names_of([v])[0], n) for j, (v, n) in enumerate(zip(cv, x.shape))
                  if j != dim] + [("r0", end - start)]
        ctx.emit("mean", y, ranges, [Access(x.buffer, src)], y.at(dst_idx), reduced=["r0"],
                 constants={"scaling_factor": 1.0 / (end - start)})
    return y
