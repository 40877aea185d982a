"""Which iteration variable of an op walks which host dim of a buffer whole.

Views never become ops (ir/graph.py): they are folded into each access's flat host-element
index, so "does variable v walk dim d" is read off the index: its coefficient is d's host
stride, its range is d's size, it appears nowhere else in the index (no floor/mod of it),
and no other term moves inside d. The coarse-tiling names (plan/tiling/dimnames.py)
and the symbolic lengths (which ops run a length, and which staging copies must too:
plan/staging.py) ask it; `stick_vars` says which var walks each arg's stick dim.
"""

from __future__ import annotations

from spyrec.indexing import Lin, Var
from spyrec.indexing.sticks import stick_info
from spyrec.ir.graph import Graph, Operation
from spyrec.layout import contiguous_strides


def stick_vars(graph: Graph, op: Operation) -> dict[str, int]:
    """Stick var -> largest elements per stick among the laid-out args whose stick var it
    is: a core's slice of it must be whole sticks of each (work division's candidates,
    length_shares' floors, verify's check of a length split)."""
    sticks: dict[str, int] = {}
    for _, access in op.accesses():
        buf = graph.buffers[access.buffer]
        if buf.layout is None:
            continue
        v = stick_info(tuple(buf.host_size), buf.host_strides, buf.layout, op.var_ranges,
                       access.index).stick_var
        if v is not None:
            sticks[v] = max(sticks.get(v, 1), buf.layout.elems_per_stick)
    return sticks


def walked_dims(index: Lin, host_size: tuple[int, ...],
                ranges: dict[str, int]) -> dict[str, int]:
    """{var: host dim} for each variable of `index` that walks a dim of `host_size` whole."""
    strides = contiguous_strides(host_size)
    plain = {atom.name: coeff for atom, coeff in index.terms if isinstance(atom, Var)}
    rest = Lin([(atom, coeff) for atom, coeff in index.terms if not isinstance(atom, Var)])
    inside = {leaf.name for leaf in rest.free_atoms() if isinstance(leaf, Var)}
    found: dict[str, int] = {}
    for d, (size, stride) in enumerate(zip(host_size, strides)):
        if size <= 1:
            continue
        # every term that moves inside dim d (a coefficient in [stride, stride * size))
        movers = [atom for atom, coeff in index.terms if stride <= abs(coeff) < stride * size]
        if len(movers) != 1 or not isinstance(movers[0], Var):
            continue
        v = movers[0].name
        if plain[v] == stride and ranges.get(v) == size and v not in inside:
            found[v] = d
    return found


def var_extents(op: Operation) -> dict[str, int]:
    """Each var's extent over all trips of the op's loops (a tiled var walks its whole dim
    across the tiles, so names flow through ops already in loops: flash attention's)."""
    extents = dict(op.ranges)
    for loop in op.loops:
        for v in loop.tiled:
            extents[v] *= loop.count
    return extents
