"""The IR verifier's loop checks (`check_loops`, one of `OP_CHECKS` in `ir/verify_ops.py`):
each enclosing loop of an op counts at least once, has a key, tiles vars of the op, and has a
well-formed trip span and symbolic bound; every access to a full buffer stays inside it on the
last trip too; and one the loops move by a translation is the untiled access on every trip
(`tiled_access_problem`, which the tiling planner also asks before it tiles: `plan/tiles.py`).
"""

from __future__ import annotations

import math
from typing import Iterator

from spyrec.indexing import Indirect, Lin, Ranges, Var, evaluate, substitute, value_range
from spyrec.indexing.simplify import simplify_lin
from spyrec.indexing.sticks import access_coordinates
from spyrec.ir.graph import Access, Buffer, Graph, Loop, Operation
from spyrec.ir.printer import format_access


def check_loops(graph: Graph, op: Operation) -> Iterator[str]:
    """Each enclosing loop counts at least once, has a key, and divides vars of the op (none
    for an op that runs every iteration at one place: an accumulator's combine); per-tile
    buffers are touched only inside loops; every access to a full buffer stays inside it on
    the last iteration too (the per-tile ranges times the counts), and one the loops move by
    a translation is the untiled access on every trip (a view's wrap inside a later tile)."""
    names = {v for v, _ in op.ranges}
    for depth, loop in enumerate(op.loops):
        if loop.count < 1:
            yield f"loop {depth} counts {loop.count} iterations"
        if not loop.key:
            yield f"loop {depth} has no key (coarse_tiling names every loop g<G>.<L>)"
        if loop.span is not None:
            yield from _span_problems(depth, loop)
        if loop.bound is not None:
            yield from _bound_problems(graph, depth, loop)
        for v in loop.tiled:
            if v not in names:
                yield f"loop {depth} tiles {v}, not an iteration variable of the op"
    if any(v not in names for loop in op.loops for v in loop.tiled):
        return
    mult: dict[str, int] = {}
    for loop in op.loops:
        for v in loop.tiled:
            mult[v] = mult.get(v, 1) * loop.count
    full = Ranges({Var(v): (0, n * mult.get(v, 1) - 1) for v, n in op.ranges})
    for _, access in op.accesses():
        buf = graph.buffers.get(access.buffer)
        if buf is None:
            continue
        if buf.per_tile or not op.loops or any(
                isinstance(leaf, Indirect) for leaf in access.index.free_atoms()):
            continue
        lo, hi = value_range(access.index, full)
        if lo < 0 or hi >= max(buf.numel, 1):
            yield (f"{format_access(access)}: over all {math.prod(mult.values())} tiles the "
                   f"index reaches {lo}..{hi}, outside {buf.name} (0..{buf.numel - 1})")
            continue
        problem = _translates(buf, op, access) and tiled_access_problem(buf, op, access)
        if problem:
            yield f"{format_access(access)}: {problem}"


def _bound_problems(graph: Graph, depth: int, loop: Loop) -> Iterator[str]:
    """A symbolic trip count names a symbol of the graph, counts `count` trips at its
    maximum, and its tile divides every admissible length of a shape (no trip reaches past
    the length, none stops short of it; a length read from a value rounds up, masked)."""
    symbol = graph.symbols.get(loop.bound.symbol)
    where = f"loop {depth} ({loop.key}) bound({loop.bound.symbol}/{loop.bound.per_trip})"
    if symbol is None:
        yield f"{where}: {loop.bound.symbol} is not a symbol of the graph"
        return
    if loop.bound.count(symbol.maximum) != loop.count:
        yield (f"{where}: counts {loop.bound.count(symbol.maximum)} trips at the maximum "
               f"{symbol.maximum}, but the loop counts {loop.count}")
    tile = loop.bound.per_trip
    if loop.bound.past_end:
        if symbol.value_of is not None or tile % symbol.granularity or \
                tile > symbol.minimum or symbol.maximum % tile:
            yield (f"{where}: a loop whose last trip passes the length needs a tile of whole "
                   f"granules, at most the shortest length, dividing the maximum "
                   f"({symbol.describe()})")
    elif tile < 1 or symbol.value_of is None and (
            symbol.minimum % tile or symbol.granularity % tile):
        yield (f"{where}: a tile of {tile} does not divide every length "
               f"{symbol.describe()}")


def _span_problems(depth: int, loop: Loop) -> Iterator[str]:
    """A trip span is a function of the directly enclosing loop's index: none at level 0,
    and each end a pair of integers (a, b) meaning a*i + b."""
    if depth == 0:
        yield (f"loop 0 ({loop.key}) has a trip span, but only a loop inside another may: its "
               f"trips are a function of the enclosing loop's index")
    ends = (loop.span.start, loop.span.stop)
    if not all(isinstance(end, tuple) and len(end) == 2 and
               all(type(x) is int for x in end) for end in ends):
        yield (f"loop {depth} ({loop.key}) has a malformed trip span {ends}: each end is a "
               f"pair of integers (a, b) meaning a*i + b")


