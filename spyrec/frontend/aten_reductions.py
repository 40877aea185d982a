"""Lowerings of reductions, matmuls and composite ops (softmax, log_softmax, norms, linear).

Composites become short chains of device ops, like the reference (softmax = max, sub, exp, sum,
div). Their intermediates are fp32: eager PyTorch computes these ops in fp32 and rounds once, and
fp16 intermediates would add a rounding per step.
"""

from __future__ import annotations

import math
from typing import Sequence

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.aten_pointwise import binary, filled
from spyrec.frontend.context import LoweringContext, Scalar, Unlowered, iteration_vars, names_of
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue, broadcast_shapes
from spyrec.indexing import const
from spyrec.ir import Access

FP32 = "float32"


def _dims(dims, rank: int) -> list[int]:
    """Reduced dims, non-negative and sorted. A 0-d tensor has none: dim 0 / -1 of a scalar
    names the scalar itself, and reducing it is a copy."""
    if rank == 0:
        return []
    if dims is None or dims == []:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % rank for d in dims})


def reduce(ctx: LoweringContext, op: str, x: TensorValue, dims, keepdim: bool,
           out_dtype: str) -> TensorValue:
    """Reduce `x` over `dims`: iteration = kept dims (c*) then reduced dims (r*)."""
    dims = _dims(dims, x.rank)
    kept = [i for i in range(x.rank) if i not in dims]
    out_shape = [1 if i in dims else x.shape[i] for i in range(x.rank)] if keepdim \
        else [x.shape[i] for i in kept]
    out = ctx.new_value(out_shape, out_dtype)
    cvars = iteration_vars(kept)
    rvars = iteration_vars(dims, prefix="r")
    x_idx = [None] * x.rank
    for v, i in zip(cvars, kept):
        x_idx[i] = v
    for v, i in zip(rvars, dims):
        x_idx[i] = v
    if keepdim:
        out_idx, it = [], iter(cvars)
        for i in range(x.rank):
            out_idx.append(const(0) if i in dims else next(it))
    else:
        out_idx = cvars
    ranges = list(zip(names_of(cvars), [x.shape[i] for i in kept]))
    ranges += list(zip(names_of(rvars), [x.shape[i] for i in dims]))
    count = math.prod(x.shape[i] for i in dims)
    constants = {"scaling_factor": 1.0 / count} if op == "mean" and count else {}
    ctx.emit(op, out, ranges, [Access(x.buffer, x.at(x_idx))], out.at(out_idx),
             reduced=names_of(rvars), constants=constants)
    return out


def _reduction(op: str):
    def lower(ctx, node, x, dims=None, keepdim=False, **kwargs):
        return reduce(ctx, op, x, dims, keepdim, ctx.out_meta()[1])
    return lower


for _op in ("sum", "mean", "amax", "amin"):
    _device = {"amax": "max", "amin": "min"}.get(_op, _op)
    lowering(f"aten.{_op}.dim_IntList", f"aten.{_op}.dim", f"aten.{_op}.default")(
        _reduction(_device))


@lowering("aten.max.dim", "aten.min.dim")
def _max_dim(ctx, node, x, dim, keepdim=False):
    """(values, indices): a max/min reduction and an argmax/argmin over the same dim, each
    emitted only when the program reads it (there is no dead-op elimination later)."""
    kind = str(node.target).split(".")[1]
    used = {u.args[1] if len(u.args) == 2 and isinstance(u.args[1], int) else None
            for u in ctx.program.users(node.name)}
    unused = Unlowered(f"{node.name}: an output of {node.target} that nothing reads")
    values = reduce(ctx, kind, x, [dim], keepdim, _first_dtype(node)) \
        if used - {1} else unused
    indices = reduce(ctx, f"arg{kind}", x, [dim], keepdim, "int64") if used - {0} else unused
    return (values, indices)


@lowering("aten.argmax.default", "aten.argmin.default")
def _argmax(ctx, node, x, dim=None, keepdim=False):
    """The index of the first extreme value (NaN counts as extreme) along `dim`, or in the
    flattened tensor when `dim` is None: the device op's index is row-major over its reduced
    vars, which are the host dims in order (docs/formats.md)."""
    shape, dtype = ctx.out_meta()
    out = reduce(ctx, str(node.target).split(".")[1], x, dim, keepdim, dtype)
    return out if out.shape == shape else out.reshape(shape)


@lowering("aten.max.default", "aten.min.default")
def _max_all(ctx, node, x):
    return reduce(ctx, str(node.target).split(".")[1], x, None, False, ctx.out_meta()[1])


