"""LX placement as a function: which intermediates live in the cores' LX scratchpads, where.

`place_lx(graph, budget, ...)` computes a placement without writing it (`LxPlacement`: an
offset per placed buffer, a report row per candidate, the peak); `apply_lx` writes it. Two
callers need the same answer: the scratchpad_planning pass (a thin driver: options, apply,
report), and stage_inputs' check that a copy it adds would stay in LX beside everything
else (`plan/staging.py`), which asks `place_lx` and writes nothing. `--tiling auto` plans its
candidates with both, as the pipeline does. (Before, stage_inputs ran the pass as a trial and
restored every `lx_address` by hand.)

Which buffers: every intermediate (not a program input, output, constant or mutated buffer)
that is either a per-tile buffer of a loop body (coarse_tiling) or used only by ops outside
loops (issue 10 §1); `intermediates: false` keeps to the per-tile ones (issue 8).

Reads: `Buffer.per_tile` (coarse_tiling), layouts, `Operation.core_splits` and `loops`.
Writes (`apply_lx`): `Buffer.lx_address` (a per-core byte offset), and drops the replicas of an
op whose output stays in HBM; a report row per candidate.
Guarantees: a buffer placed in LX is such an intermediate, has no HBM address, and
(a) each core's slice fits the budget (DESIGN §3: 1,625,344 usable bytes per core);
(b) every op that writes or reads it gives each core the same slice of it (the box of device
    coordinates per core, `ir/lx.py`, in SuperDSC core order): each core then reads only what
    it wrote itself — a reader split differently, or split over a var that does not index the
    buffer (unless its writer is replicated over it), would read another core's LX, so such a
    buffer stays in HBM and the report says why. Each core's slice is the union of its
    writers' boxes: a zero fill of padding may write a part of it beside the one writer of
    the data, whose readers read exactly what it wrote (`ir/lx.py keeps_lx_slices`); and
    each op's own per-core tile of it is laid out as those slices (`ir/lx.py tile_problem`):
    no access starts inside a stick (a roll's shifted half), none reads fewer rows than the
    slices divide on fewer cores (a roll's wrapped last rows);
(c) buffers live at the same time (by op order, widened over every loop instance a buffer is
    live across) never share bytes, except an in-place update; offsets are 128-byte aligned;
    space is reused after a buffer's last use and across groups;
(d) every op using a whole (not per-tile) LX buffer is outside loops or uses it in place
    (the same slice on every trip: a staged weight, a K-tiled accumulator), and has a
    SuperDSC form (codegen writes LX args only as SuperDSC LX nodes; `plan/sdsc_dims.py`
    answers), and gathers nothing.
A replicated writer whose output stays in HBM computes once (its copies would write the same
bytes again). memory_planning then addresses only the buffers left in HBM. A core-division
mismatch (b) is priced in the report row (`mismatch`: its HBM bytes, and whether the consumer
could take the producer's split at no more cost); work_division owns the split.

First fit in order of first use: each buffer takes the lowest aligned offset clear of every
placed buffer it is live with; one that does not fit the budget there stays in HBM. Before
that, in place: the output of a pointwise op outside loops takes the slot of an LX input that
dies at that op when both have the same layout and the op reads each element at the device
coordinates it writes (`in_place_of` in the report row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from spyrec.device import ALIGN_BYTES, LX_USABLE_BYTES_PER_CORE
from spyrec.errors import ConfigError
from spyrec.indexing import Var
from spyrec.indexing.sticks import access_coordinates
from spyrec.ir import Buffer, Graph, Operation
from spyrec.ir.ops import DEVICE_OPS
from spyrec.ir.printer import format_access
from spyrec.ir.graph import REPLICA_VAR, loop_identity
from spyrec.ir.lx import (
    box_bytes, core_boxes, keeps_lx_slices, keeps_slices, moves_with_loops,
    set_replicas, slice_boxes, tile_problem,
)
from spyrec.plan.hbm_bytes import op_bytes
from spyrec.plan.sdsc_dims import why_not_expressible
from spyrec.plan.split_candidates import split_text


def check_lx_budget(option: str, budget: int) -> None:
    """ConfigError unless `budget` (the pipeline option `option`) is a number of bytes the
    compiler may use in each core's LX: the passes that place buffers in LX share the rule."""
    if not 0 <= budget <= LX_USABLE_BYTES_PER_CORE:
        raise ConfigError(f"{option} must be between 0 and {LX_USABLE_BYTES_PER_CORE} (the LX "
                          f"bytes per core the compiler may use), got {budget}")


