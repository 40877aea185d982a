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

from spyrec.indexing import Indirect, Ranges, Var, value_range
from spyrec.indexing.sticks import access_coordinates
from spyrec.ir.graph import Access, Buffer, Graph, Operation

Box = tuple[tuple[int, int], ...]   # inclusive (lo, hi) per device dim, lanes excluded


def core_slices(op: Operation) -> list[dict[str, tuple[int, int]]]:
    """Each core's half-open range per iteration var, in SuperDSC core order."""
    splits = op.core_splits or {}
    n_cores = math.prod(splits.get(v, 1) for v, _ in op.ranges)
    out = []
    for c in range(n_cores):
        q, ranges = 1, {}
        for v, n in op.ranges:
            k = splits.get(v, 1)
            s = (c // q) % k
            q *= k
            ranges[v] = (s * (n // k), (s + 1) * (n // k))
        out.append(ranges)
    return out


def core_boxes(buf: Buffer, op: Operation, access: Access) -> list[Box] | None:
    """Per core, the bounding box of device coordinates (all dims but the lanes) `access`
    touches; None for a gathered access (data-dependent: no fixed slice)."""
    coords = access_coordinates(buf.host_size, buf.host_strides, buf.layout, op.var_ranges,
                                access.index)
    if any(isinstance(leaf, Indirect) for c in coords for leaf in c.free_atoms()):
        return None
    boxes = []
    for ranges in core_slices(op):
        r = Ranges({Var(v): (lo, hi - 1) for v, (lo, hi) in ranges.items()})
        boxes.append(tuple(value_range(c, r) for c in coords[:-1]))
    return boxes


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
