"""The one intermediate representation: buffers, device operations, and the graph holding them.

Every `Operation` is a single device op (one OpSpec): a named op from the device vocabulary
(docs/formats.md), an iteration space, the accesses it reads and the one it writes. Views never
become operations: they are folded into each access's index, a flat host-element index into the
accessed buffer's contiguous storage, written in the op's iteration variables (`c0, c1, …` for
output dims, then `r0, r1, …` for reduced dims). Gathers read index tensors through
`index_inputs`; the gathered value appears in an input index as `Indirect('<index buffer>')`.

What passes write are declared fields (`Buffer.layout`, `Buffer.hbm_address`,
`Operation.core_splits`); nothing is attached at run time. The IR is a plain record (see
`ir/ops.py` for why there is no ops-handler layer): `ir/printer.py` writes every field as text,
`ir/parser.py` reads it back, and equality is defined so that `parse(print(g)) == g`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Iterator

import numpy as np

from spyrec.indexing import Indirect, Lin, Ranges, Var, intern
from spyrec.layout import DeviceLayout, contiguous_strides
from spyrec.ir.symbols import SymLength

ROLES = ("input", "constant", "intermediate", "output")


@dataclass
class Buffer:
    """A tensor in device memory: host shape and dtype, and what the passes decide for it."""

    name: str
    host_size: tuple[int, ...]
    host_dtype: str
    role: str
    source: str | None = None
    layout: DeviceLayout | None = None      # written by stick_layout
    hbm_address: int | None = None          # written by memory_planning
    # written by coarse_tiling: the buffer holds one tile of a loop body's intermediate (its
    # host_size is the tile's); accesses to it never advance with the loop (DESIGN §4
    # `per_tile_fixed`), so it can live in LX at one fixed address for every iteration
    per_tile: bool = False
    lx_address: int | None = None           # written by scratchpad_planning: per-core LX offset

    def __post_init__(self) -> None:
        assert self.role in ROLES, self.role

    @property
    def host_strides(self) -> tuple[int, ...]:
        return contiguous_strides(self.host_size)

    @property
    def numel(self) -> int:
        return math.prod(self.host_size)


@dataclass(frozen=True)
class Access:
    """A read or write of `buffer` at flat host-element index `index` (iteration variables)."""

    buffer: str
    index: Lin

    def __post_init__(self) -> None:
        # one object per distinct index: the passes' memo keys hold it (ranges.intern)
        if type(self.index) is Lin:
            object.__setattr__(self, "index", intern(self.index))


@dataclass(frozen=True)
class TripSpan:
    """The iterations a loop runs as a function of the directly enclosing loop's index i:
    j in [lo(i), hi(i)), lo(i) = clamp(a*i + b, 0, count) for `start` = (a, b), hi(i) likewise
    for `stop`. A causal K/V loop runs the key tiles j <= i (`TripSpan((0, 0), (1, 1))`), a
    sliding window of w tiles also starts at i + 1 - w. An empty range (hi <= lo) runs
    nothing. Tile j still sits where trip j of the rectangular loop does (`advance * j`), so
    `Loop.count` stays the static maximum that allocations and address proofs use."""

    start: tuple[int, int]
    stop: tuple[int, int]

    def trips(self, outer: int, count: int) -> range:
        """The iterations run while the enclosing loop is at `outer`."""
        return range(_clamped(self.start, outer, count), _clamped(self.stop, outer, count))


def _clamped(line: tuple[int, int], i: int, count: int) -> int:
    return min(max(line[0] * i + line[1], 0), count)


@dataclass(frozen=True)
class LoopBound:
    """A trip count set by a symbolic length (issue 30): `symbol`'s length over `per_trip` (the
    tile's extent along the symbolic dim), rounded up: exact for a shape's length, which
    the tile divides; a length read from a value ends inside its last tile, which its mask
    covers. `Loop.count` stays the count at the symbol's maximum, which every plan and
    proof uses."""

    symbol: str
    per_trip: int
    # the last trip may pass the length (the tile is whole granules, not a divisor of the
    # granularity): only a flash query loop, whose extra rows read their own padding query
    # rows and write the output's padding, which no op reads (attention.query_tile_allowed)
    past_end: bool = False

    def count(self, length: int) -> int:
        return -(-length // self.per_trip)


@dataclass(frozen=True)
class Loop:
    """One level of a counted loop around ops (coarse tiling): `count` iterations, dividing
    the op's vars `tiled` (the op's ranges are then one tile's extents); with a `span`, only
    the iterations it gives for the enclosing loop's index (None: all `count`).

    `key` names the loop itself ("g0.1": group 0, level 1): ops of one loop share it, while
    each op lists its own tiled vars (ops of one loop may call the tiled dim c0 and c1;
    reference/G §5 P5), so nesting compares `identity`, never var lists."""

    count: int
    tiled: tuple[str, ...]
    key: str = ""
    span: TripSpan | None = None
    bound: LoopBound | None = None      # a symbolic trip count (count: at the maximum)

    @property
    def identity(self) -> tuple:
        """What makes two ops share this loop: key, count, span and bound (not their tiled
        vars)."""
        return self.key, self.count, self.span, self.bound

    def trips(self, outer: int) -> range:
        """The iterations run while the directly enclosing loop is at `outer`."""
        return range(self.count) if self.span is None else self.span.trips(outer, self.count)


def loop_identity(loops: tuple[Loop, ...]) -> tuple:
    """What makes two ops share a nest of loops (outermost first): each level's identity."""
    return tuple(loop.identity for loop in loops)


