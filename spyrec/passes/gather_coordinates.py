"""gather_coordinates — everything indirect: index checks, argument order, gather fusion.

Reads: ops whose accesses hold `Indirect('<index buffer>')` (gathers read through one, scatters
write through one), their `index_inputs` and `index_bounds` ((low, size) per index tensor: the
size of the dim it indexes and whether negatives wrap), constant index tensors' values.
Writes:
- one `wrapindex` op per (index tensor, bound), placed before its first user: it wraps a
  negative value once (`v + size`, when low = -size: advanced indexing, index_put,
  take_along_dim) and faults on anything outside low..size-1 (eager raises there too),
  naming the index tensor, the first offending position and value, and the op that uses it.
  Users then read the wrapped int32 buffer. A constant index tensor is checked (and wrapped)
  here, at compile time, instead;
- index inputs no coordinate reads any more are dropped (indexing a dim of size 1: the
  coordinate is always 0, and the `wrapindex` op still checks every value);
- fusion (`fuse`): a gather (`identity` with an indirect input) whose only reader is one
  pointwise, compare or copy op that reads it once becomes part of that op: the reader reads
  the gathered tensor through the `IndirectAccess` coordinate itself, one op instead of two
  and no intermediate buffer. A gather with several readers, or read twice by one, stays (fusing
  would gather twice); so does a gather that casts (its rounding would be lost);
- the `gather_coordinates` report: gathers, scatters, fused, unfused, index checks.
Guarantees: every index input of an op is the output of a `wrapindex` op or a constant whose
values are in 0..size-1; index tensors come first in each op's arguments (`Operation.accesses`),
one per buffer; no index tensor is itself read through an indirect coordinate.

Layouts: index tensors are not part of stick compatibility (the search gives them any layout).
A gather along the value tensor's stick dim is handled by the stick-layout search, not here: an
indirect coordinate in the lane (`Mod(IndirectAccess('i'), 64)`) is not a clean stick, so the
search gives the value tensor (at no cost when it is a constant or input) or a restickified copy
of it a layout whose stick is another dim, with that copy's cost in its objective. That keeps
every device read a whole-stick read with the index selecting sticks, which is the only indirect
access the device's data movers do; an element-wise gather inside sticks is never emitted.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass, replace

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.indexing import Indirect, Lin, Ranges, Var, floordiv, mod, substitute, var
from spyrec.indexing.simplify import simplify_lin
from spyrec.ir import DEVICE_OPS, Access, Buffer, Graph, Operation
from spyrec.passes.registry import CompileContext, Pass, register_pass

FUSABLE_FAMILIES = ("pointwise", "compare", "copy")


@register_pass("gather_coordinates")
@dataclass(frozen=True)
class GatherCoordinates(Pass):
    fuse: bool = True

    report_keys: ClassVar[dict] = {"gather_coordinates": None}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        gat = report.get("gather_coordinates")
        if not gat:
            return []
        return ["", f"gathers: {gat['gathers']} ({gat['fused']} fused, {gat['unfused']} "
                    f"unfused), scatters: {gat['scatters']}, index checks: "
                    f"{gat['index_checks']}"]

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        bounds = _Checks(graph).apply()
        gathers = sum(1 for op in graph.ops if _is_gather(op))
        rows = _fuse(graph, bounds) if self.fuse else []
        ctx.report["gather_coordinates"] = {
            "gathers": gathers, "scatters": sum(1 for op in graph.ops if op.is_scatter),
            "fused": len(rows), "unfused": gathers - len(rows),
            "index_checks": sum(1 for op in graph.ops if op.op == "wrapindex"),
            "fuse": self.fuse, "list": rows}


def _is_gather(op: Operation) -> bool:
    return op.op == "identity" and bool(op.index_inputs) and not op.is_scatter


def _contiguous(shape: tuple[int, ...]) -> tuple[list[str], Lin]:
    names = [f"c{i}" for i in range(len(shape))]
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return names, sum((var(v).scale(s) for v, s, n in zip(names, strides, shape) if n > 1),
                      Lin())


class _Checks:
    """Insert the `wrapindex` ops (or check constants) and point every user at their result."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.wrapped: dict[tuple[str, tuple[int, int]], str | None] = {}
        self.bounds: dict[str, int] = {}      # checked buffer -> the size its values index

    def apply(self) -> dict[str, int]:
        new_ops: list[Operation] = []
        for op in self.graph.ops:
            if op.index_inputs:
                op = self._rewire(op, new_ops)
            new_ops.append(op)
        self.graph.ops = new_ops
        return self.bounds

    def _rewire(self, op: Operation, new_ops: list) -> Operation:
        assert len(op.index_bounds) == len(op.index_inputs), op.name
        rename: dict = {}
        kept = []
        for a, bound in zip(op.index_inputs, op.index_bounds):
            name = self._checked(a.buffer, bound, op, new_ops) or a.buffer
            rename[Indirect(a.buffer)] = Indirect(name)
            # checked and wrapped: the value read is now in 0..size-1, which the index
            # algebra may use (Operation.var_ranges) to see that floor(v / size) is 0
            kept.append((Access(name, a.index), (0, bound[1])))
        inputs = tuple(Access(a.buffer, substitute(a.index, rename)) for a in op.inputs)
        output = Access(op.output.buffer, substitute(op.output.index, rename))
        used = {leaf.tensor for a in inputs + (output,) for leaf in a.index.free_atoms()
                if isinstance(leaf, Indirect)}
        kept = [(a, b) for a, b in kept if a.buffer in used]
        return replace(op, inputs=inputs, output=output,
                       index_inputs=tuple(a for a, _ in kept),
                       index_bounds=tuple(b for _, b in kept))

    def _checked(self, name: str, bound: tuple[int, int], op: Operation,
                 new_ops: list) -> str | None:
        """The buffer users read instead of `name` (None: `name` itself, already valid)."""
        key = (name, bound)
        if key in self.wrapped:
            return self.wrapped[key]
        buf = self.graph.buffers[name]
        if name in self.graph.constants:
            result = self._constant(buf, bound, op)
        else:
            result = self._wrap_op(buf, bound, op, new_ops)
        self.wrapped[key] = result
        checked = result or name   # a constant may be checked against several sizes
        self.bounds[checked] = min(self.bounds.get(checked, bound[1]), bound[1])
        return result

    def _constant(self, buf: Buffer, bound: tuple[int, int], op: Operation) -> str | None:
        values = np.asarray(self.graph.constants[buf.name]).astype(np.int64)
        low, size = bound
        bad = np.argwhere((values < low) | (values >= size))
        if bad.size:
            pos = tuple(int(i) for i in bad[0])
            raise UnsupportedProgram(
                f"{op.name}: the constant index tensor {buf.name} ({buf.source or 'constant'}) "
                f"holds {int(values[pos])} at position {list(pos)}, outside {low}..{size - 1}"
                f" for a dim of size {size} ({op.source or 'unknown source line'})")
        if not (values < 0).any():
            return None
        name = self.graph.fresh_name(f"{buf.name}__wrapped")
        self.graph.add_buffer(Buffer(name, buf.host_size, "int32", "constant",
                                     source=buf.source))
        self.graph.constants[name] = np.where(values < 0, values + size, values).astype(np.int32)
        return name

    def _wrap_op(self, buf: Buffer, bound: tuple[int, int], op: Operation,
                 new_ops: list) -> str:
        low, size = bound
        name = self.graph.fresh_name(f"{buf.name}__{'wrap' if low else 'check'}{size}")
        shape = buf.host_size or (1,)
        self.graph.add_buffer(Buffer(name, buf.host_size, "int32", "intermediate",
                                     source=op.source))
        names, index = _contiguous(shape)
        new_ops.append(Operation(
            name, "wrapindex", tuple(zip(names, shape)), (Access(buf.name, index),),
            Access(name, index), source=op.source, loops=op.loops, node=op.node, scope=op.scope,
            constants={"size": size, "low": low, "index_tensor": buf.name,
                       "index_shape": list(shape), "used_by": op.name}))
        return name


