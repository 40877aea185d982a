"""Where each arg's elements are, for every point of an op's iteration space, vectorized.

Every iteration variable gets a numpy arange on its own axis (`Chunk`); evaluating an arg's
device coordinates on those aranges gives arrays that broadcast over the whole space, and the
element offset is `base + sum(coord_j * device_stride_j)` (docs/formats.md). Reading is then one
`np.take` per arg, with no Python loop over elements, cores or tiles (reference/C-simulator.md
§5.3, the "offset" path; closed-form strided views are a later optimisation).

Bounds are checked per device dim, not on the flat offset: a coordinate that wraps into the next
dim (lane 64 of a 64-lane stick) stays inside the allocation yet reads the wrong element, and
only a per-dim check catches it. Gathers (`IndirectAccess`) read the index arg at the same point
first; a bad index value is reported with the index tensor's name and the value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

import numpy as np

from spyrec.errors import SimulatorFault
from spyrec.indexing import Indirect, Lin, Var, evaluate
from spyrec.layout import STICK_BYTES
from spyrec.sim.memory import Hbm
from spyrec.sim.specs import ArgSpec, OpSpec

MAX_CHUNK_POINTS = 1 << 22   # bounds the int64 offset arrays to ~32 MiB each


@dataclass(frozen=True)
class Chunk:
    """A box of the iteration space: [lo, hi) per var, each var an arange on its own axis."""

    vars: tuple[str, ...]
    lo: tuple[int, ...]
    hi: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(h - lo for lo, h in zip(self.lo, self.hi))

    def env(self) -> dict:
        rank = len(self.vars)
        env = {}
        for axis, (name, lo, hi) in enumerate(zip(self.vars, self.lo, self.hi)):
            shape = [1] * rank
            shape[axis] = hi - lo
            env[Var(name)] = np.arange(lo, hi, dtype=np.int64).reshape(shape)
        return env

    def point(self, index: tuple[int, ...], shape: tuple[int, ...]) -> str:
        """The iteration point at `index` of an array of `shape` (size-1 axes: any value)."""
        parts = [f"{v}={lo + i}" for v, lo, i, n in zip(self.vars, self.lo, index, shape)
                 if n > 1 or self.hi[self.vars.index(v)] - lo == 1]
        return ", ".join(parts) if parts else "every point"


def chunks(spec: OpSpec, max_points: int = MAX_CHUNK_POINTS) -> Iterator[Chunk]:
    """The iteration space in boxes whose arg accesses hold at most ~max_points each, split
    along one output var.

    The split var is the outermost non-reduced var the output is indexed by, so chunks write
    disjoint output elements and a reduction never straddles two chunks. The budget counts
    what is materialized: each arg's offsets and values span only the vars its coordinates use,
    so a matmul (x over M,K; y over K,N) runs in a few large chunks, not one per row of M (a
    kernel never builds the M*N*K box; pointwise ops and reductions have an arg over it all).
    """
    vars_, extents = spec.vars, spec.extents
    out_vars = _arg_vars(spec, spec.output)
    split = next((i for i, v in enumerate(vars_)
                  if v not in spec.reduced and v in out_vars and extents[i] > 1), None)
    per_unit = [math.prod(n for v, n in zip(vars_, extents) if v in used and v != vars_[split])
                for used in (_arg_vars(spec, a) for a in spec.args)
                if split is not None and vars_[split] in used]
    if split is None or max(per_unit) * extents[split] <= max_points:
        yield Chunk(vars_, (0,) * len(vars_), extents)
        return
    step = max(1, max_points // max(per_unit))
    for start in range(0, extents[split], step):
        lo = [0] * len(vars_)
        hi = list(extents)
        lo[split], hi[split] = start, min(start + step, extents[split])
        yield Chunk(vars_, tuple(lo), tuple(hi))


def _arg_vars(spec: OpSpec, arg: ArgSpec) -> set[str]:
    """The iteration vars an arg's access varies along (a gathered coordinate: its index
    arg's vars too)."""
    used: set[str] = set()
    for coord in arg.coordinates:
        for leaf in coord.free_atoms():
            if isinstance(leaf, Var):
                used.add(leaf.name)
            elif isinstance(leaf, Indirect):
                index = next((a for a in spec.args if a.name == leaf.tensor and a is not arg),
                             None)
                used |= _arg_vars(spec, index) if index is not None else set(spec.vars)
    return used


@dataclass(frozen=True)
class Binding:
    """One arg of one execution: its base in the typed arena view and in device coordinates."""

    arg: ArgSpec
    base_elems: int                # element offset of the arg's device element 0
    tile_coords: tuple[int, ...]   # device coordinates of the tile base (all 0 without a tile)


