"""Stick analysis of one tensor access: its device coordinates and which variable is its stick.

Definitions (reference/A-layout.md §4.1): the *lane* is the last device coordinate. An access is
*clean* when its lane is 0 (sparse or broadcast), `Mod(v, E)`, or a bare `v` whose range fits
in one stick; `v` is then its *stick var*. Anything else (an offset inside the stick such as
`Mod(c1 + 32, 64)`, or several variables in one lane) cannot be consumed by a compute op
without first moving the data.

It lives with the index algebra, not in `layout/`, so that `layout/` stays a leaf: the layout
search (the stick_layout pass), work division and code generation all ask it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from spyrec.indexing.coordinates import device_coordinates_lin
from spyrec.indexing.expr import Lin, Mod, Var, substitute, var
from spyrec.indexing.ranges import Ranges
from spyrec.indexing.simplify import simplify_lin

if TYPE_CHECKING:  # only its device_size, stride_map and elems_per_stick are read
    from spyrec.layout import DeviceLayout


@dataclass(frozen=True)
class StickInfo:
    coords: tuple[Lin, ...]
    stick_var: str | None     # the variable in a clean lane, else None
    clean: bool
    ranges: Ranges

    def uses_outside_stick(self, v: str, elems_per_stick: int) -> bool:
        """Does the in-stick part of `v` (v mod E) show up outside the lane?

        Other coordinates may use `v` only through `v // E` (its tile, possibly split further
        into several device dims, as when a [.., 4, 64] tensor is read as [.., 256]).
        Checked exactly: substitute v = E*q + l and see whether l survives simplification.
        """
        lo, hi = self.ranges.get(Var(v))
        if hi == float("inf"):
            return any(Var(v) in c.free_atoms() for c in self.coords[:-1])
        q, lane = Var(f"{v}__tile"), Var(f"{v}__lane")
        split = {Var(v): var(q.name).scale(elems_per_stick) + var(lane.name)}
        ranges = self.ranges.with_vars({q: (0, int(hi) // elems_per_stick),
                                        lane: (0, elems_per_stick - 1)})
        for c in self.coords[:-1]:
            if Var(v) not in c.free_atoms():
                continue
            if lane in simplify_lin(substitute(c, split), ranges).free_atoms():
                return True
        return False


def access_coordinates(host_size: tuple[int, ...], host_strides: tuple[int, ...],
                       layout: DeviceLayout, ranges: Ranges, index: Lin) -> tuple[Lin, ...]:
    return tuple(device_coordinates_lin(host_size, host_strides, 0, layout.device_size,
                                        layout.stride_map, ranges, index))


@lru_cache(maxsize=1 << 15)
def stick_info(host_size: tuple[int, ...], host_strides: tuple[int, ...], layout: DeviceLayout,
               ranges: Ranges, index: Lin) -> StickInfo:
    """Coordinates and stick variable of one access (memoized: the layout search asks often)."""
    coords = access_coordinates(tuple(host_size), tuple(host_strides), layout, ranges, index)
    lane = coords[-1]
    e = layout.elems_per_stick
    if lane.is_const:
        return StickInfo(coords, None, lane.const == 0, ranges)
    atom = lane.as_atom()
    if isinstance(atom, Var):
        lo, hi = ranges.get(atom)
        return StickInfo(coords, atom.name, hi < e, ranges)
    if isinstance(atom, Mod) and atom.modulus == e and isinstance(atom.num.as_atom(), Var):
        return StickInfo(coords, atom.num.as_atom().name, True, ranges)
    return StickInfo(coords, None, False, ranges)


@lru_cache(maxsize=1 << 15)
def compatible(info: StickInfo, target: str | None, reduced: tuple[str, ...], e: int) -> bool:
    """Can a compute op whose stick variable is `target` read this access as it is?

    A clean lane on the target var, used elsewhere only through its tile; or no stick var
    (sparse, broadcast) with the target var absent from the other coordinates; or, when the
    op's output has no stick var (a reduction along the stick), a stick var that is reduced.
    """
    if not info.clean:
        return False
    if info.stick_var is None:
        return target is None or not info.uses_outside_stick(target, e)
    if target is None:
        return info.stick_var in reduced
    return info.stick_var == target and not info.uses_outside_stick(target, e)
