"""Constant folding: evaluate at compile time, with numpy, what depends on no runtime value.

Real models build attention masks, position ids and rotary tables in the graph from shape-only
ops (`arange`, `cumsum`, `new_ones`, `index.Tensor`, `__and__`, `cos`, ...) and from constants
(a `position_ids` buffer, `inv_freq`). With static shapes these have one value for every run, so
`fold_constants` computes them once and hands the lowering a constant instead of ops it would
have to run on the device every time (most of which it cannot lower).

What is folded (works on the flat node list; no higher-order op is looked into):
- a node is *constant* when its op has a numpy implementation in `FOLDERS`, it produces one
  tensor of at most `MAX_FOLD_BYTES`, and every node it reads is a constant placeholder (a
  parameter, a buffer that no `buffer_mutation` output writes, a lifted constant) or another
  constant node. Anything reading a user input or a mutated buffer is data, never folded;
- a constant node that a remaining node (or the program output) reads is *materialized*: it
  becomes a placeholder of kind `constant` with the same name (so its users are untouched), FQN
  `_folded.<name>`, its value in `state` (bf16 as uint16 bits). Every other constant node is
  removed. Exceptions, which stay in the graph as ordinary (lowerable) nodes so that no weight is
  copied needlessly:
  - a pure view of state (view, transpose, slice, expand, a same-dtype copy, ... of a parameter
    with no arithmetic anywhere between them): materializing it would duplicate the weight,
    while the lowering expresses views as index maps for free. `linear`'s `t(weight)` stays;
  - a broadcasting view (`expand`) of a folded value, or one of several views of the same
    folded value (each layer's `unsqueeze` of the rotary `cos`): the value is materialized once
    and the views stay views of it.
- a parameter, buffer or constant read only by folded nodes is dropped from the program.

Dtype rules follow eager: the result dtype is the one the exporter recorded (`meta["val"]`);
integer and bool results are exact; float results are computed in float64 from operands already
rounded to the operation's dtype and rounded once (through float32, as eager's fp16/bf16 kernels
do), which gives eager's exact result for + - * / and is within 1 ulp of eager for cos, sin and
log (eager's float32 log is SLEEF's; they agree on the position arguments T5 takes the log of).
Selections and roundings (abs, sign, ceil, floor, minimum/maximum, clamp, where, repeat) are
exact. A float -> int cast of NaN, ±inf or an out-of-range value gives what eager gives: both
use the machine's conversion (x86: the int minimum), so T5's `log(0)` = -inf cast to int64 and
discarded by a `where` folds to eager's buckets.

After folding, what is left lives on the device: a tensor of a dtype the device cannot store
(float64) that folding did not remove is refused (exit 3) by `check_device_dtypes`, each one
named with its source line. So float64 arithmetic on shapes or constants that is cast to float32
before it meets data costs nothing; a float64 input, output or runtime value is a clear refusal.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from spyrec.frontend.program import InputSpec, Node, Program, Ref, TensorMeta, _refs

MAX_FOLD_BYTES = 16 * 1024 * 1024
FOLDED_PREFIX = "_folded."
ASSERTS = {"aten._assert_tensor_metadata.default", "aten._assert_scalar.default"}
# ops that read only the dtype/device/shape of their first operand, never its values
LIKE_OPS = {"aten.new_ones.default", "aten.new_zeros.default", "aten.new_full.default",
            "aten.new_empty.default", "aten.ones_like.default", "aten.zeros_like.default",
            "aten.full_like.default"}


class NotFoldable(Exception):
    """This call (an argument form the numpy folder does not handle) stays for the lowering."""


NP_DTYPES = {"bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16,
             "int32": np.int32, "int64": np.int64, "float16": np.float16,
             "bfloat16": np.float32, "float32": np.float32, "float64": np.float64}
ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
            "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
FLOATS = ("float16", "bfloat16", "float32", "float64")


# --- dtype helpers: bf16 values travel as float32 arrays holding exact bf16 values ------------


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bf16 (ties to even), still as float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    rounded = np.where(np.isnan(x), np.uint32(0x7FC00000), rounded)
    return rounded.view(np.float32)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    return (round_bf16(x).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    return np.asarray(np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def cast(x, dtype: str) -> np.ndarray:
    """`x` converted to torch dtype `dtype` as eager converts (float -> int truncates, anything
    -> bool is `!= 0`, double -> fp16/bf16 goes through float32). NaN, ±inf and out-of-range
    floats go to ints through numpy's astype, the same machine conversion eager's kernels use
    (x86: INT_MIN for int32/int64, its low bits for narrower ints; measured on torch 2.13)."""
    if dtype not in NP_DTYPES:
        raise NotFoldable(f"dtype {dtype}")
    x = np.asarray(x)
    if dtype == "bool":
        return x if x.dtype == np.bool_ else x != 0
    with np.errstate(invalid="ignore", over="ignore"):  # out of range -> inf, as eager
        if dtype in ("float16", "bfloat16") and x.dtype not in (np.float16, np.float32):
            x = x.astype(np.float32)
        if dtype == "bfloat16":
            return round_bf16(x.astype(np.float32, copy=False))
        return x.astype(NP_DTYPES[dtype], copy=False)


def _category(dtype: str) -> int:
    return 0 if dtype == "bool" else 2 if dtype in FLOATS else 1


def _promote_pair(a: str, b: str) -> str:
    if a == b:
        return a
    if _category(a) != _category(b):
        return a if _category(a) > _category(b) else b
    if _category(a) == 2:
        if {a, b} == {"float16", "bfloat16"}:
            return "float32"
        return max(a, b, key=FLOATS.index)
    return str(np.promote_types(NP_DTYPES[a], NP_DTYPES[b]))


def _promote(dtypes: list[str]) -> str | None:
    out = None
    for d in dtypes:
        out = d if out is None else _promote_pair(out, d)
    return out


def scalar_dtype(value) -> str:
    return "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float32"


# --- the folders ----------------------------------------------------------------------------


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
        out = _promote(dims)
        for group in (zeros, scalars):
            g = _promote(group)
            if g is not None and (out is None or _category(g) > _category(out)):
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


def _opmath(value, dtype: str):
    """A Python scalar as eager's kernels use it next to a `dtype` tensor (fp16/bf16 kernels
    compute in float32)."""
    if _category(dtype) == 2:
        return np.float64(np.float32(value)) if dtype != "float64" else np.float64(value)
    return np.asarray(value).astype(NP_DTYPES[dtype])


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
        return x.astype(np.float64) if _category(dtype) == 2 else x
    if isinstance(x, (bool, int, float)):
        if scalar_in_opmath:
            return _opmath(x, dtype)
        return _operand(np.asarray(x), dtype, False)
    raise NotFoldable(f"operand {x!r}")


def _arith(fn, scalar_in_opmath: bool):
    def run(c: Call, a, b, alpha=1):
        dtype = c.out.dtype
        if alpha != 1 and _category(dtype) == 2:
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
    if _category(c.out.dtype) != 2:
        raise NotFoldable("integer division result")
    return _arith(np.divide, True)(c, a, b)


@folder("aten.neg.default")
def _neg(c, a):
    return cast(-_operand(a, c.out.dtype), c.out.dtype)


def _unary_float(fn):
    def run(c: Call, a):
        dtype = c.out.dtype
        if _category(dtype) != 2:
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
        if dtype == "bool" or (integers_unchanged and _category(dtype) == 1):
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
        if _category(dtype) == 2:
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            if not isinstance(a, np.ndarray):
                x = _opmath(a, dtype)
            if not isinstance(b, np.ndarray):
                y = _opmath(b, dtype)
        return fn(x, y)
    return run


for _name, _fn in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                   ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)):
    folder(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_compare(_fn))


def _bitwise(fn):
    def run(c: Call, a, b):
        dtype = c.out.dtype
        if _category(dtype) == 2:
            raise NotFoldable("bitwise op on floats")
        return cast(fn(_operand(a, dtype), _operand(b, dtype)), dtype)
    return run


for _name, _fn in (("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
    folder(f"aten.bitwise_{_name}.Tensor", f"aten.bitwise_{_name}.Scalar",
           f"aten.__{_name}__.Tensor", f"aten.__{_name}__.Scalar")(_bitwise(_fn))


@folder("aten.bitwise_not.default")
def _bitwise_not(c, a):
    if _category(c.out.dtype) == 2:
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
    if _category(c.out.dtype) == 2:
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


@folder("aten.alias.default", "aten.clone.default", "aten.contiguous.default",
        "aten.detach.default", "aten.lift_fresh_copy.default", "aten._to_copy.default",
        "aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten.to.other",
        "aten.type_as.default", "prims.convert_element_type.default", view=True)
def _copy(c, x, *args, **kwargs):
    return cast(x, c.out.dtype)  # a view only when the dtype stays: see `_computes`


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
    if _category(out) != 2:
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
        if _category(dtype) == 2:
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


def _computes(node: Node, metas: dict[str, TensorMeta]) -> bool:
    """Whether `node` does arithmetic (as opposed to viewing or copying its first operand)."""
    if node.target not in VIEW_OPS:
        return True
    src = node.args[0] if node.args else None
    return isinstance(src, Ref) and metas[src.name].dtype != node.meta["val"].dtype


# --- the pass -------------------------------------------------------------------------------


def _numel(meta: TensorMeta) -> int:
    return int(np.prod(meta.shape, dtype=np.int64))


def _nbytes(meta: TensorMeta) -> int:
    return _numel(meta) * ITEMSIZE.get(meta.dtype, 8)


def _resolve(arg, values):
    if isinstance(arg, Ref):
        return values[arg.name]
    if isinstance(arg, (list, tuple)):
        return type(arg)(_resolve(a, values) for a in arg)
    if isinstance(arg, dict):
        return {k: _resolve(v, values) for k, v in arg.items()}
    return arg


class _StateValues(dict):
    """Placeholder name -> numpy value, read from `state` (bf16 decoded) only when asked."""

    def __init__(self, program: Program, fqns: dict[str, str]) -> None:
        super().__init__()
        self.program, self.fqns = program, fqns

    def __missing__(self, name):
        fqn = self.fqns[name]
        fqn = self.program.aliases.get(fqn, fqn)
        array = self.program.state[fqn]
        if self.program.state_dtypes.get(fqn) == "bfloat16":
            array = from_bf16_bits(array)
        self[name] = array
        return array


def fold_constants(program: Program, max_bytes: int = MAX_FOLD_BYTES) -> tuple[Program, int]:
    """`program` with its constant subgraphs evaluated (see the module docstring), and how many
    call nodes were removed. What is left runs on the device, so a value of a dtype the device
    cannot store (float64) that folding did not remove is refused here (`check_device_dtypes`),
    naming each one, rather than failing deep in the lowering."""
    program, count = _fold(program, max_bytes)
    program = _drop_unused_host_only_state(program)
    check_device_dtypes(program)
    return program, count


def _fold(program: Program, max_bytes: int) -> tuple[Program, int]:
    from spyrec.frontend.lowerings import lowerable

    mutated = {s.target for s in program.outputs if s.kind == "buffer_mutation"}
    roots = {s.name: s.target for s in program.inputs
             if s.kind in ("parameter", "buffer", "constant") and s.target not in mutated
             and s.target is not None}
    metas = {n.name: n.meta.get("val") for n in program.nodes}
    values = _StateValues(program, roots)
    const: set[str] = set()  # constant call nodes, evaluated (asserts: checked, no value)
    for node in program.nodes:
        if node.op != "call_function":
            continue
        args = node.args
        if node.target in LIKE_OPS and args and isinstance(args[0], Ref):
            args = (None,) + tuple(args[1:])  # only its metadata is read
        refs = [r.name for r in _refs((args, node.kwargs))]
        if not all(r in roots or r in const for r in refs):
            continue
        if node.target in ASSERTS:
            if refs:
                const.add(node.name)
            continue
        out = node.meta.get("val")
        if node.target not in FOLDERS or not isinstance(out, TensorMeta) \
                or out.dtype not in NP_DTYPES or _nbytes(out) > max_bytes:
            continue
        try:
            value = FOLDERS[node.target](Call(node, metas), *_resolve(args, values),
                                         **_resolve(node.kwargs, values))
        except NotFoldable:
            continue
        value = np.asarray(value)
        if value.dtype != NP_DTYPES[out.dtype]:
            value = cast(value, out.dtype)
        if tuple(value.shape) != tuple(out.shape):
            raise AssertionError(f"constant folding {node.name} ({node.target}) gave shape "
                                 f"{value.shape}, the exporter recorded {out.shape}")
        values[node.name] = value
        const.add(node.name)
    if not const:
        return program, 0

    by_name = {n.name: n for n in program.nodes}
    users: dict[str, list[Node]] = {}
    for node in program.nodes:
        for r in {r.name for r in _refs((node.args, node.kwargs))}:
            users.setdefault(r, []).append(node)
    # Nodes that stay; an assert stays with what it checks.
    keep = {n.name for n in program.nodes if n.op == "call_function" and n.name not in const}

    def pure_view_of_state(name: str) -> bool:
        node = by_name[name]
        if node.op == "placeholder":
            return name in roots
        if name not in const or node.target in ASSERTS or _computes(node, metas):
            return False
        src = node.args[0] if node.args else None
        return isinstance(src, Ref) and pure_view_of_state(src.name)

    def view_worth_keeping(node: Node) -> bool:
        """A view of a folded value that broadcasts it, or one of several views of it: the
        value is materialized once and the views stay (free index maps in the lowering)."""
        src = node.args[0] if node.args else None
        if not (node.target in VIEW_OPS and not _computes(node, metas) and isinstance(src, Ref)
                and src.name in const):
            return False
        readers = [u for u in users.get(src.name, []) if u.target not in ASSERTS]
        return _numel(metas[node.name]) > _numel(metas[src.name]) or len(readers) > 1

    changed = True
    while changed:
        changed = False
        for name in sorted(const - keep):
            node = by_name[name]
            consumers = users.get(name, [])
            if not any(u.name in keep or u.op == "output" for u in consumers):
                continue
            if node.target in ASSERTS:
                continue
            if lowerable(node.target) and (pure_view_of_state(name) or view_worth_keeping(node)):
                keep.add(name)
                changed = True
        for name in sorted(const - keep):
            if by_name[name].target in ASSERTS and \
                    any(r.name in keep for r in _refs((by_name[name].args,))):
                keep.add(name)
                changed = True

    materialize = [n for n in program.nodes if n.name in const and n.name not in keep
                   and n.target not in ASSERTS
                   and any(u.name in keep or u.op == "output" for u in users.get(n.name, []))]
    removed = {n for n in const if n not in keep}
    if not removed:
        return program, 0
    return _rewrite(program, materialize, removed, values, roots, users, keep), len(removed)


def _rewrite(program: Program, materialize: list[Node], removed: set[str], values, roots,
             users, keep) -> Program:
    state, dtypes = dict(program.state), dict(program.state_dtypes)
    new_specs, new_nodes = [], []
    for node in materialize:
        meta: TensorMeta = node.meta["val"]
        fqn = FOLDED_PREFIX + node.name
        while fqn in state:
            fqn += "_"
        value = np.array(values[node.name], order="C")  # keeps 0-dim values 0-dim
        state[fqn] = bf16_bits(value) if meta.dtype == "bfloat16" else value
        dtypes[fqn] = meta.dtype
        strides = tuple(int(s) // value.itemsize for s in value.strides)
        placeholder_meta = {k: v for k, v in node.meta.items() if k != "val"}
        placeholder_meta["val"] = TensorMeta(tuple(meta.shape), meta.dtype, strides)
        placeholder_meta["folded_from"] = node.target  # for messages about the constant
        new_nodes.append(Node(node.name, "placeholder", node.name, meta=placeholder_meta))
        new_specs.append(InputSpec("constant", node.name, fqn))
    # state read only by removed nodes is dropped (the folded constants replace it)
    dead = {name for name in roots
            if users.get(name) and all(u.name in removed for u in users[name])}
    nodes = [n for n in program.nodes if n.name not in removed and n.name not in dead]
    last_placeholder = max((i for i, n in enumerate(nodes) if n.op == "placeholder"), default=-1)
    nodes[last_placeholder + 1:last_placeholder + 1] = new_nodes
    inputs = [s for s in program.inputs if s.name not in dead]
    first_user = next((i for i, s in enumerate(inputs) if s.kind == "user_input"), len(inputs))
    inputs[first_user:first_user] = new_specs
    return dataclasses.replace(program, nodes=nodes, inputs=inputs, state=state,
                               state_dtypes=dtypes)


# --- what must live on the device -----------------------------------------------------------

# float8 has a device format the lowering refuses itself (driver._check_supported).
def _host_only(dtype: str) -> bool:
    """A host dtype with no device storage format (float64, complex, uint8, int16, ...)."""
    from spyrec.layout.dtypes import HOST_TO_DEVICE

    return dtype not in HOST_TO_DEVICE


def _hint(dtype: str) -> str:
    if dtype == "float64":
        return "cast it to float32 in the model (`.float()`, or dtype=torch.float32)"
    return "cast it to a dtype the device stores (float16, bfloat16, float32, int32, int64, " \
           "int8 or bool) in the model"


def _drop_unused_host_only_state(program: Program) -> Program:
    """A parameter, buffer or constant nobody reads never reaches the device, whatever its
    dtype: one of a host-only dtype is dropped rather than refused."""
    unused = {s.name for s in program.inputs
              if s.kind in ("parameter", "buffer", "constant") and not program.users(s.name)
              and _host_only(program.state_dtypes.get(program.aliases.get(s.target, s.target),
                                                      ""))}
    mutated = {s.target for s in program.outputs if s.kind == "buffer_mutation"}
    unused -= {s.name for s in program.inputs if s.target in mutated}
    if not unused:
        return program
    return dataclasses.replace(
        program, nodes=[n for n in program.nodes if n.name not in unused],
        inputs=[s for s in program.inputs if s.name not in unused])


def check_device_dtypes(program: Program) -> None:
    """Refuse (exit 3) every tensor that would have to live on the device in a dtype the device
    cannot store: a user input, a weight or folded constant, a runtime result. Each is listed
    with its op and source line and what to do, so a float64 `zeros_like` that folding could
    not remove (it is a program output, or it depends on an input) is a clear refusal."""
    from spyrec.errors import UnsupportedProgram
    from spyrec.frontend.sources import source_of

    kinds = {s.name: s for s in program.inputs}
    lines = []
    for node in program.nodes:
        for val in _tensor_metas(node):
            if not _host_only(val.dtype):
                continue
            where = source_of(node) or ("a program input" if node.op == "placeholder"
                                        else "unknown source line")
            lines.append(f"  {_what(node, kinds.get(node.name))} is {val.dtype} ({where}): "
                         f"{_hint(val.dtype)}")
            break
    if lines:
        raise UnsupportedProgram("the program keeps tensors in dtypes the device cannot store "
                                 "(spyrec folds only what depends on shapes and weights; "
                                 "everything else lives on the device):\n" + "\n".join(lines))


def _tensor_metas(node: Node) -> list[TensorMeta]:
    if node.op not in ("placeholder", "call_function"):
        return []
    val = node.meta.get("val")
    return [v for v in (val if isinstance(val, (list, tuple)) else [val])
            if isinstance(v, TensorMeta)]


def _what(node: Node, spec: InputSpec | None) -> str:
    """How a user knows the value: its input name, its FQN, or its op (a folded constant
    keeps the name of the node that made it)."""
    if spec is None:
        return f"the result of {node.target} (node {node.name})"
    if spec.kind == "user_input":
        return f"input {node.name}"
    if spec.target and spec.target.startswith(FOLDED_PREFIX):
        op = node.meta.get("folded_from", "a constant expression")
        return f"the result of {op} (node {node.name}; folded at compile time, but still " \
               f"a program output or read at run time)"
    return f"{spec.kind} {spec.target}"
