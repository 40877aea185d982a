"""The iteration space of one op, cut into chunks the simulator evaluates whole (`sim/access.py`
says how a chunk is read): every iteration variable is a numpy arange on its own axis, so a
chunk's accesses are arrays that broadcast over the box.

A chunk is as large as the memory budget allows (`MAX_CHUNK_POINTS` per arg's access, not per
box), split along one output var so that chunks write disjoint output elements and no
reduction straddles two, and cut on whole sticks (`CHUNK_ALIGN`) so strided reads keep their
form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from spyrec.indexing import Indirect, Var
from spyrec.sim.specs import ArgSpec, OpSpec

MAX_CHUNK_POINTS = 1 << 22   # bounds the int64 offset arrays to ~32 MiB each
# Chunks split their var at multiples of this (a whole number of sticks of any dtype: 128
# bytes hold at most 128 elements). A boundary inside a stick leaves a stick-dim access with
# no strided form (`Strided.from_terms`), and the read falls back to per-element offsets: a
# Granite-8B-width down projection's weight, chunked at 327 of 4,096 columns, was read that
# way in every layer.
CHUNK_ALIGN = 128


@dataclass(frozen=True)
class Chunk:
    """A box of the iteration space: [lo, hi) per var, each var an arange on its own axis."""

    vars: tuple[str, ...]
    lo: tuple[int, ...]
    hi: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(h - lo for lo, h in zip(self.lo, self.hi))

    def env(self) -> dict:
        rank = len(self.vars)
        env = {}
        for axis, (name, lo, hi) in enumerate(zip(self.vars, self.lo, self.hi)):
            shape = [1] * rank
            shape[axis] = hi - lo
            env[Var(name)] = np.arange(lo, hi, dtype=np.int64).reshape(shape)
        return env

    def point(self, index: tuple[int, ...], shape: tuple[int, ...]) -> str:
        """The iteration point at `index` of an array of `shape` (size-1 axes: any value)."""
        parts = [f"{v}={lo + i}" for v, lo, i, n in zip(self.vars, self.lo, index, shape)
                 if n > 1 or self.hi[self.vars.index(v)] - lo == 1]
        return ", ".join(parts) if parts else "every point"


def chunks(spec: OpSpec, max_points: int = MAX_CHUNK_POINTS) -> Iterator[Chunk]:
    """The iteration space in boxes whose arg accesses hold at most ~max_points each, split
    along one output var.

    The split var is a non-reduced var the output is indexed by, so chunks write disjoint
    output elements and a reduction never straddles two chunks; of those, the one the largest
    arg varies along (a matmul's weight: split over its N, each chunk reads its slice of the
    weight once, instead of the whole weight once per slice of M), else the outermost. The
    budget counts what is materialized: each arg's values span only the vars its coordinates
    use, so a matmul runs in a few large chunks (a kernel never builds the M*N*K box). Cuts
    fall on multiples of `CHUNK_ALIGN`, so every stick-dim access keeps its strided form."""
    vars_, extents = spec.vars, spec.extents
    out_vars = arg_vars(spec, spec.output)
    used = [arg_vars(spec, a) for a in spec.args]
    candidates = [i for i, v in enumerate(vars_)
                  if v not in spec.reduced and v in out_vars and extents[i] > 1]
    if not candidates:
        yield Chunk(vars_, (0,) * len(vars_), extents)
        return
    points = [math.prod(n for v, n in zip(vars_, extents) if v in u) for u in used]
    largest = used[max(range(len(used)), key=points.__getitem__)]
    split = next((i for i in candidates if vars_[i] in largest), candidates[0])
    per_unit = [math.prod(n for v, n in zip(vars_, extents) if v in u and v != vars_[split])
                for u in used]
    per_unit = [p for p, u in zip(per_unit, used) if vars_[split] in u]
    if max(per_unit) * extents[split] <= max_points:
        yield Chunk(vars_, (0,) * len(vars_), extents)
        return
    for start, stop in _cuts(extents[split], max(1, max_points // max(per_unit))):
        lo = [0] * len(vars_)
        hi = list(extents)
        lo[split], hi[split] = start, stop
        yield Chunk(vars_, tuple(lo), tuple(hi))


def _cuts(extent: int, step: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of at most `step` points covering [0, extent): cut at multiples
    of `CHUNK_ALIGN` where a step holds one, into an even number of near-equal ranges, so
    that two worker threads (or any even count) finish together. Ranges of `step` and a
    remainder left one thread a whole chunk behind: a Granite-8B-width MLP projection,
    12,800 columns, ran as 12 chunks of 1,024 and one of 512 (13 on two threads)."""
    if step < CHUNK_ALIGN:
        return [(start, min(start + step, extent)) for start in range(0, extent, step)]
    units = -(-extent // CHUNK_ALIGN)
    count = -(-units // (step // CHUNK_ALIGN))
    count = min(units, count + count % 2)
    edges = [i * units // count * CHUNK_ALIGN for i in range(count)] + [extent]
    return list(zip(edges[:-1], edges[1:]))


def arg_vars(spec: OpSpec, arg: ArgSpec) -> set[str]:
    """The iteration vars an arg's access varies along (a gathered coordinate: its index
    arg's vars too)."""
    used: set[str] = set()
    for coord in arg.coordinates:
        for leaf in coord.free_atoms():
            if isinstance(leaf, Var):
                used.add(leaf.name)
            elif isinstance(leaf, Indirect):
                index = next((a for a in spec.args if a.name == leaf.tensor and a is not arg),
                             None)
                used |= arg_vars(spec, index) if index is not None else set(spec.vars)
    return used