@dataclass
class LxPlacement:
    """Where `place_lx` would put each buffer: its LX offset per placed buffer, a report row
    per candidate (placed or why not), and the LX bytes per core at the peak."""

    addresses: dict[str, int]
    rows: dict[str, dict]
    peak: int


def place_lx(graph: Graph, budget: int, intermediates: bool = True,
             enabled: bool = True, memo: dict | None = None) -> LxPlacement:
    """The placement of `graph`'s LX candidates in `budget` bytes per core (`intermediates`
    false: the per-tile buffers only; `enabled` false: none, but the report rows); the graph
    is not changed. `memo`: each buffer's slice analysis, kept across calls on one graph
    while ops change (stage_inputs asks once per copy it tries: only the copy and its
    readers change between two asks), keyed on everything it reads (`_slice_key`; a buffer
    whose slices hold, also without names: `_slice_bytes_memo`)."""
    users = _users(graph)
    rows: dict[str, dict] = {}
    sizes: dict[str, int] = {}
    forms: dict[int, str] = {}      # op index -> why it takes no LX args ("" if it does)
    for name in users:
        buf = graph.buffers[name]
        if not buf.per_tile and not (intermediates and enabled):
            continue    # disabled: the report lists the per-tile buffers, as before
        reason = _not_scratch(graph, buf, users[name])
        if reason == _NOT_AN_INTERMEDIATE:
            continue
        size, consumer = buf.layout.device_bytes, None
        if reason is None:
            reason, size, consumer = _slice_bytes_memo(graph, buf, users[name], memo)
        if reason is None:
            reason = _lx_args_refused(graph, buf, users[name], forms)
        if reason is None and not enabled:
            reason = "scratchpad_planning is disabled (enabled: false)"
        if reason is None and size > budget:
            reason = (f"its per-core slice of {size} bytes exceeds the LX budget of "
                      f"{budget} bytes")
        rows[name] = {"buffer": name, "placed": False, "bytes_per_core": size,
                      "lx_address": None, "reason": reason}
        if consumer is not None:
            rows[name]["mismatch"] = _mismatch(graph, buf, users[name], consumer)
        if reason is None:
            sizes[name] = size
    live = _lifetimes(graph, users)
    addresses: dict[str, int] = {}
    peak = _place(graph, sizes, live, rows, budget, addresses)
    return LxPlacement(addresses, rows, peak)


def apply_lx(graph: Graph, placement: LxPlacement) -> None:
    """Write `placement` into `graph`: each placed buffer's `lx_address`; then a replicated
    writer whose output stays in HBM computes once (`_unreplicate_hbm_writers`), and an LX
    input such an op no longer reads slice by slice goes back to HBM (`_evict_broken`)."""
    for name, offset in placement.addresses.items():
        graph.buffers[name].lx_address = offset
    while True:
        changed = _unreplicate_hbm_writers(graph, placement.rows)
        if not changed or not _evict_broken(graph, changed, placement.rows):
            return


def lx_slices_problem(graph: Graph, buf: Buffer, uses: list[int] | None = None,
                      users: list[Operation] | None = None) -> str | None:
    """Why the ops using `buf` (at these op indices, found if not given) do not give each
    core one slice of it (condition (b)), or None; work_division asks while it aligns the
    splits of a buffer's several writers. `users`: those ops as a plan would split them
    (`plan/split_plan.py planned`), when it asks of a plan not yet in the graph."""
    if uses is None:
        uses = [i for i, op in enumerate(graph.ops)
                if any(a.buffer == buf.name for _, a in op.accesses())]
    return _slice_bytes(graph, buf, uses, users)[0]


def _unreplicate_hbm_writers(graph: Graph, rows: dict[str, dict]) -> list[Operation]:
    """A replicated op (ir/lx.py) whose output stays in HBM computes once: its copies would
    write the same bytes again. The ops changed. Their LX inputs stay valid when the first
    copy's cores are the first cores (copies slowest); with copies fastest they are not, and
    `_evict_broken` decides."""
    changed = []
    for op in graph.ops:
        n = op.replicas
        if n > 1 and graph.buffers[op.output.buffer].lx_address is None:
            set_replicas(op, 1)
            changed.append(op)
            if op.output.buffer in rows:
                rows[op.output.buffer]["replicas_dropped"] = n
    return changed


