"""The constant folders: aten op -> a numpy function computing what eager computes.

`FOLDERS` maps each foldable aten op to `(call, *args, **kwargs) -> ndarray`; `call` (a `Call`)
gives the node and its operands' dtypes. A folder raises `NotFoldable` for an argument form it
does not handle, and the node then stays for the lowering. `VIEW_OPS` are the ops that compute
nothing (a view or an unchanged copy of their first operand). The pass that runs them is
`fold.py`; the dtype rules they follow are `host_dtypes.py`.

Dtype rules follow eager: the result dtype is the one the exporter recorded (`meta["val"]`);
integer and bool results are exact; float results are computed in float64 from operands already
rounded to the operation's dtype and rounded once (through float32, as eager's fp16/bf16 kernels
do), which gives eager's exact result for + - * / and is within 1 ulp of eager for cos, sin and
log (eager's float32 log is SLEEF's; they agree on the position arguments T5 takes the log of).
Selections and roundings (abs, sign, ceil, floor, minimum/maximum, clamp, where, repeat) are
exact. A float -> int cast of NaN, ±inf or an out-of-range value gives what eager gives: both
use the machine's conversion (x86: the int minimum), so T5's `log(0)` = -inf cast to int64 and
discarded by a `where` folds to eager's buckets.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from spyrec.frontend.folders_norms import NORM_FOLDERS
from spyrec.frontend.host_dtypes import (
    NotFoldable, cast, category, opmath, promote, scalar_dtype,
)
from spyrec.frontend.program import Node, Ref, TensorMeta


class Call:
    """What a folder sees besides its arguments: the node and its operands' dtypes."""

    def __init__(self, node: Node, metas: dict[str, TensorMeta]) -> None:
        self.node = node
        self.out: TensorMeta = node.meta["val"]
        self.metas = metas

    def operand_dtypes(self) -> str | None:
        """Eager's common dtype of the node's positional operands (tensors with dims first,
        then 0-dim tensors, then Python scalars, each only if of a higher category)."""
        dims, zeros, scalars = [], [], []
        for a in self.node.args:
            if isinstance(a, Ref):
                m = self.metas[a.name]
                (dims if m.shape else zeros).append(m.dtype)
            elif isinstance(a, (bool, int, float)):
                scalars.append(scalar_dtype(a))
        out = promote(dims)
        for group in (zeros, scalars):
            g = promote(group)
            if g is not None and (out is None or category(g) > category(out)):
                out = g
        return out


Folder = Callable[..., np.ndarray]
FOLDERS: dict[str, Folder] = {}
# ops that compute nothing: their result is (a view or an unchanged copy of) their first operand
VIEW_OPS: set[str] = set()


def folder(*names: str, view: bool = False):
    def register(fn: Folder) -> Folder:
        for name in names:
            FOLDERS[name] = fn
            if view:
                VIEW_OPS.add(name)
        return fn
    return register


def _operand(x, dtype: str, scalar_in_opmath: bool = True):
    """An operand of an op computing in `dtype`, as float64 (floats) or `dtype` (integers).
    Eager's CPU kernels take a Python scalar or 0-dim operand of mul/div as float32 next to an
    fp16/bf16 tensor (opmath), but convert it to fp16/bf16 first for add/sub."""
    if isinstance(x, np.generic):
        x = np.asarray(x)
    if isinstance(x, np.ndarray) and x.ndim == 0 and scalar_in_opmath and x.dtype != np.bool_:
        x = x.item()
    if isinstance(x, np.ndarray):
        x = cast(x, dtype)
        return x.astype(np.float64) if category(dtype) == 2 else x
    if isinstance(x, (bool, int, float)):
        if scalar_in_opmath:
            return opmath(x, dtype)
        return _operand(np.asarray(x), dtype, False)
    raise NotFoldable(f"operand {x!r}")


def _arith(fn, scalar_in_opmath: bool):
    def run(c: Call, a, b, alpha=1):
        dtype = c.out.dtype
        if alpha != 1 and category(dtype) == 2:
            raise NotFoldable("float alpha")
        x, y = _operand(a, dtype, scalar_in_opmath), _operand(b, dtype, scalar_in_opmath)
        if alpha != 1:
            y = y * alpha
        with np.errstate(all="ignore"):
            return cast(fn(x, y), dtype)
    return run