@lru_cache(maxsize=1 << 12)
def nest_trips(loops: tuple[Loop, ...]) -> int:
    """How often a body inside `loops` (outermost first) runs: the product of the counts for
    rectangular loops, else the sum over the enclosing iterations of each span's trips. This
    is the one number per op the planners take (an op priced per trip costs this many): exact,
    the innermost loop's mean trips per run times the runs, so a causal loop of n tiles
    counts n(n+1)/2, not n²."""
    if all(loop.span is None for loop in loops):
        return math.prod(loop.count for loop in loops)
    runs = {0: 1}       # index of the level so far -> how often it runs (level 0: no span)
    for loop in loops:
        here: dict[int, int] = {}
        for outer, times in runs.items():
            for j in loop.trips(outer):
                here[j] = here.get(j, 0) + times
        runs = here
    return sum(runs.values())


# The name of a replicated op's copies dim in `Operation.core_ranges` and core splits: no
# iteration var may take it (ir/verify.py).
REPLICA_VAR = "rep"


def with_copies(ranges: tuple[tuple[str, int], ...], replicas: int, fastest: bool
                ) -> tuple[tuple[str, int], ...]:
    """Iteration `ranges` with `replicas` copies as one more dim, first (fastest in core
    order) or last: `Operation.core_ranges`."""
    return ranges if replicas == 1 else _copies_added(ranges, replicas, fastest)


@lru_cache(maxsize=1 << 12)
def _copies_added(ranges: tuple[tuple[str, int], ...], replicas: int, fastest: bool
                  ) -> tuple[tuple[str, int], ...]:
    """`with_copies` of a replicated op, one tuple per value: planners key memos on core
    ranges, some by identity."""
    copies = ((REPLICA_VAR, replicas),)
    return copies + ranges if fastest else ranges + copies


@dataclass(eq=False)
class Operation:
    """One device op over an iteration space (see docs/formats.md for the op vocabulary).

    Equal when every field is; `constants` compare by their JSON text (what codegen writes),
    so a NaN fill value equals itself and `1` differs from `1.0` and `True`.
    """

    name: str
    op: str
    ranges: tuple[tuple[str, int], ...]
    inputs: tuple[Access, ...]
    output: Access
    reduced: tuple[str, ...] = ()
    constants: dict = field(default_factory=dict)
    index_inputs: tuple[Access, ...] = ()
    source: str | None = None
    core_splits: dict[str, int] | None = None   # written by work_division
    loops: tuple[Loop, ...] = ()                 # enclosing loops, outermost first (tiling)
    # (low, size) per index input (parallel to index_inputs; last so that positional
    # constructors keep working): its values index a dim of
    # `size`; valid values are low..size-1, and low = -size means negatives wrap once
    # (advanced indexing), low = 0 that they are errors (index_select, gather, scatter, as
    # eager). gather_coordinates turns this into a checked `wrapindex` op per index tensor.
    index_bounds: tuple[tuple[int, int], ...] = ()
    # the FX node this op was lowered from and that node's module path (`nn_module_stack`),
    # which tiling configs select ops by (DESIGN §6); ops a pass adds inherit them
    node: str | None = None
    scope: str = ""
    # how many core groups compute the op alike (work_division replicates a writer so that
    # each group of its readers' cores finds its slice in its own LX; ir/lx.py), and whether
    # the copies are the fastest dim of the core order (else the slowest): `core_ranges`
    replicas: int = 1
    replicas_fastest: bool = False
    # (var, symbol) per iteration variable that runs a symbolic length's whole extent
    # (issue 30): `ranges` holds the symbol's maximum, and at a length L the op runs L values
    # of it, each core the same share of them (work_division splits such a var only by a
    # divisor of the granularity). The op's own size follows the length: no loop around it
    lengths: tuple[tuple[str, str], ...] = ()
    # written by fusion: the fused SuperDSC this op is one `computeOp_` of (ops of one group
    # are consecutive, in one loop nest, their intermediates in LX); "" for a one-op file
    fused: str = ""

    __hash__ = None  # mutable (passes write core_splits)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Operation):
            return NotImplemented
        return self._key() == other._key()

    def _key(self) -> tuple:
        return (self.name, self.op, self.ranges, self.inputs, self.output, self.reduced,
                constants_text(self.constants), self.index_inputs, self.source,
                self.core_splits, self.loops, self.index_bounds, self.node, self.scope,
                self.replicas, self.replicas_fastest, self.lengths, self.fused)

    @property
    def is_reduction(self) -> bool:
        return bool(self.reduced)

    def reads(self) -> tuple[Access, ...]:
        """Every access the op reads: index tensors, then value inputs."""
        return self.index_inputs + self.inputs

    def writes(self) -> tuple[Access, ...]:
        return (self.output,)

    @property
    def core_ranges(self) -> tuple[tuple[str, int], ...]:
        """The dims the cores divide, in core order: the iteration ranges, and for a
        replicated op its copies as one more dim `REPLICA_VAR` (fastest or slowest). Core
        splits name these dims; codegen writes them as the iteration space (`N_`)."""
        if self.replicas == 1:          # (inline: planners ask in their innermost loops)
            return self.ranges
        return _copies_added(self.ranges, self.replicas, self.replicas_fastest)

    @cached_property
    def var_ranges(self) -> Ranges:
        """Each iteration variable's inclusive range, plus each gathered value's where its
        index bound says it cannot be negative (after gather_coordinates: 0..size-1)."""
        ranges = {Var(v): (0, n - 1) for v, n in self.ranges}
        for access, (low, size) in zip(self.index_inputs, self.index_bounds):
            if low >= 0:
                ranges[Indirect(access.buffer)] = (low, size - 1)
        return intern(Ranges(ranges))   # one object per value: memo keys hold it

    def accesses(self) -> Iterator[tuple[str, Access]]:
        """(role, access) in argument order: index tensors, inputs, then the output."""
        for a in self.index_inputs:
            yield "index", a
        for a in self.inputs:
            yield "input", a
        yield "output", self.output

    def gathered(self) -> set[str]:
        """Names of the index buffers whose values appear in this op's indices (inputs, and
        the output of a scatter)."""
        return {leaf.tensor for a in self.inputs + (self.output,)
                for leaf in a.index.free_atoms() if isinstance(leaf, Indirect)}

    @property
    def is_scatter(self) -> bool:
        """Whether the output index holds an `Indirect` (a write at gathered positions)."""
        return any(isinstance(leaf, Indirect) for leaf in self.output.index.free_atoms())