# --- fusion ---------------------------------------------------------------------------------


def _fuse(graph: Graph, bounds: dict[str, int]) -> list[dict]:
    rows = []
    i = 0
    while i < len(graph.ops):
        g = graph.ops[i]
        target = _fusion(graph, i, bounds) if _is_gather(g) else None
        if target is None:
            i += 1
            continue
        j, fused = target
        rows.append({"gather": g.name, "into": fused.name, "op": fused.op})
        graph.ops[j] = fused
        del graph.ops[i]
        del graph.buffers[g.output.buffer]
    return rows


def _fusion(graph: Graph, i: int, bounds: dict[str, int]) -> tuple[int, Operation] | None:
    g = graph.ops[i]
    out = graph.buffers[g.output.buffer]
    (x,) = g.inputs
    if out.role != "intermediate" or g.loops or out.host_dtype != \
            graph.buffers[x.buffer].host_dtype:
        return None
    touching = [k for k, op in enumerate(graph.ops) if k != i and (
        op.output.buffer == out.name or any(a.buffer == out.name for _, a in op.accesses()))]
    if len(touching) != 1 or touching[0] < i:
        return None
    j = touching[0]
    c = graph.ops[j]
    reads = [k for k, a in enumerate(c.inputs) if a.buffer == out.name]
    if (len(reads) != 1 or c.output.buffer == out.name or c.is_scatter or c.loops
            or any(a.buffer == out.name for a in c.index_inputs)
            or DEVICE_OPS[c.op].family not in FUSABLE_FAMILIES):
        return None
    mapping = _inverse(g, c.inputs[reads[0]].index)
    if mapping is None:
        return None
    ranges = Ranges({**{Var(v): (0, n - 1) for v, n in c.ranges},
                     **{Indirect(b): (0, n - 1) for b, n in bounds.items()}})
    x_index = simplify_lin(substitute(x.index, mapping), ranges)
    merged = dict(zip(c.index_inputs, c.index_bounds))
    for a, bound in zip(g.index_inputs, g.index_bounds):
        moved = Access(a.buffer, simplify_lin(substitute(a.index, mapping), ranges))
        if any(isinstance(leaf, Indirect) for leaf in moved.index.free_atoms()):
            return None                      # an index tensor read through another gather
        if any(b.buffer == moved.buffer and b != moved for b in merged):
            return None                      # the same index tensor read at another point
        merged.setdefault(moved, bound)
    inputs = list(c.inputs)
    inputs[reads[0]] = Access(x.buffer, x_index)
    return j, replace(c, inputs=tuple(inputs), index_inputs=tuple(merged),
                      index_bounds=tuple(merged.values()))


def _inverse(g: Operation, read: Lin) -> dict | None:
    """The gather's vars as functions of the reader's: `read` is the flat index at which the
    reader reads the gather's contiguous output, so var v = (read // stride_v) mod size_v."""
    index = g.output.index
    if index.const:
        return None
    coeffs = {atom: k for atom, k in index.terms}
    mapping = {}
    for v, n in g.ranges:
        k = coeffs.pop(Var(v), None)
        if k is None or k <= 0:
            return None
        mapping[Var(v)] = mod(floordiv(read, k), n) if k > 1 else mod(read, n)
    return None if coeffs else mapping
