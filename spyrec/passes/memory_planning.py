"""memory_planning — give every buffer a device (HBM) address, reusing the bytes of dead
intermediates.

First, a mutated buffer's new value is made the buffer itself where the program cannot tell
them apart (`plan/inplace.py`): the copy of the whole buffer before a row write is deleted and
the rows land in the buffer's own memory; the `mutations` report section says, per buffer,
whether it is updated in place (and why not) and what its writes store per run.

Reads: buffer layouts (device bytes), roles, `Buffer.lx_address`, `Operation.loops`, the
signature and mutated buffers.  Writes: `Buffer.hbm_address` of every buffer not in LX; a
`memory_planning` report row (total, peak live, bound).
Guarantees: addresses are 128-byte aligned; buffers live at the same time never share bytes
(live: from the first to the last op that touches the buffer, widened to the whole of the
outermost loop around any of those ops — the simulator unrolls loops, so a buffer used in a
loop body is live from its first iteration to its last); inputs, constants, outputs and
mutated buffers never share with anything (they are live for the whole program, and a
mutated buffer's new value is read back after it); buffers addressed by an earlier run keep
their address and nothing is placed over them; everything fits in the device's memory
(`spyrec.device.DEVICE_MEMORY_BYTES`), else the program is unsupported.

Layout: the fixed buffers first, bump-allocated (inputs, constants, then outputs in order of
first write), then one arena for the intermediates. The arena is planned as a dynamic storage
allocation over live intervals: each of a few orders (largest first; then first-live first)
places every buffer at the lowest offset clear of the placed buffers it is live with, and the
smallest arena wins. The report compares it with the peak of simultaneously live
intermediate bytes (a lower bound for any plan); the issue's target is arena <= 1.1 x peak.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass

from spyrec.device import ALIGN_BYTES, DEVICE_MEMORY_BYTES, format_bytes
from spyrec.errors import UnsupportedProgram
from spyrec.ir import Graph
from spyrec.ir.graph import outer_loop_spans
from spyrec.passes.registry import REPORT_OMIT, CompileContext, Pass, register_pass
from spyrec.plan.inplace import merge_in_place, mutation_rows, mutations_text

BOUND_FACTOR = 1.1   # issue 10 §3: total <= fixed + 1.1 x peak live intermediate bytes


@register_pass("memory_planning")
@dataclass(frozen=True)
class MemoryPlanning(Pass):
    base_address: int = 0
    reuse: bool = True


    report_keys: ClassVar[dict] = {"hbm_bytes": 0, "memory_planning": None,
                                   "mutations": REPORT_OMIT}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        lines = ["", f"device memory: {report.get('hbm_bytes', 0)} bytes"]
        plan = report.get("memory_planning")
        if plan:
            lines.append(f"  fixed (inputs, constants, outputs) {plan['fixed_bytes']}, "
                         f"intermediates {plan['arena_bytes']} (peak live "
                         f"{plan['peak_live_bytes']}, "
                         f"{plan['without_reuse_bytes'] - plan['fixed_bytes']} without "
                         f"reuse); bound {plan['bound_bytes']}")
        return lines + mutations_text(report.get("mutations"))

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        if graph.mutated_buffers:
            why = merge_in_place(graph)
            ctx.report["mutations"] = mutation_rows(graph, why)
        todo = [n for n, b in graph.buffers.items()
                if b.hbm_address is None and b.lx_address is None]
        taken = [graph.buffers[n].hbm_address + _bytes(graph, n) for n in graph.buffers
                 if graph.buffers[n].hbm_address is not None]
        next_free = _align(max([self.base_address] + taken))
        fixed = _fixed_buffers(graph)
        for name in _fixed_order(graph):
            if name in todo and name in fixed:
                graph.buffers[name].hbm_address = next_free
                next_free = _align(next_free + _bytes(graph, name))
        arena_base = next_free
        sizes = {n: _align(_bytes(graph, n)) for n in todo if n not in fixed}
        live = live_intervals(graph)
        if self.reuse:
            offsets = plan_arena(sizes, live)
        else:
            offsets = _bump(sizes, _fixed_order(graph))
        for name, offset in offsets.items():
            graph.buffers[name].hbm_address = arena_base + offset
        arena = max((offsets[n] + sizes[n] for n in offsets), default=0)
        total = arena_base + arena
        _check_fits(graph, total)
        peak = peak_live_bytes(sizes, live)
        ctx.report["hbm_bytes"] = total
        ctx.report["memory_planning"] = {
            "total_bytes": total, "fixed_bytes": arena_base, "arena_bytes": arena,
            "peak_live_bytes": peak, "bound_bytes": arena_base + int(BOUND_FACTOR * peak),
            "without_reuse_bytes": arena_base + sum(sizes.values()), "reuse": self.reuse}


def _bytes(graph: Graph, name: str) -> int:
    return graph.buffers[name].layout.device_bytes


def _fixed_buffers(graph: Graph) -> set[str]:
    """Buffers that never share bytes: the signature, constants, outputs, mutated buffers."""
    fixed = set(graph.inputs) | set(graph.outputs)
    fixed |= set(graph.mutated_buffers) | set(graph.mutated_buffers.values())
    return fixed | {n for n, b in graph.buffers.items() if b.role != "intermediate"}


def _fixed_order(graph: Graph) -> list[str]:
    """Inputs, constants, then buffers in order of first write, then the rest."""
    order = list(graph.inputs)
    order += [n for n, b in graph.buffers.items() if b.role == "constant"]
    order += [op.output.buffer for op in graph.ops]
    return list(dict.fromkeys(order + list(graph.buffers)))


def live_intervals(graph: Graph) -> dict[str, tuple[int, int]]:
    """Buffer -> (first, last) op index that is live for it: from the first op touching it to
    the last, each widened to the outermost loop instance around it. Untouched buffers are
    absent (they hold nothing, so they conflict with nothing)."""
    outer = outer_loop_spans(graph.ops)
    live: dict[str, tuple[int, int]] = {}
    for i, op in enumerate(graph.ops):
        lo, hi = outer[i]
        for _, access in op.accesses():
            old = live.get(access.buffer, (lo, hi))
            live[access.buffer] = (min(old[0], lo), max(old[1], hi))
    return live


def peak_live_bytes(sizes: dict[str, int], live: dict[str, tuple[int, int]]) -> int:
    """The most bytes of `sizes` live at one op (a lower bound for any arena): a sweep over
    interval starts and ends."""
    events: list[tuple[int, int]] = []
    for name, size in sizes.items():
        if name in live:
            lo, hi = live[name]
            events += [(lo, size), (hi + 1, -size)]
    peak = now = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):   # ends before starts
        now += delta
        peak = max(peak, now)
    return peak


def plan_arena(sizes: dict[str, int], live: dict[str, tuple[int, int]]) -> dict[str, int]:
    """Offsets for `sizes` so that buffers live together never overlap: first fit over a few
    orders, keeping the smallest arena (the first order on ties, so output is deterministic)."""
    orders = (
        sorted(sizes, key=lambda n: (-sizes[n], live.get(n, (0, 0)), n)),
        sorted(sizes, key=lambda n: (live.get(n, (0, 0)), -sizes[n], n)),
        sorted(sizes, key=lambda n: (-_length(live.get(n)) * sizes[n], n)),
    )
    best: dict[str, int] | None = None
    best_end = 0
    for order in orders:
        offsets = _first_fit(order, sizes, live)
        end = max((offsets[n] + sizes[n] for n in offsets), default=0)
        if best is None or end < best_end:
            best, best_end = offsets, end
    return best or {}


def _length(span: tuple[int, int] | None) -> int:
    return 0 if span is None else span[1] - span[0] + 1


SPAN_BLOCK = 64      # op indices per bucket of `_first_fit`'s placed buffers


def _first_fit(order: list[str], sizes: dict[str, int],
               live: dict[str, tuple[int, int]]) -> dict[str, int]:
    """Each buffer in `order` at the lowest offset clear of every placed buffer it is live
    with (a buffer no op touches conflicts with nothing and goes to offset 0). The placed
    buffers are found through buckets of `SPAN_BLOCK` op indices their spans touch, not by
    scanning every one placed so far (quadratic in a long program's buffers)."""
    placed: list[tuple[int, int, tuple[int, int]]] = []     # (offset, end, live span)
    buckets: dict[int, list[int]] = {}      # block -> indices in `placed` touching it
    offsets: dict[str, int] = {}
    for name in order:
        span = live.get(name)
        busy = [] if span is None else sorted(
            placed[k][:2] for k in _touching(buckets, span)
            if placed[k][2][0] <= span[1] and span[0] <= placed[k][2][1])
        offset = 0
        for o, e in busy:
            if offset + sizes[name] <= o:
                break
            offset = max(offset, e)
        offsets[name] = offset
        if span is not None:
            for block in range(span[0] // SPAN_BLOCK, span[1] // SPAN_BLOCK + 1):
                buckets.setdefault(block, []).append(len(placed))
            placed.append((offset, offset + sizes[name], span))
    return offsets


def _touching(buckets: dict[int, list[int]], span: tuple[int, int]) -> set[int]:
    """The placed buffers registered in a block `span` touches (each once): every one whose
    span overlaps it is among them."""
    found: set[int] = set()
    for block in range(span[0] // SPAN_BLOCK, span[1] // SPAN_BLOCK + 1):
        found.update(buckets.get(block, ()))
    return found


def _bump(sizes: dict[str, int], order: list[str]) -> dict[str, int]:
    """No reuse (`reuse: false`): every intermediate after the last, in `order`."""
    offsets, end = {}, 0
    for name in order:
        if name in sizes:
            offsets[name] = end
            end += sizes[name]
    return offsets


def _check_fits(graph: Graph, total: int) -> None:
    """A program that needs more device memory than the card has cannot run; say how much it
    needs and which tensors are the largest, since those are what to shrink or split."""
    if total <= DEVICE_MEMORY_BYTES:
        return
    largest = sorted(graph.buffers.values(), key=lambda b: -b.layout.device_bytes)[:3]
    names = ", ".join(f"'{b.name}' {list(b.host_size)} {b.host_dtype} "
                      f"({format_bytes(b.layout.device_bytes)}"
                      f"{', ' + b.source if b.source else ''})" for b in largest)
    raise UnsupportedProgram(f"the program needs {format_bytes(total)} of device memory but the "
                             f"device has {format_bytes(DEVICE_MEMORY_BYTES)}; largest tensors: "
                             f"{names}; use smaller shapes or split the program")


def _align(n: int) -> int:
    return -(-n // ALIGN_BYTES) * ALIGN_BYTES