def _evict_broken(graph: Graph, ops: list[Operation], rows: dict[str, dict]) -> bool:
    """Move back to HBM every LX input of `ops` that one of its users now reads on other
    cores than its writer wrote (an op whose copies ran fastest, computing once on the first
    cores, reads core 1's slice where copy 1 of slice 0 lives). HBM serves every split; the
    evicted buffer's writer, if replicated, then computes once too (the caller's loop).
    Whether anything was evicted."""
    evicted = False
    for op in ops:
        for a in op.reads():
            buf = graph.buffers[a.buffer]
            if buf.lx_address is None:
                continue
            why = lx_slices_problem(graph, buf)
            if why is not None:
                buf.lx_address = None
                evicted = True
                if buf.name in rows:
                    rows[buf.name].update(placed=False, lx_address=None,
                                          reason=f"after {op.name!r} computes once: {why}")
    return evicted


def _users(graph: Graph) -> dict[str, list[int]]:
    """Buffer -> indices of the ops that access it, in program order (first use first)."""
    out: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        for _, access in op.accesses():
            uses = out.setdefault(access.buffer, [])
            if not uses or uses[-1] != i:
                uses.append(i)
    return out


_NOT_AN_INTERMEDIATE = "not an intermediate"


def _not_scratch(graph: Graph, buf: Buffer, uses: list[int]) -> str | None:
    """Why `buf` may not live in LX whatever its slices (None when it may). Program inputs,
    outputs, constants and mutated buffers stay in HBM (the host reads and writes them there)
    and get no report row. A whole (not per-tile) buffer used inside a loop advances with it,
    while an LX tensor has one fixed address (DESIGN §5), so it stays in HBM too — unless
    every looped op uses it in place (`moves_with_loops`: the same slice every trip)."""
    mutated = set(graph.mutated_buffers) | set(graph.mutated_buffers.values())
    if (buf.role != "intermediate" or buf.name in graph.inputs or buf.name in graph.outputs
            or buf.name in mutated):
        return _NOT_AN_INTERMEDIATE
    if buf.per_tile:
        return None
    looped = next((graph.ops[i] for i in uses
                   if moves_with_loops(graph.ops[i], buf.name)), None)
    if looped is not None:
        return (f"op {looped.name!r} uses it inside loop {looped.loops[0].key}, where its "
                f"window moves every iteration (only per-tile buffers of a loop, and buffers "
                f"loops use in place, live in LX)")
    return None


def _lx_args_refused(graph: Graph, buf: Buffer, uses: list[int],
                     forms: dict[int, str]) -> str | None:
    """Why an op using the whole buffer `buf` takes no LX args (None when all do); per-tile
    buffers are not asked (their loop ops must have a SuperDSC form anyway)."""
    if buf.per_tile:
        return None
    for i in uses:
        if i not in forms:
            forms[i] = _no_lx_args(graph, graph.ops[i])
        if forms[i]:
            return forms[i]
    return None


def _no_lx_args(graph: Graph, op: Operation) -> str:
    """Why `op` cannot take an LX argument (empty when it can). LX args exist only as
    SuperDSC LX nodes (a per-core layout, DESIGN §4): gathers keep their value and index
    tensors in HBM (SuperDSC's IndirectAccess), and an op with no SuperDSC form (a pipeline
    without superdsc_legalize) has no nodes at all. The form does not depend on where the
    args live, so the emitter's own test answers without building the file."""
    if op.index_inputs or op.gathered():
        return f"op {op.name!r} gathers (its tensors stay in HBM)"
    reason = why_not_expressible(graph, op)
    if reason is not None:
        return f"op {op.name!r} has no SuperDSC form ({reason}), so no LX arguments"
    return ""


