"""The IR verifier: what every graph must satisfy between passes (xDSL's contract: a pass may
assume a valid graph and must leave one).

`verify(graph, facts)` returns every problem as one line of text naming the buffer or the op
and the access (XLA's `Verify(out)`: tests compare exact messages); `check(graph, after,
facts)` raises an `InternalError` (exit 70) naming the pass after which the graph broke, which
is how `--verify-each` and the tests call it. Checks are tables of small generator functions,
so a new invariant is one function and one table entry; per buffer and per op, the first check
that finds a problem is the one reported (later checks assume what earlier ones establish):

- `BUFFER_CHECKS` (per buffer): a host dtype the device stores, sizes, a layout of the right
  device dtype that tiles the host tensor, an aligned address;
- `OP_CHECKS` (per op): a device op of the vocabulary with at most its arity of operands;
  ranges (`rep` reserved) and a positive count of replicas; reduced vars among them; every
  access names a buffer, uses only the op's variables and stays inside its buffer — host
  elements, and device coordinates inside `device_size` once the buffer has a layout (bounds
  from `spyrec.indexing`, the one place bounds are computed); gathers read declared index tensors; compute ops read stick-compatible operands
  (layouts consistent across the op: stick_layout's guarantee); core splits divide their
  core ranges (a replicated op's copies split over all of them, its output not in HBM),
  split a reduced var only where partials combine (outside loops, output in HBM), give each
  core whole output sticks and use at most the device's cores; each core addresses at most
  the 256 MiB span of device memory per argument (`check_span`, ir/span.py);
  loops (`check_loops`: keys, tiled vars, trip spans only inside another loop, full-buffer
  accesses inside the buffer on every iteration and, where the loops translate them, equal
  to the untiled access on every trip: `tiled_access_problem`);
- `GRAPH_CHECKS` (whole graph): the signature and constants, nothing read before it is
  written, the facts established by earlier passes (registry contracts) hold everywhere,
  buffers that are live at the same time do not share device memory, and the ops of one loop
  key agree on its count and trip span.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Iterator

from spyrec.device import ALIGN_BYTES, LX_USABLE_BYTES_PER_CORE
from spyrec.device import CORES as DEVICE_CORES
from spyrec.errors import InternalError
from spyrec.indexing import Indirect, Lin, Ranges, Var, evaluate, substitute, value_range
from spyrec.indexing.simplify import simplify_lin
from spyrec.indexing.coordinates import device_dim_sources
from spyrec.ir.graph import (
    REPLICA_VAR, ROLES, Access, Buffer, Graph, Loop, Operation, outer_loop_spans,
)
from spyrec.ir.lx import (
    box_bytes, core_boxes, keeps_lx_slices, moves_with_loops, slice_boxes,
    writer_of,
)
from spyrec.ir.ops import DEVICE_OPS, PARTIAL_SUMS
from spyrec.ir.printer import format_access
from spyrec.ir.span import span_problem
from spyrec.ir.walks import stick_vars
from spyrec.layout.dtypes import HOST_TO_DEVICE
from spyrec.indexing.sticks import access_coordinates, compatible, stick_info

# what several iteration points landing on one output element do (docs/formats.md)
SCATTER_MODES = ("assign", "add")


def verify(graph: Graph, facts: Iterable[str] = ()) -> list[str]:
    """Every problem in `graph`, one line each; `facts` (registry FACTS) must hold too."""
    problems: list[str] = []
    for buf in graph.buffers.values():
        problems += [f"buffer {buf.name!r}: {p}" for p in _first(BUFFER_CHECKS, buf)]
    for op in graph.ops:
        where = f"op {op.name!r}" + (f" ({op.source})" if op.source else "")
        problems += [f"{where}: {p}" for p in _first(OP_CHECKS, graph, op)]
    for rule in GRAPH_CHECKS:
        problems += list(rule(graph, tuple(facts)))
    return problems


def _first(rules, *args) -> list[str]:
    """The problems of the first rule that finds any: later rules assume what earlier ones
    check (a stick analysis needs accesses inside their buffer), so one root cause gives one
    message."""
    for rule in rules:
        found = list(rule(*args))
        if found:
            return found
    return []


def check(graph: Graph, after: str, facts: Iterable[str] = ()) -> None:
    """Raise InternalError (exit 70) naming the pass `after` which `graph` is not valid."""
    problems = verify(graph, facts)
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise InternalError(f"the IR is not valid after {after}: {problems[0]}{more}; this is a "
                            f"spyrec bug, please report it with the command and input")


# --- buffers -----------------------------------------------------------------------------------


def check_dtype_and_size(buf: Buffer) -> Iterator[str]:
    if buf.role not in ROLES:
        yield f"role {buf.role!r} is not one of {', '.join(ROLES)}"
    if buf.host_dtype not in HOST_TO_DEVICE:
        yield f"host dtype {buf.host_dtype!r} has no device format"
    if any(not isinstance(n, int) or n < 0 for n in buf.host_size):
        yield f"host size {list(buf.host_size)} is not a list of non-negative integers"


def check_layout(buf: Buffer) -> Iterator[str]:
    lay = buf.layout
    if lay is None or buf.host_dtype not in HOST_TO_DEVICE:
        return
    want = HOST_TO_DEVICE[buf.host_dtype].name
    if lay.device_dtype != want:
        yield f"layout device dtype {lay.device_dtype} but {buf.host_dtype} is stored as {want}"
    if not _tiles(buf):
        yield (f"layout {list(lay.device_size)} / {list(lay.stride_map)} does not tile host "
               f"{list(buf.host_size)}")


def check_address(buf: Buffer) -> Iterator[str]:
    if buf.hbm_address is None:
        return
    if buf.hbm_address < 0 or buf.hbm_address % ALIGN_BYTES:
        yield f"device address {buf.hbm_address} is not a non-negative multiple of {ALIGN_BYTES}"
    if buf.layout is None:
        yield "has a device address but no layout"


def _tiles(buf: Buffer) -> bool:
    """Every host element has a device position (an empty tensor has nothing to place)."""
    if buf.numel == 0:
        return True
    try:
        device_dim_sources(tuple(buf.host_size), buf.host_strides, buf.layout.device_size,
                           buf.layout.stride_map)
    except ValueError:
        return False
    return True


def check_lx_address(buf: Buffer) -> Iterator[str]:
    """An LX buffer (scratchpad_planning) is an intermediate at one aligned offset of every
    core's LX, and lives nowhere else (whole buffers used in loops: `check_lx_slices`)."""
    if buf.lx_address is None:
        return
    if buf.lx_address < 0 or buf.lx_address % ALIGN_BYTES:
        yield f"LX offset {buf.lx_address} is not a non-negative multiple of {ALIGN_BYTES}"
    if buf.hbm_address is not None:
        yield f"lives in LX at {buf.lx_address} and in HBM at {buf.hbm_address}"
    if buf.role != "intermediate":
        yield f"lives in LX but is a program {buf.role} (only intermediates live in LX)"
    if buf.layout is None:
        yield "lives in LX but has no layout"


