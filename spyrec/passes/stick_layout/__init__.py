"""stick_layout — choose a DeviceLayout for every buffer, minimizing restickify traffic.

Reads: buffer shapes and dtypes, op accesses, `--layouts` pins for program inputs.
Writes: `Buffer.layout` for every buffer; `ReStickifyOpHBM` copies (one per buffer and target
layout, shared by every consumer that needs it) placed before their first consumer; copies of
views that no layout can fix (a slice starting inside a stick); the `restickify` report.
A constant (a value the compiler writes) read in a second layout is never copied on the device:
it gets a second constant buffer in that layout holding the same value (`constant_layouts` in
the report), free in the search.
Guarantees: every compute op reads operands that are stick-compatible with it (A-layout §4.1),
or the pass fails with one message naming the op, its source line and the blocking tensor.

The search (`search.py` in this package) visits ops in program order, branching over each
op's candidate output layouts (A-layout §4.3) and keeping the `beam_width` cheapest states
(`optimizer: greedy` keeps one). Cost: device element slots moved, padding and sparse blow-up
included (A-layout §4.5). Constants, fills and — with `input_layouts: free` — program inputs take the
layout their first consumer needs, at no device cost; a constant's later readers get the layout
they need at no device cost too.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass, replace

from spyrec.errors import ConfigError
from spyrec.indexing import Lin, var
from spyrec.ir import Access, Buffer, Graph, Operation
from spyrec.layout import default_layout
from spyrec.indexing.sticks import stick_info
from spyrec.passes.registry import CompileContext, Pass, register_pass
from spyrec.passes.stick_layout.search import (Decision, LayoutSearch,
                                              is_laid_out_at_compile_time)
from spyrec.plan.layouts import layout_with_stick

INPUT_LAYOUTS = ("free", "default")
OPTIMIZERS = ("beam", "greedy")


@register_pass("stick_layout")
@dataclass(frozen=True)
class StickLayout(Pass):
    optimizer: str = "beam"
    beam_width: int = 64
    input_layouts: str = "free"


    report_keys: ClassVar[dict] = {
        "restickify": {"count": 0, "elements": 0, "list": []}, "layout_search": None}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        """The restickify copies inserted, and the constants laid out twice instead."""
        r = report.get("restickify")
        if r is None:
            return []
        lines = ["", f"restickify: {r['count']} copies inserted, {r['elements']} device "
                     f"elements moved"]
        for row in r["list"]:
            lines.append(f"  {'' if row['inserted'] else '(program copy) '}"
                         f"{row['tensor']} -> {row['copy']}: stick dim "
                         f"{row['from_stick_dim']} -> {row['to_stick_dim']} "
                         f"({row['from_stick_var']} -> {row['to_stick_var']}), "
                         f"{row['elements']} elements, for {', '.join(row['consumers']) or '-'}")
        laid = r.get("constant_layouts", [])
        if laid:
            lines += [f"constants in a second layout (written at compile time, no device "
                      f"copy): {len(laid)}, {sum(row['bytes'] for row in laid)} bytes of weights"]
            lines += [f"  {row['tensor']} -> {row['constant']}: stick dim "
                      f"{row['from_stick_dim']} -> {row['to_stick_dim']}, {row['bytes']} bytes"
                      for row in laid]
        return lines

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        self._check_options()
        pins = _pinned_inputs(graph, ctx.layouts_config)
        width = 1 if self.optimizer == "greedy" else self.beam_width
        search = LayoutSearch(graph, pins, free_inputs=self.input_layouts == "free",
                              beam_width=width)
        best = search.run()
        commit = _Commit(graph, best.layouts, best.decisions)
        commit.apply()
        ctx.report["restickify"] = restickify_report(graph, commit.inserted)
        ctx.report["restickify"]["constant_layouts"] = constant_layouts_report(
            graph, commit.constant_layouts)
        ctx.report["layout_search"] = {"optimizer": self.optimizer, "beam_width": width,
                                       "estimated_elements": best.cost}

    def _check_options(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"stick_layout.optimizer must be one of {', '.join(OPTIMIZERS)}, "
                              f"got {self.optimizer!r}")
        if self.input_layouts not in INPUT_LAYOUTS:
            raise ConfigError(f"stick_layout.input_layouts must be one of "
                              f"{', '.join(INPUT_LAYOUTS)}, got {self.input_layouts!r}")
        if self.beam_width < 1:
            raise ConfigError(f"stick_layout.beam_width must be at least 1, got {self.beam_width}")


def _pinned_inputs(graph: Graph, layouts_config: dict) -> dict:
    pins = (layouts_config or {}).get("inputs", {}) or {}
    out = {}
    for name, spec in pins.items():
        if name not in graph.inputs:
            raise ConfigError(f"--layouts: {name!r} is not a program input; inputs: "
                              f"{', '.join(graph.inputs)}")
        buf = graph.buffers[name]
        dim = (spec or {}).get("stick_dim")
        if not isinstance(dim, int) or not -len(buf.host_size) <= dim < len(buf.host_size):
            raise ConfigError(f"--layouts: inputs.{name}.stick_dim must be a dim of "
                              f"{list(buf.host_size)}, got {dim!r}")
        out[name] = layout_with_stick(buf, dim % len(buf.host_size))
    return out


class _Commit:
    """Apply the chosen state: layouts, shared restickified copies, materialized views."""

    def __init__(self, graph: Graph, layouts: dict, decisions: dict) -> None:
        self.graph = graph
        self.layouts = layouts
        self.decisions = decisions
        self.copies: dict[tuple, str] = {}
        self.inserted: set[str] = set()
        self.constant_layouts: list[tuple[str, str]] = []   # (constant, its re-laid copy)

    def apply(self) -> None:
        for name, buf in self.graph.buffers.items():
            buf.layout = self.layouts.get(name) or default_layout(buf.host_size, buf.host_dtype)
        new_ops: list[Operation] = []
        for i, op in enumerate(self.graph.ops):
            inputs = list(op.inputs)
            for k, decision in self.decisions.get(i, {}).items():
                inputs[k] = self._rewire(op, inputs[k], decision, new_ops)
            new_ops.append(replace(op, inputs=tuple(inputs)))
        self.graph.ops = new_ops

    def _rewire(self, op: Operation, access: Access, d: Decision, new_ops: list) -> Access:
        if d.kind == "copy":
            key = (access.buffer, d.layout)
            if key not in self.copies:
                self.copies[key] = self._restickify(access.buffer, d.layout, op, new_ops)
            return Access(self.copies[key], access.index)
        assert d.kind == "view", d
        return self._materialize(op, access, d.order, new_ops)

    def _restickify(self, name: str, layout, op: Operation, new_ops: list) -> str:
        if is_laid_out_at_compile_time(self.graph, name):
            return self._constant_layout(name, layout)
        src = self.graph.buffers[name]
        copy = self.graph.add_buffer(Buffer(self.graph.fresh_name(f"{name}__restick"),
                                            src.host_size, src.host_dtype, "intermediate",
                                            source=op.source, layout=layout))
        index = _contiguous_index([f"c{i}" for i in range(len(src.host_size))], src)
        ranges = tuple((f"c{i}", n) for i, n in enumerate(src.host_size))
        new_ops.append(Operation(copy.name, "ReStickifyOpHBM", ranges, (Access(name, index),),
                                 Access(copy.name, index), source=op.source, loops=op.loops, node=op.node, scope=op.scope))
        self.inserted.add(copy.name)
        return copy.name

    def _constant_layout(self, name: str, layout) -> str:
        """A constant read in a second layout gets a second constant holding the same value in
        that layout (DESIGN §3: the compiler lays constants out, so the layout is free): no
        device op, and the weights file writes each from the one value (a lazy reader)."""
        src = self.graph.buffers[name]
        copy = self.graph.add_buffer(Buffer(self.graph.fresh_name(f"{name}__layout"),
                                            src.host_size, src.host_dtype, "constant",
                                            source=src.source, layout=layout))
        self.graph.constants[copy.name] = self.graph.constants[name]
        self.constant_layouts.append((name, copy.name))
        return copy.name

    def _materialize(self, op: Operation, access: Access, order: tuple, new_ops: list) -> Access:
        sizes = dict(op.ranges)
        src = self.graph.buffers[access.buffer]
        buf = Buffer(self.graph.fresh_name(f"{access.buffer}__view"),
                     tuple(sizes[v] for v in order), src.host_dtype, "intermediate",
                     source=op.source)
        buf.layout = default_layout(buf.host_size, buf.host_dtype)
        self.graph.add_buffer(buf)
        index = _contiguous_index(order, buf)
        new_ops.append(Operation(buf.name, "identity", tuple((v, sizes[v]) for v in order),
                                 (access,), Access(buf.name, index), source=op.source,
                                 loops=op.loops, node=op.node, scope=op.scope))
        self.inserted.add(buf.name)
        return Access(buf.name, index)


def _contiguous_index(names, buf: Buffer) -> Lin:
    return sum((var(v).scale(s) for v, s, n in zip(names, buf.host_strides, buf.host_size)
                if n > 1), Lin())


def restickify_report(graph: Graph, inserted: set[str]) -> dict:
    """Every copy whose input and output sticks differ is a restickify: rename and list them.

    Totals count the copies this pass inserted; copies the program makes anyway (a
    `.contiguous()` after a transpose) are listed with `"inserted": false`.
    """
    rows, total, count = [], 0, 0
    consumers = _consumer_names(graph)
    for i, op in enumerate(graph.ops):
        if op.op not in ("identity", "ReStickifyOpHBM") or op.index_inputs or not op.inputs:
            continue
        src = graph.buffers[op.inputs[0].buffer]
        dst = graph.buffers[op.output.buffer]
        ranges = op.var_ranges
        a = stick_info(src.host_size, src.host_strides, src.layout, ranges, op.inputs[0].index)
        b = stick_info(dst.host_size, dst.host_strides, dst.layout, ranges, op.output.index)
        if a.clean and b.clean and a.stick_var == b.stick_var:
            continue
        if op.op == "identity" and src.host_dtype != dst.host_dtype:
            continue  # a cast, not a restickify
        graph.ops[i] = replace(op, op="ReStickifyOpHBM")
        elements = src.layout.device_elems if op.inputs[0].index == op.output.index \
            else dst.layout.device_elems  # a whole-buffer copy moves the source's slots
        if op.name in inserted:
            total += elements
            count += 1
        rows.append({"tensor": src.name, "copy": dst.name, "inserted": op.name in inserted,
                     "from_stick_dim": _stick_dim(src), "to_stick_dim": _stick_dim(dst),
                     "from_stick_var": a.stick_var, "to_stick_var": b.stick_var,
                     "elements": elements, "op": op.name,
                     "consumers": consumers.get(dst.name, [])})
    return {"count": count, "elements": total, "list": rows}


def constant_layouts_report(graph: Graph, made: list[tuple[str, str]]) -> list[dict]:
    """The constants written in a second layout (no device op: not in the restickify count),
    with the bytes each adds to the weights file."""
    return [{"tensor": name, "constant": copy,
             "from_stick_dim": _stick_dim(graph.buffers[name]),
             "to_stick_dim": _stick_dim(graph.buffers[copy]),
             "bytes": graph.buffers[copy].layout.device_bytes} for name, copy in made]


def _consumer_names(graph: Graph) -> dict[str, list[str]]:
    """Buffer -> the names of the ops reading it, in program order (`Graph.consumers` for
    every buffer in one pass: asking per row scanned the whole program per restickify)."""
    out: dict[str, list[str]] = {}
    for op in graph.ops:
        for name in dict.fromkeys(a.buffer for a in op.reads()):
            out.setdefault(name, []).append(op.name)
    return out


def _stick_dim(buf: Buffer) -> int | None:
    """The host dim whose elements run along the sticks (None: stick-sparse)."""
    lane_stride = buf.layout.stride_map[-1]
    if lane_stride <= 0:
        return None
    dims = [d for d, (n, s) in enumerate(zip(buf.host_size, buf.host_strides))
            if s == lane_stride and n > 1]
    return dims[0] if dims else len(buf.host_size) - 1
