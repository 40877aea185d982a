"""memory_planning — give every buffer a device (HBM) address.

Reads: buffer layouts (device bytes), `Buffer.lx_address`.  Writes: `Buffer.hbm_address` of
every buffer not in LX.
Guarantees: addresses are 128-byte aligned, live buffers never overlap, and everything fits in
the device's memory (`spyrec.device.DEVICE_MEMORY_BYTES`), else the program is unsupported.
Program inputs first, then constants, then the rest in order of first write: a bump allocator,
no reuse yet (the report shows the total, so reuse can be measured when it lands).
"""

from __future__ import annotations

from dataclasses import dataclass

from spyrec.device import ALIGN_BYTES, DEVICE_MEMORY_BYTES, format_bytes
from spyrec.errors import UnsupportedProgram
from spyrec.ir import Graph
from spyrec.passes.registry import CompileContext, Pass, register_pass


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
            if buf.hbm_address is not None or buf.lx_address is not None:
                continue   # addressed already, or in LX (scratchpad_planning)
            buf.hbm_address = next_free
            next_free = _align(next_free + buf.layout.device_bytes)
        _check_fits(graph, next_free)
        ctx.report["hbm_bytes"] = next_free


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
