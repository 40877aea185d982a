"""`wrapindex`: an index tensor's values checked and wrapped once, as PyTorch indexing does.

Valid values are low..size-1 (low is -size where eager wraps negatives, advanced indexing, and
0 where it raises, index_select / gather / scatter). out = v + size when v < 0, else v; any
other v is a fault (DESIGN §1:
bad input data, exit 2) naming the index tensor, the first offending position in it and the
value, and the op that uses it. The op iterates over every host dim of the index tensor in
order (size-1 dims included), so an iteration point is a position in the tensor.
op_info.constants: `size`, `low`, `index_tensor`, `index_shape`, `used_by`.
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import SimulatorFault
from spyrec.sim.kernels.registry import KernelContext, kernel


@kernel("wrapindex", arity=1, requires=("size", "low", "index_tensor"))
def wrapindex(ctx: KernelContext, inputs: list[np.ndarray]) -> np.ndarray:
    (v,) = inputs
    n, low = int(ctx.constant("size")), int(ctx.constant("low"))
    v = np.broadcast_to(v, ctx.shape).astype(np.int64)
    bad = (v < low) | (v >= n)
    if bad.any():
        at = np.unravel_index(int(np.argmax(bad)), bad.shape)
        origin = ctx.origin or (0,) * len(at)
        position = [int(o + i) for o, i in zip(origin, at)]
        shape = ctx.constant("index_shape")
        if shape is not None and len(shape) != len(position):   # a 0-d index tensor
            position = position[:len(shape)]
        user = ctx.constant("used_by")
        raise SimulatorFault(
            f"index tensor '{ctx.constant('index_tensor')}'"
            f"{f' (used by {user})' if user else ''}: the value {int(v[at])} at position "
            f"{position} is out of range for a dim of size {n} (valid {low}..{n - 1}); "
            f"fix the index data in the inputs")
    return np.where(v < 0, v + n, v)
