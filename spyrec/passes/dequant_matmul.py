"""dequant_matmul — an 8-bit weight's conversion and scale become the matmul's own: the
weight tiles are read 8-bit and converted on chip, never stored as a 16-bit copy.

A weight-only quantized linear exports as `w8.to(dtype) * scale` then the matmul (issue 60:
float8_e4m3fn / float8_e5m2 / int8 weights, a scale per tensor, per output channel, per group
of K or per 128x128 block). Lowered as written that is three device ops, the middle two
writing the whole dequantized weight to device memory in 16 bits, which every decode step then
reads again: three times the bytes of the 8-bit weight. This pass rewrites

    c = identity(w8)            (the conversion, into the matmul's dtype or fp32)
    d = mul(c, scale)           (optional; either operand order)
    y = batchmatmul(x, d)

into one `batchmatmul(x, w8, scale)` with `constants["dequantize"] = "scale"` (or
`batchmatmul(x, w8)` without a scale): the op reads the weight in its 8-bit device format
(128 elements per stick) and the scale at the points the multiply read it, converts each tile
in LX as it is read, multiplies it by its scale and rounds the product once to the dtype of
the matmul's other operand (what eager's `mul` rounded `d` to), then multiplies as any
matmul (docs/formats.md, "batchmatmul"). Each access is the old one composed through the
dense writes it replaces, so any view between them (a per-group `view`/`unsqueeze`) is kept.

Applied when the weight is a constant of an 8-bit dtype (int8, fp8_e4m3, fp8_e5m2), the scale
a constant (one the matmul can address, else the program is refused: `_check_addressable`), every intermediate read only by the next op, each op outside loops and without
index inputs, and the dequantized operand is the matmul's second (the weight of `x @ w.t()`).
The scale is applied where the tile is converted, not after the product, so the numbers are
eager's own (the product of weight and scale rounded once, as `mul` rounds it), whatever the
scale's layout: a per-channel scale applied in the epilogue instead would round differently.

Reads and writes ops and buffers; runs before layouts exist. Report: `dequant_matmul`, one row
per rewritten matmul (its name, the weight, its format and the scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.indexing import Lin, Var, const, evaluate, floordiv, mod, simplify, substitute
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import Access
from spyrec.layout import contiguous_strides, device_dtype_for
from spyrec.passes.registry import CompileContext, Pass, register_pass

EIGHT_BIT = ("int8", "fp8_e4m3", "fp8_e5m2")


@register_pass("dequant_matmul")
@dataclass(frozen=True)
class DequantMatmul(Pass):
    enabled: bool = True

    report_keys: ClassVar[dict] = {"dequant_matmul": None}

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        rows = []
        for op in list(graph.ops) if self.enabled else []:
            chain = _chain(graph, op)
            if chain is None:
                continue
            weight, scale, dead = chain
            op.inputs = (op.inputs[0], weight) + ((scale,) if scale is not None else ())
            if scale is not None:
                op.constants = {**op.constants, "dequantize": "scale"}
            graph.ops[:] = [o for o in graph.ops if all(o is not d for d in dead)]
            for d in dead:
                del graph.buffers[d.output.buffer]
            rows.append({"matmul": op.name, "weight": weight.buffer,
                         "format": _device_dtype(graph, weight.buffer),
                         "bytes": graph.buffers[weight.buffer].numel,   # one per element
                         "scale": scale.buffer if scale is not None else None})
        ctx.report["dequant_matmul"] = rows

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        rows = report.get("dequant_matmul") or []
        if not rows:
            return []
        return [f"8-bit weights converted on chip: {len(rows)} matmuls"] + [
            f"  {r['matmul']:<24} {r['weight']} ({r['format']}, {r['bytes']} bytes)"
            f"{', scale ' + r['scale'] if r['scale'] else ''}" for r in rows]


def _device_dtype(graph: Graph, name: str) -> str:
    return device_dtype_for(graph.buffers[name].host_dtype).name


def _chain(graph: Graph, mm: Operation):
    """(weight access, scale access or None, the ops replaced) when `mm` reads a dequantized
    8-bit constant as its second operand (module docstring), else None; every access in
    `mm`'s vars."""
    if mm.op != "batchmatmul" or len(mm.inputs) != 2 or mm.loops or mm.index_inputs:
        return None
    top = _sole_writer(graph, mm.inputs[1].buffer, mm)
    if top is None:
        return None
    at_top = _writer_vars(graph, mm, mm.inputs[1], top)      # top's vars in mm's vars
    if top.op == "identity":
        weight = _weight(graph, top, at_top, mm)
        return None if weight is None else (weight, None, [top])
    if top.op != "mul" or len(top.inputs) != 2:
        return None
    for k in (0, 1):
        cast_read, scale_read = top.inputs[k], top.inputs[1 - k]
        if graph.buffers[scale_read.buffer].role != "constant" or \
                _device_dtype(graph, scale_read.buffer) in EIGHT_BIT:
            continue
        cast = _sole_writer(graph, cast_read.buffer, top)
        if cast is None or cast.op != "identity":
            continue
        at_cast = {v: _in(e, at_top, mm) for v, e in
                   _writer_vars(graph, top, cast_read, cast).items()}
        weight = _weight(graph, cast, at_cast, mm)
        scale = Access(scale_read.buffer, _in(scale_read.index, at_top, mm))
        if weight is not None:
            _check_addressable(graph, mm, weight, scale)
            return weight, scale, [cast, top]
    return None


