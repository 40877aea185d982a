"""Facts about one access inside a loop nest: which host box a tile touches, how the box and
the device address move from one iteration to the next, and how to re-index a buffer that
holds a single tile.

Everything is proven numerically on the tile's points (vectorized numpy over the op's
per-tile ranges), not assumed from the shape of the index expression: an index folded from
views (reshapes, transposes, broadcasts) is checked the same way as a plain one. A tile whose
next iteration is not a pure translation of the current one in *device* coordinates cannot be
addressed by `base + Σ stride·i` (DESIGN §5) and is refused by the pass.

In plan/ because two passes ask: coarse_tiling (transform.py) proves its tiles with these, and
stage_inputs (`plan/staging.py`) finds the moving tile a loop reads and re-indexes the
per-tile copy it makes; it was coarse_tiling's module, which stage_inputs then imported.
"""

from __future__ import annotations

import numpy as np

from spyrec.indexing import Indirect, Lin, Ranges, Var, evaluate, substitute, var
from spyrec.indexing.sticks import access_coordinates
from spyrec.indexing.coordinates import host_coordinates
from spyrec.indexing.simplify import simplify_lin
from spyrec.ir import Access, Buffer, Operation
from spyrec.ir.verify_loops import tiled_access_problem
from spyrec.layout.device_layout import SPARSE, DeviceLayout, contiguous_strides, stick_layout

# Points evaluated per proof; larger tiles are checked on a strided sample of every axis
# (the first and last point of each axis always included).
MAX_PROOF_POINTS = 1 << 20


