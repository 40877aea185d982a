"""The loaded, validated form of an output directory: what the simulator executes from.

`program.py` builds these from the documents of `manifest.json` and `sdsc_<n>.json`
(docs/formats.md), schema-checked when they come from files; everything downstream (memory,
transfer, kernels, cost) reads only these objects. Coordinates are `Lin` expressions, built once
by the readers, so no kernel ever parses text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from functools import cached_property

from spyrec.costmodel import DEFAULT_PARAMS, CostParams
from spyrec.errors import InputFileError
from spyrec.indexing import Lin, Var, mod, substitute, var
from spyrec.layout import DeviceLayout
from spyrec.layout.dtypes import DEVICE_DTYPES


@dataclass(frozen=True)
class Execute:
    """One `sdsc_execute` as it runs: the op's JSON file and its operand values (addresses).
    Defined here rather than in bundle.py so that using one does not import xDSL."""

    file: str
    operands: tuple[int, ...]
    location: str        # "bundle.mlir:LINE:COL" of the sdsc_execute, for messages
    # Operand k binds the symbol id symbol_ids[k] (negative) of the op's symbolic `data_`
    # entries (tiling contract §2); empty outside loops.
    symbol_ids: tuple[int, ...] = ()
    # (induction var, value) of every enclosing scf.for, outermost first: ("i_0", 1), ...
    loop: tuple[tuple[str, int], ...] = ()

    def iteration(self) -> str:
        """`i_0=1, i_1=3` for messages; empty outside loops."""
        return ", ".join(f"{name}={value}" for name, value in self.loop)

    def where(self) -> str:
        """`at iteration i_0=1, i_1=3 (bundle.mlir:12:9)`, or `at bundle.mlir:3:5`."""
        if self.loop:
            return f"at iteration {self.iteration()} ({self.location})"
        return f"at {self.location}"


@dataclass(frozen=True)
class TensorSpec:
    """One program tensor of `manifest.json`: its host form and where it lives on the device."""

    name: str
    role: str                   # input | constant | intermediate | output
    host_shape: tuple[int, ...]
    host_dtype: str             # torch name without the prefix: float16, bfloat16, int64, ...
    layout: DeviceLayout
    hbm_address: int | None     # None: the tensor lives in LX (lx_address)
    device_bytes: int
    source: str | None
    lx_address: int | None = None          # byte offset in every core's LX scratchpad
    lx_bytes_per_core: int | None = None   # each core's slice
    # an input's, output's or folded constant's dims of a symbolic length: (host dim,
    # symbol); host_shape has the symbol's maximum there
    symbolic_dims: tuple[tuple[int, str], ...] = ()

    @property
    def numel(self) -> int:
        return math.prod(self.host_shape)

    @property
    def in_lx(self) -> bool:
        return self.lx_address is not None


@dataclass(frozen=True)
class ValueRead:
    """A symbolic length read at run time (manifest `symbols[].value`): element `index` (flat)
    of input `input`, plus `offset`, clamped to the symbol's minimum..maximum."""

    input: str
    index: int
    offset: int


@dataclass(frozen=True)
class KernelSpec:
    name: str
    bundle: str                 # file name of the bundle, relative to the output directory
    ops: tuple[str, ...]        # the sdsc files this kernel's bundle may execute


@dataclass(frozen=True)
class Manifest:
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    tensors: dict[str, TensorSpec]   # manifest order
    kernels: tuple[KernelSpec, ...]
    hbm_bytes: int
    mutated_buffers: tuple[tuple[str, str], ...] = ()   # (buffer FQN, tensor name)
    lx_args: dict = field(default_factory=dict)   # file -> {arg index (str): LX tensor name}
    hbm_args: dict = field(default_factory=dict)  # file -> {arg index (str): HBM tensor name}
    # symbolic length -> its admissible values (`in` tests one); the program is at the maxima
    symbols: dict[str, range] = field(default_factory=dict)
    # the symbolic lengths read from an input's value at run time, not from a shape
    read_from: dict[str, "ValueRead"] = field(default_factory=dict)
    # symbol -> its `min_shares` steps ((up to length, share), ...; absent: none): each busy
    # core of a sized op runs at least the share of the first step reaching the length
    min_shares: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    # the cost model's parameters the program was compiled with (manifest `cost_params`)
    cost_params: CostParams = DEFAULT_PARAMS

    def maxima(self) -> dict[str, int]:
        """Every symbolic length at its maximum: what the files are planned for."""
        return {name: values[-1] for name, values in self.symbols.items()}


