"""Lowerings of aten ops: pointwise, casts, views, copies, gathers.

Each function receives the context, the FX node, then the node's arguments with tensors already
resolved to `TensorValue`s (views) or `Scalar`s, and returns the node's value. Reductions,
matmuls and composites (softmax, norms) are in `aten_reductions.py`.
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.context import LoweringContext, Scalar, host_dtype, iteration_vars, names_of
from spyrec.frontend.host_dtypes import cast
from spyrec.frontend.indexed import (
    advanced_coordinates, advanced_shape, constant_values, distinct_indices, emit_gather,
    static_selection,
)
from spyrec.frontend.registry import LOWERINGS, lowering
from spyrec.frontend.views import TensorValue
from spyrec.indexing import Lin, const, floordiv, mod, var
from spyrec.ir import Access

# --- pointwise -------------------------------------------------------------------------------

UNARY = {
    "aten.neg.default": "neg", "aten.abs.default": "abs", "aten.exp.default": "exp",
    "aten.log.default": "log", "aten.sqrt.default": "sqrt", "aten.rsqrt.default": "rsqrt",
    "aten.reciprocal.default": "reciprocal", "aten.tanh.default": "tanh",
    "aten.sigmoid.default": "sigmoid", "aten.relu.default": "relufwd",
    "aten.silu.default": "silu", "aten.floor.default": "floor", "aten.ceil.default": "ceil",
    "aten.sign.default": "sign",
    "aten.cos.default": "cos", "aten.sin.default": "sin",
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


def binary(ctx: LoweringContext, op: str, a, b, alpha=None,
           out_dtype: str | None = None, constants: dict | None = None) -> TensorValue:
    a, b = _as_operand(a), _as_operand(b)
    constants = dict(constants or {})
    if alpha not in (None, 1):
        constants["alpha"] = float(alpha)
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        raise UnsupportedProgram(f"{ctx.node.name}: an op on two scalars has no tensor operand")
    if isinstance(a, Scalar) or isinstance(b, Scalar):
        side, scalar = ("lhs", a) if isinstance(a, Scalar) else ("rhs", b)
        constants.update(scalar=_number(scalar.value), scalar_side=side)
    return ctx.pointwise(op, [a, b], constants=constants, out_dtype=out_dtype)


def _number(v):
    return v if isinstance(v, (bool, int)) and not isinstance(v, float) else float(v)


def _binary(op: str):
    def lower(ctx: LoweringContext, node, a, b, alpha=None):
        return binary(ctx, op, a, b, alpha)
    return lower


for _torch, _op in BINARY.items():
    for _overload in ("Tensor", "Scalar", "default"):
        lowering(f"aten.{_torch}.{_overload}")(_binary(_op))


# torch.min/max of two tensors are minimum/maximum (NaN-propagating) under another name
lowering("aten.min.other")(_binary("minimum"))
lowering("aten.max.other")(_binary("maximum"))


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


@lowering("aten.clamp.Tensor", "aten.clamp_min.Tensor", "aten.clamp_max.Tensor")
def _clamp_tensor(ctx, node, x, lo=None, hi=None):
    """Tensor bounds (broadcasting): maximum with min, then minimum with max, so NaN in x or
    in a bound propagates and min > max gives max, as torch.clamp. Selection is exact, so the
    intermediate in the output dtype rounds nothing twice."""
    if str(node.target) == "aten.clamp_max.Tensor":
        lo, hi = None, lo
    dtype = ctx.out_meta()[1]
    y = x
    for op, bound in (("maximum", lo), ("minimum", hi)):
        if bound is not None:
            y = binary(ctx, op, y, bound, out_dtype=dtype)
    if y is x:  # clamp(x) with neither bound: a copy in the output dtype
        y = ctx.pointwise("identity", [x], out_dtype=dtype)
    return y


@lowering("aten.hardtanh.default")
def _hardtanh(ctx, node, x, min_val=-1.0, max_val=1.0):
    return ctx.pointwise("clip", [x], constants={"clipMin": float(min_val),
                                                 "clipMax": float(max_val)})


@lowering("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div_mode(ctx, node, a, b, rounding_mode=None):
    """rounding_mode None: true division; 'trunc'/'floor': the truncdiv/floordiv device ops,
    which follow eager exactly (floor is Python's float //, not floor(a / b))."""
    op = {None: "realdiv", "trunc": "truncdiv", "floor": "floordiv"}.get(rounding_mode)
    if op is None:
        raise UnsupportedProgram(f"{node.name}: div with rounding_mode={rounding_mode!r}")
    # Eager evaluates the rounding formulas in Half/BFloat16 arithmetic for those dtypes,
    # except with a one-element divisor (a Python number or a numel-1 tensor: its CPU scalar
    # path), which it evaluates in fp32; measured on torch 2.13, bit for bit.
    step = {"float16": "fp16", "bfloat16": "bf16"}.get(ctx.out_meta()[1])
    one_element = not isinstance(b, TensorValue) or b.numel == 1
    extra = {"intermediate_dtype": step} if op != "realdiv" and step and not one_element \
        else None
    return binary(ctx, op, a, b, constants=extra)


@lowering("aten.floor_divide.default", "aten.floor_divide.Scalar")
def _floor_divide(ctx, node, a, b):
    """torch.floor_divide is div with rounding_mode='floor', eager's rounding steps included."""
    return _div_mode(ctx, node, a, b, "floor")


@lowering("aten.remainder.Tensor", "aten.remainder.Scalar", "aten.remainder.Scalar_Tensor",
          "aten.fmod.Tensor", "aten.fmod.Scalar")
def _remainder(ctx, node, a, b):
    """x % y (the sign of y) and torch.fmod (the sign of x): one exact step, so fp16 needs no
    emulated intermediate rounding; a float Python number is rounded like eager (96% of fp16
    `x % 0.1` differ otherwise)."""
    return binary(ctx, str(node.target).split(".")[1], *_eager_scalars(ctx, a, b))


@lowering("aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def _pow_tensor(ctx, node, base, exponent):
    """A tensor exponent (pow.Scalar: a scalar base, rounded like eager) is `powtensor`."""
    return binary(ctx, "powtensor", *_eager_scalars(ctx, base, exponent))


def _eager_scalars(ctx, *operands):
    """Float Python numbers rounded to an fp16/bf16 result dtype first, as eager's type
    promotion does for remainder, fmod and pow.Scalar (measured on torch 2.13; the rounding
    divisions are different: they keep an fp32 scalar)."""
    dtype = ctx.out_meta()[1]
    operands = [_as_operand(v) for v in operands]
    if dtype not in ("float16", "bfloat16"):
        return operands
    return [Scalar(round_scalar(v.value, dtype))
            if isinstance(v, Scalar) and isinstance(v.value, float) else v for v in operands]


def round_scalar(value: float, dtype: str) -> float:
    """A Python float rounded to fp16 or bf16 as `torch.tensor(value, dtype=...)` does
    (through float32: eager's double rounding, so ours; `host_dtypes.cast` is that one rule)."""
    return float(cast(np.float64(value), dtype))


@lowering("aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf",
          "aten.where.Scalar")
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


@lowering("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(ctx, node, x, mask, value):
    """x where mask is false, else `value` (a number, or a 0-d tensor eager casts to x's
    dtype): one where3, the value rounded once to the output dtype as eager's cast does."""
    return _where(ctx, node, mask, value, x)


@lowering("aten.isnan.default")
def _isnan(ctx, node, x):
    """x != x: true only for NaN (integers and bools are never NaN)."""
    if x.dtype not in FLOAT_MAX:
        return _constant_bool(ctx, False)
    return ctx.pointwise("notequal", [x, x], out_dtype="bool")


@lowering("aten.isinf.default")
def _isinf(ctx, node, x):
    """|x| > the dtype's largest finite value: no infinity has to travel as a constant, and
    NaN compares false, as eager's isinf."""
    if x.dtype not in FLOAT_MAX:
        return _constant_bool(ctx, False)
    magnitude = ctx.pointwise("abs", [x], out_dtype=x.dtype)
    return binary(ctx, "greaterthan", magnitude, FLOAT_MAX[x.dtype], out_dtype="bool")


@lowering("aten.isfinite.default")
def _isfinite(ctx, node, x):
    """|x| <= the largest finite value (NaN compares false: not finite)."""
    if x.dtype not in FLOAT_MAX:
        return _constant_bool(ctx, True)
    magnitude = ctx.pointwise("abs", [x], out_dtype=x.dtype)
    return binary(ctx, "lesserequal", magnitude, FLOAT_MAX[x.dtype], out_dtype="bool")


FLOAT_MAX = {"float32": 3.4028234663852886e38, "float16": 65504.0,
             "bfloat16": 3.3895313892515355e38}


def _constant_bool(ctx, value: bool) -> TensorValue:
    """A result known from the dtype alone (isinf of an int tensor), as a filled tensor."""
    shape, dtype = ctx.out_meta()
    return _filled(ctx, shape, dtype, value)


def _filled(ctx, shape, dtype: str, value) -> TensorValue:
    out = ctx.new_value(shape, dtype)
    cvars = iteration_vars(shape)
    ctx.emit("fill", out, list(zip(names_of(cvars), shape)), [], out.at(cvars),
             constants={"value": _number(value)})
    return out


# --- casts and copies ------------------------------------------------------------------------


MAX_COPIED_CONSTANT = 4096   # elements: index lists and small tables, never a weight


@lowering("aten._to_copy.default", "aten.to.dtype", "aten.clone.default",
          "aten.contiguous.default", "prims.convert_element_type.default")
def _copy(ctx, node, x, *args, **kwargs):
    """A copy on the device; a same-dtype copy of a small constant (an index list the torch
    front end reaches as `clone(lifted_tensor)`) is a constant itself, so that indexing with it
    stays a static selection (`indexed.static_selection`) instead of a runtime gather."""
    shape, dtype = ctx.out_meta()
    if dtype == x.dtype and 0 < x.numel <= MAX_COPIED_CONSTANT:
        values = constant_values(ctx, x)
        if values is not None:
            return ctx.new_constant(np.ascontiguousarray(values.reshape(shape)), dtype, "copy")
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


@lowering("aten.expand.default", "aten.broadcast_to.default")
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


@lowering("aten.chunk.default")
def _chunk(ctx, node, x, chunks, dim=0):
    """torch.chunk: pieces of ceil(n / chunks) along `dim` (fewer when that divides n),
    each a slice view."""
    dim = dim % x.rank
    return _split(ctx, node, x, max(-(-x.shape[dim] // chunks), 1), dim)


@lowering("aten.numpy_T.default")
def _numpy_t(ctx, node, x):
    """x.T: every dim reversed (Falcon's fused QKV)."""
    return x.permute(list(range(x.rank))[::-1])


@lowering("aten.repeat.default")
def _repeat(ctx, node, x, repeats):
    """x tiled `repeats` times per dim (extra leading repeats add dims): a view whose index
    in each tiled dim is Mod(v, n). A constant input is folded before it gets here."""
    lead = len(repeats) - x.rank
    old = []
    for i, n in enumerate(x.shape):
        old.append(const(0) if n <= 1 else mod(var(f"v{lead + i}"), n))  # 0: no element
    shape = list(repeats[:lead]) + [n * r for n, r in zip(x.shape, repeats[lead:])]
    return x._with(shape, x.at(old))


@lowering("aten.repeat_interleave.self_int", "aten.repeat_interleave.self_Tensor")
def _repeat_interleave(ctx, node, x, repeats, dim=None, output_size=None):
    """Each element `repeats` times along `dim` (the flattened x when dim is None). The same
    count everywhere is a view with floor(v / repeats); per-element counts (a constant tensor)
    are a static selection with a constant index list; runtime counts are refused (the
    result's shape would depend on data)."""
    if dim is None:
        x, dim = x.reshape([x.numel]), 0
    dim = dim % max(x.rank, 1)
    counts = _repeat_counts(ctx, node, repeats, x.shape[dim])
    if counts.size == 0 or not counts.any():   # nothing to repeat, or every count 0
        return x.slice(dim, 0, 0)
    if len(set(counts.tolist())) == 1:
        r = int(counts[0])
        old = [var(f"v{i}") for i in range(x.rank)]
        old[dim] = floordiv(var(f"v{dim}"), r) if r > 1 else var(f"v{dim}")
        shape = list(x.shape)
        shape[dim] *= r
        return x._with(shape, x.at(old))
    picks = np.repeat(np.arange(x.shape[dim], dtype=np.int64), counts)
    index = ctx.new_constant(picks, "int64", "repeat_index")
    return advanced_index(ctx, x, [None] * dim + [index])


def _repeat_counts(ctx, node, repeats, n: int) -> np.ndarray:
    """The repeat count of each of the n elements, known at compile time, or a refusal."""
    if isinstance(repeats, TensorValue):
        values = constant_values(ctx, repeats)
        if values is None:
            raise UnsupportedProgram(
                f"{node.name}: repeat_interleave with repeat counts computed at run time "
                f"({ctx_source(node)}); the result's shape would depend on data: pass an int "
                f"or a constant tensor")
        values = values.reshape(-1).astype(np.int64)
    else:
        values = np.asarray([int(repeats)], dtype=np.int64)
    if values.size == 1:
        values = np.repeat(values, max(n, 1))[:n] if n else values[:0]
    if (values < 0).any():
        raise UnsupportedProgram(f"{node.name}: repeat_interleave with a negative count "
                                 f"({ctx_source(node)})")
    return values


def ctx_source(node) -> str:
    from spyrec.frontend.sources import source_of

    return source_of(node) or "unknown source line"


@lowering("aten.narrow.default")
def _narrow(ctx, node, x, dim, start, length):
    start = start % x.shape[dim % x.rank] if start < 0 else start
    return x.slice(dim, start, start + length)


@lowering("aten.diagonal.default")
def _diagonal(ctx, node, x, offset=0, dim1=0, dim2=1):
    """The diagonal of dims (dim1, dim2) as the last dim: both dims read the same new var."""
    dim1, dim2 = dim1 % x.rank, dim2 % x.rank
    n1, n2 = x.shape[dim1], x.shape[dim2]
    skip1, skip2 = max(-offset, 0), max(offset, 0)
    length = max(min(n1 - skip1, n2 - skip2), 0)
    rest = [i for i in range(x.rank) if i not in (dim1, dim2)]
    old = [const(0)] * x.rank
    for new_pos, i in enumerate(rest):
        old[i] = var(f"v{new_pos}")
    d = var(f"v{len(rest)}")
    old[dim1], old[dim2] = d + skip1, d + skip2
    return x._with([x.shape[i] for i in rest] + [length], x.at(old))


@lowering("aten.unfold.default")
def _unfold(ctx, node, x, dim, size, step):
    """Windows of `size` every `step` along `dim`, the window position as a new last dim (a
    0-d tensor is one window of its one element: shape [1])."""
    if x.rank == 0:
        return x.reshape([1])
    dim = dim % x.rank
    count = (x.shape[dim] - size) // step + 1
    old = [var(f"v{i}") for i in range(x.rank)]
    old[dim] = var(f"v{dim}").scale(step) + var(f"v{x.rank}")
    shape = list(x.shape)
    shape[dim] = count
    return x._with(shape + [size], x.at(old))


@lowering("aten.as_strided.default")
def _as_strided(ctx, node, x, size, stride, storage_offset=None):
    """Index arithmetic over the storage, only when that storage is certainly the same in
    spyrec and in eager: `x` is a whole buffer read row-major and eager's `x` is contiguous."""
    val = ctx.meta_of(node.args[0])
    same_storage = (val is not None and val.is_contiguous() and val.storage_offset == 0
                    and x.numel == ctx.graph.buffers[x.buffer].numel
                    and x == x._with(x.shape, _row_major(x.shape)))
    offset = int(storage_offset or 0)
    last = offset + sum((n - 1) * st for n, st in zip(size, stride) if n > 0)
    if not same_storage or any(st < 0 for st in stride) or last >= max(x.numel, 1):
        raise UnsupportedProgram(
            f"{node.name}: as_strided over a view or outside its tensor; only as_strided of a "
            f"whole contiguous tensor is supported (use view/permute/slice/unfold)")
    index = sum((var(f"v{i}").scale(st) for i, (n, st) in enumerate(zip(size, stride))
                 if n > 1), const(offset))
    return x._with(size, index)


def _row_major(shape) -> Lin:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return sum((var(f"v{i}").scale(st) for i, (n, st) in enumerate(zip(shape, strides))
                if n > 1), Lin())


# The *_copy variants torch.export and functionalization produce: the same index expressions as
# their views. A value is never mutated after it is made, so a view can stand for the copy; a
# consumer that needs a fresh buffer (a program output) materializes it as any view.
VIEW_COPIES = {
    "aten.view_copy.default": "aten.view.default",
    "aten._reshape_copy.default": "aten.reshape.default",
    "aten.permute_copy.default": "aten.permute.default",
    "aten.transpose_copy.int": "aten.transpose.int",
    "aten.t_copy.default": "aten.t.default",
    "aten.expand_copy.default": "aten.expand.default",
    "aten.squeeze_copy.default": "aten.squeeze.default",
    "aten.squeeze_copy.dim": "aten.squeeze.dim",
    "aten.squeeze_copy.dims": "aten.squeeze.dims",
    "aten.unsqueeze_copy.default": "aten.unsqueeze.default",
    "aten.slice_copy.Tensor": "aten.slice.Tensor",
    "aten.select_copy.int": "aten.select.int",
    "aten.narrow_copy.default": "aten.narrow.default",
    "aten.split_copy.Tensor": "aten.split.Tensor",
    "aten.split_with_sizes_copy.default": "aten.split_with_sizes.default",
    "aten.alias_copy.default": "aten.alias.default",
    "aten.detach_copy.default": "aten.detach.default",
    "aten.diagonal_copy.default": "aten.diagonal.default",
    "aten.unfold_copy.default": "aten.unfold.default",
    "aten.as_strided_copy.default": "aten.as_strided.default",
}

for _copy_name, _view_name in VIEW_COPIES.items():
    lowering(_copy_name)(LOWERINGS[_view_name])


@lowering("_operator.getitem")
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
    """x[i, :, j, ...]: advanced indexing with any number of index tensors of any rank."""
    return advanced_index(ctx, x, list(indices))


@lowering("aten.embedding.default")
def _embedding(ctx, node, weight, idx, padding_idx=-1, scale_grad_by_freq=False,
               sparse=False):
    """weight[idx]; padding_idx only changes the gradient."""
    return gather(ctx, weight, 0, idx)


def advanced_index(ctx: LoweringContext, x: TensorValue, indices: list,
                   wrap: bool = True) -> TensorValue:
    indices = distinct_indices(ctx, x.shape, indices)
    static = static_selection(ctx, x, indices, wrap)
    if static is not None:
        return static
    shape = advanced_shape(x.shape, indices)
    return emit_gather(ctx, x, shape,
                       lambda cvars: advanced_coordinates(x.shape, indices, cvars, wrap))


def gather(ctx: LoweringContext, x: TensorValue, dim: int, idx: TensorValue) -> TensorValue:
    """out[pre, i, post] = x[pre, idx[i], post] (one identity op with an indirect coordinate);
    a negative idx is an error, as in eager's index_select and embedding."""
    return advanced_index(ctx, x, [None] * dim + [idx], wrap=False)


__all__ = ["binary", "gather", "host_dtype"]