BUFFER_CHECKS: tuple[Callable[[Buffer], Iterator[str]], ...] = (
    check_dtype_and_size, check_layout, check_address, check_lx_address)


# --- ops ---------------------------------------------------------------------------------------


def check_kind(graph: Graph, op: Operation) -> Iterator[str]:
    kind = DEVICE_OPS.get(op.op)
    if kind is None:
        yield f"{op.op!r} is not a device op"
    elif len(op.inputs) > kind.arity:
        yield f"{op.op} takes at most {kind.arity} operands, has {len(op.inputs)}"


def check_ranges(graph: Graph, op: Operation) -> Iterator[str]:
    names = [v for v, _ in op.ranges]
    if len(set(names)) != len(names):
        yield f"iteration variables repeat: {names}"
    for v, n in op.ranges:
        if not isinstance(n, int) or n < 0:
            yield f"range {v}<{n} is not a non-negative integer"
    for v in op.reduced:
        if v not in names:
            yield f"reduced variable {v} is not an iteration variable ({', '.join(names)})"
    if REPLICA_VAR in names:
        yield (f"iteration variable {REPLICA_VAR} is reserved for a replicated op's copies "
               f"(declared as replicas N)")
    if not isinstance(op.replicas, int) or op.replicas < 1 or \
            op.replicas == 1 and op.replicas_fastest:
        yield f"replicas {op.replicas} is not a positive count of copies"


def check_accesses(graph: Graph, op: Operation) -> Iterator[str]:
    names = {v for v, _ in op.ranges}
    gathered = {a.buffer for a in op.index_inputs}
    if op.index_bounds and len(op.index_bounds) != len(op.index_inputs):
        yield (f"{len(op.index_bounds)} index bounds for {len(op.index_inputs)} index "
               f"tensors (one (low, size) per index tensor)")
    for role, access in _labelled(op):
        what = f"{role} {format_access(access)}"
        buf = graph.buffers.get(access.buffer)
        if buf is None:
            yield f"{what}: no buffer {access.buffer!r}"
            continue
        leaves = access.index.free_atoms()
        unknown = sorted(a.name for a in leaves if isinstance(a, Var) and a.name not in names)
        if unknown:
            yield f"{what}: uses {', '.join(unknown)}, not iteration variables of the op"
            continue
        indirect = {a.tensor for a in leaves if isinstance(a, Indirect)}
        if indirect and role == "output" and op.constants.get("scatter") not in SCATTER_MODES:
            yield (f"{what}: a gathered value (IndirectAccess) indexes the output, but "
                   f"constants.scatter is {op.constants.get('scatter')!r}, not one of "
                   f"{list(SCATTER_MODES)}")
            continue
        if indirect and role.startswith("gather"):
            yield f"{what}: a gathered value (IndirectAccess) indexes an index tensor"
            continue
        if indirect - gathered:
            yield (f"{what}: gathers through {', '.join(sorted(indirect - gathered))}, which "
                   f"the op does not read as an index tensor")
            continue
        if role == "output" and any(a.name in op.reduced for a in leaves if isinstance(a, Var)):
            yield f"{what}: the output is indexed by a reduced variable"
        yield from _within(what, buf, op, access)


