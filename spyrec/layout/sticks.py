"""Stick analysis of one tensor access: its device coordinates and which variable is its stick.

Definitions (reference/A-layout.md §4.1): the *lane* is the last device coordinate. An access is
*clean* when its lane is 0 (sparse or broadcast), `Mod(v, E)`, or a bare `v` whose range fits
in one stick; `v` is then its *stick var*. Anything else (an offset inside the stick such as
`Mod(c1 + 32, 64)`, or several variables in one lane) cannot be consumed by a compute op
without first moving the data.
"""

from __future__ import annotations

from dataclasses import dataclass

from spyrec.indexing import Lin, Mod, Ranges, Var, floordiv, var
from spyrec.indexing.coordinates import device_coordinates_lin
from spyrec.layout.device_layout import DeviceLayout


@dataclass(frozen=True)
class StickInfo:
    coords: tuple[Lin, ...]
    stick_var: str | None     # the variable in a clean lane, else None
    clean: bool

    def uses_outside_stick(self, v: str, elems_per_stick: int) -> bool:
        """Does variable `v` appear in a coordinate other than the lane and its own tile
        (`floor(v/E)`, possibly plus a constant)?"""
        tile = floordiv(var(v), elems_per_stick)
        for c in self.coords[:-1]:
            names = {a.name for a in c.free_atoms() if isinstance(a, Var)}
            if v in names and (v != self.stick_var or c - c.const != tile):
                return True
        return False


def access_coordinates(host_size: tuple[int, ...], host_strides: tuple[int, ...],
                       layout: DeviceLayout, ranges: Ranges, index: Lin) -> tuple[Lin, ...]:
    return tuple(device_coordinates_lin(host_size, host_strides, 0, layout.device_size,
                                        layout.stride_map, ranges, index))


def stick_info(host_size, host_strides, layout: DeviceLayout, ranges: Ranges,
               index: Lin) -> StickInfo:
    coords = access_coordinates(tuple(host_size), tuple(host_strides), layout, ranges, index)
    lane = coords[-1]
    e = layout.elems_per_stick
    if lane.is_const:
        return StickInfo(coords, None, lane.const == 0)
    atom = lane.as_atom()
    if isinstance(atom, Var):
        lo, hi = ranges.get(atom)
        return StickInfo(coords, atom.name, hi < e)
    if isinstance(atom, Mod) and atom.modulus == e and isinstance(atom.num.as_atom(), Var):
        return StickInfo(coords, atom.num.as_atom().name, True)
    return StickInfo(coords, None, False)
