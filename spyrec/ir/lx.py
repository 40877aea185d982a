"""Which part of a buffer each core touches: the facts an LX (scratchpad) placement rests on.

A buffer in LX lives in every core's scratchpad at one offset, each core holding only its own
slice (issue 8 contract §1). That is sound only when every op that writes or reads the buffer
gives each core the same slice, so this module computes, per op and core, the box of device
coordinates an access touches. Core numbering is SuperDSC's (reference/F-superdsc.md §2.9, what
`codegen/superdsc.py` emits and the simulator reads): iteration vars in order, the first split
var fastest. scratchpad_planning decides with these boxes; `ir/verify.py` re-checks them and
codegen writes each LX tensor's per-core bytes from them.
"""

from __future__ import annotations

import math
from functools import lru_cache

from spyrec.indexing import Indirect, Ranges, Var, value_range
from spyrec.indexing.sticks import access_coordinates
from spyrec.ir.graph import Access, Buffer, Graph, Operation

Box = tuple[tuple[int, int], ...]   # inclusive (lo, hi) per device dim, lanes excluded


def core_slices(op: Operation) -> list[dict[str, tuple[int, int]]]:
    """Each core's half-open range per iteration var, in SuperDSC core order."""
    return _slices(op.ranges, op.core_splits or {})


def _slices(var_ranges: tuple[tuple[str, int], ...], splits: dict[str, int]
            ) -> list[dict[str, tuple[int, int]]]:
    n_cores = math.prod(splits.get(v, 1) for v, _ in var_ranges)
    out = []
    for c in range(n_cores):
        q, ranges = 1, {}
        for v, n in var_ranges:
            k = splits.get(v, 1)
            s = (c // q) % k
            q *= k
            ranges[v] = (s * (n // k), (s + 1) * (n // k))
        out.append(ranges)
    return out


def core_boxes(buf: Buffer, op: Operation, access: Access) -> list[Box] | None:
    """Per core, the bounding box of device coordinates (all dims but the lanes) `access`
    touches; None for a gathered access (data-dependent: no fixed slice). Memoized on what
    the boxes depend on: scratchpad_planning, the verifier and codegen ask for the same
    accesses many times, at 32 cores x every device dim each."""
    splits = tuple(sorted((op.core_splits or {}).items()))
    boxes = _core_boxes(tuple(buf.host_size), tuple(buf.host_strides), buf.layout, op.ranges,
                        splits, access.index)
    return list(boxes) if boxes is not None else None


@lru_cache(maxsize=1 << 12)
def _core_boxes(host_size, host_strides, layout, var_ranges, splits, index
                ) -> tuple[Box, ...] | None:
    whole = Ranges({Var(v): (0, n - 1) for v, n in var_ranges})
    coords = access_coordinates(host_size, host_strides, layout, whole, index)
    if any(isinstance(leaf, Indirect) for c in coords for leaf in c.free_atoms()):
        return None
    # a coordinate's range depends only on its own vars' slices: cores that differ elsewhere
    # share it (a [rows x cols] split has 32 cores but 8 distinct row slices)
    uses = [sorted(a.name for a in c.free_atoms() if isinstance(a, Var)) for c in coords[:-1]]
    known: dict[tuple, tuple[int, int]] = {}
    boxes = []
    for ranges in _slices(var_ranges, dict(splits)):
        box = []
        for k, (c, names) in enumerate(zip(coords, uses)):
            key = (k, *(ranges[v] for v in names))
            if key not in known:
                r = Ranges({Var(v): (ranges[v][0], ranges[v][1] - 1) for v in names})
                known[key] = value_range(c, r)
            box.append(known[key])
        boxes.append(tuple(box))
    return tuple(boxes)


def box_bytes(buf: Buffer, box: Box) -> int:
    """Bytes of one core's slice: whole sticks over the box."""
    return math.prod(hi - lo + 1 for lo, hi in box) * buf.layout.dtype.itemsize * \
        buf.layout.elems_per_stick


def writer_of(graph: Graph, name: str) -> Operation | None:
    """The first op that writes `name` (a per-tile buffer has exactly one)."""
    return next((op for op in graph.ops if op.output.buffer == name), None)


def lx_bytes_per_core(graph: Graph, buf: Buffer) -> int:
    """Each core's share of an LX buffer: the slice its writer's core split gives core 0."""
    op = writer_of(graph, buf.name)
    if op is None:
        return buf.layout.device_bytes
    boxes = core_boxes(buf, op, op.output)
    return box_bytes(buf, boxes[0]) if boxes else buf.layout.device_bytes


def moves_with_loops(op: Operation, buffer: str) -> bool:
    """Does `op` access `buffer` at a place that moves from one loop trip to the next (an
    index using a var its loops tile, or an index tensor)? A whole buffer every looped op
    reads or updates in place (a weight each token tile multiplies by; the accumulator a
    K-tiled matmul adds each tile's partial into) is at the same place on every trip, so it
    may live in LX at one fixed offset like a buffer outside loops."""
    if not op.loops:
        return False
    tiled = {v for loop in op.loops for v in loop.tiled}
    return any(a.buffer == buffer and (a in op.index_inputs or tiled & {
        leaf.name for leaf in a.index.free_atoms() if isinstance(leaf, Var)})
        for a in op.reads() + (op.output,))
