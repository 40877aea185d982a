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

The pieces it stands on: the chunks of the iteration space (`sim/chunking.py`), each arg's
checked base for one execution (`sim/binding.py`) and the core of each point for LX args
(`sim/core_map.py`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from spyrec.errors import SimulatorFault
from spyrec.indexing import Indirect, Lin, Mod, Var, evaluate
from spyrec.layout import STICK_BYTES, DeviceLayout
from spyrec.sim.binding import Binding
from spyrec.sim.chunking import Chunk
from spyrec.sim.core_map import broadcast_sum, core_parts, separable, thin_parts
from spyrec.sim.memory import Hbm, Lx
from spyrec.sim.numerics import FP8_FORMATS, decoded
from spyrec.sim.specs import OpSpec
from spyrec.sim.strided import Strided


class ChunkAccess:
    """Where every arg's elements are over one chunk, each distinct access computed once.

    Offsets are relative to the arg's base, and reads index a view that starts at the base, so
    args that share coordinates and layout (x, y and the output of most elementwise ops) share
    one offset array. `env` holds the chunk's var aranges plus the values (int64) of every
    index arg, read first, under `Indirect` keys.
    """

    def __init__(self, spec: OpSpec, bindings: list[Binding], chunk: Chunk, hbm: Hbm,
                 lx: Lx | None = None, where: str = ""):
        self.spec, self.chunk, self.hbm, self.lx, self.where = spec, chunk, hbm, lx, where
        # what an LX access's per-core work depends on beside the arg itself (`_LX_WORK`)
        self._split = (spec.split_signature, chunk, lx.core_bytes if lx is not None else 0)
        self.env = chunk.env()
        self._relative: dict[tuple, np.ndarray] = {}
        self._strided: dict[tuple, Strided | None] = {}
        self._cores: list[np.ndarray] | None = None
        self._cores_separable = False
        for b in bindings:
            if b.arg.is_index:
                self.env[Indirect(b.arg.name)] = self.read(b, np.dtype(np.int64))

    def base_view(self, b: Binding) -> np.ndarray:
        """The arg's memory as its dtype from its device element 0 (to its segment's end)."""
        if b.lx is not None:
            return self.lx.view(b.arg.device_dtype)[b.base_elems:]
        return self.hbm.region(b.base_elems * b.arg.itemsize, b.arg.device_dtype)

    def read(self, b: Binding, dtype: np.dtype | None = None, arena_order: bool = False
             ) -> np.ndarray:
        """The arg's values at every point of the chunk (broadcastable to its shape), as
        `dtype` (default: the storage dtype); always a new array, in the chunk's axis order
        in memory unless `arena_order` (`Strided.read`)."""
        form = self.strided(b)          # bounds-checked before the LX tags are indexed
        rel = self.relative(b) if form is None else None
        if b.lx is not None:
            self._check_lx_read(b)
        if b.arg.device_dtype in FP8_FORMATS:       # bit patterns: decoded, never cast
            raw = form.read(self.base_view(b), np.dtype(np.uint8), arena_order) \
                if form is not None else np.take(self.base_view(b), rel)
            return decoded(raw, b.arg.device_dtype, dtype)
        if form is not None:
            return form.read(self.base_view(b), dtype or self.base_view(b).dtype, arena_order)
        values = np.take(self.base_view(b), rel)
        return values if dtype is None else values.astype(dtype, copy=False)

    def _key(self, b: Binding) -> tuple:
        # an LX arg's offsets also depend on the split vars it is replicated along (thinned
        # in `_arg_cores`): two args alike but for that (a replicated mask and a partitioned
        # tensor read at the same coordinates) must not share offsets
        arg = b.arg
        return (arg.coordinates, arg.layout.device_size, b.tile_coords, b.lx is not None,
                arg.is_input, arg.tile_coordinates if b.lx is not None else ())

    def _terms(self, b: Binding) -> list[np.ndarray]:
        """Per device dim, coordinate x stride over the chunk (each varies only along the
        vars its coordinate uses), bounds-checked per dim."""
        terms, bad = _offset_terms(b.arg.coordinates, b.arg.layout, b.tile_coords, self.env)
        if bad is not None:
            _out_of_range(self.spec, b, self.chunk, self.env, *bad)
        return terms

    def strided(self, b: Binding) -> Strided | None:
        """The arg's access as one strided view (`spyrec.sim.strided`), bounds-checked; None
        for gathers and accesses with no such form (they use `relative`). An LX arg's core
        term joins its coordinate terms when the cores split the chunk var by var (each
        core's LX is a slice of one arena, `core * core_bytes` in)."""
        key = self._key(b)
        if key not in self._strided:
            arg, form = b.arg, None
            if _gathers(arg.coordinates):
                pass                        # data-dependent: the offset path (`relative`)
            elif b.lx is None:
                form = _hbm_form(arg.coordinates, arg.layout, b.tile_coords, self.chunk)
                if form is _OUT_OF_RANGE:
                    self._terms(b)          # raises, naming the point and the coordinate
                    form = None
            else:
                form = _LX_WORK.get(("form", self._lx_key(b)), lambda: self._lx_form(b))
            if form is not None and not form.fits(len(self.base_view(b))):
                form = None
            self._strided[key] = form
        return self._strided[key]

    def _lx_key(self, b: Binding) -> tuple:
        """What an LX arg's per-chunk work depends on: its access, its tile strides and
        dtype, and the op's core split over the chunk (`_split`)."""
        return (self._key(b), b.arg.tile_strides_elems, b.arg.device_dtype, self._split)

    def _lx_form(self, b: Binding) -> Strided | None:
        """An LX arg's strided form before its bounds check: its coordinate terms plus its
        core term, when the cores split the chunk var by var."""
        terms = self._terms(b)
        parts = self._arg_cores(b, per_slice=not b.arg.is_input)
        split = parts if self._cores_separable else separable(parts[0])
        if split is None:
            return None
        return Strided.of_terms(
            terms + [t * (self.lx.core_bytes // b.arg.itemsize) for t in split],
            self.chunk.shape)

    def relative(self, b: Binding) -> np.ndarray:
        """Element offsets from the arg's base at every point (broadcastable), bounds-checked.
        An LX arg's points live in the LX of the core that runs them (`cores`)."""
        key = self._key(b)
        if key not in self._relative:
            parts = self._terms(b)
            if b.lx is not None:
                parts += [t * (self.lx.core_bytes // b.arg.itemsize)
                          for t in self._arg_cores(b, per_slice=not b.arg.is_input)]
            self._relative[key] = broadcast_sum(parts)
        return self._relative[key]

    def _arg_cores(self, b: Binding, per_slice: bool) -> list[np.ndarray]:
        """`core_parts()` for LX arg b, thinned along the vars b does not use: an op split
        over a var its input does not use (a matmul split over N reading rows from LX) has
        that input replicated on each of those cores (ir/lx.py). The tag check reads one
        point per core slice (`per_slice`), proving every core holds its own copy; the
        values are then read from the first slice's core alone (the copies are equal), so
        the read does not grow by the unused var's whole range."""
        return thin_parts(self.core_parts(), self._unused_axes(b, per_slice))

    def _unused_axes(self, b: Binding, per_slice: bool) -> dict[int, np.ndarray]:
        """Axis -> kept positions, for each var b does not use that splits the cores."""
        used = {leaf.name for c in b.arg.coordinates + b.arg.tile_coordinates
                for leaf in c.free_atoms() if isinstance(leaf, Var)}
        out = {}
        for axis, v in enumerate(self.chunk.vars):
            if v in used or self.spec.iteration_space[v][1] == 1:
                continue
            keep = np.zeros(1, dtype=np.int64)
            if per_slice:
                values = np.arange(self.chunk.lo[axis], self.chunk.hi[axis])
                keep = np.flatnonzero((values % self.spec.slice_size(v) == 0) |
                                      (values == values[0]))
            out[axis] = keep
        return out

    # --- LX ---------------------------------------------------------------------------------

    def core_parts(self) -> list[np.ndarray]:
        """The core that runs each point (coreIdToWkSlice_) as broadcastable parts whose sum
        it is (`core_parts`); `_cores_separable` says whether they are a constant and one
        term per split var."""
        if self._cores is None:
            self._cores, self._cores_separable = core_parts(self.spec, self.chunk)
        return self._cores

    def cores(self) -> np.ndarray:
        """The core of each point as one array, broadcast over the split vars."""
        return broadcast_sum(self.core_parts())

    def lx_sticks(self, b: Binding) -> tuple[np.ndarray, np.ndarray, dict]:
        """(index into lx.tags, expected tag, env) at one point per stick of an LX arg: tags
        are per stick, so the lane var is thinned to one value per stick where that is
        exact (`_stick_env`); `env` holds the var values the arrays run over. The offsets
        and tile sticks depend on the access alone (`_LX_WORK`); the base and the tensor's
        tag are the binding's."""
        if _gathers(b.arg.coordinates + b.arg.tile_coordinates):    # data-dependent
            rel, tile, env = self._stick_offsets(b)
        else:
            rel, tile, env = _LX_WORK.get(("sticks", self._lx_key(b)),
                                          lambda: self._stick_offsets(b))
        sticks = (rel + b.base_elems) * b.arg.itemsize // STICK_BYTES
        sticks, tags = np.broadcast_arrays(sticks, self.lx.tag(b.lx, tile))
        return sticks, tags, env

    def _stick_offsets(self, b: Binding) -> tuple[np.ndarray, np.ndarray, dict]:
        """(element offset from the arg's base, tile stick, env) at one point per stick."""
        env, thinned = self._stick_env(b)
        cores = self._arg_cores(b, per_slice=True)
        unused = self._unused_axes(b, per_slice=True)
        if unused:                  # the vars b does not use, at one point per core slice
            env = dict(env)
            for axis, keep in unused.items():
                name = Var(self.chunk.vars[axis])
                env[name] = np.take(env[name], keep, axis=axis)
        if thinned is not None:
            cores = thin_parts(cores, dict([thinned]))
        # per stick: the lane coordinate is left out (device layouts are stick-aligned)
        rel = broadcast_sum(
            [np.asarray(evaluate(c, env), dtype=np.int64) * s for c, s in
             zip(b.arg.coordinates[:-1], b.arg.layout.device_strides_elems[:-1])] +
            [t * (self.lx.core_bytes // b.arg.itemsize) for t in cores])
        tile = broadcast_sum([np.asarray(evaluate(c, env), dtype=np.int64) * s for c, s
                               in zip(b.arg.tile_coordinates, b.arg.tile_strides_elems)])
        rel, tile = np.array(rel), np.array(tile)   # a sum of 0-d parts is a scalar
        for array in (rel, tile):
            array.flags.writeable = False       # shared by every op accessed alike
        # messages read the vars' values only; a gathered index's values are not kept
        return rel, tile, {k: v for k, v in env.items() if isinstance(k, Var)}

    def _stick_env(self, b: Binding) -> tuple[dict, tuple[int, np.ndarray] | None]:
        """The chunk's env with the lane var v (lane `Mod(v, E)` or `v`) kept only at the first
        value of each stick, and (v's axis, the kept positions); the env itself and None when
        that would be inexact: every other coordinate over v must be constant on each run
        of E values (checked on v's own range, cheap), and a core split of v must give whole
        sticks to each core."""
        arg, chunk = b.arg, self.chunk
        e = arg.layout.device_size[-1]
        inner = arg.coordinates[-1].as_atom()
        while isinstance(inner, Mod) and inner.modulus % e == 0:    # Mod(Mod(v, 128), 32)
            inner = inner.num.as_atom()
        if not isinstance(inner, Var) or inner.name not in chunk.vars:
            return self.env, None
        v, axis = inner.name, chunk.vars.index(inner.name)
        k = self.spec.iteration_space[v][1]
        values = np.arange(chunk.lo[axis], chunk.hi[axis], dtype=np.int64)
        if len(values) <= 1 or k > 1 and self.spec.slice_size(v) % e:
            return self.env, None
        keep = np.flatnonzero((values % e == 0) | (values == values[0]))
        run = np.searchsorted(keep, np.arange(len(values)), side="right") - 1
        for c in arg.coordinates[:-1] + arg.tile_coordinates:
            names = {a for a in c.free_atoms() if isinstance(a, Var)}
            if inner not in names:
                continue
            if names != {inner}:
                return self.env, None
            at = np.broadcast_to(evaluate(c, {inner: values}), values.shape)
            if not np.array_equal(at, at[keep][run]):
                return self.env, None
        env = dict(self.env)
        env[inner] = np.take(self.env[inner], keep, axis=axis)
        return env, (axis, keep)

    def mark_written(self, b: Binding, shape: tuple[int, ...]) -> None:
        sticks, tags, _ = self.lx_sticks(b)
        self.lx.tags[sticks] = tags

    def _check_lx_read(self, b: Binding) -> None:
        sticks, want, env = self.lx_sticks(b)
        have = self.lx.tags[sticks]
        bad = np.argwhere(have != want)
        if not len(bad):
            return
        at = tuple(bad[0])
        point = ", ".join(f"{v}={int(env[Var(v)].ravel()[at[axis]])}"
                          for axis, v in enumerate(self.chunk.vars)
                          if sticks.shape[axis] > 1) or "every point"
        core = int(np.broadcast_to(self._cores_at(env), sticks.shape)[at])
        owner, tile_stick = self.lx.tag_owner(int(have[at]))
        _, wanted = self.lx.tag_owner(int(want[at]))
        if owner is None:
            what = "that no op wrote on this core"
        elif owner != b.lx.name:
            what = f"that holds tensor '{owner}' (a stale or overlapping LX plan)"
        else:
            what = (f"that holds stick {tile_stick} of the tile, not stick {wanted}: the op "
                    f"that wrote it split the tile over the cores differently (each core "
                    f"reads only its own LX)")
        raise SimulatorFault(
            f"{self.spec.describe()} {self.where}: core {core} reads LX arg '{b.arg.name}' "
            f"(LX tensor '{b.lx.name}' at offset {b.lx.address}) at {point}, a stick {what}")

    def _cores_at(self, env: dict) -> np.ndarray:
        """The core of each point of `env` (the chunk's, or one thinned by `_stick_env`)."""
        cores = self.cores()
        for axis, v in enumerate(self.chunk.vars):
            n = env[Var(v)].shape[axis]
            if cores.ndim and cores.shape[axis] > 1 and n != cores.shape[axis]:
                keep = np.searchsorted(self.env[Var(v)].ravel(), env[Var(v)].ravel())
                cores = np.take(cores, keep, axis=axis)
        return cores


class _Memo:
    """A memo of per-access work bounded in bytes (least recently used out first). LX
    accesses are keyed by the arg's access (`ChunkAccess._key`), its dtype and the op's core
    split over the chunk: a model's layers repeat their LX accesses at other offsets, and
    each op rebuilt its core maps, strided forms and per-stick offsets (a third of a
    Llama-3.2-1B prefill's elementwise time). That program keeps 82 entries, 3.5 MB."""

    ENTRY_BYTES = 1024          # what an entry costs beside its arrays

    def __init__(self, limit_bytes: int):
        self._limit, self._bytes, self._items = limit_bytes, 0, {}

    def get(self, key, make):
        items = self._items
        if key in items:
            value, size = items.pop(key)
        else:
            value = make()
            size = self.ENTRY_BYTES + _array_bytes(value)
            self._bytes += size
            while items and self._bytes > self._limit:
                self._bytes -= items.pop(next(iter(items)))[1]
        items[key] = value, size
        return value


def _array_bytes(value) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (tuple, list)):
        return sum(map(_array_bytes, value))
    if isinstance(value, dict):
        return sum(map(_array_bytes, value.values()))
    return 0


_LX_WORK = _Memo(64 << 20)
_OUT_OF_RANGE = Strided(0, (), ())      # `_hbm_form`: some coordinate leaves its dim


def _gathers(coordinates: tuple[Lin, ...]) -> bool:
    return any(isinstance(leaf, Indirect) for c in coordinates for leaf in c.free_atoms())


@lru_cache(maxsize=1 << 12)
def _hbm_form(coordinates: tuple[Lin, ...], layout: DeviceLayout, tile_coords: tuple[int, ...],
              chunk: Chunk) -> Strided | None:
    """An HBM arg's strided form over `chunk` before its bounds check (`Strided.fits`), or
    `_OUT_OF_RANGE`: a function of the access alone, not of where the arg lives, so a
    transformer's layers, which repeat their accesses at other addresses, find each one
    computed."""
    terms, bad = _offset_terms(coordinates, layout, tile_coords, chunk.env())
    return _OUT_OF_RANGE if bad is not None else Strided.of_terms(terms, chunk.shape)


def _offset_terms(coordinates: tuple[Lin, ...], layout: DeviceLayout,
                  tile_coords: tuple[int, ...], env: dict
                  ) -> tuple[list[np.ndarray], tuple[int, np.ndarray] | None]:
    """Per device dim, (coordinate + tile base) x stride on `env`, and None; or, at the first
    dim whose coordinate leaves 0..size-1, (that dim, its values) in place of None."""
    terms = []
    for j, (coord, size, stride) in enumerate(zip(coordinates, layout.device_size,
                                                  layout.device_strides_elems)):
        value = np.asarray(evaluate(coord, env), dtype=np.int64) + tile_coords[j]
        if value.size and (value.min() < 0 or value.max() >= size):
            return terms, (j, value)
        terms.append(value * stride)
    return terms, None


def one_to_one(spec: OpSpec, b: Binding, chunk: Chunk) -> bool | None:
    """Whether the arg's coordinates map the chunk's points one-to-one (reduced vars excluded);
    None when no cheap proof applies.

    Proof used: every coordinate depends on at most one var, and for each var the coordinates
    that use it take distinct value tuples along its range; the device coordinate tuple then
    splits into independent per-var blocks. That covers every layout-derived access; anything
    else is left to an exact count. An LX arg's points also carry their core (each core's LX
    is its own arena), so there each core's slice of a split var is checked on its own.
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
        coords = tuple(by_var.get(v, ()))
        k = spec.iteration_space[v][1]
        if b.lx is not None and k > 1:
            p = spec.slice_size(v)
            if not all(_var_one_to_one(coords, v, max(lo, s), min(hi, s + p))
                       for s in range(lo - lo % p, hi, p) if min(hi, s + p) - max(lo, s) > 1):
                return False
        elif not _var_one_to_one(coords, v, lo, hi):
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
    coord = arg.coordinate_texts()[dim]
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
