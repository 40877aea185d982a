"""Reduction kernels: sum, max, min, mean over the `reduced` vars, and batchmatmul.

The reduced vars are axes of the iteration space, so a reduction is one numpy reduction over
those axes with `keepdims` (the output offsets have size 1 there). Accumulation is float32
(ints: int64) as in eager; max/min propagate NaN. `mean` multiplies by the spec's
`scaling_factor` (1 / product of the real reduced sizes), never by padded extents.

batchmatmul: roles come from which operand varies along which axis (reference/C-simulator.md
§5.4): axes where both vary and the output does too are batch, only x varies are M, only y are
N, reduced axes where both vary are K. Operands are gathered in float32, arranged as
(B, M, K) @ (B, K, N) and multiplied in float32 (numpy's OpenBLAS on one thread, fp32
accumulation as in eager; half-precision matmul in numpy is unusably slow and rounds
differently).
"""

from __future__ import annotations

import math

import numpy as np

from spyrec.sim import dequant
from spyrec.sim.blas import single_threaded_blas
from spyrec.sim.kernels.registry import KernelContext, kernel
from spyrec.sim.torch_kernels import half_matmul


def _broadcast_factor(ctx: KernelContext, x: np.ndarray) -> int:
    """How many times each value of `x` is counted: reduced axes it does not vary along."""
    return math.prod(ctx.shape[a] for a in ctx.reduced_axes if x.shape[a] == 1)


@kernel("mean", arity=1, float_only=True, requires=("scaling_factor",))
@kernel("sum", arity=1)
def sum_(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    (x,) = inputs
    total = np.sum(x, axis=ctx.reduced_axes, keepdims=True, dtype=ctx.compute)
    factor = _broadcast_factor(ctx, x)
    if factor != 1:
        total = total * ctx.compute.type(factor)
    if ctx.op == "mean":
        total = total * np.float32(ctx.constant("scaling_factor"))
    return total


@kernel("max", arity=1)
def max_(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    (x,) = inputs
    return np.max(x, axis=ctx.reduced_axes, keepdims=True)


@kernel("min", arity=1)
def min_(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    (x,) = inputs
    return np.min(x, axis=ctx.reduced_axes, keepdims=True)


@kernel("batchmatmul", arity=dequant.arity)
def batchmatmul(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    """sum over the reduced axes of x*y, as one batched sgemm (fp16 operands, read so when
    torch's half matmul is in use: one torch matmul, unless a reduced axis needs summing
    first)."""
    rank = len(ctx.shape)
    reduced = set(ctx.reduced_axes)
    x, y = inputs
    half = x.dtype == y.dtype == np.float16 and not _needs_presum(ctx, x, y, reduced)
    if not half:
        x, y = (np.asarray(v, dtype=ctx.compute) for v in inputs)
    # A reduced axis only one operand varies along is summed out first (and an axis neither
    # varies along multiplies the result), so K is always shared.
    x, y, scale = _presum(ctx, x, y, reduced)
    varies_x = {a for a in range(rank) if x.shape[a] > 1}
    varies_y = {a for a in range(rank) if y.shape[a] > 1}
    k_axes = sorted(reduced & varies_x & varies_y)
    free = [a for a in range(rank) if a not in reduced]
    batch = [a for a in free if a in varies_x and a in varies_y]
    m_axes = [a for a in free if a in varies_x and a not in varies_y]
    n_axes = [a for a in free if a in varies_y and a not in varies_x]
    size = lambda axes: math.prod(ctx.shape[a] for a in axes)  # noqa: E731
    xs = _arrange(x, batch + m_axes + k_axes).reshape(size(batch), size(m_axes), size(k_axes))
    ys = _arrange(y, batch + k_axes + n_axes).reshape(size(batch), size(k_axes), size(n_axes))
    out = half_matmul(xs, ys) if half else _matmul(xs, ys)
    if scale != 1:
        out = out * ctx.compute.type(scale)
    # back to iteration axes: (batch, m, n) in that order, then to axis order with size-1 gaps
    order = batch + m_axes + n_axes
    out = out.reshape([ctx.shape[a] for a in order])
    out = np.transpose(out, np.argsort(order))
    shape = [ctx.shape[a] if a in order else 1 for a in range(rank)]
    return out.reshape(shape)


def _matmul(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Batched matmul in numpy: fp32 in, fp32 accumulation, no torch import (seconds of
    start-up `spyrec run` need not pay). numpy's OpenBLAS thread pool degrades by orders of
    magnitude on small batched products when the cores are busy (60 ms for 4 x 127x64x127
    here), so it is pinned to one thread first (spyrec/sim/blas.py: 9x faster than the pool,
    faster than torch's GEMM, and a fixed accumulation order whatever the load)."""
    if xs.dtype != np.float32:          # integer matmul: exact in int64
        return np.matmul(xs, ys)
    single_threaded_blas()
    return np.matmul(xs, ys)


def _needs_presum(ctx: KernelContext, x: np.ndarray, y: np.ndarray, reduced: set[int]
                  ) -> bool:
    """Whether `_presum` would sum an operand or scale the product (a reduced axis of more
    than one point that not both operands vary along): a half matmul then converts them
    first, so that the sum and the scale are float32 before the single rounding."""
    return any((x.shape[a] > 1) != (y.shape[a] > 1) or
               (x.shape[a] == y.shape[a] == 1 and ctx.shape[a] > 1) for a in reduced)


def _presum(ctx: KernelContext, x: np.ndarray, y: np.ndarray,
            reduced: set[int]) -> tuple[np.ndarray, np.ndarray, int]:
    scale = 1
    for a in sorted(reduced):
        in_x, in_y = x.shape[a] > 1, y.shape[a] > 1
        if in_x and not in_y:
            x = np.sum(x, axis=a, keepdims=True, dtype=ctx.compute)
        elif in_y and not in_x:
            y = np.sum(y, axis=a, keepdims=True, dtype=ctx.compute)
        elif not in_x and not in_y:
            scale *= ctx.shape[a]
    return x, y, scale


def _arrange(a: np.ndarray, axes: list[int]) -> np.ndarray:
    """`a` with `axes` first in that order (full extents), every other axis size 1 dropped."""
    rest = [i for i in range(a.ndim) if i not in axes]
    assert all(a.shape[i] == 1 for i in rest), (a.shape, axes)
    return np.transpose(a, axes + rest).reshape([a.shape[i] for i in axes])

