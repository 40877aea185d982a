"""The checks a resolved group must pass before any loop is built (DESIGN §6), each one
`ConfigError` naming the file, the group and the op or dim:

- whole sticks: a level that tiles the variable in an access's stick lane must leave tiles of
  whole sticks of that buffer (tiles start on a stick boundary, DESIGN §5), for every buffer
  the op reads or writes, in that buffer's own layout and dtype;
- contiguity: no op outside the group both depends on the group and feeds it (the loop nest
  could not be placed anywhere in the program without breaking that dependence).
"""

from __future__ import annotations

from spyrec.errors import ConfigError
from spyrec.indexing import Var
from spyrec.indexing.sticks import stick_info
from spyrec.ir import Graph, Operation
from spyrec.plan.tiling.dimnames import describe_op


def check_whole_sticks(graph: Graph, op: Operation, var: str, dim: str, count: int,
                       where: str) -> None:
    """Tiling `var` of `op` into `count` pieces (level dim `dim`) keeps every access's tiles
    whole sticks (one piece splits nothing, even a dim shorter than a stick)."""
    if count == 1:
        return
    size = dict(op.ranges)[var]
    tile = size // count
    for _, access in op.accesses():
        buf = graph.buffers[access.buffer]
        if buf.layout is None:
            continue
        info = stick_info(tuple(buf.host_size), buf.host_strides, buf.layout, op.var_ranges,
                          access.index)
        if Var(var) not in info.coords[-1].free_atoms():
            continue
        per_stick = buf.layout.elems_per_stick
        if tile % per_stick:
            raise ConfigError(
                f"{where}: loops: {{{dim}: {count}}} splits sticks of {buf.name} at "
                f"{describe_op(op)}: a tile is {tile} elements of its stick dim, and a stick "
                f"of {buf.layout.device_dtype} holds {per_stick}; "
                f"{_whole_stick_counts(dim, size, per_stick, count)}")


def _whole_stick_counts(dim: str, size: int, per_stick: int, count: int) -> str:
    good = [k for k in range(2, size + 1) if size % k == 0 and (size // k) % per_stick == 0]
    if not good:
        return f"{dim} ({size}) cannot be cut into tiles of whole sticks; drop the level"
    near = sorted(good, key=lambda k: (abs(k - count), k))[:3]
    return f"counts that keep whole sticks: {', '.join(map(str, sorted(near)))}"


def check_contiguous(graph: Graph, group: list[Operation], where: str) -> None:
    """No op outside `group` lies on a dependence path from the group back into it."""
    members = {id(op) for op in group}
    succ = _successors(graph)
    after = _reach([op for op in group], succ)            # everything the group feeds
    pred: dict[int, list[Operation]] = {}
    for op in graph.ops:
        for nxt in succ[id(op)]:
            pred.setdefault(id(nxt), []).append(op)
    before = _reach([op for op in group], pred)           # everything that feeds the group
    for op in graph.ops:
        if id(op) in members or id(op) not in after or id(op) not in before:
            continue
        source = next(g for g in group if id(op) in _reach([g], succ))
        target = next(g for g in group if id(g) in _reach([op], succ))
        raise ConfigError(
            f"{where}: the group is not contiguous: {describe_op(op)} is outside it, depends "
            f"on its node {source.node!r} and feeds its node {target.node!r}; add "
            f"{op.node or op.name!r} to the group or split the group there")


def _successors(graph: Graph) -> dict[int, list[Operation]]:
    """Op -> the later ops that read what it writes, or write it again (graph order)."""
    succ: dict[int, list[Operation]] = {id(op): [] for op in graph.ops}
    writers: dict[str, list[Operation]] = {}
    for op in graph.ops:
        for access in op.reads():
            for w in writers.get(access.buffer, ()):
                succ[id(w)].append(op)
        for w in writers.get(op.output.buffer, ()):
            succ[id(w)].append(op)
        writers.setdefault(op.output.buffer, []).append(op)
    return succ


def _reach(start: list[Operation], edges: dict[int, list[Operation]]) -> set[int]:
    """Ids of the ops reachable from `start` by one or more edges."""
    seen: set[int] = set()
    stack = list(start)
    while stack:
        for nxt in edges.get(id(stack.pop()), ()):
            if id(nxt) not in seen:
                seen.add(id(nxt))
                stack.append(nxt)
    return seen
