"""Data-independent footprints: how many distinct sticks an arg touches over a box of points.

HBM traffic is charged in whole 128-byte sticks (reference/C-simulator.md §5.9, KC's rule), so
the cost model needs "unique sticks touched by core c", computed from the specs alone. A stick
is identified by all device coordinates except the lanes (the last dim is the stick).

Counting distinct keys over every point would sort millions of values per op. Instead, a var
whose every atom depends on that var alone (the usual `floor(c1/64)`, `Mod(c1,64)`, `c0`) is
first reduced to one representative per distinct value of its atoms: for stick ids `c1` enters
only through `floor(c1/64)`, so 4096 values of c1 collapse to 64. Vars in atoms that mix vars
fall back to their full range, which is exact, just slower.

Gathers: the rows an `IndirectAccess` reads depend on data. The footprint assumes every element
of the index tensor selects a different row (its own element offset stands in for the value),
an upper bound that is exact for gathers without repeated indices.
"""

from __future__ import annotations

import math

import numpy as np

from spyrec.indexing import Indirect, Lin, Var, as_lin, evaluate
from spyrec.sim.specs import ArgSpec, OpSpec

_BOOL_MARK_LIMIT = 1 << 26   # keys below this are counted with a bitmap, not a sort


def distinct_sticks(spec: OpSpec, arg: ArgSpec, box: dict[str, tuple[int, int]]) -> int:
    """Distinct sticks of `arg` touched by the points of `box` (half-open range per var)."""
    return _distinct(spec, arg.coordinates[:-1], box)


def useful_elements(spec: OpSpec, arg: ArgSpec, box: dict[str, tuple[int, int]]) -> int:
    """Elements of `arg` the points of `box` use: the product of the extents of its vars.

    Exact when the access is one-to-one in the vars it depends on, which holds for every
    access derived from a host index through a layout; counting distinct elements exactly
    would cost a sort of every point.
    """
    used = set().union(*(support(spec, c) for c in arg.coordinates))
    return math.prod(hi - lo for v, (lo, hi) in box.items() if v in used)


def support(spec: OpSpec, expr: Lin) -> frozenset[str]:
    """Iteration vars an expression depends on; a gathered value depends on its index's vars."""
    out: set[str] = set()
    for leaf in expr.free_atoms():
        if isinstance(leaf, Var):
            out.add(leaf.name)
        elif isinstance(leaf, Indirect):
            index = _index_arg(spec, leaf.tensor)
            for c in index.coordinates:
                out |= support(spec, c)
    return frozenset(out)


def _index_arg(spec: OpSpec, name: str) -> ArgSpec:
    return next(a for a in spec.args if a.name == name)


def _distinct(spec: OpSpec, coords: tuple[Lin, ...], box: dict[str, tuple[int, int]]) -> int:
    if any(hi <= lo for lo, hi in box.values()):
        return 0
    if not coords:
        return 1
    values = {v: _representatives(spec, coords, v, lo, hi) for v, (lo, hi) in box.items()}
    env = _env(spec, values)
    columns = [np.asarray(evaluate(c, env), dtype=np.int64) for c in coords]
    shape = np.broadcast_shapes(*(c.shape for c in columns))
    columns = [np.broadcast_to(c, shape).ravel() for c in columns]
    return _count_rows(columns)


def _representatives(spec: OpSpec, coords: tuple[Lin, ...], v: str, lo: int,
                     hi: int) -> np.ndarray:
    """Values of var v in [lo, hi), one per distinct value of the atoms that use v."""
    full = np.arange(lo, hi, dtype=np.int64)
    atoms = {atom for c in coords for atom, _ in c.terms if v in support(spec, as_lin(atom))}
    if not atoms:
        return full[:1]                     # v does not matter: any single value will do
    if any(support(spec, as_lin(a)) != {v} for a in atoms):
        return full                         # mixes vars: no shortcut, exact anyway
    env = _env(spec, {v: full})
    table = np.stack([np.broadcast_to(np.asarray(evaluate(as_lin(a), env)).reshape(-1),
                                      full.shape)
                      for a in sorted(atoms, key=lambda a: a.key)], axis=1)
    _, first = np.unique(table, axis=0, return_index=True)
    return full[np.sort(first)]


def _env(spec: OpSpec, values: dict[str, np.ndarray]) -> dict:
    """Vars on their own axes (in spec order) plus a stand-in value for each gather."""
    rank = len(spec.vars)
    env: dict = {}
    for axis, v in enumerate(spec.vars):
        if v in values:
            shape = [1] * rank
            shape[axis] = len(values[v])
            env[Var(v)] = values[v].reshape(shape)
    for index in spec.index_args:
        if all(name in values for name in
               set().union(*(support(spec, c) for c in index.coordinates))):
            offset = sum((np.asarray(evaluate(c, env), dtype=np.int64) * s for c, s in
                          zip(index.coordinates, index.layout.device_strides_elems)),
                         np.int64(0))
            env[Indirect(index.name)] = offset
    return env


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
