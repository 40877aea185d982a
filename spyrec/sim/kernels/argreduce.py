"""Index-producing reductions: argmax and argmin over the `reduced` vars.

The result at each output point is the position of the extreme value among the reduced
iteration points, counted row-major over the reduced vars in the order `reduced` lists them
(one reduced var: its value; torch.argmax without a dim: the flat index of the input).

Points are the real iteration points: a reduced var padded to whole sticks (masked with the
identity, so a pad lane never wins) counts only its real extent in the row-major position.

Tie rule: the **first** position wins (the smallest row-major index), as eager on CPU. NaN is
greater than every number for argmax and smaller for argmin, so the first NaN wins whenever
there is one (eager's max.dim/argmax on CPU; numpy's argmax/argmin agree). The output is an
integer tensor (host int64, device int32); the values, when a program needs them too, are a
separate `max`/`min` op.
"""

from __future__ import annotations

import numpy as np

from spyrec.sim.kernels.registry import KernelContext, kernel


@kernel("argmax", "argmin", arity=1)
def argreduce(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    x = np.asarray(inputs[0])
    x = x.reshape((1,) * (len(ctx.shape) - x.ndim) + x.shape)
    axes = list(ctx.reduced_axes)
    # an input that does not vary along a reduced axis still has that axis' extent of points
    full = tuple(ctx.shape[a] if a in axes else n for a, n in enumerate(x.shape))
    x = np.broadcast_to(x, full)
    kept = [a for a in range(x.ndim) if a not in axes]
    flat = np.transpose(x, kept + axes).reshape([x.shape[a] for a in kept] + [-1])
    pick = np.argmax if ctx.op == "argmax" else np.argmin
    index = pick(flat, axis=-1).astype(np.int64)
    index = _without_padding(index, [x.shape[a] for a in axes], ctx, axes)
    return index.reshape([1 if a in axes else x.shape[a] for a in range(x.ndim)])


def _without_padding(index: np.ndarray, padded: list[int], ctx: KernelContext,
                     axes: list[int]) -> np.ndarray:
    """The row-major position among the real points: a padded reduced var (a partial stick
    rounded up, masked with the identity so its lanes never win) counts only its real extent,
    so argmax over [3, 5] without a dim is a flat index below 15, not one over [3, 32]."""
    pads = [ctx.padding[a] if ctx.padding else 0 for a in axes]
    if not any(pads[1:]):       # padding of the outermost reduced var moves no index
        return index
    coords = np.unravel_index(index, padded)
    real = [n - p for n, p in zip(padded, pads)]
    return np.ravel_multi_index(coords, real).astype(np.int64)