@dataclass(frozen=True)
class ArgSpec:
    """One tensor argument of a device op (formats.md `args[]`)."""

    name: str
    is_input: bool
    arg_index: int
    layout: DeviceLayout
    coordinates: tuple[Lin, ...]     # one per device dim, relative to the arg's base
    # the coordinates as the OpSpec's maker wrote them (tests state them as text); None: printed
    coordinate_text: tuple[str, ...] | None
    hbm_address: int | None          # byte address of device element 0 (None for LX)
    lx_offset: int | None
    operand: int | None              # sdsc_execute operand that supplies the base, if any
    per_tile_fixed: bool
    is_index: bool = False           # read through IndirectAccess by another arg
    span_bytes: int | None = None    # bytes from the base to the end of the last stick touched
    # Symbolic HBM start (isStartAddrSymbolic_): each core's symbol id, resolved per execution
    # from the sdsc_execute operands; hbm_address is None then.
    symbols: tuple[int, ...] | None = None
    # Bytes from the arg's base to each core's first element (F §4.2 step 6), for checking
    # resolved symbolic starts; one entry per core.
    core_origin_bytes: tuple[int, ...] = ()
    # LX args: the element offset, in the tile's unsplit layout, of each point: the identity
    # of the data a stick holds, so a reader with another layout or split is caught.
    tile_coordinates: tuple[Lin, ...] = ()
    tile_strides_elems: tuple[int, ...] = ()
    # Of an op whose size follows a symbolic length (`OpSpec.lengths`): an LX arg's
    # coordinates before they were made core-local (`OpSpec.at` localizes them again for a
    # length's per-core share), and a symbolic arg's bytes per slice of each split label it
    # walks (its `core_origin_bytes` at another length).
    global_coordinates: tuple[Lin, ...] = ()
    origin_steps: tuple[tuple[str, int], ...] = ()

    @property
    def in_lx(self) -> bool:
        return self.lx_offset is not None

    def coordinate_texts(self) -> tuple[str, ...]:
        """The coordinates as written, or printed (only messages need them: printing every
        arg's on load was a tenth of reading a SuperDSC file)."""
        if self.coordinate_text is not None:
            return self.coordinate_text
        return tuple(str(c) for c in self.coordinates)

    @property
    def itemsize(self) -> int:
        return self.layout.dtype.itemsize

    @property
    def device_dtype(self) -> str:
        return self.layout.device_dtype

    @property
    def device_elems(self) -> int:
        return self.layout.device_elems

    @property
    def extent_bytes(self) -> int:
        """Bytes from the base to the end of the last stick the arg can touch (by default its
        whole device layout)."""
        return self.layout.device_bytes if self.span_bytes is None else self.span_bytes


@dataclass(frozen=True)
class CoreSplit:
    """The slice of the iteration space one core runs (half-open ranges per var)."""

    core: int
    ranges: dict[str, tuple[int, int]]
    arg_start_bytes: tuple[int | None, ...]   # None: data-dependent (gathered arg)

    @property
    def points(self) -> int:
        return math.prod(hi - lo for lo, hi in self.ranges.values())