def _labelled(op: Operation) -> Iterator[tuple[str, Access]]:
    for i, a in enumerate(op.index_inputs):
        yield f"gather {i}", a
    for i, a in enumerate(op.inputs):
        yield f"input {i}", a
    yield "output", op.output


def _within(what: str, buf: Buffer, op: Operation, access: Access) -> Iterator[str]:
    """Host elements inside the buffer, and device coordinates inside its device size."""
    if any(n == 0 for _, n in op.ranges):
        return  # an empty iteration space touches nothing
    ranges = _with_gathered(op, buf, access.index)
    lo, hi = value_range(access.index, ranges)
    if lo < 0 or hi > buf.numel - 1:
        yield (f"{what}: reads elements [{lo}, {hi}] but {buf.name} has {buf.numel} "
               f"({list(buf.host_size)})")
        return
    if buf.layout is None or buf.numel == 0 or not _tiles(buf):
        return
    coords = access_coordinates(tuple(buf.host_size), buf.host_strides, buf.layout,
                                op.var_ranges, access.index)
    for j, (c, n) in enumerate(zip(coords, buf.layout.device_size)):
        lo, hi = value_range(c, ranges)
        if lo < 0 or hi > n - 1:
            yield (f"{what}: device coordinate {j} ({c}) spans [{lo}, {hi}] outside "
                   f"device size {list(buf.layout.device_size)}")


def _with_gathered(op: Operation, buf: Buffer, index: Lin) -> Ranges:
    """A gathered value ranges over the dim it indexes: 0..size-1 from the op's `index_bounds`
    (a negative value wraps into that range, any other is a run-time fault), else over the
    host dim it steps through (the simulator checks the real values at run time); one that
    steps through no dim stays unbounded."""
    ranges = op.var_ranges
    bounds = {a.buffer: size for a, (_, size) in zip(op.index_inputs, op.index_bounds)}
    updates = {}
    for atom, coeff in index.terms:
        if isinstance(atom, Indirect):
            if atom.tensor in bounds:
                updates[atom] = (0, bounds[atom.tensor] - 1)
                continue
            for n, s in zip(buf.host_size, buf.host_strides):
                if s == coeff:
                    updates[atom] = (0, n - 1)
                    break
    return ranges.with_vars(updates) if updates else ranges


def check_stick_compatible(graph: Graph, op: Operation) -> Iterator[str]:
    """A compute op reads each operand with the output's stick variable in the lane (a
    matmul's x with K there), the stick_layout guarantee (A-layout §4.1). Copies and fills
    read or write any layout; ops with a buffer not yet laid out are not checked."""
    kind = DEVICE_OPS.get(op.op)
    if kind is None or kind.family in ("copy", "fill"):
        return
    bufs = [graph.buffers.get(a.buffer) for a in op.inputs + (op.output,)]
    if any(b is None or b.layout is None or b.numel == 0 or not _tiles(b) for b in bufs):
        return
    out = bufs[-1]
    target = stick_info(tuple(out.host_size), out.host_strides, out.layout, op.var_ranges,
                        op.output.index).stick_var
    for k, (access, buf) in enumerate(zip(op.inputs, bufs)):
        want = op.reduced[0] if kind.family == "matmul" and k == 0 and op.reduced else target
        info = stick_info(tuple(buf.host_size), buf.host_strides, buf.layout, op.var_ranges,
                          access.index)
        if not compatible(info, want, op.reduced, buf.layout.elems_per_stick):
            lane = info.coords[-1]
            yield (f"input {k} {format_access(access)}: its lane ({lane}) is not "
                   f"stick-compatible with stick variable {want or 'none'}")


def check_core_splits(graph: Graph, op: Operation) -> Iterator[str]:
    splits = op.core_splits
    if splits is None:
        return
    sizes = dict(op.core_ranges)
    if set(splits) != set(sizes):
        yield (f"cores {_splits(splits)} do not name exactly the iteration variables "
               f"{', '.join(sizes)}")
        return
    total = 1
    for v, k in splits.items():
        total *= k
        if k < 1 or sizes[v] % k:
            yield f"cores {_splits(splits)}: {k} slices do not divide {v}<{sizes[v]}"
        elif k > 1 and v in op.reduced:
            yield from _k_split(graph, op, v)
    if total > DEVICE_CORES:
        yield f"cores {_splits(splits)} use {total} cores; the device has {DEVICE_CORES}"
    yield from _whole_sticks(graph, op, splits)
    yield from _replicas(graph, op, splits)
    yield from _length_splits(graph, op, splits)


