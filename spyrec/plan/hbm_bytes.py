"""Device-memory (HBM) bytes: the one count the compiler's planners use.

Why one: work division prices a split by the bytes each core moves (`plan/split_estimate.py`),
`--tiling auto` and attention tiling compare candidates by the bytes a planned program moves
(`passes/coarse_tiling/auto.py`, `passes/flash_attention/search.py`), and LX placement says
whether a consumer could take its producer's split at no more traffic
(`plan/lx_placement.py`). Counted three
ways they drifted (a gather was one stick per index element in one, its whole tensor per
core in the others). The count, for an access under a split:

- each core touches a box of device coordinates (lanes excluded: whole sticks), the bounding
  box of its slice's values of each coordinate (`ir/lx.py core_boxes`, the boxes LX placement
  and the verifier use); its bytes are the box's sticks x 128. Every core's slice of an even
  split has core 0's extents, so the per-core figure is core 0's (`access_sticks`), the whole
  op's the sum over its cores (`access_bytes`);
- a gathered coordinate counts one stick per index element the slice reads (each a different
  row; the simulator's footprint assumes the same: no repeated indices);
- an input slice r cores read alike is charged max(8, r) / (8 r) of its bytes per core (the
  broadcast cohort rule, `CostParams.read_share`; `readers_of_access` counts r) where a caller
  prices time or traffic (the split estimate, `hbm_bytes`), not where it counts what one op's
  cores address (`op_bytes`).

The simulator counts bytes from the sdsc files with its own code (sim/footprint.py), on
purpose: tests/passes/test_work_division_cost.py comparing the two is a real check.
"""

from __future__ import annotations

import math
from functools import lru_cache

from spyrec.costmodel import DEFAULT_PARAMS, CostParams
from spyrec.device import STICK_BYTES
from spyrec.indexing import Indirect, Lin, Ranges, Var, value_range
from spyrec.indexing.sticks import stick_info
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import Access, nest_trips
from spyrec.ir.lx import box_bytes, core_boxes, core_slices


def core0_slice(op: Operation, splits: dict[str, int]) -> dict[str, int]:
    """Extent of each iteration var in one core's slice (every core's is the same size)."""
    return {v: n // splits.get(v, 1) for v, n in op.core_ranges}


def access_sticks(graph: Graph, op: Operation, access: Access, extent: dict[str, int]) -> int:
    """Sticks of `access` that a core with slice extents `extent` (from 0) touches."""
    buf = graph.buffers[access.buffer]
    coords = stick_info(buf.host_size, buf.host_strides, buf.layout, op.var_ranges,
                        access.index).coords       # memoized, unlike access_coordinates
    total = 1
    for c in coords[:-1]:
        names, gathers = coord_leaves(c)
        if gathers:
            total *= math.prod(_index_elements(op, g, extent) for g in gathers)
        elif names:
            total *= _extent(c, tuple((v, extent[v]) for v in names))
    return total


@lru_cache(maxsize=1 << 16)
def coord_leaves(c: Lin) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(var names, gathered tensor names) of one coordinate, sorted."""
    atoms = c.free_atoms()
    return (tuple(sorted(a.name for a in atoms if isinstance(a, Var))),
            tuple(sorted(a.tensor for a in atoms if isinstance(a, Indirect))))


def _extent(c: Lin, extent: tuple[tuple[str, int], ...]) -> int:
    """Values `c` spans when each of its vars runs from 0 below its extent."""
    lo, hi = coord_span(c, extent)
    return hi - lo + 1


@lru_cache(maxsize=1 << 16)
def coord_span(c: Lin, extent: tuple[tuple[str, int], ...]) -> tuple[int, int]:
    """(lo, hi) of `c` when each of its vars runs from 0 below its extent (memoized: the
    candidates of an op share most per-var extents)."""
    return value_range(c, Ranges({Var(v): (0, n - 1) for v, n in extent}))


def _index_elements(op: Operation, tensor: str, extent: dict[str, int]) -> int:
    """Elements of index tensor `tensor` one core's slice reads (each a different row)."""
    access = next(a for a in op.index_inputs if a.buffer == tensor)
    used = {a.name for a in access.index.free_atoms() if isinstance(a, Var)}
    return math.prod(n for v, n in extent.items() if v in used)


def readers_of_access(op: Operation, access: Access, splits: dict[str, int]) -> int:
    """Cores reading each slice of `access` (sim/footprint.py `ArgFootprint.readers`): the
    splits of the vars it does not use, a gathered coordinate using its index tensor's vars."""
    used: set[str] = set()
    for atom in access.index.free_atoms():
        if isinstance(atom, Var):
            used.add(atom.name)
        elif isinstance(atom, Indirect):
            index = next(a for a in op.index_inputs if a.buffer == atom.tensor)
            used |= {a.name for a in index.index.free_atoms() if isinstance(a, Var)}
    return math.prod(k for v, k in splits.items() if v not in used)


def access_bytes(graph: Graph, op: Operation, access: Access) -> int:
    """Bytes every core of `op` (split as its `core_splits`) moves for `access`, summed:
    each core's box in whole sticks; a gathered access, core 0's sticks (`access_sticks`)
    on every core."""
    buf = graph.buffers[access.buffer]
    boxes = core_boxes(buf, op, access)
    if boxes is not None:
        return sum(box_bytes(buf, box) for box in boxes)
    splits = op.core_splits or {}
    return len(core_slices(op)) * access_sticks(graph, op, access, core0_slice(op, splits)) \
        * STICK_BYTES


def op_bytes(graph: Graph, op: Operation, skip: str | None = None) -> int:
    """Bytes `op`'s cores move for its args outside LX (`access_bytes`), but `skip`'s."""
    return sum(access_bytes(graph, op, access) for _, access in op.accesses()
               if access.buffer != skip and graph.buffers[access.buffer].lx_address is None)


def hbm_bytes(graph: Graph, p: CostParams = DEFAULT_PARAMS) -> int:
    """Device-memory bytes a planned graph's ops move: per op execution, `access_bytes` of
    every argument outside LX, a slice several cores read charged by the broadcast cohort
    rule (`readers_of_access`), times the executions of its loops."""
    total = 0
    for op in graph.ops:
        per_run = 0
        for role, access in op.accesses():
            if graph.buffers[access.buffer].lx_address is not None:
                continue
            moved = access_bytes(graph, op, access)
            if role != "output":
                moved *= p.read_share(readers_of_access(op, access, op.core_splits or {}))
            per_run += moved
        total += per_run * nest_trips(op.loops)
    return round(total)