def tile_env(op: Operation, shift: dict[str, int] | None = None) -> dict:
    """Every var of `op` as a numpy arange on its own axis (over the per-tile ranges), each
    shifted by `shift[v]`; large axes are sampled so the whole env stays small."""
    ranges = list(op.ranges)
    per_axis = max(2, int(MAX_PROOF_POINTS ** (1 / max(len(ranges), 1))))
    env = {}
    for axis, (v, n) in enumerate(ranges):
        points = np.arange(n, dtype=np.int64)
        if n > per_axis:
            points = np.unique(np.concatenate([points[::-(-n // per_axis)], [n - 1]]))
        shape = [1] * len(ranges)
        shape[axis] = len(points)
        env[Var(v)] = (points + (shift or {}).get(v, 0)).reshape(shape)
    return env


def host_box(buf: Buffer, op: Operation, index: Lin) -> tuple[tuple[int, int], ...]:
    """Per host dim of `buf`, the [lo, hi) that `index` touches over the op's tile."""
    coords = host_coordinates(buf.host_size, buf.host_strides, index)
    env = tile_env(op)
    box = []
    for c in coords:
        values = np.asarray(evaluate(c, env))
        box.append((int(values.min()), int(values.max()) + 1))
    return tuple(box)


def host_advance(buf: Buffer, op: Operation, index: Lin, tiled: str, step: int) -> \
        tuple[int, ...] | None:
    """The host-coordinate translation of one iteration along `tiled` (`step` = its tile
    extent), or None when it is not the same translation for every point of the tile."""
    coords = host_coordinates(buf.host_size, buf.host_strides, index)
    here, there = tile_env(op), tile_env(op, {tiled: step})
    delta = []
    for c in coords:
        d = np.asarray(evaluate(c, there)) - np.asarray(evaluate(c, here))
        if d.size and d.min() != d.max():
            return None
        delta.append(int(d.flat[0]) if d.size else 0)
    return tuple(delta)


def device_advance(buf: Buffer, op: Operation, index: Lin, full: Ranges, tiled: str,
                   step: int, count: int) -> int | None:
    """Bytes the access's device address moves per iteration along `tiled` (`step` = its
    tile extent, `count` iterations), or None when the iterations are not one constant
    translation of each other in the device layout (a tile that splits a stick, or wraps
    into another device dim).

    Device coordinates come from the layout (`access_coordinates`) over the op's *full*
    ranges `full`, so they hold at every iteration; the translation is proven on the tile's
    points for the first step, and on the tile's first point for every later iteration."""
    if count == 1:
        return 0
    coords = access_coordinates(tuple(buf.host_size), buf.host_strides, buf.layout, full,
                                index)
    strides = buf.layout.device_strides_elems

    def offset(env: dict) -> np.ndarray:
        total = np.zeros((), dtype=np.int64)
        for c, s in zip(coords, strides):
            total = total + np.asarray(evaluate(c, env), dtype=np.int64) * s
        return total

    diff = offset(tile_env(op, {tiled: step})) - offset(tile_env(op))
    if diff.size and diff.min() != diff.max():
        return None
    per_step = int(diff.flat[0]) if diff.size else 0
    if per_step % buf.layout.elems_per_stick:
        return None              # the tile would start inside a stick
    origin = {Var(v): np.zeros((1,) * len(op.ranges), dtype=np.int64) for v, _ in op.ranges}
    first = int(np.asarray(offset(origin)).flat[0])
    for i in range(2, count):
        env = {**origin, Var(tiled): origin[Var(tiled)] + i * step}
        if int(np.asarray(offset(env)).flat[0]) - first != i * per_step:
            return None
    return per_step * buf.layout.dtype.itemsize


def full_ranges(op: Operation) -> Ranges:
    """The inclusive ranges of `op`'s vars over all trips of its loops (a tiled var's tile
    extent times its loop's count)."""
    mult = {v: loop.count for loop in op.loops for v in loop.tiled}
    return Ranges({Var(v): (0, n * mult.get(v, 1) - 1) for v, n in op.ranges})


def moving_tile_problem(buf: Buffer, op: Operation, access: Access
                        ) -> tuple[int | None, str] | None:
    """Why an access to the full buffer `buf` inside `op`'s loops breaks the tiling contract
    (DESIGN §5), or None: (the loop level, ...) when its tile does not move by one constant
    device-address step per trip of that loop, (None, the verifier's reason) when a trip's
    tile is not exactly the untiled access there (a view wrapping inside a later tile).
    A per-tile buffer never moves, and neither does a gathered tensor (only its index
    tensor does): None for those."""
    if buf.per_tile or any(isinstance(leaf, Indirect) for leaf in access.index.free_atoms()):
        return None
    full = full_ranges(op)
    sizes = dict(op.ranges)
    for level, loop in enumerate(op.loops):
        if loop.tiled and device_advance(buf, op, access.index, full, loop.tiled[0],
                                         sizes[loop.tiled[0]], loop.count) is None:
            return level, "moves by other than one constant step per trip"
    problem = tiled_access_problem(buf, op, access)
    return None if problem is None else (None, problem)


def tile_buffer_layout(full: Buffer, shape: tuple[int, ...], dtype: str) -> DeviceLayout:
    """The layout of a buffer like `full` (same stick dim, or sparse sticks, and dim order)
    over another host shape and dtype: a one-tile buffer, or an fp32 accumulator."""
    rank = len(full.host_size)
    for order in _orders(rank):
        if stick_layout(full.host_size, full.host_strides, full.host_dtype, order) == \
                full.layout:
            return stick_layout(shape, contiguous_strides(shape), dtype, order)
    raise ValueError(f"layout of {full.name} is not a stick layout of its host dims")


def _orders(rank: int):
    dims = list(range(rank))
    for stick in dims:
        yield [d for d in dims if d != stick] + [stick]
    yield dims + [SPARSE]


def retile_index(full: Buffer, box_lo: tuple[int, ...], shape: tuple[int, ...],
                 index: Lin, ranges) -> Lin:
    """`index` (into the full buffer) as an index into a contiguous buffer of `shape` whose
    element 0 is the full buffer's element at `box_lo`."""
    coords = host_coordinates(full.host_size, full.host_strides, index)
    strides = contiguous_strides(shape)
    total = Lin()
    for c, lo, s, n in zip(coords, box_lo, strides, shape):
        if n > 1:
            total = total + (c + Lin(const=-lo) if lo else c).scale(s)
    return simplify_lin(total, ranges)


def shift_index(index: Lin, shifts: dict[str, int]) -> Lin:
    """`index` with every var v replaced by v + shifts[v] (one unrolled iteration's tile)."""
    mapping = {Var(v): var(v) + Lin(const=k) for v, k in shifts.items() if k}
    return substitute(index, mapping) if mapping else index


__all__ = ["device_advance", "full_ranges", "host_advance", "host_box", "moving_tile_problem",
           "retile_index", "shift_index", "tile_buffer_layout", "tile_env"]
