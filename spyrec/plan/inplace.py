"""In-place buffer updates: a mutated buffer's new value written into the buffer's own memory.

A program that writes a registered buffer (a static KV cache's `index_copy_`, `index_put_`,
`copy_` into a slice, a counter's `add_`) reaches the IR functionalized and single-assignment:
`X = identity(A)` copies the buffer's initial value A (a constant) into a fresh buffer, then a
scatter writes the new rows into X, and X is the value returned under the buffer's FQN
(`frontend/aten_mutation.py`). On the device that copy moves the whole cache every step: at
32,768 slots and 40 layers ~10.7 GB per generated token, more than the step's own weights.

`merge_in_place` makes X the buffer A itself when the program cannot tell them apart:
- every op that writes X before its first other writer copies A into X element for element
  (same flat index, and A and X have the same shape, dtype and device layout): under the
  alias the bytes already hold that value, so those copies are deleted; or the first writer
  of X computes each element from A's element at the same index (`count.add_(1)`: the op
  reads and writes the same sticks, so it may run in place and is kept); or X is the new
  value and made without A at all (`length.copy_(pos)`: its writers define every element,
  as every single-assignment value's do);
- no op reads A after X's first write other than that op (it would see X's new rows), and
  no op writes A after X's first copy (X would see them);
- neither is in LX (a mutated value is read back from device memory) nor already placed.
Then X is renamed A everywhere (its writers, readers, the signature), so the written rows are
the only bytes of A the program stores, and A is what `manifest.json` returns under the FQN.
Chains (`X1 = copy(A); scatter X1; X2 = copy(X1); scatter X2`) merge one link at a time.

`mutation_rows` is report.json's `mutations` section: per mutated buffer, in place or not and
why, the elements and bytes its writes store per run, and how the layout stores a row.
"""

from __future__ import annotations

import math

from spyrec.indexing import Indirect
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import Access, nest_trips
from spyrec.layout import device_dtype_for


def init_constant(graph: Graph, fqn: str) -> str | None:
    """The constant holding `fqn`'s initial value (the front end names it by its FQN in
    `Buffer.source`), None when the program has none (a folded or lifted one)."""
    return next((b.name for b in graph.buffers.values()
                 if b.role == "constant" and b.source == fqn and b.name in graph.constants),
                None)


def merge_in_place(graph: Graph) -> dict[str, str | None]:
    """Merge every mutated buffer's new value into its constant where allowed (see the
    module docstring); FQN -> None when in place, else why not."""
    why: dict[str, str | None] = {}
    for fqn in list(graph.mutated_buffers):
        init = init_constant(graph, fqn)
        if init is None:
            why[fqn] = "the buffer has no stored initial value to update"
            continue
        twin = _second_layout(graph, init)
        if twin is not None:
            why[fqn] = (f"its value is also stored in a second layout ({twin!r}) for another "
                        f"reader, which a write into {init!r} would leave stale")
            continue
        reason = None
        while graph.mutated_buffers[fqn] != init:
            target = _next_link(graph, init) or _overwrite(graph, fqn, init)
            if target.startswith("!"):
                reason = target[1:]
                break
            _merge(graph, target, init)
        why[fqn] = reason
    return why


def _second_layout(graph: Graph, init: str) -> str | None:
    """Another constant holding `init`'s value (stick_layout's `__layout` copy), if any."""
    value, source = graph.constants[init], graph.buffers[init].source
    return next((n for n, b in graph.buffers.items() if n != init and b.role == "constant"
                 and (graph.constants.get(n) is value or b.source == source)), None)


def _next_link(graph: Graph, init: str) -> str | None:
    """The buffer X to merge into `init` next (or '!reason' when the first candidate may
    not), None when no op makes a buffer from `init` element for element."""
    ops = graph.ops
    for i, op in enumerate(ops):
        x = op.output.buffer
        if x == init or not any(a.buffer == init for a in op.inputs):
            continue
        if not _elementwise_from(graph, op, init):
            continue
        problem = _alias_problem(graph, init, x)
        return x if problem is None else "!" + problem
    return None


def _overwrite(graph: Graph, fqn: str, init: str) -> str:
    """The new value itself when it is made without reading the old one element for element
    (`length.copy_(pos)`: a whole overwrite) and may share its memory, else '!reason'."""
    x = graph.mutated_buffers[fqn]
    a, buf = graph.buffers[init], graph.buffers[x]
    if (a.host_size, a.host_dtype, a.layout) != (buf.host_size, buf.host_dtype, buf.layout):
        return (f"!its new value {x!r} has another shape, dtype or device layout than "
                f"{init!r}")
    problem = _alias_problem(graph, init, x)
    return x if problem is None else "!" + problem


def _elementwise_from(graph: Graph, op: Operation, init: str) -> bool:
    """`op` writes each element of its output from `init`'s element at the same flat index,
    and the two buffers have one shape, dtype and device layout."""
    a, x = graph.buffers[init], graph.buffers[op.output.buffer]
    if (a.host_size, a.host_dtype, a.layout) != (x.host_size, x.host_dtype, x.layout):
        return False
    reads = [acc for acc in op.inputs if acc.buffer == init]
    return bool(reads) and all(acc.index == op.output.index for acc in reads) \
        and not op.index_inputs and not op.is_reduction


