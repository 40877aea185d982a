"""The IR verifier's checks per op (`OP_CHECKS`, run by `ir/verify.py`; the first check that
finds a problem is the one reported, so later checks assume what earlier ones establish).

In order: a device op of the vocabulary with at most its arity of operands; ranges (`rep`
reserved) and a positive count of replicas; reduced vars among them; every access names a
buffer, uses only the op's variables and stays inside its buffer (host elements, and device
coordinates inside `device_size` once the buffer has a layout; bounds from `spyrec.indexing`,
the one place bounds are computed); gathers read declared index tensors; compute ops read
stick-compatible operands (stick_layout's guarantee); core splits divide their core ranges (a
replicated op's copies split over all of them, its output not in HBM), split a reduced var only
where partials combine, give each core whole output sticks and use at most the device's cores;
each core addresses at most the 256 MiB span of device memory per argument (`ir/span.py`);
the loops (`ir/verify_loops.py`); symbolic lengths.
"""

from __future__ import annotations

from typing import Callable, Iterator

from spyrec.device import CORES as DEVICE_CORES
from spyrec.indexing import Indirect, Lin, Ranges, Var, value_range
from spyrec.indexing.sticks import access_coordinates, compatible, stick_info
from spyrec.ir.graph import REPLICA_VAR, Access, Buffer, Graph, Operation
from spyrec.ir.ops import DEVICE_OPS, PARTIAL_SUMS
from spyrec.ir.printer import format_access
from spyrec.ir.span import span_problem
from spyrec.ir.verify_buffers import layout_tiles
from spyrec.ir.verify_loops import check_loops
from spyrec.ir.walks import stick_vars

# what several iteration points landing on one output element do (docs/formats.md)
SCATTER_MODES = ("assign", "add")


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
    if buf.layout is None or buf.numel == 0 or not layout_tiles(buf):
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
    if any(b is None or b.layout is None or b.numel == 0 or not layout_tiles(b) for b in bufs):
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
    units = stick_vars(graph, op) if all(b is not None and (b.layout is None or layout_tiles(b))
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
    if out is None or out.layout is None or out.numel == 0 or not layout_tiles(out):
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
    if any(b is None or b.layout is None or b.numel == 0 or not layout_tiles(b) for b in bufs):
        return
    splits = op.core_splits
    if splits is None and any(b.hbm_address is None and b.lx_address is None for b in bufs):
        return
    problem = span_problem(graph, op, splits or {})
    if problem is not None:
        yield f"cores {_splits(splits) if splits is not None else 'none (one core)'}: {problem}"


def _splits(splits: dict[str, int]) -> str:
    return "[" + ", ".join(f"{v}:{k}" for v, k in splits.items()) + "]"


OP_CHECKS: tuple[Callable[[Graph, Operation], Iterator[str]], ...] = (
    check_kind, check_ranges, check_accesses, check_stick_compatible, check_core_splits,
    check_span, check_loops, check_lengths)