def _length_splits(graph: Graph, op: Operation, splits: dict[str, int]) -> Iterator[str]:
    """A var running a symbolic length (`Operation.lengths`) is split by a divisor of the
    granularity, so that at every admissible length each busy core runs length / k values
    (whole sticks of every arg whose stick dim the var walks), and so that where the
    symbol's minimum share binds, the busy cores' shares fit and are whole sticks, the last
    busy slice ending at the length (`SymLength.splits`)."""
    if not op.lengths:
        return
    laid_out = [graph.buffers.get(a.buffer) for _, a in op.accesses()]
    units = stick_vars(graph, op) if all(b is not None and (b.layout is None or _tiles(b))
                                         for b in laid_out) else {}
    for v, name in op.lengths:
        symbol, k = graph.symbols.get(name), splits.get(v, 1)
        if symbol is None:
            continue
        e = units.get(v, 1)
        what = "sticks" if e > 1 else "values"
        if symbol.granularity % (k * e):
            yield (f"cores {_splits(splits)}: {v} runs the symbolic length {name} "
                   f"({symbol.describe()}), which {k} cores cannot share in whole {what} at "
                   f"every length")
        elif not symbol.splits(k, e, v in op.reduced):
            floors = ", ".join(f"{m} to {upto}" for upto, m in symbol.min_shares)
            why = "an idle core would hold a partial sum" if v in op.reduced else \
                f"a busy core's share would pass the {symbol.maximum // k} it holds at the " \
                f"maximum or not be whole {what}"
            yield (f"cores {_splits(splits)}: {v} runs {name}, whose busy cores each take at "
                   f"least [{floors}] values: at some length {why}")


def _replicas(graph: Graph, op: Operation, splits: dict[str, int]) -> Iterator[str]:
    """A replicated op's copies (`Operation.replicas`, ir/lx.py) are split over all of them
    (its core dim `rep`; no access can use it: `check_ranges` reserves the name), and they
    write LX (in HBM they would write the same bytes again)."""
    n = op.replicas
    if n == 1:
        return
    if splits.get(REPLICA_VAR) != n:
        yield f"cores {_splits(splits)}: its {n} copies ({REPLICA_VAR}) are not split {n} ways"
    out = graph.buffers.get(op.output.buffer)
    if out is not None and out.hbm_address is not None:
        yield f"replicated ({n} copies) but its output {out.name!r} is in HBM"


def _k_split(graph: Graph, op: Operation, v: str) -> Iterator[str]:
    """A reduced var split across cores (partial sums, issue 10 §2): only for ops whose
    partials combine (`PARTIAL_SUMS`), outside loops, into an output in HBM (in LX each core
    would hold only its own partial)."""
    if op.op not in PARTIAL_SUMS:
        yield f"cores {_splits(op.core_splits)}: reduced variable {v} of {op.op} is split across " \
              f"cores, but its partials do not combine"
    elif op.loops:
        yield f"cores {_splits(op.core_splits)}: reduced variable {v} is split across cores " \
              f"inside loop {op.loops[0].key}"
    elif getattr(graph.buffers.get(op.output.buffer), "lx_address", None) is not None:
        yield f"cores {_splits(op.core_splits)}: reduced variable {v} is split across cores, " \
              f"but the output is in LX, where each core would hold only its partial"


