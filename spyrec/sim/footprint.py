"""Data-independent footprints: how many distinct sticks an arg touches over a box of points.

HBM traffic is charged in whole 128-byte sticks (reference/C-simulator.md §5.9, KC's rule), so
the cost model needs "unique sticks touched by core c", computed from the specs alone. A stick
is identified by all device coordinates except the lanes (the last dim is the stick).

Counting distinct tuples over every point would sort millions of values per op and core. Two
exact shortcuts make it cheap:
- Components: coordinates are grouped by the vars they share (`4*c0 + c1` ties c0 and c1;
  `floor(c2/64)` stands alone). Distinct tuples = product over components of the distinct
  tuples of each component over its own vars, so each count is small and cached.
- Representatives: inside a component, a var whose atoms each depend on that var alone is
  reduced to one value per distinct value of its atoms (for stick ids `c1` enters only through
  `floor(c1/64)`, so 4096 values collapse to 64).

Gathers: the rows an `IndirectAccess` reads depend on data. The footprint assumes every element
of the index tensor selects a different row (its own element offset stands in for the value),
an upper bound that is exact for gathers without repeated indices.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from spyrec.indexing import Indirect, Lin, Var, as_lin, evaluate
from spyrec.sim.specs import ArgSpec, OpSpec

Box = dict[str, tuple[int, int]]
_BOOL_MARK_LIMIT = 1 << 26   # keys below this are counted with a bitmap, not a sort


def useful_elements(spec: OpSpec, arg: ArgSpec, box: Box) -> int:
    """Elements of `arg` the points of `box` use: the product of the extents of its vars.

    Exact when the access is one-to-one in the vars it depends on, which holds for every
    access derived from a host index through a layout; counting distinct elements exactly
    would cost a sort of every point.
    """
    return ArgFootprint(spec, arg).useful(box)


class ArgFootprint:
    """The footprint of one arg, with the box-independent work (components, vars used) done
    once: the cost model asks for every core of every op (~2,000 boxes for a 2-layer decoder),
    and redoing it per box was most of the estimate's time."""

    __slots__ = ("spec", "components", "used", "readers")

    def __init__(self, spec: OpSpec, arg: ArgSpec):
        self.spec = spec
        self.components = [(vars_, group, any(_leaf_names(c)[1] for c in group))
                           for vars_, group in _components(spec, arg.coordinates[:-1])]
        self.used = frozenset().union(*(support(spec, c) for c in arg.coordinates))
        # cores reading each slice alike: the busy slices of the vars the arg does not use
        # (a var's split, less the slices an op sized by a short length leaves idle)
        self.readers = math.prod(_busy_slices(spec, v, k)
                                 for v, (_, k) in spec.iteration_space.items()
                                 if v not in self.used and k > 1)

    def sticks(self, box: Box) -> int:
        """Distinct sticks touched by the points of `box`."""
        if any(hi <= lo for lo, hi in box.values()):
            return 0
        total = 1
        for vars_, group, gathers in self.components:
            ranges = tuple(box[v] for v in vars_)
            if gathers:
                total *= _count(self.spec, group, dict(zip(vars_, ranges)))
            else:
                total *= _count_plain(group, vars_, ranges)
        return total

    def useful(self, box: Box) -> int:
        """Elements used by the points of `box` (see `useful_elements`)."""
        return math.prod(hi - lo for v, (lo, hi) in box.items() if v in self.used)


def _busy_slices(spec: OpSpec, v: str, k: int) -> int:
    """How many of var `v`'s `k` slices have values (all but a sized op's idle ones)."""
    if v not in spec.lengths:
        return k
    return len({c.ranges[v] for c in spec.cores if c.ranges[v][1] > c.ranges[v][0]}) or 1


def support(spec: OpSpec, expr: Lin) -> frozenset[str]:
    """Iteration vars an expression depends on; a gathered value depends on its index's vars."""
    names, gathers = _leaf_names(expr)
    out = set(names)
    for tensor in gathers:
        for c in _index_arg(spec, tensor).coordinates:
            out |= support(spec, c)
    return frozenset(out)


@lru_cache(maxsize=1 << 14)
def _leaf_names(expr: Lin) -> tuple[frozenset[str], frozenset[str]]:
    """(var names, gathered tensor names) inside an expression."""
    leaves = expr.free_atoms()
    return (frozenset(x.name for x in leaves if isinstance(x, Var)),
            frozenset(x.tensor for x in leaves if isinstance(x, Indirect)))


def _index_arg(spec: OpSpec, name: str) -> ArgSpec:
    return next(a for a in spec.args if a.name == name)


def _components(spec: OpSpec, coords: tuple[Lin, ...]) -> list[tuple[tuple[str, ...], tuple]]:
    """Coordinates grouped into sets that share no var: [(vars in spec order, coords)]."""
    if not any(_leaf_names(c)[1] for c in coords):
        return _plain_components(coords, spec.vars)
    return _group(coords, spec.vars, lambda c: support(spec, c))