@lowering("aten.any.default", "aten.any.dim", "aten.any.dims",
          "aten.all.default", "aten.all.dim", "aten.all.dims")
def _any_all(ctx, node, x, dim=None, keepdim=False):
    """any = max and all = min of `x != 0` (a bool; NaN counts as true, as eager). Over an
    empty dim: eager's identity (any False, all True), a fill."""
    shape, dtype = ctx.out_meta()
    is_any = str(node.target).startswith("aten.any.")
    if x.numel == 0:
        return filled(ctx, shape, dtype, not is_any)
    truth = x if x.dtype == "bool" else binary(ctx, "notequal", x, 0, out_dtype="bool")
    out = reduce(ctx, "max" if is_any else "min", truth, dim, keepdim, dtype)
    return out if out.shape == shape else out.reshape(shape)


# --- matmul ----------------------------------------------------------------------------------


def matmul(ctx: LoweringContext, a: TensorValue, b: TensorValue, out_dtype: str) -> TensorValue:
    """Batched a @ b with broadcast batch dims (ranks >= 1, like torch.matmul)."""
    if a.rank == 1:
        return matmul(ctx, a.unsqueeze(0), b, out_dtype).squeeze([-2])
    if b.rank == 1:
        return matmul(ctx, a, b.unsqueeze(1), out_dtype).squeeze([-1])
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        raise UnsupportedProgram(f"{ctx.node.name}: matmul inner sizes differ ({k} vs {k2})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = ctx.new_value(tuple(batch) + (m, n), out_dtype)
    cvars = iteration_vars(tuple(batch) + (m, n))
    kv = iteration_vars([k], prefix="r")[0]
    bvars = cvars[:len(batch)]
    a_idx = _batch_index(a, bvars) + [cvars[-2], kv]
    b_idx = _batch_index(b, bvars) + [kv, cvars[-1]]
    ranges = list(zip(names_of(cvars), tuple(batch) + (m, n))) + [("r0", k)]
    ctx.emit("batchmatmul", out, ranges, [Access(a.buffer, a.at(a_idx)),
                                          Access(b.buffer, b.at(b_idx))],
             out.at(cvars), reduced=["r0"])
    return out


def _batch_index(x: TensorValue, bvars) -> list:
    lead = len(bvars) - (x.rank - 2)
    return [const(0) if n == 1 else bvars[lead + i] for i, n in enumerate(x.shape[:-2])]


@lowering("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _mm(ctx, node, a, b):
    return matmul(ctx, a, b, ctx.out_meta()[1])


@lowering("aten.addmm.default", "aten.addmv.default", "aten.baddbmm.default")
def _addmm(ctx, node, bias, a, b, beta=1, alpha=1):
    """beta * bias + alpha * (a @ b) (baddbmm: BLOOM's alibi scores), the product in fp32 and one rounding at the end, as
    eager's CPU GEMM. beta == 0 ignores `bias` (NaN and inf in it included), as eager does for
    every dtype; alpha == 0 ignores the product only in fp32 (BLAS skips it), while eager's
    fp16/bf16 GEMM multiplies it by 0, so NaN or inf in it still give NaN there."""
    shape, dtype = ctx.out_meta()
    if alpha == 0 and dtype == FP32:
        if beta == 0:
            return ctx.pointwise("fill", [], constants={"value": 0.0})
        return ctx.pointwise("mul", [bias, Scalar(beta)], shape=shape,
                             constants={"scalar": float(beta), "scalar_side": "rhs"})
    last = beta == 0 and alpha == 1
    y = matmul(ctx, a, b, dtype if last else FP32)
    if alpha != 1:
        y = ctx.pointwise("mul", [y, Scalar(alpha)], out_dtype=dtype if beta == 0 else FP32,
                          constants={"scalar": float(alpha), "scalar_side": "rhs"})
    if beta == 0:
        return y
    return binary(ctx, "add", y, bias, alpha=beta, out_dtype=dtype)


@lowering("aten.linear.default")
def _linear(ctx, node, x, weight, bias=None):
    dtype = ctx.out_meta()[1]
    y = matmul(ctx, x, weight.transpose(0, 1) if weight.rank == 2 else weight, dtype)
    return y if bias is None else binary(ctx, "add", y, bias)


# --- composites ------------------------------------------------------------------------------


def shifted_exp_sum(ctx, x: TensorValue, dim: int):
    """x - max(x), its exp, and the sum of the exp along `dim` (all fp32, keepdim): the
    numerically safe core of softmax and log_softmax, sdpa's included."""
    m = reduce(ctx, "max", x, [dim], True, FP32)
    shifted = ctx.pointwise("sub", [x, m], out_dtype=FP32)
    e = ctx.pointwise("exp", [shifted], out_dtype=FP32)
    return shifted, e, reduce(ctx, "sum", e, [dim], True, FP32)


@lowering("aten._softmax.default", "aten.softmax.int")
def _softmax(ctx, node, x, dim, half_to_float=None, **kwargs):
    _, e, z = shifted_exp_sum(ctx, x, dim)
    return ctx.pointwise("realdiv", [e, z], out_dtype=ctx.out_meta()[1])


@lowering("aten._log_softmax.default", "aten.log_softmax.int")
def _log_softmax(ctx, node, x, dim, half_to_float=None, **kwargs):
    shifted, _, z = shifted_exp_sum(ctx, x, dim)
    log_z = ctx.pointwise("log", [z], out_dtype=FP32)
    return ctx.pointwise("sub", [shifted, log_z], out_dtype=ctx.out_meta()[1])


def _normalized_dims(x: TensorValue, normalized_shape: Sequence[int]) -> list[int]:
    return list(range(x.rank - len(normalized_shape), x.rank))


def _affine(ctx, y: TensorValue, weight, bias, out_dtype: str) -> TensorValue:
    steps = [("mul", weight), ("add", bias)]
    steps = [(op, t) for op, t in steps if t is not None]
    for k, (op, t) in enumerate(steps):
        y = ctx.pointwise(op, [y, t], out_dtype=out_dtype if k == len(steps) - 1 else FP32)
    return y


@lowering("aten.layer_norm.default", "aten.native_layer_norm.default")
def _layer_norm(ctx, node, x, normalized_shape, weight=None, bias=None, eps=1e-5, *rest):
    out_dtype = _first_dtype(node)
    dims = _normalized_dims(x, normalized_shape)
    mu = reduce(ctx, "mean", x, dims, True, FP32)
    xc = ctx.pointwise("sub", [x, mu], out_dtype=FP32)
    sq = ctx.pointwise("mul", [xc, xc], out_dtype=FP32)
    var_ = reduce(ctx, "mean", sq, dims, True, FP32)
    var_eps = ctx.pointwise("add", [var_, Scalar(eps)], out_dtype=FP32,
                            constants={"scalar": float(eps), "scalar_side": "rhs"})
    rstd = ctx.pointwise("rsqrt", [var_eps], out_dtype=FP32)
    has_affine = weight is not None or bias is not None
    y = ctx.pointwise("mul", [xc, rstd], out_dtype=FP32 if has_affine else out_dtype)
    y = _affine(ctx, y, weight, bias, out_dtype) if has_affine else y
    if str(node.target) == "aten.native_layer_norm.default":
        return (y, *(_as_dtype(ctx, t, v) for t, v in zip((mu, rstd), node.meta["val"][1:])))
    return y


# torch.finfo(dtype).eps, rms_norm's default: 2**-(mantissa bits).
MACHINE_EPSILON = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7,
                   "float64": 2.0 ** -52}


def _as_dtype(ctx, t: TensorValue, val) -> TensorValue:
    """`t` cast to the dtype eager gives (native_layer_norm's mean and rstd follow the input
    dtype on CPU); our statistics are fp32."""
    dtype = str(val.dtype).removeprefix("torch.")
    if dtype == t.dtype:
        return t
    return ctx.pointwise("identity", [t], out_dtype=dtype, shape=t.shape)


def _first_dtype(node) -> str:
    val = node.meta["val"]
    val = val[0] if isinstance(val, (list, tuple)) else val
    return str(val.dtype).removeprefix("torch.")


@lowering("aten.rms_norm.default")
def _rms_norm(ctx, node, x, normalized_shape, weight=None, eps=None):
    out_dtype = ctx.out_meta()[1]
    if eps is None:
        eps = MACHINE_EPSILON[x.dtype]
    dims = _normalized_dims(x, normalized_shape)
    sq = ctx.pointwise("mul", [x, x], out_dtype=FP32)
    ms = reduce(ctx, "mean", sq, dims, True, FP32)
    ms_eps = ctx.pointwise("add", [ms, Scalar(eps)], out_dtype=FP32,
                           constants={"scalar": float(eps), "scalar_side": "rhs"})
    r = ctx.pointwise("rsqrt", [ms_eps], out_dtype=FP32)
    y = ctx.pointwise("mul", [x, r], out_dtype=FP32 if weight is not None else out_dtype)
    return _affine(ctx, y, weight, None, out_dtype) if weight is not None else y