def _copies(graph: Graph, x: str, init: str) -> tuple[list[int], int | None]:
    """(positions of the leading plain copies init -> x, position of x's first other
    writer)."""
    copies, first = [], None
    for i, op in enumerate(graph.ops):
        if op.output.buffer != x:
            continue
        if first is None and op.op == "identity" and not op.constants \
                and _elementwise_from(graph, op, init) and len(op.inputs) == 1:
            copies.append(i)
        elif first is None:
            first = i
    return copies, first


def _alias_problem(graph: Graph, init: str, x: str) -> str | None:
    buf, a = graph.buffers[x], graph.buffers[init]
    if buf.role == "input" or x in graph.inputs:
        return f"{x!r} is a program input"
    if buf.lx_address is not None or a.lx_address is not None or buf.per_tile:
        return f"{x!r} is planned in the scratchpad (LX)"
    if buf.hbm_address is not None:
        return f"{x!r} already has a device address"
    copies, first = _copies(graph, x, init)
    start = copies[0] if copies else first
    if start is None:
        return None
    for i, op in enumerate(graph.ops):
        if i > start and op.output.buffer == init:
            return (f"op {op.name!r} writes {init!r} after {x!r} is made from it "
                    f"(the copy would see that write)")
        if first is not None and i > first and any(acc.buffer == init for acc in op.reads()):
            return (f"op {op.name!r} reads the old value of {init!r} after the write into "
                    f"{x!r}")
    return None


def _merge(graph: Graph, x: str, init: str) -> None:
    """`x` becomes `init`: its leading copies deleted, every access renamed."""
    copies, _ = _copies(graph, x, init)
    drop = set(copies)
    graph.ops = [_renamed(op, x, init) for i, op in enumerate(graph.ops) if i not in drop]
    del graph.buffers[x]
    graph.outputs = [init if n == x else n for n in graph.outputs]
    graph.mutated_buffers = {f: init if n == x else n for f, n in graph.mutated_buffers.items()}
    if x in graph.symbolic_dims:
        graph.symbolic_dims[init] = graph.symbolic_dims.pop(x)


def _renamed(op: Operation, old: str, new: str) -> Operation:
    def re(acc: Access) -> Access:
        return Access(new, acc.index) if acc.buffer == old else acc
    if not any(acc.buffer == old for _, acc in op.accesses()):
        return op
    op.inputs = tuple(re(a) for a in op.inputs)
    op.index_inputs = tuple(re(a) for a in op.index_inputs)
    op.output = re(op.output)
    return op


# --- the report -------------------------------------------------------------------------------

def mutation_rows(graph: Graph, why: dict[str, str | None]) -> list[dict]:
    """report.json `mutations`: one row per mutated buffer (see the module docstring)."""
    rows = []
    for fqn, name in graph.mutated_buffers.items():
        buf = graph.buffers[name]
        writers = [op for op in graph.ops if op.output.buffer == name]
        itemsize = device_dtype_for(buf.host_dtype).itemsize
        elements = sum(_points(op) for op in writers)
        rows.append({
            "buffer": fqn, "tensor": name, "in_place": why.get(fqn, "not planned") is None,
            "reason": why.get(fqn, "not planned"),
            "writes": [op.name for op in writers],
            "elements_written": elements, "bytes_written": elements * itemsize,
            "buffer_bytes": buf.layout.device_bytes if buf.layout else buf.numel * itemsize,
            "store": _store(buf, writers)})
    return rows


def _points(op: Operation) -> int:
    """Elements `op` writes per run: its output's iteration points over every trip."""
    return math.prod(n for v, n in op.ranges if v not in op.reduced) * nest_trips(op.loops)


def _store(buf, writers: list[Operation]) -> str:
    """How a row write lands in the device layout: `rows` when the written (gathered) dim is
    not the stick dim (whole sticks, a strided store), `lanes` when it is (one lane of each
    stick it touches: the layout was chosen for the op reading it), `whole` for a write of
    every element (an element-wise update)."""
    lay = buf.layout
    scatters = [op for op in writers if op.is_scatter]
    if not scatters or lay is None:
        return "whole"
    stick_stride = lay.stride_map[-1]
    for op in scatters:
        step = op.output.index.coeff(Indirect(_gathered(op)))
        if step == stick_stride:
            return "lanes"
    return "rows"


def _gathered(op: Operation) -> str:
    return next(leaf.tensor for leaf in op.output.index.free_atoms() if isinstance(leaf, Indirect))


STORE_NOTES = {"rows": " (whole sticks, a strided store)",
               "lanes": " (the written dim is the stick dim, as the matmul reading the buffer "
                        "takes it: one lane of each stick)",
               "whole": ""}


def mutations_text(rows: list[dict] | None) -> list[str]:
    """report.txt's lines for the `mutations` section."""
    if not rows:
        return []
    lines = ["", "mutated buffers (written per run):"]
    for r in rows:
        where = "in place" if r["in_place"] else f"copied ({r['reason']})"
        lines.append(f"  {r['buffer']:<24} {r['bytes_written']:>10} of {r['buffer_bytes']} "
                     f"bytes, {where}, store {r['store']}{STORE_NOTES[r['store']]}")
    return lines
