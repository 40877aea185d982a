"""Data-movement kernels: identity (copy and cast), ReStickifyOpHBM, fill.

They compute nothing: the executor reads the input through its coordinates and writes through
the output's, so a restickify is just two different layouts over the same iteration space, and
a cast is the single rounding the executor does on every store (torch `.to` semantics).
"""

from __future__ import annotations

import numpy as np

from spyrec.sim.kernels.registry import KernelContext, kernel


@kernel("identity", "ReStickifyOpHBM", arity=1)
def copy(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    (x,) = inputs
    return x


@kernel("fill", arity=0, requires=("value",))
def fill(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    """Every output element = `value` (broadcast by the executor)."""
    return np.asarray(ctx.constant("value"), dtype=ctx.compute)
