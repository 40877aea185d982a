"""The per-core span: how wide a range of device memory one core of an op addresses.

Each core addresses at most `MAX_SPAN_BYTES` (256 MiB) of device memory per op argument
(reference/A-layout.md §1 and §5.6; DESIGN §3): the reference's users hit a SIGABRT on LM heads
whose one core spans the whole weight. Work division must keep every core under it, so
planning asks this module per candidate split (`plan/split_candidates.py` keeps only the
splits that fit) and the verifier asks it per op (`ir/verify_ops.py check_span`): it lives in the
IR package, as `ir/lx.py` does, because the verifier may import nothing above it.

The span of an access under a split (A-layout §5.6): walk the device dims outermost first,
skipping the lanes; the first whose extent over a core's slice is > 1 decides it:
span = that extent × Π device_size after it (lanes included: whole sticks) × itemsize, i.e.
extent × (sticks per step of that dim) × 128 bytes; an access of a single stick spans one.
A gathered coordinate (`Indirect`) spans its whole dim: any row may be read. Every core's
slice has the same extents; a coordinate affine in its vars spans alike on every core, so
core 0 answers for it, while one with floor/mod of its vars (a view's reshape) is measured on
every core's slice and the widest counts.

An op's span is the widest of its accesses in device memory (index tensors, inputs, output);
an argument placed in LX (`Buffer.lx_address`) is scratchpad, not a device-memory address.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

from spyrec.device import MAX_SPAN_BYTES, STICK_BYTES
from spyrec.indexing import Indirect, Lin, Ranges, Var, value_range
from spyrec.indexing.sticks import stick_info
from spyrec.ir.graph import Access, Graph, Operation
from spyrec.ir.printer import format_access


def access_span(graph: Graph, op: Operation, access: Access, splits: dict[str, int]) -> int:
    """Bytes of device memory one core of `op` split as `splits` addresses through `access`."""
    return outermost(graph, op, access, splits)[0]


def outermost(graph: Graph, op: Operation, access: Access, splits: dict[str, int]
              ) -> tuple[int, int | None, int]:
    """(span, device dim, extent): `access_span` and the dim that decides it, the outermost
    one a core's slice takes more than one step of, with that many steps (None, 1: a core
    reads one stick)."""
    buf = graph.buffers[access.buffer]
    return _outermost(buf.host_size, buf.host_strides, buf.layout, op.var_ranges,
                      access.index, op.core_ranges,
                      tuple(splits.get(v, 1) for v, _ in op.core_ranges))


def op_span(graph: Graph, op: Operation, splits: dict[str, int]) -> tuple[int, Access | None]:
    """(span, access): the widest per-core span of `op`'s device-memory accesses under
    `splits`, and the access that has it (None when every argument is in LX)."""
    widest, which = 0, None
    for _, access in op.accesses():
        if graph.buffers[access.buffer].lx_address is not None:
            continue
        span = access_span(graph, op, access, splits)
        if span > widest:
            widest, which = span, access
    return widest, which


def fits(graph: Graph, op: Operation, splits: dict[str, int]) -> bool:
    """Does every core of `op` split as `splits` stay within the span limit?"""
    return op_span(graph, op, splits)[0] <= MAX_SPAN_BYTES


def span_problem(graph: Graph, op: Operation, splits: dict[str, int]) -> str | None:
    """What is over the limit under `splits` (None when every core fits): the widest access
    and its span, for the verifier's and work division's messages."""
    span, access = op_span(graph, op, splits)
    if span <= MAX_SPAN_BYTES:
        return None
    return (f"one core addresses {span / 2**20:.1f} MiB of {format_access(access)}, over the "
            f"{MAX_SPAN_BYTES >> 20} MiB per-core span limit")


@lru_cache(maxsize=1 << 15)
def _outermost(host_size, host_strides, layout, ranges: Ranges, index: Lin,
               core_ranges: tuple[tuple[str, int], ...], splits: tuple[int, ...]
               ) -> tuple[int, int | None, int]:
    """`outermost` on hashable facts (memoized: work division asks per candidate)."""
    coords = stick_info(host_size, host_strides, layout, ranges, index).coords
    size = layout.device_size
    slices = {v: (n, k) for (v, n), k in zip(core_ranges, splits)}
    for j, c in enumerate(coords[:-1]):
        names = sorted({a.name for a in c.free_atoms() if isinstance(a, Var)})
        gathered = any(isinstance(a, Indirect) for a in c.free_atoms())
        extent = size[j] if gathered else \
            _extent(c, tuple((v, *slices[v]) for v in names)) if names else 1
        if extent > 1:
            return extent * math.prod(size[j + 1:-1]) * STICK_BYTES, j, extent
    return STICK_BYTES, None, 1


@lru_cache(maxsize=1 << 16)
def _extent(c: Lin, slices: tuple[tuple[str, int, int], ...]) -> int:
    """Values `c` takes over one core's slice (var, range, slices), the widest over cores."""
    widths = {v: n // k for v, n, k in slices}
    starts = [(0,)] * len(slices)
    if any(not isinstance(atom, Var) for atom, _ in c.terms):   # floor/mod: per core
        starts = [range(0, n, n // k) for _, n, k in slices]
    widest = 0
    for offsets in itertools.product(*starts):
        lo, hi = value_range(c, Ranges({Var(v): (s, s + widths[v] - 1)
                                        for (v, _, _), s in zip(slices, offsets)}))
        widest = max(widest, hi - lo + 1)
    return widest
