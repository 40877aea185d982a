"""Writing a scatter's result: an output whose coordinates hold `IndirectAccess`.

The executor computes the op's value at every iteration point as for any op; the output
coordinates (with the index tensors' values, read first like a gather's) give the destination
element of each point. op_info.constants `scatter` says what several points landing on one
element do:
- `assign`: the last point in row-major iteration order wins (eager's CPU kernels write
  sequentially, so index_copy / index_put / scatter with duplicates end the same way);
- `add`: the element's old value plus every contribution, summed in the compute dtype (fp32
  or int64) and rounded once (DESIGN §8; eager rounds after each add in fp16, so fp16 sums
  can differ in the last bit).
Elements no point lands on keep their value: the compiler copies the destination first.
"""

from __future__ import annotations

import numpy as np

from spyrec.indexing import Indirect
from spyrec.sim.numerics import to_storage

MODES = ("assign", "add")


def is_scatter(spec, arg) -> bool:
    """An output written through IndirectAccess, or any op marked `scatter` (indexing a dim
    of size 1 leaves no IndirectAccess, yet several points still land on one element)."""
    return spec.constants.get("scatter") in MODES or any(
        isinstance(leaf, Indirect) for c in arg.coordinates for leaf in c.free_atoms())


def write(spec, b, access, result: np.ndarray, shape: tuple[int, ...]) -> None:
    """Store `result` (broadcast to `shape`) at the output's gathered positions."""
    where = np.broadcast_to(access.relative(b), shape).ravel()
    values = np.broadcast_to(np.asarray(result), shape).ravel()
    view = access.base_view(b)
    what = f"output '{b.arg.name}' of {spec.describe()}"
    if spec.constants.get("scatter") == "add":
        targets, inverse = np.unique(where, return_inverse=True)
        sums = np.zeros(targets.size, dtype=values.dtype)
        np.add.at(sums, inverse.ravel(), values)
        old = view[targets].astype(values.dtype)
        view[targets] = to_storage(old + sums, b.arg.device_dtype, what)
        return
    reverse_first = np.unique(where[::-1], return_index=True)[1]
    last = where.size - 1 - reverse_first
    view[where[last]] = to_storage(values[last], b.arg.device_dtype, what)
