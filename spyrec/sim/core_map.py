"""Which core runs each point of a chunk (SuperDSC's `coreIdToWkSlice_`), as broadcastable parts
whose sum is the core id, and the small algebra on such parts (`separable`, `thin_parts`,
`broadcast_sum`) that `sim/access.py` uses for LX accesses: each core's LX is its own slice of
one arena, so an LX arg's offset adds `core * core_bytes`, and a map that is a constant plus
one term per split var keeps the access strided.
"""

from __future__ import annotations

import numpy as np

from spyrec.sim.chunking import Chunk
from spyrec.sim.specs import OpSpec


def core_parts(spec: OpSpec, chunk: Chunk) -> tuple[list[np.ndarray], bool]:
    """The id of the core whose slice holds each point of `chunk` (product splits of equal
    slices, as SuperDSC's `numWkSlicesPerDim_` gives) as broadcastable parts whose sum it
    is, and whether they are separable: a constant plus one term per split var, each
    varying along its own axis alone (the form a strided LX access needs); else one array
    over the chunk. Decided on the slices of the core grid the chunk touches (a few dozen
    cells), never on a chunk-sized array: the chunk's map repeats each cell along every
    axis, so it is such a sum exactly when those cells are (a Granite-8B-width layer's
    elementwise ops spent 30% of their time building and comparing chunk-sized core maps)."""
    per = [spec.slice_size(v) for v in spec.vars]
    grid = np.zeros([k for _, k in spec.iteration_space.values()], dtype=np.int64)
    for c in spec.cores:
        if c.points:            # (an idle core of a sized op holds no point)
            grid[tuple(c.ranges[v][0] // p for v, p in zip(spec.vars, per))] = c.core
    first = [lo // p for lo, p in zip(chunk.lo, per)]
    cells = grid[tuple(slice(f, (hi - 1) // p + 1) if hi > lo else slice(f, f + 1)
                       for f, lo, hi, p in zip(first, chunk.lo, chunk.hi, per))]
    rank = len(spec.vars)
    index = []          # per axis: each point's cell along it (shape 1 where unsplit)
    for axis, (v, p) in enumerate(zip(spec.vars, per)):
        shape = [1] * rank
        if spec.iteration_space[v][1] > 1:
            shape[axis] = chunk.hi[axis] - chunk.lo[axis]
            index.append(np.arange(chunk.lo[axis], chunk.hi[axis]).reshape(shape) // p
                         - first[axis])
        else:
            index.append(np.zeros(shape, dtype=np.int64))
    terms = separable(cells)
    if terms is None:
        return [cells[tuple(index)]], False
    return [terms[0]] + [np.take(t, index[_axis(t)].ravel(), axis=_axis(t))
                         for t in terms[1:]], True


def _axis(term: np.ndarray) -> int:
    """The one axis a separable term varies along."""
    return next(a for a, n in enumerate(term.shape) if n > 1)


def thin_parts(parts: list[np.ndarray], keep: dict[int, np.ndarray]) -> list[np.ndarray]:
    """Broadcastable parts with each axis of `keep` reduced to its kept positions."""
    for axis, positions in keep.items():
        parts = [np.take(t, positions, axis=axis) if t.ndim and t.shape[axis] > 1 else t
                 for t in parts]
    return parts


def separable(cores: np.ndarray) -> list[np.ndarray] | None:
    """`cores` as a constant plus one term per axis (each varying along that axis alone), or
    None when the core grid is not such a sum (then the offset path handles it)."""
    cores = np.asarray(cores)
    if cores.size <= 1 or cores.ndim == 0:
        return [cores.reshape((1,) * cores.ndim)]
    origin = cores[(0,) * cores.ndim]
    terms, total = [np.full((1,) * cores.ndim, origin, dtype=np.int64)], origin
    for axis, n in enumerate(cores.shape):
        if n > 1:
            index = tuple(slice(None) if a == axis else slice(0, 1) for a in range(cores.ndim))
            term = cores[index] - origin
            terms.append(term)
            total = total + term
    return terms if np.array_equal(np.broadcast_to(total, cores.shape), cores) else None


def broadcast_sum(parts: list[np.ndarray]) -> np.ndarray:
    """Sum of broadcastable arrays, smallest first: terms over the same axes are added while
    still small, so only the last additions are full size."""
    by_shape: dict[tuple, np.ndarray] = {}
    for part in parts:
        by_shape[part.shape] = by_shape[part.shape] + part if part.shape in by_shape else part
    total = np.zeros((), dtype=np.int64)
    for shape in sorted(by_shape, key=lambda s: int(np.prod(s))):
        total = total + by_shape[shape]
    return total
