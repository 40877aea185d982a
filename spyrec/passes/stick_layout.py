"""stick_layout — pick a DeviceLayout for every buffer; insert restickify copies where needed.

Reads: buffer shapes and dtypes, op accesses, `--layouts` pins for program inputs.
Writes: `Buffer.layout` for every buffer; new buffers and `ReStickifyOpHBM` / `identity` copy ops
before the ops that need them; renames copy ops whose input and output sticks differ to
`ReStickifyOpHBM`; the `restickify` report (count, elements, one row per copy).
Guarantees: every compute op's operands are stick-compatible with it (A-layout §4.1): one stick
variable, the output's (matmul: x on K, y on N), used nowhere else but its own tile coordinate.

Greedy, op by op in program order (the optimal global choice is a later pass):
outputs get the default layout (stick on the last dim), or a stick-sparse one when a reduction
removes the input's stick. An incompatible input is fixed, cheapest first, by (1) choosing the
layout of a not-yet-placed constant (free: it is laid out at compile time), (2) reusing or
inserting a restickified copy of the whole buffer, (3) materializing the accessed view into a
fresh buffer sticked on the needed variable. A stick-sparse tensor read across the stick
variable has no mechanism on the device: that is an `UnsupportedProgram` naming the op.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from spyrec.errors import UnsupportedProgram
from spyrec.indexing import Lin, Ranges, Var, var
from spyrec.indexing.coordinates import host_coordinates
from spyrec.indexing.simplify import simplify_lin
from spyrec.ir import Access, Buffer, Graph, Operation
from spyrec.layout import SPARSE, DeviceLayout, default_layout, stick_layout
from spyrec.layout.sticks import StickInfo, stick_info
from spyrec.passes.registry import CompileContext, Pass, register_pass

COPY_OPS = {"identity", "ReStickifyOpHBM", "fill"}


@register_pass("stick_layout")
@dataclass(frozen=True)
class StickLayout(Pass):
    optimizer: str = "greedy"

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        _Placer(graph, ctx.layouts_config).place()
        report = _rename_restickifies(graph)
        ctx.report["restickify"] = report


def layout_with_stick(buf: Buffer, stick_dim: int | None) -> DeviceLayout:
    """Dense layout sticked on host dim `stick_dim`, or stick-sparse when it is None."""
    rank = len(buf.host_size)
    if stick_dim is None:
        order = list(range(rank)) + [SPARSE]
    else:
        order = [d for d in range(rank) if d != stick_dim] + [stick_dim]
    return stick_layout(buf.host_size, buf.host_strides, buf.host_dtype, order)


class _Placer:
    def __init__(self, graph: Graph, layouts_config: dict) -> None:
        self.graph = graph
        self.pins = (layouts_config or {}).get("inputs", {}) or {}
        self.copies: dict[tuple[str, DeviceLayout], str] = {}
        self.new_ops: list[Operation] = []

    def place(self) -> None:
        for name in self.graph.inputs:
            buf = self.graph.buffers[name]
            pin = self.pins.get(name, {}).get("stick_dim")
            buf.layout = default_layout(buf.host_size, buf.host_dtype) if pin is None \
                else layout_with_stick(buf, pin % max(len(buf.host_size), 1))
        for op in list(self.graph.ops):
            self.new_ops.append(self._place_op(op))
        for buf in self.graph.buffers.values():
            if buf.layout is None:
                buf.layout = default_layout(buf.host_size, buf.host_dtype)
        self.graph.ops = self.new_ops

    # --- one op ------------------------------------------------------------------------------
    def _place_op(self, op: Operation) -> Operation:
        for a in op.index_inputs:
            self._ensure_layout(self.graph.buffers[a.buffer])
        out = self.graph.buffers[op.output.buffer]
        if out.layout is None:
            out.layout = self._output_layout(op, out)
        if op.op in COPY_OPS:
            for a in op.inputs:
                self._ensure_layout(self.graph.buffers[a.buffer])
            return op
        ranges = op.var_ranges
        out_info = self._info(out, op.output.index, ranges)
        inputs = list(op.inputs)
        for k, access in enumerate(inputs):
            target = self._target(op, k, out_info)
            inputs[k] = self._fix(op, access, target, ranges)
        return replace(op, inputs=tuple(inputs))

    def _target(self, op: Operation, k: int, out_info: StickInfo) -> str | None:
        if op.op == "batchmatmul":
            return op.reduced[0] if k == 0 else out_info.stick_var
        return out_info.stick_var

    def _output_layout(self, op: Operation, out: Buffer) -> DeviceLayout:
        if op.is_reduction and op.op != "batchmatmul" and op.inputs:
            src = self.graph.buffers[op.inputs[0].buffer]
            self._ensure_layout(src)
            info = self._info(src, op.inputs[0].index, op.var_ranges)
            if info.stick_var in op.reduced and out.host_size:
                return layout_with_stick(out, None)
        return default_layout(out.host_size, out.host_dtype)

    def _ensure_layout(self, buf: Buffer) -> None:
        if buf.layout is None:
            buf.layout = default_layout(buf.host_size, buf.host_dtype)

    def _info(self, buf: Buffer, index: Lin, ranges: Ranges) -> StickInfo:
        return stick_info(buf.host_size, buf.host_strides, buf.layout, ranges, index)

    # --- making one input compatible -----------------------------------------------------
    def _compatible(self, info: StickInfo, target: str | None, op: Operation, e: int) -> bool:
        if not info.clean:
            return False
        if info.stick_var is None:
            return target is None or not info.uses_outside_stick(target, e)
        if target is None:
            return info.stick_var in op.reduced
        return info.stick_var == target and not info.uses_outside_stick(target, e)

    def _fix(self, op: Operation, access: Access, target: str | None, ranges: Ranges) -> Access:
        buf = self.graph.buffers[access.buffer]
        candidates = self._candidates(buf, access.index, target, ranges)
        if buf.layout is None and buf.role == "constant":
            for layout in candidates:
                buf.layout = layout
                if self._ok(buf, access.index, target, op, ranges):
                    return access
            buf.layout = None
        self._ensure_layout(buf)
        if self._ok(buf, access.index, target, op, ranges):
            return access
        if not buf.layout.is_sparse:
            for layout in candidates:
                trial = Buffer(buf.name, buf.host_size, buf.host_dtype, buf.role, layout=layout)
                if self._ok(trial, access.index, target, op, ranges):
                    return Access(self._restickified(buf, layout, op).name, access.index)
            materialized = self._materialize(op, access, target)
            if materialized is not None:
                return materialized
        raise self._infeasible(op, access, target)

    def _ok(self, buf: Buffer, index: Lin, target, op: Operation, ranges: Ranges) -> bool:
        return self._compatible(self._info(buf, index, ranges), target, op,
                                buf.layout.elems_per_stick)

    def _candidates(self, buf: Buffer, index: Lin, target: str | None,
                    ranges: Ranges) -> list[DeviceLayout]:
        """Layouts worth trying: stick on the dim carrying `target`, sparse, then the rest."""
        host = [simplify_lin(c, ranges)
                for c in host_coordinates(buf.host_size, buf.host_strides, index)]
        carrying = [d for d, c in enumerate(host)
                    if target is not None and any(isinstance(a, Var) and a.name == target
                                                  for a in c.free_atoms())]
        dims = carrying + [d for d, n in enumerate(buf.host_size)
                           if d not in carrying and n > 1]
        out = [layout_with_stick(buf, d) for d in carrying]
        if buf.host_size:
            out.append(layout_with_stick(buf, None))
        out += [layout_with_stick(buf, d) for d in dims[len(carrying):]]
        return [lay for lay in out if lay != buf.layout]

    def _restickified(self, buf: Buffer, layout: DeviceLayout, op: Operation) -> Buffer:
        key = (buf.name, layout)
        if key in self.copies:
            return self.graph.buffers[self.copies[key]]
        name = self.graph.fresh_name(f"{buf.name}_restick")
        copy = self.graph.add_buffer(Buffer(name, buf.host_size, buf.host_dtype,
                                            "intermediate", source=op.source, layout=layout))
        cvars = [var(f"c{i}") for i in range(len(buf.host_size))]
        index = sum((v.scale(s) for v, s, n in zip(cvars, buf.host_strides, buf.host_size)
                     if n > 1), Lin())
        ranges = tuple((f"c{i}", n) for i, n in enumerate(buf.host_size))
        self.new_ops.append(Operation(name, "ReStickifyOpHBM", ranges, (Access(buf.name, index),),
                                      Access(name, index), source=op.source))
        self.copies[key] = name
        return copy

    def _materialize(self, op: Operation, access: Access, target: str | None) -> Access | None:
        """Copy the accessed view into a fresh buffer indexed by the vars it uses, target last."""
        used = {a.name for a in access.index.free_atoms() if isinstance(a, Var)}
        order = [v for v, _ in op.ranges if v in used and v != target]
        if target in used:
            order.append(target)
        sizes = dict(op.ranges)
        shape = tuple(sizes[v] for v in order)
        src = self.graph.buffers[access.buffer]
        name = self.graph.fresh_name(f"{access.buffer}_view")
        buf = self.graph.add_buffer(Buffer(name, shape, src.host_dtype, "intermediate",
                                           source=op.source))
        buf.layout = default_layout(shape, src.host_dtype)
        strides = buf.host_strides
        index = sum((var(v).scale(s) for v, s, n in zip(order, strides, shape) if n > 1), Lin())
        self.new_ops.append(Operation(name, "identity", tuple((v, sizes[v]) for v in order),
                                      (access,), Access(name, index), source=op.source))
        new = Access(name, index)
        ok = self._ok(buf, index, target, op, op.var_ranges)
        return new if ok else None

    def _infeasible(self, op: Operation, access: Access, target: str | None) -> UnsupportedProgram:
        buf = self.graph.buffers[access.buffer]
        info = self._info(buf, access.index, op.var_ranges)
        coords = ", ".join(str(c) for c in info.coords)
        return UnsupportedProgram(
            f"no device layout works for op {op.name} ({op.op}) at "
            f"{op.source or 'unknown source line'}: input {buf.name} "
            f"{list(buf.host_size)} is stick-sparse (device coordinates [{coords}]) and is read "
            f"across the op's stick variable {target}; there is no mechanism to gather "
            f"elements from multiple sticks into a single stick. Keep the reduced dim "
            f"(keepdim=True) or reduce along a non-stick dim.")


def _rename_restickifies(graph: Graph) -> dict:
    """Copies whose input and output sticks differ are restickifies; report them."""
    rows, total = [], 0
    for i, op in enumerate(graph.ops):
        if op.op not in ("identity", "ReStickifyOpHBM") or op.index_inputs or not op.inputs:
            continue
        src = graph.buffers[op.inputs[0].buffer]
        dst = graph.buffers[op.output.buffer]
        if src.host_dtype != dst.host_dtype and op.op == "identity":
            continue
        ranges = op.var_ranges
        a = stick_info(src.host_size, src.host_strides, src.layout, ranges, op.inputs[0].index)
        b = stick_info(dst.host_size, dst.host_strides, dst.layout, ranges, op.output.index)
        if a.clean and b.clean and a.stick_var == b.stick_var:
            continue
        graph.ops[i] = replace(op, op="ReStickifyOpHBM")
        elements = dst.layout.device_elems
        total += elements
        rows.append({"tensor": src.name, "copy": dst.name, "from_stick": a.stick_var,
                     "to_stick": b.stick_var, "elements": elements,
                     "consumers": [c.name for c in graph.consumers(dst.name)]})
    return {"count": len(rows), "elements": total, "list": rows}