def bind(spec: OpSpec, operands: tuple[int, ...], hbm: Hbm, location: str) -> list[Binding]:
    """Resolve every arg's base address for one `sdsc_execute` and check it is addressable."""
    out = []
    for arg in spec.args:
        what = f"{spec.describe()}, arg '{arg.name}'"
        if arg.hbm_address is None:
            raise SimulatorFault(f"{what}: LX allocations are not simulated yet (HBM only)")
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
            tile = _tile_coords(what, arg, operands, location)
        out.append(Binding(arg, arg.hbm_address // arg.itemsize, tile))
    return out


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


class ChunkAccess:
    """Where every arg's elements are over one chunk, each distinct access computed once.

    Offsets are relative to the arg's base, and reads index a view that starts at the base, so
    args that share coordinates and layout (x, y and the output of most elementwise ops) share
    one offset array. `env` holds the chunk's var aranges plus the values (int64) of every
    index arg, read first, under `Indirect` keys.
    """

    def __init__(self, spec: OpSpec, bindings: list[Binding], chunk: Chunk, hbm: Hbm):
        self.spec, self.chunk, self.hbm = spec, chunk, hbm
        self.env = chunk.env()
        self._relative: dict[tuple, np.ndarray] = {}
        for b in bindings:
            if b.arg.is_index:
                self.env[Indirect(b.arg.name)] = self.read(b).astype(np.int64)

    def base_view(self, b: Binding) -> np.ndarray:
        """The arena as the arg's dtype, starting at the arg's device element 0."""
        return self.hbm.view(b.arg.device_dtype)[b.base_elems:]

    def read(self, b: Binding) -> np.ndarray:
        return np.take(self.base_view(b), self.relative(b))

    def relative(self, b: Binding) -> np.ndarray:
        """Element offsets from the arg's base at every point (broadcastable), bounds-checked."""
        arg = b.arg
        key = (arg.coordinates, arg.layout.device_size, b.tile_coords)
        if key not in self._relative:
            parts = []
            for j, (coord, size, stride) in enumerate(zip(
                    arg.coordinates, arg.layout.device_size, arg.layout.device_strides_elems)):
                value = np.asarray(evaluate(coord, self.env), dtype=np.int64) + b.tile_coords[j]
                if value.size and (value.min() < 0 or value.max() >= size):
                    _out_of_range(self.spec, b, self.chunk, self.env, j, value)
                parts.append(value * stride)
            self._relative[key] = _broadcast_sum(parts)
        return self._relative[key]


def _broadcast_sum(parts: list[np.ndarray]) -> np.ndarray:
    """Sum of broadcastable arrays, smallest first: terms over the same axes are added while
    still small, so only the last additions are full size."""
    by_shape: dict[tuple, np.ndarray] = {}
    for part in parts:
        by_shape[part.shape] = by_shape[part.shape] + part if part.shape in by_shape else part
    total = np.zeros((), dtype=np.int64)
    for shape in sorted(by_shape, key=lambda s: int(np.prod(s))):
        total = total + by_shape[shape]
    return total


def one_to_one(spec: OpSpec, b: Binding, chunk: Chunk) -> bool | None:
    """Whether the arg's coordinates map the chunk's points one-to-one (reduced vars excluded);
    None when no cheap proof applies.

    Proof used: every coordinate depends on at most one var, and for each var the coordinates
    that use it take distinct value tuples along its range; the device coordinate tuple then
    splits into independent per-var blocks. That covers every layout-derived access; anything
    else is left to an exact count.
    """
    by_var: dict[str, list[Lin]] = {}
    for coord in b.arg.coordinates:
        leaves = coord.free_atoms()
        if any(not isinstance(leaf, Var) for leaf in leaves) or len(leaves) > 1:
            return None
        for leaf in leaves:
            by_var.setdefault(leaf.name, []).append(coord)
    for v, lo, hi in zip(chunk.vars, chunk.lo, chunk.hi):
        if v in spec.reduced or hi - lo < 2:
            continue
        if not _var_one_to_one(tuple(by_var.get(v, ())), v, lo, hi):
            return False
    return True


@lru_cache(maxsize=1 << 12)
def _var_one_to_one(coords: tuple[Lin, ...], v: str, lo: int, hi: int) -> bool:
    """Whether `coords` (each over var v alone) take distinct value tuples on [lo, hi)."""
    if not coords:
        return False
    values = np.arange(lo, hi, dtype=np.int64)
    table = np.stack([np.broadcast_to(evaluate(c, {Var(v): values}), values.shape)
                      for c in coords], axis=1)
    return len(np.unique(table, axis=0)) == len(values)


def _out_of_range(spec: OpSpec, b: Binding, chunk: Chunk, env: dict, dim: int,
                  value: np.ndarray) -> None:
    arg = b.arg
    size = arg.layout.device_size[dim]
    bad = np.argwhere((value < 0) | (value >= size))[0]
    at = chunk.point(tuple(bad), value.shape)
    coord = arg.coordinate_text[dim]
    gathers = [leaf for leaf in arg.coordinates[dim].free_atoms() if isinstance(leaf, Indirect)]
    if gathers:
        idx = np.broadcast_to(env[gathers[0]], value.shape)[tuple(bad)]
        raise SimulatorFault(
            f"{spec.describe()}: gather index {int(idx)} read from index tensor "
            f"'{gathers[0].tensor}' is out of range for arg '{arg.name}' device dim {dim} "
            f"(coordinate {coord}, valid 0..{size - 1}) at {at}")
    tile = f" (tile base adds {b.tile_coords[dim]})" if any(b.tile_coords) else ""
    raise SimulatorFault(
        f"{spec.describe()}: arg '{arg.name}' device dim {dim} coordinate {coord} = "
        f"{int(value[tuple(bad)])}{tile} is outside 0..{size - 1} of device_size "
        f"{list(arg.layout.device_size)} at {at}")
