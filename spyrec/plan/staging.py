"""Staging inputs as a function: read a program input or constant from HBM once when it is
read alike again.

Why in plan/: the stage_inputs pass is a thin driver over `stage_inputs` (options, report
row); `--tiling auto` plans its candidates with it as the pipeline does; and the split estimate
(`plan/split_estimate.py`) prices a looped read of an input once over the trips when staging
may serve it, asking the predicates here (`stageable_inputs`, `read_in_place`). A copy is kept
only where the LX placement would hold it (`plan/lx_placement.py place_lx`, asked, nothing
written), and its split is one of the candidates of `plan/split_candidates.py`.

A decoder reads its input x four times: RMSNorm's `x * x` (twice), its `x * rsqrt(..)` and the
residual add; a tiled MLP reads every weight once per token tile. Every read is a trip to HBM,
since an input or constant is not an intermediate and never lives in LX. When accesses give
each core the same slice of it (the condition scratchpad_planning puts an LX buffer under,
`ir/lx.py`) at least twice — two accesses, or one inside a loop whose trips all read it in
place (`moves_with_loops`) — and that slice fits, one `identity` op copies it into an
intermediate with its layout, split so that each core writes exactly the slice it will read,
and those accesses read the copy: scratchpad_planning then keeps it in LX, and the tensor
crosses HBM once for all of them (accesses that slice it otherwise still read the original).
Inside a loop, accesses that read the same moving tile every trip (a softmax's max pass and
subtract over one row tile) read a per-tile buffer `<name>__tile` instead, which an `identity`
op in the loop body fills each trip (`_stage_tiles`; report rows say `per_tile`).

Reads: ops, accesses, layouts, core splits (after work_division and superdsc_legalize, whose
splits decide the slices). Writes: a buffer `<name>__staged` and its copy op before the first
reader (before the loop it runs in); the reads re-pointed; a `stage_inputs` report row per
staged tensor (`reads`: the fetches the copy replaces, each access once per trip of its loops,
so a weight one access reads in a 4-trip loop says 4; for a per-tile copy, the accesses that
read its tile each trip). Either is at least 2, as report.json's schema says: a tensor fetched
once is never staged.
Guarantees: values unchanged (the copy is exact, every read keeps its index); only inputs and
constants that are not mutated, read in place (no gather, no loop moving over them); the
group of accesses with one per-core slicing read most often (>= 2 fetches, a loop's trips
counted; a read whose own tile LX cannot address, `ir/lx.py tile_problem`, keeps reading the
original); a core-0 slice at most `max_fraction` of the LX budget; and only when the LX
placement (`place_lx`) puts the copy in LX beside everything else it holds (the copy lives
from the first reader to the last; one left in HBM would cost a read and a write more than
it saves). The objective is HBM traffic: in a compute-bound loop the copy can add its own
time to the estimate (the tiled decoder MLP: 46.2 -> 48.5 us for 4.73 -> 2.37 MB).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from spyrec.device import CORES, LX_USABLE_BYTES_PER_CORE
from spyrec.indexing import Indirect, const, var
from spyrec.ir import Access, Buffer, Graph, Loop, Operation
from spyrec.ir.graph import nest_trips, outer_loop_spans
from spyrec.ir.walks import var_extents, walked_dims
from spyrec.ir.lx import (box_bytes, core_boxes, keeps_slices, moves_with_loops,
                          replica_fields, tile_problem)
from spyrec.layout import contiguous_strides
from spyrec.plan.lx_placement import place_lx
from spyrec.plan.split_candidates import replica_candidates
from spyrec.plan.tiles import host_advance, host_box, retile_index, tile_buffer_layout


@dataclass(frozen=True)
class StagingOptions:
    """What stage_inputs may stage (the stage_inputs pass's options: the pass is these
    fields)."""

    enabled: bool = True
    # the largest core-0 slice staged, as a fraction of the LX budget
    max_fraction: float = 1.0
    # the LX budget the placement check uses (scratchpad_planning's, DESIGN §3)
    budget_bytes: int = LX_USABLE_BYTES_PER_CORE


def stage_inputs(graph: Graph, options: StagingOptions = StagingOptions()) -> list[dict]:
    """Stage what pays (module docstring) in `graph`; a report row per staged tensor."""
    rows = []
    memo: dict = {}     # the LX placement's per-buffer analysis, across the copies tried
    if options.enabled:
        reads: dict[str, list] = {}     # staging re-points only the staged tensor's reads
        for op in graph.ops:
            for a in op.reads():
                reads.setdefault(a.buffer, []).append((op, a))
        mutated = set(graph.mutated_buffers) | set(graph.mutated_buffers.values())
        for name in [n for n, b in graph.buffers.items()
                     if b.role in ("input", "constant") and n not in mutated]:
            row = _stage(graph, name, reads.get(name, []), options, memo) or \
                _stage_tiles(graph, name, reads.get(name, []), options, memo)
            if row:
                rows.append(row)
    return rows


def _stage(graph: Graph, name: str, reads: list, options: StagingOptions,
           memo: dict) -> dict | None:
    buf = graph.buffers[name]
    if _trips(reads) < 2 or not read_in_place(name, reads):
        return None
    groups = _groups_by_slices(buf, reads)
    if not groups:
        return None
    want, reads = max(groups.items(), key=lambda kv: _trips(kv[1]))
    if _trips(reads) < 2:
        return None                         # not read twice alike: nothing to save
    if box_bytes(buf, want[0]) > options.max_fraction * LX_USABLE_BYTES_PER_CORE:
        return None
    lengths = _copy_lengths(graph, name, reads)
    if lengths is None:
        return None
    copy = _copy_op(graph, buf, want, lengths)
    if copy is None:
        return None
    first = _first_position(graph.ops, reads)
    lead = graph.ops[first]          # the copy serves it: its node, scope and source line
    copy = replace(copy, node=lead.node, scope=lead.scope, source=lead.source)
    staged = graph.add_buffer(replace(buf, name=copy.output.buffer, role="intermediate",
                                      hbm_address=None, lx_address=None))
    at = _loop_span_start(graph.ops, first)        # before the loop a reader runs in
    if not _commit(graph, copy, at, reads, lambda op, a: Access(staged.name, a.index),
                   options.budget_bytes, memo):
        del graph.buffers[staged.name]
        return None
    return {"input": name, "buffer": staged.name, "reads": _trips(reads),
            "split": copy.core_splits, "bytes_per_core": box_bytes(buf, want[0])}


def _stage_tiles(graph: Graph, name: str, reads: list, options: StagingOptions,
                 memo: dict) -> dict | None:
    """Inside a loop: accesses that read the same tile of `name` on every trip (a
    softmax's max pass and its subtract over one row tile) read a per-tile copy instead,
    which one `identity` op in the loop body writes each trip."""
    buf = graph.buffers[name]
    looped = [(op, a) for op, a in reads
              if moves_with_loops(op, name) and op.output.buffer != name and
              a not in op.index_inputs and not any(isinstance(leaf, Indirect)
                                                   for leaf in a.index.free_atoms())]
    if not looped:      # (before the whole-program tables below: asked per input)
        return None
    spans = outer_loop_spans(graph.ops)
    position = {op.name: i for i, op in enumerate(graph.ops)}
    groups: dict[tuple, list] = {}
    for op, a in looped:
        key = _tile_key(buf, op, a, spans[position[op.name]])
        boxes = core_boxes(buf, op, a)      # and by per-core slicing, as `_stage`
        if key is not None and boxes is not None:
            groups.setdefault((*key, tuple(boxes)), []).append((op, a))
    if not groups:
        return None
    (_, box, moves, _), group = max(groups.items(), key=lambda kv: len(kv[1]))
    if len(group) < 2 or any(_sized_dims(buf, op, a) for op, a in group):
        return None      # (a tile of a length's rows would have to follow the length too)
    lo, shape = tuple(b[0] for b in box), tuple(b[1] - b[0] for b in box)
    try:
        layout = tile_buffer_layout(buf, shape, buf.host_dtype)
    except ValueError:                  # not a stick layout of its host dims
        return None
    tile = Buffer(graph.fresh_name(f"{name}__tile"), shape, buf.host_dtype, "intermediate",
                  source=buf.source, layout=layout, per_tile=True)

    def retiled(op: Operation, a: Access) -> Access:
        return Access(tile.name, retile_index(buf, lo, shape, a.index, op.var_ranges))
    wants = {tuple(core_boxes(tile, op, retiled(op, a)) or ()) for op, a in group}
    if len(wants) != 1 or () in wants:
        return None                     # the readers slice the tile differently
    (want,) = wants
    copy = _tile_copy(buf, tile, lo, moves, group[0][0])
    graph.add_buffer(tile)
    copy = _split_giving(graph, copy, tile, want)
    first = min(position[op.name] for op, _ in group)
    if copy is None or not _commit(graph, copy, first, group, retiled, options.budget_bytes,
                                   memo):
        del graph.buffers[tile.name]
        return None
    return {"input": name, "buffer": tile.name, "reads": len(group),
            "split": copy.core_splits, "bytes_per_core": box_bytes(tile, want[0]),
            "per_tile": True}

def _commit(graph: Graph, copy: Operation, at: int, reads: list,
            repoint: Callable[[Operation, Access], Access], budget: int, memo: dict) -> bool:
    """Insert `copy` at `at` and point `reads` at its output; kept only when the LX
    placement in `budget` bytes would put that output in LX (else the copy only adds
    traffic: everything is undone but the buffer, which the caller drops)."""
    graph.ops.insert(at, copy)
    readers = list({op.name: op for op, _ in reads}.values())
    before = [op.inputs for op in readers]
    chosen = {(op.name, a) for op, a in reads}
    for op in readers:
        op.inputs = tuple(repoint(op, a) if (op.name, a) in chosen else a
                          for a in op.inputs)
    if copy.output.buffer in place_lx(graph, budget, memo=memo).addresses:
        return True
    graph.ops.pop(at)
    for op, inputs in zip(readers, before):
        op.inputs = inputs
    return False


def _first_position(ops: list[Operation], reads: list) -> int:
    """Index of the first op in `ops` that makes one of `reads` (a scan that stops there,
    not a table of the whole program per staged input)."""
    names = {op.name for op, _ in reads}
    return next(i for i, op in enumerate(ops) if op.name in names)


def _loop_span_start(ops: list[Operation], i: int) -> int:
    """`outer_loop_spans(ops)[i][0]` without the whole program's spans: the first op of the
    run of ops sharing op i's outermost loop (i itself outside loops)."""
    if not ops[i].loops:
        return i
    head = ops[i].loops[0].identity
    while i > 0 and ops[i - 1].loops and ops[i - 1].loops[0].identity == head:
        i -= 1
    return i


def read_in_place(name: str, reads: list) -> bool:
    """May `name` be staged by `_stage`: no read of it is an index tensor, by an op that also
    writes it, or at a place a loop moves (`moves_with_loops`)? (The split estimate prices a
    looped op's read of such an input once over the trips, as staged.)"""
    return not any(a in op.index_inputs or op.output.buffer == name or
                   moves_with_loops(op, name) for op, a in reads)


def stageable_inputs(graph: Graph) -> set[str]:
    """The program inputs and constants `_stage` may copy into LX (not mutated, every read
    in place); which accesses it then serves also depends on their slices and on LX room."""
    reads: dict[str, list] = {}
    for op in graph.ops:
        for a in op.reads():
            reads.setdefault(a.buffer, []).append((op, a))
    mutated = set(graph.mutated_buffers) | set(graph.mutated_buffers.values())
    return {name for name, buf in graph.buffers.items()
            if buf.role in ("input", "constant") and name not in mutated
            and read_in_place(name, reads.get(name, []))}


def _trips(reads: list) -> int:
    """How often `reads` fetch their slices: once per access, times the trips its loops run."""
    return sum(nest_trips(op.loops) for op, _ in reads)


def _tile_key(buf: Buffer, op: Operation, access: Access, span: tuple[int, int]) -> tuple | None:
    """(loop instance, host box of one trip, per loop level its key, count, trip span and the
    host dim the tile steps along) of an access that reads a whole tile every trip and steps by the
    tile's own extent along at most one dim per level; None for anything else."""
    box = host_box(buf, op, access.index)
    ranges = dict(op.ranges)
    moves = []
    for loop in op.loops:
        step = None
        if loop.tiled:
            advance = host_advance(buf, op, access.index, loop.tiled[0], ranges[loop.tiled[0]])
            if advance is None or len(loop.tiled) > 1:
                return None
            dims = [d for d, x in enumerate(advance) if x]
            if len(dims) > 1 or dims and advance[dims[0]] != box[dims[0]][1] - box[dims[0]][0]:
                return None
            step = dims[0] if dims else None
        moves.append((*loop.identity, step))
    return span, box, tuple(moves)


def _tile_copy(buf: Buffer, tile: Buffer, lo: tuple[int, ...], moves: tuple,
               lead: Operation) -> Operation:
    """The in-loop `identity` from `buf`'s moving tile into `tile` (not yet split)."""
    dims = [(f"c{d}", n) for d, n in enumerate(tile.host_size)]
    src = sum(((var(v) + lo[d]) * s for d, ((v, _), s) in enumerate(zip(dims, buf.host_strides))),
              const(0))
    dst = sum((var(v) * s for (v, _), s in zip(dims, contiguous_strides(tile.host_size))),
              const(0))
    loops = tuple(Loop(count, (f"c{step}",) if step is not None else (), key, span, bound)
                  for key, count, span, bound, step in moves)
    return Operation(name=tile.name, op="identity", ranges=tuple(dims),
                     inputs=(Access(buf.name, src),), output=Access(tile.name, dst),
                     loops=loops, node=lead.node, scope=lead.scope, source=lead.source)


def _groups_by_slices(buf: Buffer, reads: list) -> dict[tuple, list]:
    """Reads grouped by the per-core slices they take (core order), gathers left out, and
    reads whose own tile LX cannot address with those slices (`tile_problem`: a read from
    inside a stick, a constant row of a row-split copy) kept out of a group: they go on
    reading the original. A read on fewer cores whose slices are the first cores' slices of
    a longer group's (an op beside a replicated one, ir/lx.py) joins that group: one copy
    serves both."""
    groups: dict[tuple, list] = {}
    for op, a in reads:
        boxes = tuple(core_boxes(buf, op, a) or ())
        if boxes and not tile_problem(buf, op, a, list(boxes)):
            groups.setdefault(boxes, []).append((op, a))
    for short in sorted(groups, key=len):
        longer = next((g for g in sorted(groups, key=len, reverse=True)
                       if len(g) > len(short) and keeps_slices(list(short), list(g))
                       and not any(tile_problem(buf, op, a, list(g))
                                   for op, a in groups[short])), None)
        if longer is not None:
            groups[longer] += groups.pop(short)
    return groups


def _copy_lengths(graph: Graph, name: str, reads: list) -> tuple | None:
    """The copy's `Operation.lengths` for staging `name` for `reads`: where the readers run
    a symbolic length along a dim of it (`Operation.lengths`), the copy runs it too, so each
    core holds the share its readers take at every length; None (not staged) when the
    readers do not all run the same lengths along the same dims, whose shares would differ
    at a length."""
    sized = [_sized_dims(graph.buffers[name], op, a) for op, a in reads]
    if not any(sized):
        return ()
    if any(dims != sized[0] for dims in sized):
        return None
    return tuple((f"c{d}", s) for d, s in sorted(sized[0].items()))


def _sized_dims(buf: Buffer, op: Operation, access: Access) -> dict[int, str]:
    """The dims of `buf` that `op` walks with a var running a symbolic length -> symbol."""
    if not op.lengths:
        return {}
    lengths = dict(op.lengths)
    return {d: lengths[v] for v, d in walked_dims(access.index, buf.host_size,
                                                  var_extents(op)).items() if v in lengths}


def _copy_op(graph: Graph, buf: Buffer, want: tuple, lengths: tuple = ()) -> Operation | None:
    """An identity copy of `buf` into `<buf>__staged` whose split gives each core the boxes
    `want` (in core order), or None if no split of its dims does (`lengths`: its vars that
    run a symbolic length, `_copy_lengths`)."""
    name = graph.fresh_name(f"{buf.name}__staged")
    dims = [(f"c{d}", n) for d, n in enumerate(buf.host_size)]
    index = sum((var(v) * s for (v, _), s in zip(dims, contiguous_strides(buf.host_size))),
                const(0))
    op = Operation(name=name, op="identity", ranges=tuple(dims),
                   inputs=(Access(buf.name, index),), output=Access(name, index),
                   source=buf.source, lengths=lengths)
    graph.buffers[name] = buf      # for stick_vars and core_boxes: the copy's layout is buf's
    try:
        return _split_giving(graph, op, buf, want)
    finally:
        del graph.buffers[name]


def _split_giving(graph: Graph, op: Operation, out: Buffer, want: tuple) -> Operation | None:
    """`op` with the first core split under which it writes `out` in the per-core boxes
    `want` (core order), or None."""
    distinct = len(set(want))
    copies = len(want) // distinct if len(want) % distinct == 0 else 1
    # `want` repeats its slices: copies for a replicated reader
    for ranges, split in replica_candidates(graph, op, copies, CORES):
        trial = replace(op, **replica_fields(ranges), core_splits=split)
        if (core_boxes(out, trial, trial.output) or []) == list(want):
            return trial
    return None
