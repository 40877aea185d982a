"""Lowerings of aten ops: pointwise, casts, views, copies, gathers.

Each function receives the context, the FX node, then the node's arguments with tensors already
resolved to `TensorValue`s (views) or `Scalar`s, and returns the node's value. Reductions,
matmuls and composites (softmax, norms) are in `aten_reductions.py`.
"""

from __future__ import annotations

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.lower import (
    LoweringContext, Scalar, host_dtype, iteration_vars, lowering, names_of,
)
from spyrec.frontend.views import TensorValue
from spyrec.indexing import Indirect, as_lin
from spyrec.ir import Access

# --- pointwise -------------------------------------------------------------------------------

UNARY = {
    "aten.neg.default": "neg", "aten.abs.default": "abs", "aten.exp.default": "exp",
    "aten.log.default": "log", "aten.sqrt.default": "sqrt", "aten.rsqrt.default": "rsqrt",
    "aten.reciprocal.default": "reciprocal", "aten.tanh.default": "tanh",
    "aten.sigmoid.default": "sigmoid", "aten.relu.default": "relufwd",
    "aten.silu.default": "silu", "aten.floor.default": "floor",
}

BINARY = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "realdiv", "maximum": "maximum",
    "minimum": "minimum", "eq": "equal", "ne": "notequal", "gt": "greaterthan",
    "ge": "greaterequal", "lt": "lesserthan", "le": "lesserequal",
}


def _unary(op: str):
    def lower(ctx: LoweringContext, node, x: TensorValue):
        return ctx.pointwise(op, [x])
    return lower


for _name, _op in UNARY.items():
    lowering(_name)(_unary(_op))


def _as_operand(x):
    if isinstance(x, (TensorValue, Scalar)):
        return x
    return Scalar(x)


def binary(ctx: LoweringContext, op: str, a, b, alpha=None) -> TensorValue:
    a, b = _as_operand(a), _as_operand(b)
    constants = {}
    if alpha not in (None, 1):
        constants["alpha"] = float(alpha)
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        raise UnsupportedProgram(f"{ctx.node.name}: an op on two scalars has no tensor operand")
    if isinstance(a, Scalar) or isinstance(b, Scalar):
        side, scalar = ("lhs", a) if isinstance(a, Scalar) else ("rhs", b)
        constants.update(scalar=_number(scalar.value), scalar_side=side)
    return ctx.pointwise(op, [a, b], constants=constants)


def _number(v):
    return v if isinstance(v, (bool, int)) and not isinstance(v, float) else float(v)


def _binary(op: str):
    def lower(ctx: LoweringContext, node, a, b, alpha=None):
        return binary(ctx, op, a, b, alpha)
    return lower


for _torch, _op in BINARY.items():
    for _overload in ("Tensor", "Scalar", "default"):
        lowering(f"aten.{_torch}.{_overload}")(_binary(_op))


