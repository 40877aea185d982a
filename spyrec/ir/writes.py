"""Which IR fields a pass wrote: a snapshot of a graph before the pass, compared after it.

Every pass declares in its registry contract the fields it writes (`Buffer.layout`,
`Operation.core_splits`, ...; `ops` and `buffers` for adding, removing or reordering them), so
a reader of the registry knows what each pass may change without reading its code. The
verifying instrument (`--verify-each`, and every test compile) takes a `snapshot` before each
pass and asks `written_fields` after it: a field the pass changed without declaring it is an
internal error naming the pass, the field and one op or buffer it changed.

`constants` is what `weights.bin` is made of: the constant buffers in order, the fields their
device form depends on (host size and dtype, layout) and the values they hold (by identity,
`graph.constants`). The compiler writes `weights.bin` while the passes after the last one that
declares it still run (`codegen/weights_job.py`), so this declaration is what makes that safe.

Ops are matched by name (passes replace an op by an edited copy as often as they edit it in
place), buffers by name; a changed name is an added and a removed op. Values are compared with
`==` (an op's constants by their JSON text, as `Operation` equality does).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from spyrec.ir.graph import Buffer, Graph, Operation, constants_text

OP_FIELDS = tuple(f.name for f in fields(Operation) if f.name != "name")
BUFFER_FIELDS = tuple(f.name for f in fields(Buffer) if f.name != "name")
# every name a contract may list in `writes`
WRITABLE = ("ops", "buffers", "signature", "constants", "symbols",
            *(f"Operation.{f}" for f in OP_FIELDS), *(f"Buffer.{f}" for f in BUFFER_FIELDS))


@dataclass(frozen=True)
class Snapshot:
    """The values of every op's and buffer's fields, and the graph's op order and signature."""

    ops: dict[str, tuple]
    order: tuple[str, ...]
    buffers: dict[str, tuple]
    signature: tuple
    constants: tuple
    values: tuple       # the constants' values, held so their ids stay theirs
    symbols: tuple = ()     # the symbolic lengths (frozen values), by name


def _op_values(op: Operation) -> tuple:
    return tuple(constants_text(op.constants) if f == "constants" else getattr(op, f)
                 for f in OP_FIELDS)


def _buffer_values(buf: Buffer) -> tuple:
    return tuple(getattr(buf, f) for f in BUFFER_FIELDS)


def _symbols(graph: Graph) -> tuple:
    return tuple(sorted(graph.symbols.items()))


def _signature(graph: Graph) -> tuple:
    return (tuple(graph.inputs), tuple(graph.outputs), tuple(graph.mutated_buffers.items()))


def constants_state(graph: Graph) -> tuple[tuple, tuple]:
    """(what decides weights.bin, the values it names by id): every constant buffer in order
    with its host size, host dtype, layout and the id of its value."""
    bufs = [b for b in graph.buffers.values() if b.role == "constant"]
    values = tuple(graph.constants.get(b.name) for b in bufs)
    return (tuple((b.name, b.host_size, b.host_dtype, b.layout, id(v))
                  for b, v in zip(bufs, values)), values)


def snapshot(graph: Graph) -> Snapshot:
    """The graph's field values now (copied where mutable, so later edits do not reach it)."""
    ops = {op.name: tuple(dict(v) if isinstance(v, dict) else v for v in _op_values(op))
           for op in graph.ops}
    constants, values = constants_state(graph)
    return Snapshot(ops=ops, order=tuple(op.name for op in graph.ops),
                    buffers={name: _buffer_values(b) for name, b in graph.buffers.items()},
                    signature=_signature(graph), constants=constants, values=values,
                    symbols=_symbols(graph))


def written_fields(before: Snapshot, graph: Graph) -> dict[str, str]:
    """Each field (a `WRITABLE` name) that differs between `before` and `graph`, with one op
    or buffer where it does (for the message)."""
    out: dict[str, str] = {}
    if tuple(op.name for op in graph.ops) != before.order:
        added = [op.name for op in graph.ops if op.name not in before.ops]
        out["ops"] = f"op {added[0]!r}" if added else "the op order"
    for op in graph.ops:
        old = before.ops.get(op.name)
        if old is None:
            continue
        for name, a, b in zip(OP_FIELDS, old, _op_values(op)):
            if a != b:
                out.setdefault(f"Operation.{name}", f"op {op.name!r}")
    if set(graph.buffers) != set(before.buffers):
        changed = sorted(set(graph.buffers) ^ set(before.buffers))
        out["buffers"] = f"buffer {changed[0]!r}"
    for name, buf in graph.buffers.items():
        old = before.buffers.get(name)
        if old is None:
            continue
        for field_name, a, b in zip(BUFFER_FIELDS, old, _buffer_values(buf)):
            if a != b:
                out.setdefault(f"Buffer.{field_name}", f"buffer {name!r}")
    now = constants_state(graph)[0]
    if now != before.constants:
        changed = [a[0] for a, b in zip(now, before.constants) if a != b]
        out["constants"] = (f"constant {changed[0]!r}" if changed else
                            "the set or order of constant buffers")
    if _signature(graph) != before.signature:
        out["signature"] = "the graph's inputs, outputs or mutated buffers"
    if _symbols(graph) != before.symbols:
        changed = [a[0] for a, b in zip(_symbols(graph), before.symbols) if a != b]
        out["symbols"] = f"symbol {changed[0]!r}" if changed else "the set of symbols"
    return out
