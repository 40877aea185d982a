"""DESIGN §8's rule for an fp16 matmul, as a bound a test computes itself in float64.

The device (and the simulator) multiply exactly, accumulate in float32 and round once to fp16.
The order of the float32 additions is left open: BLAS picks it, and picks differently by CPU
(AVX-512 or AVX2 kernels, Intel or AMD) and by shape (a chunk of 128 columns may take another
kernel than the whole 640), so two correct runs may differ by an fp16 step at a few outputs
and a test must never compare them bit for bit. What every correct order satisfies, on every
machine: the result is within half an fp16 step of the exact product (the one rounding) plus
float32 accumulation's worst error, k * 2**-24 * sum |x y| (Higham, any summation order).
A miscompile (an operand swapped, an access off by one stick) misses it by the size of the
signal, orders above the bound.
"""

from __future__ import annotations

import numpy as np


def fp16_product_bound(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(exact product, allowed |error|) of xs @ ys (fp16 or fp32 values, any batch dims), both
    float64: half an fp16 step at the exact value plus the float32 accumulation bound."""
    x64, y64 = xs.astype(np.float64), ys.astype(np.float64)
    exact = np.matmul(x64, y64)
    k = xs.shape[-1]
    rounding = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64) / 2
    return exact, rounding + k * 2.0 ** -24 * np.matmul(np.abs(x64), np.abs(y64))


def assert_fp16_product(got: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> None:
    """`got` (fp16) is xs @ ys by DESIGN §8's rule, at every element."""
    exact, bound = fp16_product_bound(xs, ys)
    assert got.dtype == np.float16 and got.shape == exact.shape, (got.dtype, got.shape)
    error = np.abs(got.astype(np.float64) - exact)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert (error <= bound).all(), (f"{int((error > bound).sum())} of {error.size} outside the "
                                    f"bound; worst at {worst}: got {got[worst]}, exact "
                                    f"{exact[worst]}, bound {bound[worst]}")

