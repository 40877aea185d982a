"""Loop advances and symbolic start addresses of the ops inside coarse-tiling loops.

An op inside loops is emitted once (one `sdsc_<n>.json`) and executed every iteration. Its
arguments in full HBM tensors move with the loop: at iteration (i_0, …, i_L) an arg's tile
starts `Σ_l i_l · advance_l` bytes past where it starts at iteration 0 (issue 8 contract §1).
The advance of level l is a device-coordinate translation turned into bytes through the
tensor's *device* strides (DESIGN §5) — never host strides, which is the reference's bug.

Such args are **symbolic** in the op's JSON (reference/F-superdsc.md §3.G): each core's start
address is a negative symbol id that `bundle.mlir` binds to an `affine.apply` of the address at
iteration 0. `SymbolTable` hands out the ids, bundle-unique in emission order, one per distinct
(address, advance) of an op, so a repeated address reuses its id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spyrec.errors import InternalError
from spyrec.indexing import Indirect, Ranges, Var, evaluate
from spyrec.indexing.sticks import access_coordinates
from spyrec.ir import Access, Buffer, Operation


def level_advances_bytes(buf: Buffer, op: Operation, access: Access) -> tuple[int, ...]:
    """The byte advance of `access` per enclosing loop level of `op`, outermost first.

    Zero for per-tile and LX buffers (same address every iteration) and for levels whose
    tiled vars do not index the access. The advance is read off the device coordinates over
    the *full* extents (a tile's own ranges can fold `Mod(v, 64)` into `v`), at the tile
    origin: `coords(v = range(v)) - coords(v = 0)` for the level's tiled vars."""
    if not op.loops:
        return ()
    if buf.per_tile or buf.lx_address is not None:
        return (0,) * len(op.loops)
    tile = dict(op.ranges)
    full = dict(tile)
    for loop in op.loops:
        for v in loop.tiled:
            full[v] *= loop.count
    ranges = Ranges({Var(v): (0, n - 1) for v, n in full.items()})
    coords = access_coordinates(buf.host_size, buf.host_strides, buf.layout, ranges,
                                access.index)
    origin: dict = {v: 0 for v in tile}
    origin.update({leaf.tensor: 0 for c in coords for leaf in c.free_atoms()
                   if isinstance(leaf, Indirect)})
    base = [evaluate(c, origin) for c in coords]
    strides = buf.layout.device_strides_elems
    itemsize = buf.layout.dtype.itemsize
    corner = {**origin, **{v: n - 1 for v, n in tile.items()}}
    far = [evaluate(c, corner) for c in coords]
    out = []
    for depth, loop in enumerate(op.loops):
        if loop.count == 1:      # never advances (and v = its range is outside the domain)
            out.append(0)
            continue
        moved = {**origin, **{v: tile[v] for v in loop.tiled}}
        delta = [evaluate(c, moved) - b for c, b in zip(coords, base)]
        moved_far = {**corner, **{v: corner[v] + tile[v] for v in loop.tiled}}
        if delta[-1] or [evaluate(c, moved_far) - f for c, f in zip(coords, far)] != delta:
            # coarse_tiling guarantees a whole-stick translation (issue 8 contract §1)
            raise InternalError(f"op {op.name!r}: loop {depth} ({loop.key}) does not move "
                                f"{access.buffer} by one device translation of whole sticks "
                                f"(origin {delta}); coarse_tiling should have refused it")
        out.append(sum(d * s for d, s in zip(delta, strides)) * itemsize)
    return tuple(out)


@dataclass(frozen=True)
class Symbol:
    """One symbolic start address: `%sym_<n>` holds `address` (iteration 0) and the op's
    operand is `affine.apply` of `advance_bytes` (one coefficient per loop level) plus, for
    an op whose size follows a symbolic length (`Operation.lengths`), `(share floordiv
    unit) * bytes` per `(symbol, cores, unit, bytes)` of `length_terms`, share the values
    each of `cores` slices of the length runs (`SymLength.share`; the bundle's
    `%share_<symbol>_<cores>`) and unit the values per stick on a stick dim (else 1): a
    core's slice starts its share times its slice number into the length."""

    id: int                       # negative: -n
    address: int
    advance_bytes: tuple[int, ...]
    length_terms: tuple[tuple[str, int, int, int], ...] = ()

    def at(self, trips: tuple[int, ...], shares: dict[tuple[str, int], int]) -> int:
        """The operand at loop iterations `trips` and shares `shares` ((symbol, cores) ->
        values per slice)."""
        return self.address + sum(a * i for a, i in zip(self.advance_bytes, trips)) + \
            sum(b * (shares[s, k] // unit) for s, k, unit, b in self.length_terms)

    @property
    def n(self) -> int:
        return -self.id


@dataclass
class SymbolTable:
    """Bundle-unique symbol ids (-1, -2, … in emission order) and each op's symbols."""

    issued: int = 0
    per_op: dict[int, list[Symbol]] = field(default_factory=dict)

    def symbol(self, op_index: int, address: int, advance_bytes: tuple[int, ...],
               length_terms: tuple[tuple[str, int, int, int], ...] = ()) -> int:
        """The id of (address, advance, length terms) in op `op_index`: reused when the op
        already has it. (The reference keys ids by address alone; an address that two args
        reach with different advances cannot share one operand, so the advance is part of
        the key.)"""
        symbols = self.per_op.setdefault(op_index, [])
        for s in symbols:
            if (s.address, s.advance_bytes, s.length_terms) == \
                    (address, advance_bytes, length_terms):
                return s.id
        self.issued += 1
        symbols.append(Symbol(-self.issued, address, advance_bytes, length_terms))
        return -self.issued

    def of(self, op_index: int) -> list[Symbol]:
        """The op's symbols in order of first appearance (its execute's `symbol_ids`)."""
        return list(self.per_op.get(op_index, []))