def _whole_sticks(graph: Graph, op: Operation, splits: dict[str, int]) -> Iterator[str]:
    out = graph.buffers.get(op.output.buffer)
    if out is None or out.layout is None or out.numel == 0 or not _tiles(out):
        return
    stick = stick_info(tuple(out.host_size), out.host_strides, out.layout, op.var_ranges,
                       op.output.index).stick_var
    e = out.layout.elems_per_stick
    k = splits.get(stick, 1) if stick else 1
    if k > 1 and (dict(op.ranges)[stick] // k) % e:
        yield (f"cores {_splits(splits)}: splitting stick variable {stick} into {k} slices "
               f"gives cores partial sticks of {format_access(op.output)} ({e} per stick)")


def check_lengths(graph: Graph, op: Operation) -> Iterator[str]:
    """Each var of `Operation.lengths` is an iteration variable of the op, not tiled by a
    loop, whose range is the maximum of a symbol of the graph read from a shape (a reduced
    one sums the length's values)."""
    sizes = dict(op.ranges)
    tiled = {v for loop in op.loops for v in loop.tiled}
    for v, name in op.lengths:
        symbol = graph.symbols.get(name)
        if v not in sizes:
            yield f"lengths [{v}={name}]: {v} is not an iteration variable of the op"
        elif symbol is None or symbol.value_of is not None:
            yield f"lengths [{v}={name}]: {name} is not a symbolic length of an input's shape"
        elif sizes[v] != symbol.maximum:
            yield (f"lengths [{v}={name}]: {v}<{sizes[v]}, but {name}'s maximum is "
                   f"{symbol.maximum}")
        elif v in tiled:
            yield f"lengths [{v}={name}]: {v} is tiled by a loop"
    if len({v for v, _ in op.lengths}) != len(op.lengths):
        yield "lengths: a variable is listed twice"


def check_span(graph: Graph, op: Operation) -> Iterator[str]:
    """Each core addresses at most 256 MiB of device memory per argument (DESIGN §3,
    `ir/span.py`). An op without core splits runs on one core in the emitted program, but
    before work division its split is still to come: it is checked as one core once memory
    planning has placed every buffer it touches."""
    bufs = [graph.buffers.get(a.buffer) for _, a in op.accesses()]
    if any(b is None or b.layout is None or b.numel == 0 or not _tiles(b) for b in bufs):
        return
    splits = op.core_splits
    if splits is None and any(b.hbm_address is None and b.lx_address is None for b in bufs):
        return
    problem = span_problem(graph, op, splits or {})
    if problem is not None:
        yield f"cores {_splits(splits) if splits is not None else 'none (one core)'}: {problem}"


def _splits(splits: dict[str, int]) -> str:
    return "[" + ", ".join(f"{v}:{k}" for v, k in splits.items()) + "]"


def check_loops(graph: Graph, op: Operation) -> Iterator[str]:
    """Each enclosing loop counts at least once, has a key, and divides vars of the op (none
    for an op that runs every iteration at one place: an accumulator's combine); per-tile
    buffers are touched only inside loops; every access to a full buffer stays inside it on
    the last iteration too (the per-tile ranges times the counts), and one the loops move by
    a translation is the untiled access on every trip (a view's wrap inside a later tile)."""
    names = {v for v, _ in op.ranges}
    for depth, loop in enumerate(op.loops):
        if loop.count < 1:
            yield f"loop {depth} counts {loop.count} iterations"
        if not loop.key:
            yield f"loop {depth} has no key (coarse_tiling names every loop g<G>.<L>)"
        if loop.span is not None:
            yield from _span_problems(depth, loop)
        if loop.bound is not None:
            yield from _bound_problems(graph, depth, loop)
        for v in loop.tiled:
            if v not in names:
                yield f"loop {depth} tiles {v}, not an iteration variable of the op"
    if any(v not in names for loop in op.loops for v in loop.tiled):
        return
    mult: dict[str, int] = {}
    for loop in op.loops:
        for v in loop.tiled:
            mult[v] = mult.get(v, 1) * loop.count
    full = Ranges({Var(v): (0, n * mult.get(v, 1) - 1) for v, n in op.ranges})
    for _, access in op.accesses():
        buf = graph.buffers.get(access.buffer)
        if buf is None:
            continue
        if buf.per_tile or not op.loops or any(
                isinstance(leaf, Indirect) for leaf in access.index.free_atoms()):
            continue
        lo, hi = value_range(access.index, full)
        if lo < 0 or hi >= max(buf.numel, 1):
            yield (f"{format_access(access)}: over all {math.prod(mult.values())} tiles the "
                   f"index reaches {lo}..{hi}, outside {buf.name} (0..{buf.numel - 1})")
            continue
        problem = _translates(buf, op, access) and tiled_access_problem(buf, op, access)
        if problem:
            yield f"{format_access(access)}: {problem}"


def _bound_problems(graph: Graph, depth: int, loop: Loop) -> Iterator[str]:
    """A symbolic trip count names a symbol of the graph, counts `count` trips at its
    maximum, and its tile divides every admissible length of a shape (no trip reaches past
    the length, none stops short of it; a length read from a value rounds up, masked)."""
    symbol = graph.symbols.get(loop.bound.symbol)
    where = f"loop {depth} ({loop.key}) bound({loop.bound.symbol}/{loop.bound.per_trip})"
    if symbol is None:
        yield f"{where}: {loop.bound.symbol} is not a symbol of the graph"
        return
    if loop.bound.count(symbol.maximum) != loop.count:
        yield (f"{where}: counts {loop.bound.count(symbol.maximum)} trips at the maximum "
               f"{symbol.maximum}, but the loop counts {loop.count}")
    tile = loop.bound.per_trip
    if loop.bound.past_end:
        if symbol.value_of is not None or tile % symbol.granularity or \
                tile > symbol.minimum or symbol.maximum % tile:
            yield (f"{where}: a loop whose last trip passes the length needs a tile of whole "
                   f"granules, at most the shortest length, dividing the maximum "
                   f"({symbol.describe()})")
    elif tile < 1 or symbol.value_of is None and (
            symbol.minimum % tile or symbol.granularity % tile):
        yield (f"{where}: a tile of {tile} does not divide every length "
               f"{symbol.describe()}")


def _span_problems(depth: int, loop: Loop) -> Iterator[str]:
    """A trip span is a function of the directly enclosing loop's index: none at level 0,
    and each end a pair of integers (a, b) meaning a*i + b."""
    if depth == 0:
        yield (f"loop 0 ({loop.key}) has a trip span, but only a loop inside another may: its "
               f"trips are a function of the enclosing loop's index")
    ends = (loop.span.start, loop.span.stop)
    if not all(isinstance(end, tuple) and len(end) == 2 and
               all(type(x) is int for x in end) for end in ends):
        yield (f"loop {depth} ({loop.key}) has a malformed trip span {ends}: each end is a "
               f"pair of integers (a, b) meaning a*i + b")


def _translates(buf: Buffer, op: Operation, access: Access) -> bool:
    """Does every loop move `access` by one whole-stick translation between the tile's
    origin and its far corner (codegen's own test, `level_advances_bytes`, which raises an
    internal error otherwise)? Only then can a wrong tile reach the files silently, so only
    then is each trip proven exact here."""
    if buf.layout is None:
        return False
    mult: dict[str, int] = {}
    for loop in op.loops:
        for v in loop.tiled:
            mult[v] = mult.get(v, 1) * loop.count
    tile = dict(op.ranges)
    full = Ranges({Var(v): (0, n * mult.get(v, 1) - 1) for v, n in tile.items()})
    coords = access_coordinates(tuple(buf.host_size), buf.host_strides, buf.layout, full,
                                access.index)
    origin = {Var(v): 0 for v in tile}
    corner = {Var(v): n - 1 for v, n in tile.items()}
    for loop in op.loops:
        if loop.count == 1 or not loop.tiled:
            continue
        moved = [{**at, **{Var(v): at[Var(v)] + tile[v] for v in loop.tiled}}
                 for at in (origin, corner)]
        deltas = [[evaluate(c, m) - evaluate(c, at) for c in coords]
                  for m, at in zip(moved, (origin, corner))]
        if deltas[0] != deltas[1] or deltas[0][-1]:
            return False
    return True


# Points (tile points x trips) `tiled_access_problem` evaluates when the simplifier alone
# cannot prove a tiled access exact; beyond it the access is reported unproven.
MAX_TRIP_PROOF_POINTS = 1 << 22


def tiled_access_problem(buf: Buffer, op: Operation, access: Access) -> str | None:
    """None when, on every trip of `op`'s loops, `access` touches exactly the device elements
    the untiled op does there; else why not (one line).

    Why: codegen addresses trip `i` as `base + Σ advance_l·i_l` plus the tile's own device
    coordinates, which are simplified over the *tile's* ranges (`Mod(c1 + 71, 300)` becomes
    `c1 + 71` on a tile of 100). That is only the untiled access when no floor/mod of the
    index wraps inside a later tile; a check on the first tile or on tile origins misses a
    wrap in the middle of the last tile (a read past the tensor's end). The proof: each
    tiled var v becomes `v + size_v·t_l` (t_l the level's trip, a fresh var), and the device
    offset minus the tile's offset must simplify to a linear form in the trips alone; when the
    simplifier cannot show it, every point of every trip is evaluated (up to
    `MAX_TRIP_PROOF_POINTS`). Device memory only: per-tile, LX and gathered accesses do not
    move with the loops (`check_loops` skips them)."""
    used = {a.name for a in access.index.free_atoms() if isinstance(a, Var)}
    levels = [(d, loop) for d, loop in enumerate(op.loops)
              if loop.count > 1 and used & set(loop.tiled)]
    if not levels or buf.layout is None:
        return None
    tile = dict(op.ranges)
    trips = {Var(f"__trip{d}"): (0, loop.count - 1) for d, loop in levels}
    shift: dict[str, Lin] = {}
    for d, loop in levels:
        for v in loop.tiled:
            shift[v] = shift.get(v, Lin(const=0)) + Lin({Var(f"__trip{d}"): tile[v]})
    moved = substitute(access.index, {Var(v): Lin({Var(v): 1}) + s for v, s in shift.items()})
    ranges = op.var_ranges.with_vars(trips)
    strides = buf.layout.device_strides_elems

    def offset(index: Lin, r: Ranges) -> Lin:
        coords = access_coordinates(tuple(buf.host_size), buf.host_strides, buf.layout, r,
                                    index)
        return sum((c.scale(s) for c, s in zip(coords, strides)), Lin())

    diff = simplify_lin(offset(moved, ranges) - offset(access.index, op.var_ranges), ranges)
    if diff.const == 0 and all(isinstance(a, Var) and a in trips for a, _ in diff.terms):
        return None
    return _evaluate_trips(op, diff, trips, levels)


def _evaluate_trips(op: Operation, diff: Lin, trips: dict, levels: list) -> str | None:
    """`diff` (device offset on a trip minus the tile's) is `Σ advance_l·t_l` at every point:
    checked on all of them, the advances read off the tile origin."""
    import numpy as np

    names = [Var(v) for v, _ in op.ranges] + list(trips)
    sizes = [n for _, n in op.ranges] + [hi + 1 for _, hi in trips.values()]
    if math.prod(sizes) > MAX_TRIP_PROOF_POINTS:
        return (f"cannot prove that every trip of loop(s) "
                f"{', '.join(loop.key for _, loop in levels)} addresses the tile the untiled op "
                f"reads ({diff} is not a constant step per trip, and the "
                f"{math.prod(sizes)} points are too many to evaluate)")
    env = {}
    for axis, (name, n) in enumerate(zip(names, sizes)):
        shape = [1] * len(names)
        shape[axis] = n
        env[name] = np.arange(n, dtype=np.int64).reshape(shape)
    got = np.broadcast_to(np.asarray(evaluate(diff, env), dtype=np.int64), sizes)
    origin = {name: 0 for name in names}
    want = 0
    for t in trips:
        step = int(evaluate(diff, {**origin, t: 1}))
        want = want + step * env[t]
    bad = np.argwhere(got != want)
    if not len(bad):
        return None
    at = dict(zip(names, bad[0]))
    point = ", ".join(f"{v}={at[Var(v)]}" for v, _ in op.ranges)
    trip = ", ".join(f"{loop.key}={at[Var(f'__trip{d}')]}" for d, loop in levels)
    return (f"on trip {trip} the tile's device address is not the untiled access's at "
            f"{point} (the index wraps inside the tile: floor/mod of a tiled var crosses a "
            f"boundary the first tile does not); coarse_tiling must refuse this tiling")


OP_CHECKS: tuple[Callable[[Graph, Operation], Iterator[str]], ...] = (
    check_kind, check_ranges, check_accesses, check_stick_compatible, check_core_splits,
    check_span, check_loops, check_lengths)


# --- the whole graph ---------------------------------------------------------------------------


def check_signature(graph: Graph, facts: tuple[str, ...]) -> Iterator[str]:
    for kind, names in (("input", graph.inputs), ("output", graph.outputs)):
        for name in names:
            if name not in graph.buffers:
                yield f"program {kind} {name!r} is not a buffer"
    for name in graph.inputs:
        if name in graph.buffers and graph.buffers[name].role != "input":
            yield f"program input {name!r} has role {graph.buffers[name].role}"
    for name, buf in graph.buffers.items():
        if buf.role == "input" and name not in graph.inputs:
            yield f"buffer {name!r} has role input but is not a program input"
    for fqn, name in graph.mutated_buffers.items():
        if name not in graph.buffers:
            yield f"mutated buffer {fqn} -> {name!r}: no such buffer"
    for name, value in graph.constants.items():
        buf = graph.buffers.get(name)
        if buf is None or buf.role != "constant":
            yield f"constant value {name!r} has no constant buffer"
        elif tuple(value.shape) != tuple(buf.host_size):
            yield (f"constant value {name!r} has shape {list(value.shape)}, its buffer "
                   f"{list(buf.host_size)}")


def check_min_shares(graph: Graph, facts: tuple[str, ...]) -> Iterator[str]:
    """A symbol's minimum-share steps (`SymLength.min_shares`) ascend in length, and no
    share is negative."""
    for symbol in graph.symbols.values():
        uptos = [upto for upto, _ in symbol.min_shares]
        if uptos != sorted(set(uptos)):
            yield f"symbol {symbol.name}: share steps do not ascend in length: {uptos}"
        for upto, m in symbol.min_shares:
            if m < 0:
                yield f"symbol {symbol.name}: share {m} to {upto} is negative"


def check_def_use(graph: Graph, facts: tuple[str, ...]) -> Iterator[str]:
    """Intermediates and outputs are written by an earlier op before any op reads them."""
    written: set[str] = set()
    names = [op.name for op in graph.ops]
    for name in sorted({n for n in names if names.count(n) > 1}):
        yield f"op name {name!r} is used by {names.count(name)} ops"
    for op in graph.ops:
        for access in op.reads():
            buf = graph.buffers.get(access.buffer)
            if buf is not None and buf.role in ("intermediate", "output") and \
                    access.buffer not in written:
                yield (f"op {op.name!r}: reads {format_access(access)} before any op "
                       f"writes {access.buffer}")
        written.add(op.output.buffer)


def check_facts(graph: Graph, facts: tuple[str, ...]) -> Iterator[str]:
    """The facts earlier passes established (registry contracts) hold for every buffer/op."""
    if "layouts" in facts:
        yield from (f"buffer {b.name!r}: no device layout, though an earlier pass laid out "
                    f"every buffer" for b in graph.buffers.values() if b.layout is None)
    if "core_splits" in facts:
        yield from (f"op {op.name!r}: no core splits, though an earlier pass split every op"
                    for op in graph.ops if op.core_splits is None)
    if "hbm_addresses" in facts:
        yield from (f"buffer {b.name!r}: no device address, though an earlier pass addressed "
                    f"every buffer" for b in graph.buffers.values()
                    if b.hbm_address is None and b.lx_address is None)


def check_memory(graph: Graph, facts: tuple[str, ...]) -> Iterator[str]:
    """Buffers live at the same time never share device bytes (live: from the first write to
    the last access, widened to the whole outermost loop for an access inside one; inputs and
    constants from the start, outputs to the end)."""
    end_of_program = len(graph.ops)
    live: dict[str, list[int]] = {}
    for name, buf in graph.buffers.items():
        if buf.role in ("input", "constant"):
            live[name] = [-1, -1]
        if buf.role == "output" or name in graph.outputs:
            live.setdefault(name, [end_of_program, end_of_program])[1] = end_of_program
    runs = outer_loop_spans(graph.ops)
    for i, op in enumerate(graph.ops):
        lo, hi = runs[i]   # inside a loop: every iteration runs the whole loop body
        for access in op.reads() + op.writes():
            span = live.setdefault(access.buffer, [lo, hi])
            span[0], span[1] = min(span[0], lo), max(span[1], hi)
    placed = sorted((b.hbm_address, b.hbm_address + b.layout.device_bytes, b.name)
                    for b in graph.buffers.values()
                    if b.hbm_address is not None and b.layout is not None)
    open_: list[tuple[int, int, str]] = []
    for start, end, name in placed:
        open_ = [o for o in open_ if o[1] > start]
        for _, o_end, other in open_:
            if _overlap(live.get(name), live.get(other)):
                yield (f"buffers {other!r} and {name!r} are live at the same time and share "
                       f"device bytes [{start}, {min(end, o_end)})")
        open_.append((start, end, name))


def _overlap(a: list[int] | None, b: list[int] | None) -> bool:
    if a is None or b is None:
        return False  # a buffer no op touches holds nothing
    return a[0] <= b[1] and b[0] <= a[1]


def check_lx_slices(graph: Graph, facts: tuple[str, ...]) -> Iterator[str]:
    """Every LX buffer fits each core's usable LX, and every op touching it gives each core
    the slice its writer gave that core (each core holds only its own slice)."""
    for buf in graph.buffers.values():
        if buf.lx_address is None or buf.layout is None:
            continue
        looped = next((op for op in graph.ops if moves_with_loops(op, buf.name)),
                      None)
        if looped is not None and not buf.per_tile:
            yield (f"LX buffer {buf.name!r}: op {looped.name!r} uses it inside a loop but it is "
                   f"not per-tile (its accesses would advance with the loop)")
        writer = writer_of(graph, buf.name)
        if writer is None:
            continue
        boxes = slice_boxes(graph, buf)
        if boxes is None:
            yield f"LX buffer {buf.name!r}: written through a gather"
            continue
        writers = [(op, core_boxes(buf, op, op.output)) for op in graph.ops
                   if op.output.buffer == buf.name]
        end = buf.lx_address + box_bytes(buf, boxes[0])
        if end > LX_USABLE_BYTES_PER_CORE:
            yield (f"LX buffer {buf.name!r}: ends at byte {end} of each core's LX, past the "
                   f"{LX_USABLE_BYTES_PER_CORE} usable")
        for op in graph.ops:
            for role, access in op.accesses():
                if access.buffer != buf.name:
                    continue
                if not keeps_lx_slices(buf, op, core_boxes(buf, op, access), role == "output",
                                       boxes, writers, access):
                    yield (f"LX buffer {buf.name!r}: op {op.name!r} divides it across cores "
                           f"unlike its writer {writer.name!r}")


def check_loop_keys(graph: Graph, facts: tuple[str, ...]) -> Iterator[str]:
    """Ops naming one loop key agree on its count and trip span: they run one loop, so one
    number of trips (codegen would otherwise nest them as two loops of one name)."""
    seen: dict[str, tuple[str, Loop]] = {}
    for op in graph.ops:
        for loop in op.loops:
            if not loop.key:
                continue                    # check_loops reports it
            first = seen.setdefault(loop.key, (op.name, loop))
            if (first[1].count, first[1].span) != (loop.count, loop.span):
                yield (f"loop {loop.key}: op {op.name!r} gives it {loop.count} iterations and "
                       f"span {loop.span}, op {first[0]!r} {first[1].count} and span "
                       f"{first[1].span}; the ops of one loop share its count and span")


GRAPH_CHECKS: tuple[Callable[[Graph, tuple[str, ...]], Iterator[str]], ...] = (
    check_signature, check_min_shares, check_def_use, check_facts, check_memory,
    check_lx_slices, check_loop_keys)