def _slice_bytes(graph: Graph, buf: Buffer, uses: list[int],
                 users: list[Operation] | None = None
                 ) -> tuple[str | None, int, Operation | None]:
    """(why it cannot live in LX or None, bytes of each core's slice, the consumer that
    divides it across cores unlike its writer or None) — condition (b). `users`: the ops
    at `uses` as a plan splits them (`lx_slices_problem`), else the graph's."""
    ops = [graph.ops[i] for i in uses] if users is None else users
    writers = [op for op in ops if op.output.buffer == buf.name]
    if not writers:
        return "no op writes it", buf.layout.device_bytes, None
    writer = writers[0]
    if buf.hbm_address is not None:
        return "it already has an HBM address", buf.layout.device_bytes, None
    for op in writers:
        k_split = [v for v, k in (op.core_splits or {}).items() if k > 1 and v in op.reduced]
        if k_split:
            return (f"its writer {op.name!r} splits reduced {', '.join(k_split)} across "
                    f"cores (cores {_split_text(op)}): the partial sums meet in HBM"), \
                buf.layout.device_bytes, None
    boxes = slice_boxes(graph, buf, writers)   # `uses` holds every op that writes it
    if boxes is None:
        gatherer = next(op for op in writers if core_boxes(buf, op, op.output) is None)
        return f"op {gatherer.name!r} writes it through a gather", buf.layout.device_bytes, \
            None
    size = box_bytes(buf, boxes[0])
    distinct = set(boxes)
    if len(boxes) % len(distinct) or size * len(distinct) != buf.layout.device_bytes:
        return (f"its writer {writer.name!r} does not give each core a separate whole slice "
                f"(cores {_split_text(writer)})"), size, None
    for op in ops:
        for role, access in op.accesses():
            if access.buffer != buf.name:
                continue
            problem = _same_slices(buf, op, role, access, boxes, writers)
            if problem:
                return problem, size, op
    return None, size, None


def lx_slices_hold(graph: Graph, buf: Buffer, uses: list[int], memo: dict,
                   users: list[Operation] | None = None) -> bool:
    """`lx_slices_problem(graph, buf, uses, users) is None`, from `memo` when it holds the
    answer for a buffer and users alike but for names (the layers of a stack): only the
    reasons quote names, and which access is `buf`'s is kept (`_unnamed_slice_key`)."""
    key = _unnamed_slice_key(graph, buf, uses, users)
    holds = memo.get(key)
    if holds is None:
        holds = memo[key] = _slice_bytes(graph, buf, uses, users)[0] is None
    return holds


def _unnamed_slice_key(graph: Graph, buf: Buffer, uses: list[int],
                       users: list[Operation] | None = None) -> tuple:
    """`_slice_key` without names: the buffer's sizes and layout and whether it has an HBM
    address; each op using it with every field `_op_state` keeps but its name, an access
    named only by whether it is `buf`'s (`users`: as `_slice_bytes`)."""
    name = buf.name
    ops = (graph.ops[i] for i in uses) if users is None else users

    def unnamed(a) -> tuple:
        return a.buffer == name, a.index
    return (buf.host_size, buf.host_dtype, buf.layout, buf.hbm_address is None,
            tuple((op.op, op.ranges, tuple(map(unnamed, op.inputs)), unnamed(op.output),
                   op.reduced, tuple(map(unnamed, op.index_inputs)),
                   None if op.core_splits is None else tuple(op.core_splits.items()),
                   op.loops, op.replicas, op.replicas_fastest)
                  for op in ops))


def _slice_bytes_memo(graph: Graph, buf: Buffer, uses: list[int], memo: dict | None):
    """`_slice_bytes`, from `memo` when it holds the answer for the same inputs: a buffer
    without a problem (no reason, no consumer: only its slice's bytes) for a buffer and
    users alike but for names (the layers of a stack, `_unnamed_slice_key`), any other for
    the same names too (its reason quotes them)."""
    if memo is None:
        return _slice_bytes(graph, buf, uses)
    unnamed = ("unnamed", _unnamed_slice_key(graph, buf, uses))
    size = memo.get(unnamed)
    if size is not None:
        return None, size, None
    key = _slice_key(graph, buf, uses)
    if key not in memo:
        memo[key] = _slice_bytes(graph, buf, uses)
        if memo[key][0] is None:
            memo[unnamed] = memo[key][1]
    return memo[key]


def _slice_key(graph: Graph, buf: Buffer, uses: list[int]) -> tuple:
    """What `_slice_bytes` of `buf` reads: the buffer (its name, sizes, layout and HBM
    address) and, in order, each op using it (its name, which the reasons quote, and every
    field the slices and accesses come from), so an op changed in place misses."""
    return (buf.name, buf.host_size, buf.host_dtype, buf.layout, buf.hbm_address,
            tuple(_op_state(graph.ops[i]) for i in uses))