folder("aten.add.Tensor", "aten.add.Scalar")(_arith(np.add, False))
folder("aten.sub.Tensor", "aten.sub.Scalar")(_arith(np.subtract, False))
folder("aten.mul.Tensor", "aten.mul.Scalar")(_arith(np.multiply, True))


@folder("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(c, a, b, alpha=1):
    return _arith(np.subtract, False)(c, b, a, alpha)


@folder("aten.div.Tensor", "aten.div.Scalar")
def _div(c, a, b):
    if category(c.out.dtype) != 2:
        raise NotFoldable("integer division result")
    return _arith(np.divide, True)(c, a, b)


@folder("aten.neg.default")
def _neg(c, a):
    return cast(-_operand(a, c.out.dtype), c.out.dtype)


def _unary_float(fn):
    def run(c: Call, a):
        dtype = c.out.dtype
        if category(dtype) != 2:
            raise NotFoldable("non-float result")
        with np.errstate(all="ignore"):
            return cast(fn(_operand(a, dtype)), dtype)
    return run


folder("aten.cos.default")(_unary_float(np.cos))
folder("aten.sin.default")(_unary_float(np.sin))
folder("aten.log.default")(_unary_float(np.log))
# correctly rounded in float64, so rounding it once to float32/16 is eager's result exactly
folder("aten.sqrt.default")(_unary_float(np.sqrt))


def _sign(x):
    """torch.sign: (0 < x) - (x < 0), so NaN and -0.0 give +0 (np.sign keeps NaN)."""
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _unary_exact(fn, integers_unchanged: bool = False):
    """An op whose result is exact in its own dtype (abs, sign, ceil, floor): computed on the
    operand cast to the result dtype, nothing to round. `integers_unchanged`: the op is the
    identity on integers (eager's floor/ceil of an int tensor is a copy)."""
    def run(c: Call, a):
        dtype = c.out.dtype
        x = cast(a, dtype)
        if dtype == "bool" or (integers_unchanged and category(dtype) == 1):
            return x
        return cast(fn(x), dtype)
    return run


folder("aten.abs.default")(_unary_exact(np.abs))
folder("aten.sign.default")(_unary_exact(_sign))
folder("aten.ceil.default")(_unary_exact(np.ceil, integers_unchanged=True))
folder("aten.floor.default")(_unary_exact(np.floor, integers_unchanged=True))


def _select_in(dtype: str, value):
    """An operand of a selecting op (minimum, clamp, where) in the result dtype: a Python
    number as eager's `Scalar.to<scalar_t>()` (double -> float -> half for fp16), a tensor
    cast as eager casts it to the common dtype. Selection itself rounds nothing."""
    return cast(np.asarray(value), dtype)


@folder("aten.minimum.default", "aten.maximum.default", "aten.min.other", "aten.max.other",
        "aten.fmin.default", "aten.fmax.default")
def _min_max(c, a, b):
    """Elementwise min/max in the result dtype; NaN propagates (fmin/fmax: NaN loses)."""
    name = c.node.target.split(".")[1]
    fn = {"minimum": np.minimum, "min": np.minimum, "maximum": np.maximum, "max": np.maximum,
          "fmin": np.fmin, "fmax": np.fmax}[name]
    dtype = c.out.dtype
    return cast(fn(_select_in(dtype, a), _select_in(dtype, b)), dtype)


@folder("aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min.default",
        "aten.clamp_min.Tensor", "aten.clamp_max.default", "aten.clamp_max.Tensor")
def _clamp(c, x, lo=None, hi=None):
    """torch.clamp: max(x, lo) then min(., hi) in the result dtype, NaN-propagating, so
    lo > hi gives hi (eager's CPU kernels, scalar bounds rounded to the dtype first)."""
    if c.node.target.startswith("aten.clamp_max."):
        lo, hi = None, lo
    dtype = c.out.dtype
    y = _select_in(dtype, x)
    if lo is not None:
        y = np.maximum(y, _select_in(dtype, lo))
    if hi is not None:
        y = np.minimum(y, _select_in(dtype, hi))
    return cast(y, dtype)


def _compare(fn):
    def run(c: Call, a, b):
        dtype = c.operand_dtypes()
        if dtype is None:
            raise NotFoldable("no tensor operand")
        x = cast(a, dtype) if isinstance(a, np.ndarray) else np.asarray(a)
        y = cast(b, dtype) if isinstance(b, np.ndarray) else np.asarray(b)
        if category(dtype) == 2:
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            if not isinstance(a, np.ndarray):
                x = opmath(a, dtype)
            if not isinstance(b, np.ndarray):
                y = opmath(b, dtype)
        return fn(x, y)
    return run


for _name, _fn in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                   ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)):
    folder(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_compare(_fn))


