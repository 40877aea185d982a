"""Group norm, vector norms and weight norm: the normalizations of speech encoders (wav2vec2,
HuBERT: a group norm in the feature extractor, a weight-normed positional convolution) and of
ConvNeXt-V2 (global response normalization: an L2 norm over the spatial dims).

All statistics are float32 and the result is rounded once to the output dtype, as eager's CPU
kernels compute fp16/bf16 norms. A weight norm over parameters only is folded at compile time
(`fold.py`, `folders_norms.py`); the lowerings here are for norms of runtime values.
"""

from __future__ import annotations

from spyrec.frontend.aten_pointwise import binary
from spyrec.frontend.aten_reductions import reduce
from spyrec.frontend.context import LoweringContext
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue

FP32 = "float32"


@lowering("aten.group_norm.default")
def _group_norm(ctx, node, x, num_groups, weight=None, bias=None, eps=1e-5, cudnn=True):
    return group_norm(ctx, x, int(num_groups), weight, bias, float(eps), ctx.out_meta()[1])[0]


@lowering("aten.native_group_norm.default")
def _native_group_norm(ctx, node, x, weight, bias, n, c, hw, group, eps):
    out_dtype = str(node.meta["val"][0].dtype).removeprefix("torch.")
    y, mean, rstd = group_norm(ctx, x, int(group), weight, bias, float(eps), out_dtype)
    stats = [_cast(ctx, t.reshape([x.shape[0], int(group)]), str(v.dtype).removeprefix(
        "torch.")) for t, v in zip((mean, rstd), node.meta["val"][1:])]
    return (y, *stats)


def group_norm(ctx: LoweringContext, x: TensorValue, groups: int, weight, bias, eps: float,
               out_dtype: str) -> tuple[TensorValue, TensorValue, TensorValue]:
    """(y, mean, rstd): x [N, C, *] normalized over each group of C/groups channels and all
    spatial positions (biased variance), then scaled and shifted per channel."""
    n, c = x.shape[0], x.shape[1]
    if groups <= 0 or c % groups:
        ctx.refuse(f"with {groups} groups for {c} channels", "use a group count dividing C")
    grouped = x.reshape([n, groups, x.numel // max(n * groups, 1)])
    mean = reduce(ctx, "mean", grouped, [2], True, FP32)
    xc = ctx.pointwise("sub", [grouped, mean], out_dtype=FP32)
    sq = ctx.pointwise("mul", [xc, xc], out_dtype=FP32)
    var = reduce(ctx, "mean", sq, [2], True, FP32)
    var_eps = binary(ctx, "add", var, eps, out_dtype=FP32)
    rstd = ctx.pointwise("rsqrt", [var_eps], out_dtype=FP32)
    affine = weight is not None or bias is not None
    y = ctx.pointwise("mul", [xc, rstd], out_dtype=FP32 if affine else out_dtype)
    y = y.reshape(x.shape)
    per_channel = [c] + [1] * (x.rank - 2)
    if weight is not None:
        y = ctx.pointwise("mul", [y, weight.reshape(per_channel)],
                          out_dtype=FP32 if bias is not None else out_dtype)
    if bias is not None:
        y = ctx.pointwise("add", [y, bias.reshape(per_channel)], out_dtype=out_dtype)
    return y, mean, rstd


def _cast(ctx, t: TensorValue, dtype: str) -> TensorValue:
    if t.dtype == dtype:
        return t
    return ctx.pointwise("identity", [t], out_dtype=dtype, shape=t.shape)


@lowering("aten.linalg_vector_norm.default")
def _vector_norm(ctx, node, x, ord=2, dim=None, keepdim=False, dtype=None):
    return vector_norm(ctx, x, ord, dim, keepdim, ctx.out_meta()[1])


def vector_norm(ctx: LoweringContext, x: TensorValue, order, dim, keepdim: bool,
                out_dtype: str) -> TensorValue:
    """The 2-norm sqrt(sum x^2), the 1-norm sum |x|, the inf-norms max/min |x|, the
    0-"norm" (the count of non-zeros) and any other p as (sum |x|^p)^(1/p), in float32."""
    order = float(order)
    if order == 2:
        sq = ctx.pointwise("mul", [x, x], out_dtype=FP32)
        total = reduce(ctx, "sum", sq, dim, keepdim, FP32)
        return ctx.pointwise("sqrt", [total], out_dtype=out_dtype)
    if order == 0:
        nonzero = binary(ctx, "notequal", x, 0, out_dtype=FP32)
        return reduce(ctx, "sum", nonzero, dim, keepdim, out_dtype)
    magnitude = ctx.pointwise("abs", [x], out_dtype=FP32)
    op = {1.0: "sum", float("inf"): "max", float("-inf"): "min"}.get(order)
    if op is not None:
        return reduce(ctx, op, magnitude, dim, keepdim, out_dtype)
    powered = ctx.pointwise("pow", [magnitude], out_dtype=FP32, constants={"exponent": order})
    total = reduce(ctx, "sum", powered, dim, keepdim, FP32)
    return ctx.pointwise("pow", [total], out_dtype=out_dtype,
                         constants={"exponent": 1.0 / order})


@lowering("aten._weight_norm.default")
def _weight_norm(ctx, node, v, g, dim=0):
    """v * g / ||v|| over every dim but `dim` (what the parametrization computes), for a v
    that is not a constant (a constant one is folded)."""
    out_dtype = ctx.out_meta()[1]
    dims = [d for d in range(v.rank) if d != dim % max(v.rank, 1)] if dim != -1 else None
    norm = vector_norm(ctx, v, 2, dims, True, FP32)
    scale = ctx.pointwise("realdiv", [g, norm], out_dtype=FP32)
    return ctx.pointwise("mul", [v, scale], out_dtype=out_dtype)

