"""Elementwise kernels: unary math, binary arithmetic and compares, where3, clip, pow, gelu.

Semantics follow PyTorch eager on CPU (docs/formats.md op table): inputs arrive as float32
(ints as int64), results are returned unrounded and the executor rounds once to the output
dtype. maximum/minimum and clip propagate NaN like torch; compares return bools (stored 0/1).
A scalar operand (`scalar`, `scalar_side`) replaces the missing input of a binary op.
"""

from __future__ import annotations

import math

import numpy as np

from spyrec.costmodel import TRANSCENDENTAL, cost_class
from spyrec.sim.kernels.registry import KernelContext, kernel
from spyrec.sim.kernels.special import erf


def _f(ctx: KernelContext, value: object) -> np.ndarray:
    return np.asarray(value, dtype=ctx.compute)


# --- unary ------------------------------------------------------------------------------------

_UNARY = {
    "neg": np.negative,
    "abs": np.abs,
    "relufwd": lambda x: np.maximum(x, x.dtype.type(0)),
    "floor": np.floor,
    "ceil": np.ceil,
    "sign": lambda x: (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype),
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: np.float32(1) / np.sqrt(x),
    "reciprocal": lambda x: np.float32(1) / x,
    "tanh": np.tanh,
    "cos": np.cos,
    "sin": np.sin,
    "sigmoid": lambda x: np.float32(1) / (np.float32(1) + np.exp(-x)),
    "silu": lambda x: x / (np.float32(1) + np.exp(-x)),
}


# floor and ceil of an integer are the integer (torch returns a copy); sign is written as
# (x > 0) - (x < 0) so that NaN and -0.0 give +0, as torch.sign (np.sign keeps NaN).
_INTEGER_IDENTITY = ("floor", "ceil")


def _register_unary(op: str, fn) -> None:
    float_only = cost_class(op) == TRANSCENDENTAL

    def run(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
        (x,) = inputs
        if op in _INTEGER_IDENTITY and x.dtype.kind == "i":
            return x
        return fn(x)

    kernel(op, arity=1, float_only=float_only)(run)


for _op, _fn in _UNARY.items():
    _register_unary(_op, _fn)


@kernel("gelufwd", arity=1, float_only=True)
def gelu(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    """torch.nn.functional.gelu; `approximate` "none" uses erf, "tanh" the tanh formula."""
    (x,) = inputs
    if ctx.constant("approximate", "none") == "tanh":
        inner = np.float32(math.sqrt(2.0 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
        return np.float32(0.5) * x * (np.float32(1) + np.tanh(inner))
    return np.float32(0.5) * x * (np.float32(1) + _erf(x * np.float32(1 / math.sqrt(2.0))))


def _erf(x: np.ndarray) -> np.ndarray:
    """float32 erf without torch (its import costs `spyrec run` seconds): special.erf is the
    correctly rounded float32 erf, at most one ulp from torch's on ~1% of inputs — inside
    the fp32 differential tolerance."""
    return erf(np.asarray(x, dtype=np.float32))


@kernel("pow", arity=1, requires=("exponent",))
def pow_(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    (x,) = inputs
    return np.power(x, _f(ctx, ctx.constant("exponent")))


# --- binary -----------------------------------------------------------------------------------


def _binary_arity(constants: dict) -> int:
    return 1 if "scalar" in constants else 2


def _operands(ctx: KernelContext, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(a, b), with the scalar in the place `scalar_side` says."""
    if "scalar" not in ctx.constants:
        return inputs[0], inputs[1]
    scalar = _f(ctx, ctx.constant("scalar"))
    if ctx.constant("scalar_side", "rhs") == "lhs":
        return scalar, inputs[0]
    return inputs[0], scalar


def _alpha(ctx: KernelContext, b: np.ndarray) -> np.ndarray:
    alpha = ctx.constant("alpha")
    return b if alpha is None or alpha == 1 else _f(ctx, alpha) * b


_BINARY = {
    "add": lambda ctx, a, b: a + _alpha(ctx, b),
    "sub": lambda ctx, a, b: a - _alpha(ctx, b),
    "mul": lambda ctx, a, b: a * b,
    "realdiv": lambda ctx, a, b: a / b,
    "maximum": lambda ctx, a, b: np.maximum(a, b),
    "minimum": lambda ctx, a, b: np.minimum(a, b),
    "equal": lambda ctx, a, b: a == b,
    "notequal": lambda ctx, a, b: a != b,
    "greaterthan": lambda ctx, a, b: a > b,
    "greaterequal": lambda ctx, a, b: a >= b,
    "lesserthan": lambda ctx, a, b: a < b,
    "lesserequal": lambda ctx, a, b: a <= b,
}


def _register_binary(op: str, fn) -> None:
    def run(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
        a, b = _operands(ctx, inputs)
        return fn(ctx, a, b)

    kernel(op, arity=_binary_arity, float_only=op == "realdiv")(run)


for _op, _fn in _BINARY.items():
    _register_binary(_op, _fn)


# --- selection --------------------------------------------------------------------------------


def _where_arity(constants: dict) -> int:
    return 3 - ("a_scalar" in constants) - ("b_scalar" in constants)


@kernel("where3", arity=_where_arity, conditions=1)
def where3(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    """cond ? a : b; cond is a bool stored as 0/1, a missing a or b is its `*_scalar`."""
    rest = iter(inputs[1:])
    cond = inputs[0] != 0
    a = _f(ctx, ctx.constant("a_scalar")) if "a_scalar" in ctx.constants else next(rest)
    b = _f(ctx, ctx.constant("b_scalar")) if "b_scalar" in ctx.constants else next(rest)
    return np.where(cond, a, b)


@kernel("clip", arity=1)
def clip(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    """torch.clamp: max(x, min) then min(., max), NaN-propagating; a null bound is absent."""
    (x,) = inputs
    lo, hi = ctx.constant("clipMin"), ctx.constant("clipMax")
    if lo is not None:
        x = np.maximum(x, _f(ctx, lo))
    if hi is not None:
        x = np.minimum(x, _f(ctx, hi))
    return x