def outer_loop_spans(ops: list[Operation]) -> list[tuple[int, int]]:
    """Per op, the first and last op index of the outermost loop instance it runs in (a run
    of consecutive ops sharing their outermost loop's identity, as codegen nests them);
    (i, i) for an op outside loops. A buffer touched inside a loop is live over the whole
    span, since every iteration runs the whole body."""
    spans = [(i, i) for i in range(len(ops))]
    i = 0
    while i < len(ops):
        if not ops[i].loops:
            i += 1
            continue
        head = ops[i].loops[0].identity
        j = i
        while j + 1 < len(ops) and ops[j + 1].loops and ops[j + 1].loops[0].identity == head:
            j += 1
        spans[i:j + 1] = [(i, j)] * (j + 1 - i)
        i = j + 1
    return spans


def constants_text(constants: dict) -> str:
    """An op's constants as canonical JSON text (key order kept: codegen writes that order)."""
    return json.dumps(constants, allow_nan=True, ensure_ascii=False)


@dataclass(eq=False)
class Graph:
    """A whole program: buffers by name, operations in execution order, and its signature.

    Equal when buffers (in order), ops, signature and mutated buffers are, and the constant
    values are the same arrays (name, dtype, shape, bytes). The text form does not carry
    constant values (weights are data, like MLIR's elided resources): `ir.parser.parse` takes
    them as an argument.
    """

    buffers: dict[str, Buffer] = field(default_factory=dict)
    ops: list[Operation] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    # buffer FQN -> the output buffer holding its new value (a KV cache updated in place)
    mutated_buffers: dict[str, str] = field(default_factory=dict)
    # symbolic lengths by name (ir/symbols.py); the graph is their instance at the maximum
    symbols: dict[str, SymLength] = field(default_factory=dict)
    # input or output buffer -> {host dim: symbol} for the dims of a symbolic length
    symbolic_dims: dict[str, dict[int, str]] = field(default_factory=dict)

    __hash__ = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (list(self.buffers.items()) == list(other.buffers.items())
                and self.ops == other.ops and self.inputs == other.inputs
                and self.outputs == other.outputs
                and self.mutated_buffers == other.mutated_buffers
                and self.symbols == other.symbols
                and self.symbolic_dims == other.symbolic_dims
                and _same_arrays(self.constants, other.constants))

    def add_buffer(self, buf: Buffer) -> Buffer:
        assert buf.name not in self.buffers, buf.name
        self.buffers[buf.name] = buf
        return buf

    def fresh_name(self, base: str) -> str:
        """`base`, or `base__2`, `base__3`, … — the first name not yet used by a buffer
        (`__`, not FX's `_<k>`, marks a derived name: spyrec/frontend/names.py)."""
        if base not in self.buffers:
            return base
        k = 2
        while f"{base}__{k}" in self.buffers:
            k += 1
        return f"{base}__{k}"

    def consumers(self, buffer: str) -> list[Operation]:
        return [op for op in self.ops if any(a.buffer == buffer for a in op.reads())]


def _same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    if list(a) != list(b):
        return False
    return all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
               for x, y in ((np.asarray(a[k]), np.asarray(b[k])) for k in a))
