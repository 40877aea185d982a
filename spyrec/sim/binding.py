"""Where each arg of one execution (`sdsc_execute`) starts: its base in HBM or LX and its tile's
device coordinates, checked before anything is read. A base outside the manifest's tensors, not
stick-aligned, or an LX window outside its LX tensor stops the run with the arg's name, so
`sim/access.py` can index memory without re-checking the base.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spyrec.errors import SimulatorFault
from spyrec.layout import STICK_BYTES
from spyrec.sim.addresses import check_window, symbolic_base
from spyrec.sim.memory import Allocation, Hbm, Lx
from spyrec.sim.specs import ArgSpec, Execute, OpSpec


@dataclass(frozen=True)
class Binding:
    """One arg of one execution: its base in the typed arena view and in device coordinates."""

    arg: ArgSpec
    base_elems: int                # element offset of the arg's device element 0
    tile_coords: tuple[int, ...]   # device coordinates of the tile base (all 0 without a tile)
    lx: Allocation | None = None   # the LX tensor an LX arg reads or writes


def bind(spec: OpSpec, ex: Execute, hbm: Hbm, lx: Lx | None = None) -> list[Binding]:
    """Resolve every arg's base address for one `sdsc_execute` and check it is addressable."""
    out = []
    for arg in spec.args:
        what = f"{spec.describe()}, arg '{arg.name}'"
        if arg.in_lx and not arg.tile_strides_elems:
            raise SimulatorFault(f"{what}: LX allocations are simulated from SuperDSC LX "
                                 f"nodes only; this arg has no per-core layout")
        if arg.in_lx:
            out.append(_bind_lx(spec, arg, ex, lx))
            continue
        if arg.symbols is not None:
            base = symbolic_base(spec, arg, ex)
            check_window(spec, arg, base, ex, hbm)
            out.append(Binding(arg, base // arg.itemsize, (0,) * len(arg.layout.device_size)))
            continue
        if arg.hbm_address % STICK_BYTES:
            raise SimulatorFault(f"{what}: allocation.hbm {arg.hbm_address} is not "
                                 f"{STICK_BYTES}-byte aligned")
        if hbm.find(arg.hbm_address, arg.extent_bytes, arg.name) is None:
            raise SimulatorFault(
                f"{what}: bytes [{arg.hbm_address}, {arg.hbm_address + arg.extent_bytes}) of "
                f"its layout {list(arg.layout.device_size)} are not inside one tensor of "
                f"manifest.json")
        tile = (0,) * len(arg.layout.device_size)
        if arg.operand is not None:
            tile = _tile_coords(what, arg, ex.operands, ex.location)
        out.append(Binding(arg, arg.hbm_address // arg.itemsize, tile))
    return out


def _bind_lx(spec: OpSpec, arg: ArgSpec, ex: Execute, lx: Lx | None) -> Binding:
    """An LX arg: its per-core window must lie inside the manifest LX tensor it names."""
    where = f"{spec.describe()} {ex.where()}: LX arg '{arg.name}'"
    alloc = lx.find(arg.name) if lx is not None else None
    if alloc is None:
        raise SimulatorFault(f"{where}: no LX tensor of manifest.json has lx_address "
                             f"{arg.lx_offset}; re-run spyrec compile")
    if arg.lx_offset % STICK_BYTES:
        raise SimulatorFault(f"{where}: LX offset {arg.lx_offset} is not {STICK_BYTES}-byte "
                             f"aligned")
    if not alloc.contains(arg.lx_offset, arg.extent_bytes):
        raise SimulatorFault(
            f"{where}: each core's window [{arg.lx_offset}, {arg.lx_offset + arg.extent_bytes})"
            f" is not inside LX tensor '{alloc.name}' [{alloc.address}, {alloc.end}) "
            f"(lx_bytes_per_core); re-run spyrec compile")
    return Binding(arg, arg.lx_offset // arg.itemsize, (0,) * len(arg.layout.device_size),
                   alloc)


def _tile_coords(what: str, arg: ArgSpec, operands: tuple[int, ...],
                 location: str) -> tuple[int, ...]:
    if arg.operand >= len(operands):
        raise SimulatorFault(f"{what}: takes its base from operand {arg.operand}, but "
                             f"{location} passes {len(operands)} operands")
    base = operands[arg.operand]
    rel = base - arg.hbm_address
    if base % STICK_BYTES or rel < 0 or rel >= arg.extent_bytes or rel % arg.itemsize:
        raise SimulatorFault(
            f"{what}: tile base {base} from operand {arg.operand} at {location} is not a "
            f"stick-aligned address inside the tensor [{arg.hbm_address}, "
            f"{arg.hbm_address + arg.extent_bytes})")
    coords = np.unravel_index(rel // arg.itemsize, arg.layout.device_size)
    return tuple(int(c) for c in coords)