@lru_cache(maxsize=1 << 12)
def _plain_components(coords: tuple[Lin, ...], order: tuple[str, ...]) -> list:
    return _group(coords, order, lambda c: _leaf_names(c)[0])


def _group(coords: tuple[Lin, ...], order: tuple[str, ...], uses) -> list:
    groups: list[tuple[set[str], list[Lin]]] = []
    for coord in coords:
        used = set(uses(coord))
        if not used:
            continue                          # a constant coordinate: one value
        merged = [g for g in groups if g[0] & used]
        for g in merged:
            groups.remove(g)
            used |= g[0]
        groups.append((used, [c for g in merged for c in g[1]] + [coord]))
    return [(tuple(v for v in order if v in vs), tuple(cs)) for vs, cs in groups]


@lru_cache(maxsize=1 << 14)
def _count_plain(coords: tuple[Lin, ...], vars_: tuple[str, ...],
                 ranges: tuple[tuple[int, int], ...]) -> int:
    """Distinct tuples of gather-free `coords` over the box `vars_` x `ranges` (cached)."""
    values = {v: _representatives(coords, v, lo, hi) for v, (lo, hi) in zip(vars_, ranges)}
    return _count_on(coords, _env(vars_, values))


def _count(spec: OpSpec, coords: tuple[Lin, ...], box: Box) -> int:
    """Distinct tuples of coords that gather: every var in full, index offsets as values."""
    vars_ = tuple(box)
    env = _env(vars_, {v: np.arange(lo, hi, dtype=np.int64) for v, (lo, hi) in box.items()})
    gathered = set().union(*(_leaf_names(c)[1] for c in coords))
    for index in (a for a in spec.index_args if a.name in gathered):
        offset = sum((np.asarray(evaluate(c, env), dtype=np.int64) * s for c, s in
                      zip(index.coordinates, index.layout.device_strides_elems)), np.int64(0))
        env[Indirect(index.name)] = offset
    return _count_on(coords, env)


def _representatives(coords: tuple[Lin, ...], v: str, lo: int, hi: int) -> np.ndarray:
    """Values of var v in [lo, hi), one per distinct value of the atoms that use v."""
    full = np.arange(lo, hi, dtype=np.int64)
    atoms = {atom for c in coords for atom, _ in c.terms if v in _leaf_names(as_lin(atom))[0]}
    if not atoms:
        return full[:1]
    if any(_leaf_names(as_lin(a))[0] != {v} for a in atoms):
        return full                           # an atom mixes vars: no shortcut, exact anyway
    env = {Var(v): full}
    table = np.stack([np.broadcast_to(np.asarray(evaluate(as_lin(a), env)), full.shape)
                      for a in sorted(atoms, key=lambda a: a.key)], axis=1)
    return full[np.sort(_first_of_each_row(table))]


def _first_of_each_row(table: np.ndarray) -> np.ndarray:
    """Index of the first occurrence of each distinct row. Rows are packed into one int64 key
    (mixed radix over each column's span) when they fit: a 1-D unique is ~10x faster than
    np.unique(axis=0), and the key is a bijection of the row, so the indices are the same."""
    lows, highs = table.min(axis=0), table.max(axis=0)
    spans = [int(h) - int(lo) + 1 for lo, h in zip(lows, highs)]
    if math.prod(spans) >= 1 << 62:
        return np.unique(table, axis=0, return_index=True)[1]
    key = np.zeros(table.shape[0], dtype=np.int64)
    for j, span in enumerate(spans):
        key = key * span + (table[:, j] - lows[j])
    return np.unique(key, return_index=True)[1]


def _env(vars_: tuple[str, ...], values: dict[str, np.ndarray]) -> dict:
    """Each var's values on its own axis."""
    env: dict = {}
    for axis, v in enumerate(vars_):
        shape = [1] * len(vars_)
        shape[axis] = len(values[v])
        env[Var(v)] = values[v].reshape(shape)
    return env


def _count_on(coords: tuple[Lin, ...], env: dict) -> int:
    columns = [np.asarray(evaluate(c, env), dtype=np.int64) for c in coords]
    shape = np.broadcast_shapes(*(c.shape for c in columns))
    return _count_rows([np.broadcast_to(c, shape).ravel() for c in columns])


def _count_rows(columns: list[np.ndarray]) -> int:
    """Number of distinct rows of the column-stacked integer matrix."""
    lows = [int(c.min()) for c in columns]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(columns, lows)]
    if math.prod(spans) >= 1 << 62:
        return len(np.unique(np.stack(columns, axis=1), axis=0))
    key = np.zeros(columns[0].shape, dtype=np.int64)
    for c, lo, span in zip(columns, lows, spans):
        key = key * span + (c - lo)
    total = math.prod(spans)
    if total <= _BOOL_MARK_LIMIT:
        seen = np.zeros(total, dtype=bool)
        seen[key] = True
        return int(seen.sum())
    return len(np.unique(key))
