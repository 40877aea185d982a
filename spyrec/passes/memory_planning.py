"""memory_planning — give every buffer a device (HBM) address.

Reads: buffer layouts (device bytes).  Writes: `Buffer.hbm_address`.
Guarantees: addresses are 128-byte aligned and live buffers never overlap. Program inputs
first, then constants, then the rest in order of first write: a bump allocator, no reuse yet
(the report shows the total, so reuse can be measured when it lands).
"""

from __future__ import annotations

from dataclasses import dataclass

from spyrec.ir import Graph
from spyrec.passes.registry import CompileContext, Pass, register_pass

ALIGN_BYTES = 128


@register_pass("memory_planning")
@dataclass(frozen=True)
class MemoryPlanning(Pass):
    base_address: int = 0

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        order = list(graph.inputs)
        order += [n for n, b in graph.buffers.items() if b.role == "constant"]
        for op in graph.ops:
            order.append(op.output.buffer)
        order += list(graph.buffers)
        next_free = _align(self.base_address)
        for name in dict.fromkeys(order):
            buf = graph.buffers[name]
            if buf.hbm_address is not None:
                continue
            buf.hbm_address = next_free
            next_free = _align(next_free + buf.layout.device_bytes)
        ctx.report["hbm_bytes"] = next_free


def _align(n: int) -> int:
    return -(-n // ALIGN_BYTES) * ALIGN_BYTES
