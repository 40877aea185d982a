"""Binary arithmetic with eager's exact rules: truncdiv, floordiv (torch.div rounding modes)
and powtensor (pow with a tensor exponent, or a scalar base).

Operands follow the binary-op convention of `pointwise.py`: two inputs, or one input and a
`scalar` in `op_info.constants` on side `scalar_side`. Floats compute in float32 (fp16/bf16
inputs are widened, as eager's CPU kernels do) and the executor rounds once; when every operand
is an integer the kernels compute in int64 with torch's integer rules.
"""

from __future__ import annotations

import numpy as np

from spyrec.bf16 import round_to_bf16
from spyrec.errors import SimulatorFault
from spyrec.sim.kernels.pointwise import _binary_arity, _operands
from spyrec.sim.kernels.registry import KernelContext, kernel

_ZERO, _HALF, _ONE = np.float32(0), np.float32(0.5), np.float32(1)


def _check_int_divisor(ctx: KernelContext, b: np.ndarray) -> None:
    if np.any(np.asarray(b) == 0):
        raise SimulatorFault(f"{ctx.op}: integer division by zero (eager raises "
                             f"ZeroDivisionError; only float division gives inf/nan)")


def _rounding(ctx: KernelContext):
    """Each step's rounding: none (float32), or to `intermediate_dtype` ("fp16", "bf16"),
    which is how eager's Half/BFloat16 arithmetic evaluates these formulas. The operands are
    rounded too: a no-op for fp16 tensors, and a Python-number dividend becomes the fp16 value
    eager's type promotion makes of it. (Eager takes its fp32 path for a one-element divisor;
    the compiler then leaves `intermediate_dtype` out.)"""
    kind = ctx.constant("intermediate_dtype")
    if kind is None:
        return lambda v: np.asarray(v, np.float32)
    if kind == "fp16":
        return lambda v: np.asarray(v, np.float32).astype(np.float16).astype(np.float32)
    if kind == "bf16":
        return _round_bf16
    raise SimulatorFault(f"{ctx.op}: intermediate_dtype {kind!r} (expected fp16 or bf16)")


def _round_bf16(v) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), back as float32; NaN and inf stay
    (`spyrec/bf16.py`: the front end's rounding too)."""
    return round_to_bf16(np.ascontiguousarray(v, np.float32))


@kernel("truncdiv", arity=_binary_arity)
def truncdiv(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    """torch.div(a, b, rounding_mode='trunc'): floats trunc(a / b), operands and quotient
    rounded first (to `intermediate_dtype` when given), so x/0 is ±inf or nan; integers C
    division (the quotient rounded toward zero)."""
    a, b = _operands(ctx, inputs)
    if ctx.compute.kind == "i":
        _check_int_divisor(ctx, b)
        q = a // b
        return q + (((a % b) != 0) & ((a < 0) != (b < 0)))
    rnd = _rounding(ctx)
    return np.trunc(rnd(rnd(a) / rnd(b)))


@kernel("floordiv", arity=_binary_arity)
def floordiv(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    """torch.div(a, b, rounding_mode='floor') = ATen's div_floor_floating (Python's float //),
    which is *not* floor(a / b): it floors (a - fmod(a, b)) / b and rounds a result within 0.5
    of the next integer up, so 5.5 // 0.1 is 54 where floor(5.5 / 0.1) is 55. b == 0 gives a / b
    (±inf or nan); a zero quotient keeps the sign of a / b. Every step is rounded to
    `intermediate_dtype` when given. Integers: floor division."""
    a, b = _operands(ctx, inputs)
    if ctx.compute.kind == "i":
        _check_int_divisor(ctx, b)
        return a // b
    rnd = _rounding(ctx)
    a, b = np.broadcast_arrays(rnd(a), rnd(b))
    basic = rnd(a / b)
    mod = rnd(np.fmod(a, b))
    # ATen's fix-up for an fmod that cannot be exact: an infinite quotient of a finite a
    top = np.where((np.abs(basic) == np.inf) & (np.abs(a) != np.inf), a, rnd(a - mod))
    div = rnd(top / b)
    div = np.where((mod != _ZERO) & ((b < _ZERO) != (mod < _ZERO)), rnd(div - _ONE), div)
    floored = np.floor(div)
    floored = np.where(rnd(div - floored) > _HALF, rnd(floored + _ONE), floored)
    floored = np.where(div == _ZERO, np.copysign(_ZERO, basic), floored)
    return np.where(b == _ZERO, basic, floored)


@kernel("powtensor", arity=_binary_arity)
def powtensor(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    """base ** exponent elementwise (torch.pow with a tensor exponent; a scalar base or
    exponent is the `scalar`). Floats: C pow (x**0 == 1 even for nan, 1**y == 1). Integers:
    exact int64 powers; a negative exponent gives 1 for base 1, ±1 for base -1, else 0, as
    torch's integer pow."""
    base, exp = _operands(ctx, inputs)
    if ctx.compute.kind != "i":
        return np.power(np.asarray(base, np.float32), np.asarray(exp, np.float32))
    base, exp = np.broadcast_arrays(np.asarray(base, np.int64), np.asarray(exp, np.int64))
    result = np.ones(base.shape, np.int64)
    b, e = base.copy(), np.where(exp < 0, 0, exp)
    while np.any(e > 0):
        result = np.where(e & 1, result * b, result)
        b = b * b
        e = e >> 1
    negative = np.where(base == 1, 1, np.where(base == -1, np.where(exp % 2 != 0, -1, 1), 0))
    return np.where(exp < 0, negative, result)


@kernel("remainder", "fmod", arity=_binary_arity)
def remainder(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    """torch.remainder (Python's %: the sign of b) and torch.fmod (C's fmod: the sign of a).
    Floats: fmod(a, b) exactly, and remainder adds b to a nonzero result whose sign differs
    from b's, as ATen; b == 0 gives nan. Integers: the same rules; a zero divisor faults."""
    a, b = _operands(ctx, inputs)
    if ctx.compute.kind == "i":
        _check_int_divisor(ctx, b)
        return np.mod(a, b) if ctx.op == "remainder" else np.fmod(a, b)
    mod = np.fmod(a, b)
    if ctx.op == "fmod":
        return mod
    return np.where((mod != _ZERO) & ((b < _ZERO) != (mod < _ZERO)), mod + b, mod)
