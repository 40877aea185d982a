"""The text form of a Graph: what `--dump-after` prints, what pass tests are written in, and
what `ir/parser.py` reads back exactly (`parse(format_graph(g)) == g`).

One line per buffer, then one line per op in execution order, then the signature:

    buffer x: input float16[64, 256] device [4, 64, 64] / [64, 256, 1] fp16 @hbm 0
    op y: y[256*c0 + c1] = add(x[256*c0 + c1], b[c1]) over [c0<64, c1<256] cores [c0:32, c1:1]
    inputs [x]
    outputs [y]

Buffer lines: role, host dtype and shape; then what passes decided, each only once decided:
`device SIZE / STRIDE_MAP DTYPE` (the layout), `@hbm ADDRESS`, and `source "..."`. Op lines:
`op NAME:` then the body `OUT[INDEX] = OPCODE(IN[INDEX], ...)` (indices in the index
algebra's text form, `spyrec/indexing/printer.py`), then `over [VAR<SIZE, ...]` and optional
clauses in this order: `replicas N` or `replicas N fastest` (a replicated op's copies, the
slowest or fastest dim of its core order, named `rep` in `cores`; ir/lx.py), `reduce [VARS]`,
`gather [IDX[INDEX], ...]` (index tensors read first), `bounds [LOW..HIGH, ...]` (per index
tensor, the values it may hold), `attrs {JSON}` (op constants), `cores [VAR:SLICES, ...]`,
`loops [COUNT(VARS)@KEY, ...]` (outermost first; a loop whose trips depend on the enclosing
loop's index i adds `span(A*i+B, C*i+D)`: it runs j in [A*i+B, C*i+D), each end clamped to
0..COUNT), `node NAME` (the FX node), `scope "..."`
(its module path), `fused NAME` (the fused SuperDSC it is one compute op of),
`source "..."`. Buffers add `per_tile` (one tile of a loop body's
intermediate) and `@lx OFFSET` (per-core LX) when set. Names that are not plain identifiers,
and all source lines, are JSON strings. Constant *values* are not printed (weights are data,
not IR).
"""

from __future__ import annotations

import json
import re

from spyrec.indexing.printer import format_expr
from spyrec.ir.graph import Access, Buffer, Graph, Loop, Operation, constants_text

PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


def format_graph(graph: Graph) -> str:
    lines = [format_buffer(b) for b in graph.buffers.values()]
    lines += [format_op(op) for op in graph.ops]
    lines.append(f"inputs {_names(graph.inputs)}")
    lines.append(f"outputs {_names(graph.outputs)}")
    if graph.mutated_buffers:
        pairs = ", ".join(f"{format_name(k)} -> {format_name(v)}"
                          for k, v in graph.mutated_buffers.items())
        lines.append(f"mutated [{pairs}]")
    lines += [_symbol(graph, s) for s in graph.symbols.values()]
    return "\n".join(lines) + "\n"


def format_name(name: str) -> str:
    """A buffer, op or variable name: bare when it is a plain identifier, else a JSON string."""
    return name if PLAIN_NAME.match(name) else _quote(name)


def format_buffer(buf: Buffer) -> str:
    text = (f"buffer {format_name(buf.name)}: {buf.role} {buf.host_dtype}"
            f"{_ints(buf.host_size)}")
    if buf.layout is not None:
        text += (f" device {_ints(buf.layout.device_size)} / {_ints(buf.layout.stride_map)} "
                 f"{buf.layout.device_dtype}")
    if buf.per_tile:
        text += " per_tile"
    if buf.hbm_address is not None:
        text += f" @hbm {buf.hbm_address}"
    if buf.lx_address is not None:
        text += f" @lx {buf.lx_address}"
    return text + _source(buf.source)


def format_access(a: Access) -> str:
    return f"{format_name(a.buffer)}[{format_expr(a.index)}]"