def _bitwise(fn):
    def run(c: Call, a, b):
        dtype = c.out.dtype
        if category(dtype) == 2:
            raise NotFoldable("bitwise op on floats")
        return cast(fn(_operand(a, dtype), _operand(b, dtype)), dtype)
    return run


for _name, _fn in (("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
    folder(f"aten.bitwise_{_name}.Tensor", f"aten.bitwise_{_name}.Scalar",
           f"aten.__{_name}__.Tensor", f"aten.__{_name}__.Scalar")(_bitwise(_fn))


@folder("aten.bitwise_not.default")
def _bitwise_not(c, a):
    if category(c.out.dtype) == 2:
        raise NotFoldable("bitwise op on floats")
    x = cast(a, c.out.dtype)
    return ~x


@folder("aten.logical_not.default")
def _logical_not(c, a):
    return cast(~cast(a, "bool"), c.out.dtype)


for _name, _fn in (("and", np.logical_and), ("or", np.logical_or), ("xor", np.logical_xor)):
    folder(f"aten.logical_{_name}.default")(
        lambda c, a, b, _fn=_fn: cast(_fn(cast(a, "bool"), cast(b, "bool")), c.out.dtype))


@folder("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def _where(c, cond, a, b):
    dtype = c.out.dtype
    return cast(np.where(cast(cond, "bool"), cast(a, dtype), cast(b, dtype)), dtype)


@folder("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(c, x, mask, value):
    dtype = c.out.dtype
    return cast(np.where(cast(mask, "bool"), cast(np.asarray(value), dtype), cast(x, dtype)),
                dtype)


# creation


@folder("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(c, *args, **kwargs):
    start, step = 0, 1
    if len(args) == 1:
        (end,) = args
    elif len(args) == 2:
        start, end = args
    else:
        start, end, step = args[:3]
    n = c.out.shape[0]
    if category(c.out.dtype) == 2:
        # Eager's vectorized kernel adds float offsets to a double base per vector, so only
        # values every method gives exactly are folded: integers the dtype represents exactly.
        if not all(float(v).is_integer() for v in (start, step)):
            raise NotFoldable("float arange with a fractional start or step")
        values = np.float64(start) + np.arange(n, dtype=np.float64) * np.float64(step)
        if n and np.abs(values).max() > EXACT_INTEGERS[c.out.dtype]:
            raise NotFoldable("float arange beyond the exactly representable integers")
        return cast(values, c.out.dtype)
    if any(isinstance(v, float) for v in (start, end, step)):
        raise NotFoldable("integer arange with float bounds")
    return cast(start + np.arange(n, dtype=np.int64) * step, c.out.dtype)


EXACT_INTEGERS = {"float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53}


def _filled(value):
    def run(c: Call, *args, **kwargs):
        v = value(args) if callable(value) else value
        return cast(np.full(c.out.shape, v), c.out.dtype)
    return run


folder("aten.ones.default", "aten.new_ones.default", "aten.ones_like.default")(_filled(1))
folder("aten.zeros.default", "aten.new_zeros.default", "aten.zeros_like.default")(_filled(0))
folder("aten.full.default", "aten.full_like.default")(_filled(lambda args: args[1]))
folder("aten.new_full.default")(_filled(lambda args: args[2]))
folder("aten.scalar_tensor.default")(_filled(lambda args: args[0]))


# views and copies (compute nothing)


@folder("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
        "aten.unsqueeze.default", "aten.squeeze.default", "aten.squeeze.dim",
        "aten.squeeze.dims", "aten.flatten.using_ints", "aten.unflatten.int", view=True)
def _reshape(c, x, *args):
    return x.reshape(c.out.shape)


@folder("aten.expand.default", view=True)
def _expand(c, x, *args, **kwargs):
    return np.broadcast_to(x, c.out.shape)


@folder("aten.permute.default", view=True)
def _permute(c, x, dims):
    return np.transpose(x, dims)


@folder("aten.t.default", view=True)
def _t(c, x):
    return x.T


@folder("aten.transpose.int", view=True)
def _transpose(c, x, a, b):
    return np.swapaxes(x, a, b)


@folder("aten.slice.Tensor", view=True)
def _slice(c, x, dim=0, start=None, end=None, step=1):
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, end, step)
    return x[tuple(index)]


@folder("aten.select.int", view=True)
def _select(c, x, dim, index):
    return np.take(x, index, axis=dim)


# copies and dtype conversions of their first operand: the only ops that read a CONVERTED_ONLY
# (complex) constant (host_dtypes.py)
CONVERSIONS = frozenset({
    "aten.alias.default", "aten.clone.default", "aten.contiguous.default",
    "aten.detach.default", "aten.lift_fresh_copy.default", "aten._to_copy.default",
    "aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten.to.other",
    "aten.type_as.default", "prims.convert_element_type.default"})


@folder(*sorted(CONVERSIONS), view=True)
def _copy(c, x, *args, **kwargs):
    return cast(x, c.out.dtype)  # a view only when the dtype stays: see `computes`


@folder("aten.repeat.default")
def _repeat(c, x, repeats):
    """x tiled `repeats` times per dim (extra leading repeats add dims), as np.tile does."""
    return np.tile(x, tuple(repeats))


@folder("aten.dropout.default", view=True)
def _dropout(c, x, p, train):
    if train and p > 0:
        raise NotFoldable("dropout in training mode")
    return x


# indexing, joining, scans and reductions


@folder("aten.index.Tensor")
def _index(c, x, indices):
    try:
        return x[tuple(slice(None) if i is None else
                       (i if i.dtype == np.bool_ else i.astype(np.int64)) for i in indices)]
    except IndexError as e:
        raise NotFoldable(str(e)) from None


@folder("aten.gather.default")
def _gather(c, x, dim, index, sparse_grad=False):
    dim = dim % max(x.ndim, 1)
    x = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(index.shape))]
    try:
        return np.take_along_axis(x, index.astype(np.int64), axis=dim)
    except IndexError as e:
        raise NotFoldable(str(e)) from None


@folder("aten.embedding.default")
def _embedding(c, weight, indices, *args):
    try:
        return weight[indices.astype(np.int64)]
    except IndexError as e:
        raise NotFoldable(str(e)) from None


@folder("aten.cat.default")
def _cat(c, tensors, dim=0):
    dtype = c.out.dtype
    parts = [cast(t, dtype) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    return np.concatenate(parts, axis=dim)


@folder("aten.stack.default")
def _stack(c, tensors, dim=0):
    return np.stack([cast(t, c.out.dtype) for t in tensors], axis=dim)


@folder("aten.cumsum.default")
def _cumsum(c, x, dim, dtype=None):
    out = c.out.dtype
    if category(out) != 2:
        return cast(np.cumsum(cast(x, "int64"), axis=dim), out)
    # eager's CPU kernel accumulates float32/64 in double, fp16/bf16 in float32, sequentially
    acc = np.float64 if out in ("float32", "float64") else np.float32
    return cast(np.cumsum(cast(x, out).astype(acc), axis=dim, dtype=acc), out)


@folder("aten.diff.default")
def _diff(c, x, n=1, dim=-1, prepend=None, append=None):
    dtype = c.out.dtype
    parts = [cast(p, dtype) for p in (prepend, x, append) if p is not None]
    joined = np.concatenate(parts, axis=dim)
    for _ in range(n):  # eager takes the first difference n times, rounding each time
        if category(dtype) == 2:
            with np.errstate(all="ignore"):
                joined = cast(np.diff(joined.astype(np.float64), axis=dim), dtype)
        else:
            joined = cast(np.diff(joined, axis=dim), dtype)
    return joined


def _reduce_bool(fn):
    def run(c: Call, x, dim=None, keepdim=False):
        axis = tuple(dim) if isinstance(dim, (list, tuple)) else dim
        if axis == ():
            axis = None
        return cast(fn(cast(x, "bool"), axis=axis, keepdims=keepdim), c.out.dtype)
    return run


folder("aten.any.default", "aten.any.dim", "aten.any.dims")(_reduce_bool(np.any))
folder("aten.all.default", "aten.all.dim", "aten.all.dims")(_reduce_bool(np.all))


def computes(node: Node, metas: dict[str, TensorMeta]) -> bool:
    """Whether `node` does arithmetic (as opposed to viewing or copying its first operand)."""
    if node.target not in VIEW_OPS:
        return True
    src = node.args[0] if node.args else None
    return isinstance(src, Ref) and metas[src.name].dtype != node.meta["val"].dtype


FOLDERS.update(NORM_FOLDERS)