def _check_addressable(graph: Graph, mm: Operation, weight: Access, scale: Access) -> None:
    """Refuse (exit 3) a scale the matmul cannot read: one that changes inside a stick without
    changing at every lane, along K (a stick of x: 64 fp16 or 32 fp32 inputs) or along N (a
    stick of the 8-bit weight: 128 outputs). Per tensor, per channel, groups of a whole stick
    of x and 128 x 128 blocks are read a lane or a stick at a time; a group of 32 beside
    fp16 activations, or a 64-row block, would need a scale per half stick, which no
    SuperDSC coordinate expresses."""
    x_stick = device_dtype_for(graph.buffers[mm.inputs[0].buffer].host_dtype).elems_per_stick
    n_var = next((a.name for a, c in mm.output.index.terms if c == 1 and isinstance(a, Var)),
                 None)
    for v, e, along in ((mm.reduced[0], x_stick, "inputs (K)"), (n_var, 128, "outputs (N)")):
        run = _split_run(mm, scale, v, e)
        if run:
            w, s = graph.buffers[weight.buffer], graph.buffers[scale.buffer]
            raise UnsupportedProgram(
                f"{mm.name} ({mm.source}): the scale {s.source or s.name} of the 8-bit weight "
                f"{w.source or w.name} ({w.host_dtype}) changes every {run} {along}, inside a "
                f"stick of {e}: the device converts a weight tile with one scale per lane or "
                f"per stick (supported: a scale per tensor, per output channel, per group of "
                f"a multiple of {x_stick} inputs, per 128 x 128 block); regroup the scales")


def _split_run(mm: Operation, scale: Access, v: str | None, e: int) -> int | None:
    """The length of the runs of one scale value along var `v` when they split a stick of
    `e` lanes without being single lanes; None when the scale is per lane or per stick."""
    if v is None:
        return None
    points = np.arange(dict(mm.ranges)[v])
    env = {Var(u): (points if u == v else 0) for u, _ in mm.ranges}
    values = np.broadcast_to(np.asarray(evaluate(scale.index, env)), points.shape)
    if len(points) < 2 or np.array_equal(values, values[points // e * e]) or \
            np.all(values[1:] != values[:-1]):
        return None
    changes = np.flatnonzero(values[1:] != values[:-1])
    return int(changes[0]) + 1


def _weight(graph: Graph, cast: Operation, at_cast: dict, mm: Operation) -> Access | None:
    """The 8-bit constant `cast` converts, read at `cast`'s point for each point of `mm`;
    None if `cast` converts anything else."""
    if len(cast.inputs) != 1:
        return None
    src = graph.buffers[cast.inputs[0].buffer]
    if src.role != "constant" or device_dtype_for(src.host_dtype).name not in EIGHT_BIT:
        return None
    return Access(src.name, _in(cast.inputs[0].index, at_cast, mm))


def _sole_writer(graph: Graph, name: str, reader: Operation) -> Operation | None:
    """The one op writing intermediate `name` densely, outside loops, when `reader` is the
    only op reading it (once)."""
    buf = graph.buffers[name]
    if buf.role != "intermediate" or name in graph.outputs or name in graph.inputs:
        return None
    writers = [o for o in graph.ops if o.output.buffer == name]
    reads = sum(a.buffer == name for o in graph.ops for a in o.reads())
    if len(writers) != 1 or reads != 1 or not any(a.buffer == name for a in reader.inputs):
        return None
    w = writers[0]
    if w.loops or w.index_inputs or w.reduced or not _dense(w, buf.host_size):
        return None
    return w


def _dense(op: Operation, size: tuple[int, ...]) -> bool:
    """Whether `op` writes each element of a contiguous `size` tensor once: its output index
    is sum(stride_d * var_d), each var spanning its dim."""
    ranges = dict(op.ranges)
    want = {s: n for s, n in zip(contiguous_strides(size), size) if n > 1}
    terms = dict(op.output.index.terms)
    if op.output.index.const or len(terms) != len(want):
        return False
    return all(isinstance(a, Var) and want.get(c) == ranges.get(a.name)
               for a, c in terms.items())


def _writer_vars(graph: Graph, reader: Operation, read: Access, writer: Operation) -> dict:
    """The writer's var values at each point of `reader`, {Var: Lin in reader's vars}: the
    read's flat index split back into the writer's output coordinates (a dense write)."""
    size = graph.buffers[read.buffer].host_size
    # (a dim of one element shares its stride with the next: it must not hide that dim)
    strides = {s: n for s, n in zip(contiguous_strides(size), size) if n > 1}
    values: dict = {Var(v): const(0) for v, _ in writer.ranges}     # vars of one value
    for atom, coeff in writer.output.index.terms:
        values[atom] = simplify(mod(floordiv(read.index, coeff), strides[coeff]),
                                reader.var_ranges)
    return values


def _in(index: Lin, values: dict, reader: Operation) -> Lin:
    """`index` with each var replaced by its value in `reader`'s vars, simplified there."""
    return simplify(substitute(index, values), reader.var_ranges)