def _op_state(op: Operation) -> tuple:
    return (op.name, op.op, op.ranges, op.inputs, op.output, op.reduced, op.index_inputs,
            None if op.core_splits is None else tuple(op.core_splits.items()), op.loops,
            op.replicas, op.replicas_fastest)


def _same_slices(buf: Buffer, op: Operation, role: str, access, boxes: list,
                 writers: list[Operation]) -> str:
    """Why `op` would touch another core's slice of `buf` (empty when it does not; the rule
    is `ir/lx.py keeps_lx_slices`)."""
    theirs = core_boxes(buf, op, access)
    if keeps_lx_slices(buf, op, theirs, role == "output", boxes,
                       [(w, core_boxes(buf, w, w.output)) for w in writers], access):
        return ""
    problem = tile_problem(buf, op, access, boxes)
    if problem and keeps_slices(theirs, boxes):       # the slices agree, the tiles do not
        return (f"op {op.name!r} cannot lay out its tile of it ({format_access(access)}) "
                f"as its writer's cores hold it: {problem}")
    writer = writers[0]
    used = {leaf.name for leaf in access.index.free_atoms() if isinstance(leaf, Var)}
    stray = [v for v, k in (op.core_splits or {}).items() if k > 1 and v not in used
             and v != REPLICA_VAR]
    if stray:
        return (f"op {op.name!r} splits {', '.join(stray)} across cores, which does not index "
                f"it: its cores would read slices other cores hold (unless its writer "
                f"{writer.name!r} is replicated so)")
    if role == "output" and len(writers) > 1:
        return (f"its writers {', '.join(repr(w.name) for w in writers)} do not write parts "
                f"of one slice per core at one offset (op {op.name!r} as {_split_text(op)})")
    return (f"op {op.name!r} divides it across cores as {_split_text(op)}, its writer "
            f"{writer.name!r} as {_split_text(writer)}: cores would read slices other "
            f"cores hold")


def _mismatch(graph: Graph, buf: Buffer, uses: list[int], consumer: Operation) -> dict:
    """The price of a core-division mismatch (reference/B-codegen.md §6.1, G §4.2-4.3): the
    buffer goes to HBM, written once and read by every op that reads it. And whether the
    consumer could take its producer's split at no more cost: the producer's split vars are
    the consumer's (same names and ranges), the consumer then gives each core the slices the
    producer wrote, uses at least as many cores, and its other args move no more HBM bytes
    (`plan/hbm_bytes.py op_bytes`). work_division owns the split; this only says so."""
    writer = next(graph.ops[i] for i in uses if graph.ops[i].output.buffer == buf.name)
    readers = sum(1 for i in uses if any(a.buffer == buf.name for a in graph.ops[i].reads()))
    row = {"producer": writer.name, "producer_cores": _split_text(writer),
           "consumer": consumer.name, "consumer_cores": _split_text(consumer),
           "hbm_bytes": buf.layout.device_bytes * (1 + readers),
           "consumer_can_take_producer_split": False}
    ranges = dict(consumer.core_ranges)
    split = {v: k for v, k in (writer.core_splits or {}).items() if k > 1}
    if not split or any(ranges.get(v) != n for v, n in writer.core_ranges if v in split):
        return row
    moved = replace(consumer, core_splits={v: split.get(v, 1) for v in ranges})
    if math.prod(split.values()) < math.prod((consumer.core_splits or {}).values() or [1]):
        return row
    boxes = core_boxes(buf, writer, writer.output)
    if any(core_boxes(buf, moved, a) != boxes for _, a in moved.accesses()
           if a.buffer == buf.name):
        return row
    row["consumer_can_take_producer_split"] = \
        op_bytes(graph, moved, buf.name) <= op_bytes(graph, consumer, buf.name)
    return row


def _split_text(op: Operation) -> str:
    return split_text(op.core_splits or {})


