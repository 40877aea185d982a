"""matmul_padding — zero-pad K of the matmul operand that carries N (A-layout §3.6).

Reads: batchmatmul ops and their operands' layouts (after stick_layout).
Writes: for each matmul whose K is not a multiple of the stick size E, a buffer `<y>__kpad`
with K rounded up to whole sticks, a `fill` of zeros over its padding rows only and an
`identity` copy of y into the rest; the
matmul then reads the padded buffer. The `matmul_padding` report (count, elements).
Guarantees: only y is padded, along K (a non-stick dim of y, so its layout keeps the stick on
N, or stays stick-sparse when y has no N and is read sparse); x is untouched — its lanes past
K are padding the hardware masks. The op's iteration range stays K (iteration spaces count
real elements); the device's padded K reads zeros.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass, replace

from spyrec.indexing import Lin, Var, substitute, var
from spyrec.ir import Access, Buffer, Graph, Operation
from spyrec.layout import default_layout
from spyrec.passes.registry import CompileContext, Pass, register_pass
from spyrec.plan.layouts import layout_with_stick


@register_pass("matmul_padding")
@dataclass(frozen=True)
class MatmulPadding(Pass):
    report_keys: ClassVar[dict] = {"matmul_padding": {"count": 0, "elements": 0, "list": []}}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        pad = report.get("matmul_padding")
        if pad is None:
            return []
        lines = ["", f"matmul K padding: {pad['count']} operands, {pad['elements']} device "
                     f"elements"]
        return lines + [f"  {row['tensor']} -> {row['padded']}: K {row['k']} -> "
                        f"{row['k_padded']} for {row['op']}" for row in pad["list"]]

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        new_ops: list[Operation] = []
        rows: list[dict] = []
        for op in graph.ops:
            if op.op == "batchmatmul":
                op = self._pad(graph, op, new_ops, rows)
            new_ops.append(op)
        graph.ops = new_ops
        ctx.report["matmul_padding"] = {"count": len(rows),
                                        "elements": sum(r["elements"] for r in rows),
                                        "list": rows}

    def _pad(self, graph: Graph, op: Operation, new_ops: list, rows: list) -> Operation:
        x, y = op.inputs[:2]        # a third: an 8-bit y's scale, read at the op's own points
        k = op.reduced[0]
        sizes = dict(op.ranges)
        e = graph.buffers[x.buffer].layout.elems_per_stick
        if sizes[k] % e == 0:
            return op
        used = _vars(y)
        # N is a var of y that x does not read (batch vars are read by both): none when y
        # has no N (matrix-vector, a batched dot product of a single key)
        free = [v for v, _ in op.ranges if v not in op.reduced and v in used - _vars(x)]
        n_var = free[-1] if free else None
        order = [v for v, _ in op.ranges if v in used and v not in (k, n_var)] + \
            [v for v in (k, n_var) if v is not None]
        k_pad = -(-sizes[k] // e) * e
        src = graph.buffers[y.buffer]
        shape = tuple(k_pad if v == k else sizes[v] for v in order)
        buf = graph.add_buffer(Buffer(graph.fresh_name(f"{y.buffer}__kpad"), shape,
                                      src.host_dtype, "intermediate", source=op.source))
        # A stick-sparse y (a vector read one element per stick) stays sparse when padded:
        # its lanes hold no N, so a dense copy would put K in the lanes of an operand whose
        # consumer expects its own stick var (or none) there.
        buf.layout = layout_with_stick(buf, None) if src.layout.is_sparse else \
            default_layout(shape, src.host_dtype)
        index = sum((var(v).scale(s) for v, s, n in zip(order, buf.host_strides, shape)
                     if n > 1), Lin())
        # zeros only where the copy does not write: the k_pad - K padding rows, whole sticks
        # when N is in the lanes; a K in the lanes (a vector) is filled whole
        pad_ranges, pad_index = tuple(zip(order, shape)), index
        if n_var is not None:
            pad_ranges = tuple((v, k_pad - sizes[k] if v == k else n) for v, n in zip(order, shape))
            pad_index = substitute(index, {Var(k): var(k) + sizes[k]})
        new_ops.append(Operation(buf.name, "fill", pad_ranges, (), Access(buf.name, pad_index),
                                 constants={"value": 0.0}, source=op.source, loops=op.loops, node=op.node, scope=op.scope))
        new_ops.append(Operation(f"{buf.name}.1", "identity",
                                 tuple((v, sizes[v]) for v in order), (y,),
                                 Access(buf.name, index), source=op.source, loops=op.loops, node=op.node, scope=op.scope))
        rows.append({"tensor": y.buffer, "padded": buf.name, "k": sizes[k], "k_padded": k_pad,
                     "elements": buf.layout.device_elems, "op": op.name})
        return replace(op, inputs=(x, Access(buf.name, index)) + op.inputs[2:])


def _vars(access: Access) -> set[str]:
    return {a.name for a in access.index.free_atoms() if isinstance(a, Var)}
