"""The IR verifier's whole-graph checks (`GRAPH_CHECKS`, run by `ir/verify.py`): the signature
and constants, ascending share steps of every symbol, nothing read before it is written, the
facts earlier passes established (registry contracts) hold everywhere, buffers live at the same
time do not share device memory, every LX buffer fits and keeps its writer's per-core slices,
and the ops of one loop key agree on its count and trip span.
"""

from __future__ import annotations

from typing import Callable, Iterator

from spyrec.device import LX_USABLE_BYTES_PER_CORE
from spyrec.ir.graph import Graph, Loop, outer_loop_spans
from spyrec.ir.lx import (
    box_bytes, core_boxes, keeps_lx_slices, moves_with_loops, slice_boxes, writer_of,
)
from spyrec.ir.printer import format_access
from spyrec.ir.verify_mutations import check_in_place


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


def check_fused(graph: Graph, facts: tuple[str, ...]) -> Iterator[str]:
    """The ops of one fused SuperDSC (`Operation.fused`, the fusion pass) are consecutive, in
    one loop nest, and every value a member passes a later member lives in LX (never HBM)."""
    seen: set[str] = set()
    members: list = []
    for op in graph.ops + [None]:
        if members and (op is None or op.fused != members[0].fused):
            yield from _fused_problems(graph, members)
            seen.add(members[0].fused)
            members = []
        if op is not None and op.fused:
            if op.fused in seen:
                yield f"fused SuperDSC {op.fused!r}: op {op.name!r} is not next to its members"
            members.append(op)


def _fused_problems(graph: Graph, members: list) -> Iterator[str]:
    name = members[0].fused
    nests = {tuple(loop.identity for loop in op.loops) for op in members}
    if len(nests) > 1:
        yield f"fused SuperDSC {name!r}: its ops run in {len(nests)} loop nests, not one"
    written: set[str] = set()
    for op in members:
        for a in op.reads():
            if a.buffer in written and graph.buffers[a.buffer].lx_address is None:
                yield (f"fused SuperDSC {name!r}: op {op.name!r} reads {a.buffer!r}, which a "
                       f"member writes, from HBM (a fused value lives in LX)")
        written.add(op.output.buffer)


GRAPH_CHECKS: tuple[Callable[[Graph, tuple[str, ...]], Iterator[str]], ...] = (
    check_signature, check_min_shares, check_def_use, check_facts, check_memory,
    check_lx_slices, check_loop_keys, check_in_place, check_fused)