def format_op(op: Operation) -> str:
    operands = ", ".join(format_access(a) for a in op.inputs)
    space = ", ".join(f"{format_name(v)}<{n}" for v, n in op.ranges)
    text = (f"op {format_name(op.name)}: {format_access(op.output)} = {op.op}({operands}) "
            f"over [{space}]")
    if op.replicas != 1 or op.replicas_fastest:
        text += f" replicas {op.replicas}{' fastest' if op.replicas_fastest else ''}"
    if op.reduced:
        text += f" reduce {_names(op.reduced)}"
    if op.index_inputs:
        text += f" gather [{', '.join(format_access(a) for a in op.index_inputs)}]"
    if op.index_bounds:
        text += f" bounds [{', '.join(f'{lo}..{n - 1}' for lo, n in op.index_bounds)}]"
    if op.constants:
        text += f" attrs {constants_text(op.constants)}"
    if op.core_splits is not None:
        splits = ", ".join(f"{format_name(v)}:{k}" for v, k in op.core_splits.items())
        text += f" cores [{splits}]"
    if op.loops:
        text += f" loops [{', '.join(map(format_loop, op.loops))}]"
    if op.lengths:
        pairs = (f"{format_name(v)}={format_name(s)}" for v, s in op.lengths)
        text += f" lengths [{', '.join(pairs)}]"
    if op.node is not None:
        text += f" node {format_name(op.node)}"
    if op.scope:
        text += f" scope {_quote(op.scope)}"
    if op.fused:
        text += f" fused {format_name(op.fused)}"
    return text + _source(op.source)


def _symbol(graph: Graph, symbol) -> str:
    """`symbol NAME MIN..MAX by GRANULARITY [value INPUT[I]+C] [share [M to L, ...]] at
    [BUFFER:DIM, ...]`: a symbolic length (read from an input's element plus C at run time,
    with `value`; each busy core of a sized op running at least M values at lengths up to
    L, the first step that reaches a length counting, with `share`) and the input and output
    dims that have it."""
    dims = [f"{format_name(b)}:{d}" for b, by_dim in graph.symbolic_dims.items()
            for d, name in by_dim.items() if name == symbol.name]
    value = symbol.value_of
    source = "" if value is None else \
        f" value {format_name(value.input)}[{value.index}]{value.offset:+d}"
    steps = ", ".join(f"{m} to {upto}" for upto, m in symbol.min_shares)
    share = f" share [{steps}]" if steps else ""
    return (f"symbol {format_name(symbol.name)} {symbol.minimum}..{symbol.maximum} by "
            f"{symbol.granularity}{source}{share} at [{', '.join(dims)}]")


def format_loop(loop: Loop) -> str:
    """`COUNT(VARS)@KEY`, then `span(A*i+B, C*i+D)` for a loop running j in [A*i+B, C*i+D)
    of the enclosing loop's index i (each clamped to 0..COUNT), and `bound(S/T)` for a loop
    running S // T trips, S a symbolic length (COUNT: at its maximum), `bound(S/T past end)`
    for one running ceil(S / T) trips whose last may pass S."""
    text = f"{loop.count}({', '.join(map(format_name, loop.tiled))})"
    if loop.key:
        text += f"@{format_name(loop.key)}"
    if loop.span is not None:
        text += f" span({_line(loop.span.start)}, {_line(loop.span.stop)})"
    if loop.bound is not None:
        past = " past end" if loop.bound.past_end else ""
        text += f" bound({format_name(loop.bound.symbol)}/{loop.bound.per_trip}{past})"
    return text


def _line(line: tuple[int, int]) -> str:
    a, b = line
    return f"{a}*i{'+' if b >= 0 else '-'}{abs(b)}"


def _ints(values) -> str:
    return f"[{', '.join(str(v) for v in values)}]"


def _names(names) -> str:
    return f"[{', '.join(format_name(n) for n in names)}]"


def _source(source: str | None) -> str:
    return "" if source is None else f" source {_quote(source)}"


def _quote(text: str) -> str:
    """A JSON string, non-ASCII kept readable (control characters are still escaped)."""
    return json.dumps(text, ensure_ascii=False)