@lowering("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(ctx, node, a, b, alpha=1):
    return binary(ctx, "sub", b, a, None if alpha == 1 else alpha)


@lowering("aten.gelu.default")
def _gelu(ctx, node, x, approximate="none"):
    return ctx.pointwise("gelufwd", [x], constants={"approximate": approximate})


@lowering("aten.pow.Tensor_Scalar")
def _pow(ctx, node, x, exponent):
    return ctx.pointwise("pow", [x], constants={"exponent": float(exponent)})


@lowering("aten.clamp.default", "aten.clamp_min.default", "aten.clamp_max.default")
def _clamp(ctx, node, x, lo=None, hi=None):
    if str(node.target) == "aten.clamp_max.default":
        lo, hi = None, lo
    bound = {"clipMin": None if lo is None else float(lo),
             "clipMax": None if hi is None else float(hi)}
    return ctx.pointwise("clip", [x], constants=bound)


@lowering("aten.where.self")
def _where(ctx, node, cond, a, b):
    constants, operands = {}, [cond]
    for key, v in (("a_scalar", a), ("b_scalar", b)):
        v = _as_operand(v)
        if isinstance(v, Scalar):
            constants[key] = _number(v.value)
        else:
            operands.append(v)
    return ctx.pointwise("where3", operands, constants=constants,
                         shape=ctx.out_meta()[0])


@lowering("aten.scalar_tensor.default")
def _scalar_tensor(ctx, node, value, **_):
    return Scalar(value)


@lowering("aten.full.default", "aten.full_like.default", "aten.ones_like.default",
          "aten.zeros_like.default", "aten.ones.default", "aten.zeros.default")
def _full(ctx, node, *args, **kwargs):
    name = str(node.target)
    value = {"ones": 1.0, "zeros": 0.0}.get(name.split(".")[1].removesuffix("_like"))
    if value is None:
        value = args[1]
    shape, dtype = ctx.out_meta()
    out = ctx.new_value(shape, dtype)
    cvars = iteration_vars(shape)
    ctx.emit("fill", out, list(zip(names_of(cvars), shape)), [], out.at(cvars),
             constants={"value": _number(value)})
    return out


# --- casts and copies ------------------------------------------------------------------------


@lowering("aten._to_copy.default", "aten.to.dtype", "aten.clone.default",
          "aten.contiguous.default", "prims.convert_element_type.default")
def _copy(ctx, node, x, *args, **kwargs):
    shape, dtype = ctx.out_meta()
    return ctx.pointwise("identity", [x], out_dtype=dtype, shape=shape)


@lowering("aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default")
def _alias(ctx, node, x, *args, **kwargs):
    return x


# --- views: pure index arithmetic ------------------------------------------------------------


@lowering("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(ctx, node, x, shape):
    return x.reshape(shape)


@lowering("aten.permute.default")
def _permute(ctx, node, x, dims):
    return x.permute(dims)


@lowering("aten.transpose.int")
def _transpose(ctx, node, x, a, b):
    return x.transpose(a, b)


@lowering("aten.t.default")
def _t(ctx, node, x):
    return x.transpose(0, 1) if x.rank == 2 else x


@lowering("aten.expand.default")
def _expand(ctx, node, x, shape, implicit=False):
    return x.expand(shape)


@lowering("aten.unsqueeze.default")
def _unsqueeze(ctx, node, x, dim):
    return x.unsqueeze(dim)


@lowering("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def _squeeze(ctx, node, x, dims=None):
    if isinstance(dims, int):
        dims = [dims]
    return x.squeeze(dims)


@lowering("aten.slice.Tensor")
def _slice(ctx, node, x, dim=0, start=None, end=None, step=1):
    return x.slice(dim, start, end, step)


@lowering("aten.select.int")
def _select(ctx, node, x, dim, index):
    return x.select(dim, index)


@lowering("aten.split.Tensor", "aten.split_with_sizes.default")
def _split(ctx, node, x, sizes, dim=0):
    dim = dim % x.rank
    if isinstance(sizes, int):
        sizes = [sizes] * (-(-x.shape[dim] // sizes))
    parts, start = [], 0
    for n in sizes:
        parts.append(x.slice(dim, start, min(start + n, x.shape[dim])))
        start += n
    return parts


@lowering("<built-in function getitem>")
def _getitem(ctx, node, seq, i):
    return seq[i]


@lowering("aten.cat.default")
def _cat(ctx, node, values, dim=0):
    shape, dtype = ctx.out_meta()
    out = ctx.new_value(shape, dtype)
    dim = dim % len(shape)
    offset = 0
    for v in values:
        if v.numel == 0:
            continue
        cvars = iteration_vars(v.shape)
        out_idx = list(cvars)
        out_idx[dim] = cvars[dim] + offset
        ctx.emit("identity", out, list(zip(names_of(cvars), v.shape)),
                 [Access(v.buffer, v.at(cvars))], out.at(out_idx))
        offset += v.shape[dim]
    return out


# --- gathers ---------------------------------------------------------------------------------


@lowering("aten.index.Tensor")
def _index(ctx, node, x, indices):
    positions = [i for i, t in enumerate(indices) if t is not None]
    if len(positions) != 1:
        raise UnsupportedProgram(f"{node.name}: indexing with {len(positions)} index tensors; "
                                 f"only one index tensor is supported (x[idx], x[:, idx])")
    return gather(ctx, x, positions[0], indices[positions[0]])


@lowering("aten.embedding.default")
def _embedding(ctx, node, weight, idx, *args):
    return gather(ctx, weight, 0, idx)


def gather(ctx: LoweringContext, x: TensorValue, dim: int, idx: TensorValue) -> TensorValue:
    """out[pre, i, post] = x[pre, idx[i], post] (one identity op with an indirect coordinate)."""
    if not host_dtype_is_integer(idx.dtype):
        raise UnsupportedProgram(f"{ctx.node.name}: index tensor {idx.buffer} has dtype "
                                 f"{idx.dtype}; gathers need integer indices")
    shape, dtype = ctx.out_meta()
    out = ctx.new_value(shape, dtype)
    cvars = iteration_vars(shape)
    idx_vars = cvars[dim:dim + idx.rank]
    x_idx = cvars[:dim] + [as_lin(Indirect(idx.buffer))] + cvars[dim + idx.rank:]
    ctx.emit("identity", out, list(zip(names_of(cvars), shape)),
             [Access(x.buffer, x.at(x_idx))], out.at(cvars),
             index_inputs=[Access(idx.buffer, idx.at(idx_vars))])
    return out


def host_dtype_is_integer(dtype: str) -> bool:
    return dtype in ("int32", "int64", "int8", "uint8", "int16")


__all__ = ["binary", "gather", "host_dtype"]
