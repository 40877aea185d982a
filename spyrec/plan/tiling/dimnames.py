"""Named dims: which iteration variable of which op walks a dim the tiling config named.

A tiling config names the dims of program inputs and parameters (DESIGN §6); a loop over a
name needs, in every op of its group, the variable that carries that dim. The one question
to ask is, per access, *which op variable walks which host dim of the buffer whole*
(`ir/walks.py`): a reshape that keeps a dim whole keeps that; one that splits or merges the
dim does not, and a size-1 dim is walked by no variable (a broadcast has no name).

Names then flow dims -> variables -> dims: every access of an op (inputs, index tensors, and
the output buffer's names when another writer set them) names the variables that walk named
dims; the op's output dims take the names of the variables that walk them. That one rule
covers pointwise ops and broadcasts (aligned position = same variable), transposes (the
variable walks another dim of the output), reductions (the reduced variable keeps its name)
and matmuls (M from the left operand's walk, N from the right's, K from either). It repeats
to a fixpoint so buffers written by several ops (padding fills and copies) agree.

Two names meeting on one variable or one dim is a `ConfigError` naming the op (one name on
dims of different sizes is refused where the config names them, config.py). One name on two
variables of one op is recorded (a Gram matrix x @ x.T carries its token dim twice) and
refused only if a loop tiles it (config.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from spyrec.errors import ConfigError
from spyrec.indexing import Var
from spyrec.indexing.coordinates import host_coordinates
from spyrec.indexing.simplify import simplify_lin
from spyrec.ir import Buffer, Graph, Operation
from spyrec.ir.walks import var_extents, walked_dims


def describe_op(op: Operation) -> str:
    """How messages name an op: the FX node a config selects it by, the IR op, the source."""
    node = f"node {op.node!r}" if op.node else f"op {op.name!r}"
    extra = f"op {op.name}, " if op.node and op.node != op.name else ""
    return f"{node} ({extra}{op.source or 'unknown source line'})"


@dataclass(frozen=True)
class DimNames:
    """The result of propagation: a name (or None) per host dim of every buffer, and per op
    the name each of its variables carries (only the named ones)."""

    buffers: dict[str, tuple[str | None, ...]]
    op_vars: dict[str, dict[str, str]]


def propagate(graph: Graph, seeds: dict[str, tuple[str | None, ...]], sizes: dict[str, int],
              where: str) -> DimNames:
    """Names of every buffer dim and op variable, from the config's `seeds` (buffer -> one
    name or None per dim); `sizes` is each name's size; `where` prefixes messages."""
    names = {b: (None,) * len(buf.host_size) for b, buf in graph.buffers.items()}
    names.update(seeds)
    op_vars: dict[str, dict[str, str]] = {}
    changed = True
    while changed:  # names only grow (a clash raises), so this ends
        changed = False
        for op in graph.ops:
            carried = _carried(graph, op, names, sizes, where)
            op_vars[op.name] = {v: n for v, (n, _) in carried.items()}
            out = op.output.buffer
            new = _output_names(graph.buffers[out], op, names[out], carried, where)
            if new != names[out]:
                names[out] = new
                changed = True
    return DimNames(names, op_vars)


def _carried(graph: Graph, op: Operation, names: dict, sizes: dict[str, int],
             where: str) -> dict[str, tuple[str, str]]:
    """{var: (name, "buffer dim d")} for the op's variables that walk a named dim."""
    ranges = var_extents(op)
    carried: dict[str, tuple[str, str]] = {}
    for _, access in op.accesses():
        buf = graph.buffers[access.buffer]
        for v, d in walked_dims(access.index, buf.host_size, ranges).items():
            name = names[buf.name][d]
            if name is None:
                continue
            seen = f"{buf.name} dim {d}"
            if v in carried and carried[v][0] != name:
                other, other_seen = carried[v]
                raise ConfigError(
                    f"{where}: dims: names {other!r} and {name!r} meet on one dim at "
                    f"{describe_op(op)}: its variable {v} walks {other_seen} ({other!r}) and "
                    f"{seen} ({name!r}); give both the same name or leave one '_'")
            # a name sits on a dim of its size (config.py checks the seeds, walked_dims the
            # range), so a variable that walks the dim whole has that size too
            assert ranges[v] == sizes[name], (op.name, v, name)
            carried.setdefault(v, (name, seen))
    return carried


def _output_names(out: Buffer, op: Operation, current: tuple[str | None, ...],
                  carried: dict[str, tuple[str, str]],
                  where: str) -> tuple[str | None, ...]:
    new = list(current)
    for v, d in walked_dims(op.output.index, out.host_size, var_extents(op)).items():
        if v not in carried:
            continue
        name = carried[v][0]
        if new[d] is not None and new[d] != name:
            raise ConfigError(
                f"{where}: dims: names {new[d]!r} and {name!r} meet on {out.name} dim {d}, "
                f"written by {describe_op(op)}; give both the same name or leave one '_'")
        new[d] = name
    return tuple(new)


def dim_vars(buf: Buffer, op: Operation) -> tuple[str | None, ...] | None:
    """Per host dim of `buf` (written by `op`), the var the output index walks it with
    (None: a size-1 dim), or None when a dim is not one plain var."""
    out = []
    coords = host_coordinates(buf.host_size, buf.host_strides, op.output.index)
    for size, c in zip(buf.host_size, coords):
        c = simplify_lin(c, op.var_ranges)
        atom = c.as_atom()
        if size == 1 and c.is_const:
            out.append(None)
        elif isinstance(atom, Var):
            out.append(atom.name)
        else:
            return None
    return tuple(out)
