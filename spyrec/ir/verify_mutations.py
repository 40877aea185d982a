"""The IR verifier's check of in-place buffer updates (`plan/inplace.py`), a `GRAPH_CHECKS`
entry: a mutated buffer whose new value is a constant is updated in place, and then

- the constant is the one holding that buffer's initial value (its `source` is the FQN);
- every op writing it writes only what it defines: a scatter (its rows at gathered
  positions), an element-wise update (each element from the same element of the buffer), or
  a value that reads nothing of the buffer; no op copies another part of the buffer into it,
  so no op reads or writes the rest of the destination on the write's behalf.
"""

from __future__ import annotations

from typing import Iterator

from spyrec.ir.graph import Graph, Operation


def check_in_place(graph: Graph, facts: tuple[str, ...]) -> Iterator[str]:
    for fqn, name in graph.mutated_buffers.items():
        buf = graph.buffers.get(name)
        if buf is None or buf.role != "constant":
            continue
        if buf.source != fqn:
            yield (f"mutated buffer {fqn} is updated in place in {name!r}, the constant of "
                   f"{buf.source!r}, not its own")
        for op in graph.ops:
            if op.output.buffer == name and not _writes_what_it_defines(op, name):
                yield (f"op {op.name!r} writes the in-place buffer {fqn} ({name!r}) from "
                       f"other elements of it: not a row write or an element-wise update")


def _writes_what_it_defines(op: Operation, name: str) -> bool:
    reads = [a for a in op.reads() if a.buffer == name]
    if op.is_scatter:
        return not reads
    return all(a.index == op.output.index for a in reads) and not op.is_reduction