@dataclass(frozen=True)
class OpSpec:
    """One executed device op (`sdsc_<n>.json`)."""

    file: str
    index: int
    op: str
    name: str
    source: str | None
    is_reduction: bool
    iteration_space: dict[str, tuple[int, int]]   # var -> (range, core slices), JSON order
    reduced: tuple[str, ...]
    constants: dict = field(default_factory=dict)
    args: tuple[ArgSpec, ...] = ()
    cores: tuple[CoreSplit, ...] = ()
    # reduced var -> (first masked coordinate, count): padding lanes read as the mask constant
    masking: dict = field(default_factory=dict)
    # var -> symbolic length it runs (`dimToSymbolMapping_`): the spec is at the symbol's
    # maximum; `at` gives it at another length
    lengths: dict[str, str] = field(default_factory=dict)
    # var -> values per core slice where that is not range / split (`at`: a short length's
    # minimum share, the slices past the length idle, the last busy one maybe short)
    shares: dict[str, int] = field(default_factory=dict)
    # the fused SuperDSC file this op is one compute op of (its `file` is `<that>#<j>`),
    # None for a one-op file (sim/fused.py)
    fused: str | None = None

    def slice_size(self, v: str) -> int:
        """Values of var `v` in one core's slice (the last busy one may hold fewer)."""
        n, k = self.iteration_space[v]
        return self.shares.get(v, n // k)

    @property
    def vars(self) -> tuple[str, ...]:
        """Iteration variables in axis order: the order every kernel array uses."""
        return tuple(self.iteration_space)

    @property
    def extents(self) -> tuple[int, ...]:
        return tuple(n for n, _ in self.iteration_space.values())

    @cached_property
    def split_signature(self) -> tuple:
        """The iteration space and its per-core split as one hashable value: what the cores
        that run each point depend on, so ops alike in it (a model's layers) share the
        simulator's per-access work (`sim/access.py`)."""
        return (tuple(self.iteration_space.items()),
                tuple((c.core, tuple(c.ranges.items())) for c in self.cores))

    @property
    def points(self) -> int:
        return math.prod(self.extents)

    @property
    def replica_vars(self) -> tuple[str, ...]:
        """The dims of a replicated op's copies (docs/formats.md, replicas): addressed by no
        arg, reducing nothing and split over all their values, so each core runs one value
        (the whole op once, into its own LX). An LX arg's local coordinates drop a var split
        one value per core; its tile coordinates keep it."""
        used = {leaf.name for a in self.args for c in a.coordinates + a.tile_coordinates
                for leaf in c.free_atoms() if isinstance(leaf, Var)}
        return tuple(v for v, (n, k) in self.iteration_space.items()
                     if v not in used and v not in self.reduced and n == k > 1)

    @property
    def index_args(self) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if a.is_index)

    @property
    def value_inputs(self) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if a.is_input and not a.is_index)

    @property
    def output(self) -> ArgSpec:
        return self.args[-1]

    def at(self, lengths: dict[str, int],
           min_shares: dict[str, tuple[tuple[int, int], ...]] | None = None) -> "OpSpec":
        """This op at symbolic `lengths` (self, when it runs no symbolic length): each var
        of `self.lengths` runs its length, split k ways: core slice j runs values
        [j*s, (j+1)*s) of it cut at the length, s = max(L / k, the symbol's minimum share at
        L) (manifest `min_shares`, `share_floor`; the slices past the length idle); LX args are
        core-local over that share, and a symbolic arg's per-core origins move with it.
        Layouts and addresses stay the maximum's."""
        sizes = {v: lengths[s] for v, s in self.lengths.items() if s in lengths}
        if not sizes or all(self.iteration_space[v][0] == n for v, n in sizes.items()):
            return self
        shares = {}
        for v, n in sizes.items():
            top, k = self.iteration_space[v]
            floor = share_floor((min_shares or {}).get(self.lengths[v], ()), n)
            shares[v] = slice_share(n, k, floor)
            if not fits_shares(n, top, k, shares[v]):
                raise InputFileError(f"{self.describe()}: {v} runs {self.lengths[v]} = {n}, "
                                     f"which its {k} cores cannot share in slices of "
                                     f"{shares[v]} values within the {top // k} each holds at "
                                     f"its maximum {top}")
        space = {v: ((sizes[v], k) if v in sizes else (n, k))
                 for v, (n, k) in self.iteration_space.items()}
        # var -> (share, share at the maximum): what a slice's origin scales by
        scale = {v: (shares[v], self.iteration_space[v][0] // self.iteration_space[v][1])
                 for v in sizes}
        slices = [{v: c.ranges[v][0] // top for v, (_, top) in scale.items()}
                  for c in self.cores]
        pieces = {v: shares.get(v, n // k) for v, (n, k) in self.iteration_space.items()
                  if k > 1}
        args = tuple(_arg_at(a, pieces, scale, slices) for a in self.args)
        cores = tuple(CoreSplit(c.core, _ranges_at(c.ranges, sizes, shares, scale),
                                _starts_at(c, args, slices[i], scale))
                      for i, c in enumerate(self.cores))
        uneven = {v: n for v, n in shares.items() if n * space[v][1] != space[v][0]}
        return _replace(self, iteration_space=space, cores=cores, args=args, shares=uneven)

    def describe(self) -> str:
        """How messages name this op: file, op kind, FX name and source line."""
        where = f", {self.source}" if self.source else ""
        return f"{self.file} ({self.op} '{self.name}'{where})"


def share_floor(steps: tuple[tuple[int, int], ...], length: int) -> int:
    """A symbol's minimum share at `length` (manifest `symbols[].min_shares`): the share of
    the first (up to length, share) step that reaches it, else 0."""
    return next((m for upto, m in steps if length <= upto), 0)


def slice_share(length: int, cores: int, min_share: int = 0) -> int:
    """Values each busy slice of a length split `cores` ways runs: length / cores, at least
    the symbol's minimum share at that length (`share_floor`; the slices past the length
    idle)."""
    return length if cores <= 1 else max(length // cores, min_share)


def fits_shares(length: int, top: int, cores: int, share: int) -> bool:
    """Whether slices of `share` values cut `length` (at most `top`, split `cores` ways) so
    that each fits the slice a core holds at `top`: length / cores exactly when that is the
    share, else a minimum share above it (the last busy slice may then end at the length,
    short of a whole share)."""
    exact = share > length // cores or length % cores == 0
    return share > 0 and exact and length <= top and share <= top // cores


def _ranges_at(ranges: dict[str, tuple[int, int]], sizes: dict[str, int],
               shares: dict[str, int], scale: dict) -> dict:
    """A core's ranges at other lengths: a var of `sizes` (var -> length) runs the same slice
    number of its `shares` (var -> values per slice), cut at the length (empty past it)."""
    out = {}
    for v, (lo, hi) in ranges.items():
        if v not in sizes:
            out[v] = (lo, hi)
            continue
        j = lo // scale[v][1]
        out[v] = (min(j * shares[v], sizes[v]), min((j + 1) * shares[v], sizes[v]))
    return out


def _arg_at(arg: ArgSpec, pieces: dict[str, int], scale: dict, slices: list[dict[str, int]]
            ) -> ArgSpec:
    """`arg` of an op run at other lengths (`OpSpec.at`; `pieces`: each split var's values
    per slice there; `scale`: var -> (share, share at the maximum) of each var that runs a
    symbolic length; `slices`: per core, its slice number of each such var)."""
    if arg.global_coordinates:
        local = {Var(v): mod(var(v), n) for v, n in pieces.items()}
        return _replace(arg, coordinates=tuple(substitute(c, local)
                                               for c in arg.global_coordinates))
    if arg.symbols is None or not any(v in scale for v, _ in arg.origin_steps):
        return arg
    origins = tuple(o - _origin_shift(arg, s, scale)
                    for o, s in zip(arg.core_origin_bytes, slices))
    return _replace(arg, core_origin_bytes=origins)


def _origin_shift(arg: ArgSpec, slices: dict[str, int], scale: dict) -> int:
    """Bytes a core's first element moves back when its shares shrink (`scale`: var ->
    (share, share at the maximum); `slices`: its slice number of each)."""
    return sum(slices[v] * (step - step * scale[v][0] // scale[v][1])
               for v, step in arg.origin_steps if v in scale)


def _starts_at(core: CoreSplit, args: tuple[ArgSpec, ...], slices: dict[str, int],
              scale: dict) -> tuple[int | None, ...]:
    """A core's `arg_start_bytes` at another length: an arg with a fixed start keeps it
    unless it walks a var whose share moved (then its start, like a symbolic arg's origin,
    moves by the share's change); None stays None (LX, symbolic, gathered)."""
    return tuple(None if start is None else start - _origin_shift(a, slices, scale)
                 for start, a in zip(core.arg_start_bytes, args))


def device_layout(label: str, size: list, stride_map: list, device_dtype: str) -> DeviceLayout:
    """A DeviceLayout from a document's fields, after the checks that DeviceLayout itself only
    asserts (`label` says where, for the message)."""
    if len(size) != len(stride_map):
        raise InputFileError(f"{label}: device_size {size} and stride_map {stride_map} differ "
                             f"in length")
    lanes = DEVICE_DTYPES[device_dtype].elems_per_stick
    if size[-1] != lanes:
        raise InputFileError(f"{label}: the last device dim holds the stick lanes and must be "
                             f"{lanes} for {device_dtype}, got device_size {size}")
    return DeviceLayout(tuple(size), tuple(stride_map), device_dtype)
