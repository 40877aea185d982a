"""Lowerings of pointwise aten ops: unary and binary math, comparisons, where, fills and the
NaN/inf tests.

Each function receives the context, the FX node, then the node's arguments with tensors already
resolved to `TensorValue`s (views) or `Scalar`s, and returns the node's value. A Python number
beside a tensor becomes a scalar constant of the device op (`binary`), rounded first as eager
rounds it where eager does. Views are in `aten_views.py`, casts, copies and gathers in
`aten_copies.py`, reductions, matmuls and composites (softmax, norms) in `aten_reductions.py`.
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.context import LoweringContext, Scalar, iteration_vars, names_of
from spyrec.frontend.host_dtypes import cast
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue

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
    return filled(ctx, shape, dtype, value)


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
    return filled(ctx, shape, dtype, value)


def filled(ctx, shape, dtype: str, value) -> TensorValue:
    """A new tensor of `shape` and `dtype` with every element `value` (one `fill` op)."""
    out = ctx.new_value(shape, dtype)
    cvars = iteration_vars(shape)
    ctx.emit("fill", out, list(zip(names_of(cvars), shape)), [], out.at(cvars),
             constants={"value": _number(value)})
    return out