def _translates(buf: Buffer, op: Operation, access: Access) -> bool:
    """Does every loop move `access` by one whole-stick translation between the tile's
    origin and its far corner (codegen's own test, `level_advances_bytes`, which raises an
    internal error otherwise)? Only then can a wrong tile reach the files silently, so only
    then is each trip proven exact here."""
    if buf.layout is None:
        return False
    mult: dict[str, int] = {}
    for loop in op.loops:
        for v in loop.tiled:
            mult[v] = mult.get(v, 1) * loop.count
    tile = dict(op.ranges)
    full = Ranges({Var(v): (0, n * mult.get(v, 1) - 1) for v, n in tile.items()})
    coords = access_coordinates(tuple(buf.host_size), buf.host_strides, buf.layout, full,
                                access.index)
    origin = {Var(v): 0 for v in tile}
    corner = {Var(v): n - 1 for v, n in tile.items()}
    for loop in op.loops:
        if loop.count == 1 or not loop.tiled:
            continue
        moved = [{**at, **{Var(v): at[Var(v)] + tile[v] for v in loop.tiled}}
                 for at in (origin, corner)]
        deltas = [[evaluate(c, m) - evaluate(c, at) for c in coords]
                  for m, at in zip(moved, (origin, corner))]
        if deltas[0] != deltas[1] or deltas[0][-1]:
            return False
    return True


# Points (tile points x trips) `tiled_access_problem` evaluates when the simplifier alone
# cannot prove a tiled access exact; beyond it the access is reported unproven.
MAX_TRIP_PROOF_POINTS = 1 << 22


def tiled_access_problem(buf: Buffer, op: Operation, access: Access) -> str | None:
    """None when, on every trip of `op`'s loops, `access` touches exactly the device elements
    the untiled op does there; else why not (one line).

    Why: codegen addresses trip `i` as `base + Σ advance_l·i_l` plus the tile's own device
    coordinates, which are simplified over the *tile's* ranges (`Mod(c1 + 71, 300)` becomes
    `c1 + 71` on a tile of 100). That is only the untiled access when no floor/mod of the
    index wraps inside a later tile; a check on the first tile or on tile origins misses a
    wrap in the middle of the last tile (a read past the tensor's end). The proof: each
    tiled var v becomes `v + size_v·t_l` (t_l the level's trip, a fresh var), and the device
    offset minus the tile's offset must simplify to a linear form in the trips alone; when the
    simplifier cannot show it, every point of every trip is evaluated (up to
    `MAX_TRIP_PROOF_POINTS`). Device memory only: per-tile, LX and gathered accesses do not
    move with the loops (`check_loops` skips them)."""
    used = {a.name for a in access.index.free_atoms() if isinstance(a, Var)}
    levels = [(d, loop) for d, loop in enumerate(op.loops)
              if loop.count > 1 and used & set(loop.tiled)]
    if not levels or buf.layout is None:
        return None
    tile = dict(op.ranges)
    trips = {Var(f"__trip{d}"): (0, loop.count - 1) for d, loop in levels}
    shift: dict[str, Lin] = {}
    for d, loop in levels:
        for v in loop.tiled:
            shift[v] = shift.get(v, Lin(const=0)) + Lin({Var(f"__trip{d}"): tile[v]})
    moved = substitute(access.index, {Var(v): Lin({Var(v): 1}) + s for v, s in shift.items()})
    ranges = op.var_ranges.with_vars(trips)
    strides = buf.layout.device_strides_elems

    def offset(index: Lin, r: Ranges) -> Lin:
        coords = access_coordinates(tuple(buf.host_size), buf.host_strides, buf.layout, r,
                                    index)
        return sum((c.scale(s) for c, s in zip(coords, strides)), Lin())

    diff = simplify_lin(offset(moved, ranges) - offset(access.index, op.var_ranges), ranges)
    if diff.const == 0 and all(isinstance(a, Var) and a in trips for a, _ in diff.terms):
        return None
    return _evaluate_trips(op, diff, trips, levels)


def _evaluate_trips(op: Operation, diff: Lin, trips: dict, levels: list) -> str | None:
    """`diff` (device offset on a trip minus the tile's) is `Σ advance_l·t_l` at every point:
    checked on all of them, the advances read off the tile origin."""
    import numpy as np

    names = [Var(v) for v, _ in op.ranges] + list(trips)
    sizes = [n for _, n in op.ranges] + [hi + 1 for _, hi in trips.values()]
    if math.prod(sizes) > MAX_TRIP_PROOF_POINTS:
        return (f"cannot prove that every trip of loop(s) "
                f"{', '.join(loop.key for _, loop in levels)} addresses the tile the untiled op "
                f"reads ({diff} is not a constant step per trip, and the "
                f"{math.prod(sizes)} points are too many to evaluate)")
    env = {}
    for axis, (name, n) in enumerate(zip(names, sizes)):
        shape = [1] * len(names)
        shape[axis] = n
        env[name] = np.arange(n, dtype=np.int64).reshape(shape)
    got = np.broadcast_to(np.asarray(evaluate(diff, env), dtype=np.int64), sizes)
    origin = {name: 0 for name in names}
    want = 0
    for t in trips:
        step = int(evaluate(diff, {**origin, t: 1}))
        want = want + step * env[t]
    bad = np.argwhere(got != want)
    if not len(bad):
        return None
    at = dict(zip(names, bad[0]))
    point = ", ".join(f"{v}={at[Var(v)]}" for v, _ in op.ranges)
    trip = ", ".join(f"{loop.key}={at[Var(f'__trip{d}')]}" for d, loop in levels)
    return (f"on trip {trip} the tile's device address is not the untiled access's at "
            f"{point} (the index wraps inside the tile: floor/mod of a tiled var crosses a "
            f"boundary the first tile does not); coarse_tiling must refuse this tiling")