def _lifetimes(graph: Graph, users: dict[str, list[int]]) -> dict[str, tuple[int, int]]:
    """Each buffer's live op interval, widened to the whole of every loop instance it is live
    across but not contained in (written before a loop and read in it, or written in it and
    read after: every iteration of the loop then needs it)."""
    spans = _loop_spans(graph.ops)
    live = {}
    for name, uses in users.items():
        lo, hi = uses[0], uses[-1]
        changed = True
        while changed:
            changed = False
            for s, e in spans:
                if lo <= e and s <= hi and not (s <= lo and hi <= e) and (s < lo or e > hi):
                    lo, hi = min(lo, s), max(hi, e)
                    changed = True
        live[name] = (lo, hi)
    return live


def _loop_spans(ops: list[Operation]) -> list[tuple[int, int]]:
    """(first, last) op index of every loop instance, at every depth."""
    spans = []
    depth = max((len(op.loops) for op in ops), default=0)
    for d in range(depth):
        i = 0
        while i < len(ops):
            if len(ops[i].loops) <= d:
                i += 1
                continue
            ident = _ids(ops[i], d)
            j = i
            while j + 1 < len(ops) and len(ops[j + 1].loops) > d and _ids(ops[j + 1], d) == ident:
                j += 1
            spans.append((i, j))
            i = j + 1
    return spans


def _ids(op: Operation, depth: int) -> tuple:
    return loop_identity(op.loops[:depth + 1])


def _place(graph: Graph, sizes: dict[str, int], live: dict[str, tuple[int, int]],
           rows: dict[str, dict], budget: int, offsets: dict[str, int]) -> int:
    """First fit in order of first use, after trying an in-place update: each placed
    buffer's offset into `offsets`; returns the peak LX bytes per core.

    Buffers come in order of first use, so a placed buffer overlaps the current one's
    lifetime exactly when it is still live at its first use; those whose lifetime has ended
    leave `active` for good, which keeps the pass linear in the number of buffers."""
    active: list[tuple[int, int, str]] = []       # (offset, end, name), placed, maybe live
    peak = 0
    for name in sorted(sizes, key=lambda n: live[n]):
        lo, hi = live[name]
        active = [p for p in active if live[p[2]][1] >= lo]
        host = _in_place_of(graph, name, live, sizes, offsets)
        busy = sorted((o, e) for o, e, other in active if other != host
                      and live[other][0] <= hi and lo <= live[other][1])
        offset = 0
        if host is not None:
            offset = offsets[host]
            if any(o < offset + sizes[name] and offset < e for o, e in busy):
                host, offset = None, 0
        if host is None:
            for o, e in busy:
                if offset + sizes[name] <= o:
                    break
                offset = max(offset, _align(e))
        if offset + sizes[name] > budget:
            rows[name]["reason"] = (f"LX is full while it is live: it needs {sizes[name]} bytes "
                                    f"per core at offset {offset}, past the budget of {budget}")
            continue
        active.append((offset, offset + sizes[name], name))
        offsets[name] = offset
        rows[name].update(placed=True, lx_address=offset)
        if host is not None:
            rows[name]["in_place_of"] = host
        peak = max(peak, offset + sizes[name])
    return peak


def _in_place_of(graph: Graph, name: str, live: dict[str, tuple[int, int]],
                 sizes: dict[str, int], offsets: dict[str, int]) -> str | None:
    """The LX input whose slot `name` may take: its writer is a pointwise op outside loops
    (it is born there) that reads that input for the last time, every element read from the
    same device coordinates of an identical layout as it is written, so each core overwrites
    exactly the bytes it has just read (an in-place update)."""
    first = live[name][0]
    op = graph.ops[first]
    if (op.output.buffer != name or op.loops or op.index_inputs
            or DEVICE_OPS[op.op].family != "pointwise"):
        return None
    out = graph.buffers[name]
    written = _coords(out, op, op.output)
    for access in op.inputs:
        src = graph.buffers[access.buffer]
        if (access.buffer not in offsets or live[access.buffer][1] != first
                or sizes[access.buffer] != sizes[name] or src.layout != out.layout):
            continue
        if all(_coords(src, op, a) == written for a in op.inputs if a.buffer == src.name):
            return src.name
    return None


def _coords(buf: Buffer, op: Operation, access) -> tuple:
    return access_coordinates(buf.host_size, buf.host_strides, buf.layout, op.var_ranges,
                              access.index)


def _align(n: int) -> int:
    return -(-n // ALIGN_BYTES) * ALIGN_BYTES
