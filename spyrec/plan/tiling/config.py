"""A tiling config resolved against a graph: which ops each group holds, and per op and loop
level the iteration variable that carries the level's dim (DESIGN §6, issue 8 contract).

Runs on the graph after stick_layout and matmul_padding: layouts are known (the whole-stick
check needs them) and the restickify copies and padding ops those passes add carry the
`node`/`scope` of the op they serve, so they join its group. It reads the graph and never
changes it; the coarse_tiling transform builds the loops from the `TilingPlan`.

Every problem is one `ConfigError` (exit 2) naming the file, the group and the op or dim, with
near names suggested: unknown tensors in `dims`, ops, scopes or loop dims; a count that does
not divide its dim; a tile that splits a stick; a group that is not contiguous; an op in two
groups; a loop dim no op of the group carries, or carries twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from spyrec.errors import ConfigError
from spyrec.ir import Graph, Operation
from spyrec.plan.tiling.checks import check_contiguous, check_whole_sticks
from spyrec.plan.tiling.dimnames import DimNames, describe_op, propagate
from spyrec.plan.tiling.spec import (
    GroupSpec, TilingSpec, check_shape, group_where, near,
)

__all__ = ["GroupPlan", "Level", "TilingPlan", "resolve"]


@dataclass(frozen=True)
class Level:
    dim: str          # the config's dim name
    count: int


@dataclass(frozen=True)
class GroupPlan:
    index: int                  # position in `groups` (loop keys "g<index>.<level>")
    ops: tuple[str, ...]        # Operation.name of every op in the group, graph order
    levels: tuple[Level, ...]   # outermost first
    # op name -> per level: the op's variable that carries the level's dim (tiled or
    # reduced), or None when the op does not carry it
    vars: dict[str, tuple[str | None, ...]]
    where: str                  # "tiling.yaml: group 1" for messages


@dataclass(frozen=True)
class TilingPlan:
    path: str
    groups: tuple[GroupPlan, ...]
    dim_sizes: dict[str, int]   # each named dim's size


def resolve(graph: Graph, config: dict, where: str) -> TilingPlan:
    """The plan of tiling document `config` (as read by `read_tiling_file`) for `graph`;
    `where` (the file name) prefixes every message."""
    spec = check_shape(config, where)
    seeds, sizes = _seed_names(graph, spec, where)
    named = propagate(graph, seeds, sizes, where)
    groups = tuple(_group_plan(graph, g, i, named, sizes, where)
                   for i, g in enumerate(spec.groups))
    _check_disjoint(graph, groups, where)
    for plan in groups:
        check_contiguous(graph, [op for op in graph.ops if op.name in plan.vars], plan.where)
    return TilingPlan(where, groups, sizes)


def _seed_names(graph: Graph, spec: TilingSpec,
                where: str) -> tuple[dict[str, tuple[str | None, ...]], dict[str, int]]:
    """`dims` on buffers: {buffer: names}, and each name's size (one size per name)."""
    by_key = {name: name for name in graph.inputs}
    by_key.update({b.source: b.name for b in graph.buffers.values()
                   if b.role == "constant" and b.source})
    seeds: dict[str, tuple[str | None, ...]] = {}
    sizes: dict[str, int] = {}
    first: dict[str, str] = {}   # name -> "x dim 0", where its size came from
    for key, names in spec.dims.items():
        if key not in by_key:
            raise ConfigError(
                f"{where}: dims: {key!r} is not a program input or parameter{near(key, by_key)}"
                f"; inputs: {', '.join(graph.inputs) or 'none'}; parameters are named by FQN "
                f"(fc1.weight)")
        buf = graph.buffers[by_key[key]]
        if len(names) != len(buf.host_size):
            raise ConfigError(
                f"{where}: dims: {key} has {len(buf.host_size)} dims {list(buf.host_size)}, "
                f"but {len(names)} names are given; give one name (or '_') per dim")
        for d, name in enumerate(names):
            if name is None:
                continue
            size = buf.host_size[d]
            if name in sizes and sizes[name] != size:
                raise ConfigError(
                    f"{where}: dims: {name!r} names {first[name]} of size {sizes[name]} and "
                    f"{key} dim {d} of size {size}; one name must mean one size")
            sizes.setdefault(name, size)
            first.setdefault(name, f"{key} dim {d}")
        seeds[buf.name] = names
    return seeds, sizes


def _select(graph: Graph, spec: GroupSpec, where: str) -> list[Operation]:
    if spec.ops is not None:
        nodes = [op.node for op in graph.ops if op.node]
        for glob in spec.ops:
            if not any(fnmatchcase(n, glob) for n in nodes):
                raise ConfigError(
                    f"{where}: ops: {glob!r} matches no node of the program"
                    f"{near(_plain(glob), nodes)}; `spyrec inspect OUT` lists every op with its "
                    f"node name")
        return [op for op in graph.ops
                if op.node and any(fnmatchcase(op.node, g) for g in spec.ops)]
    chosen = [op for op in graph.ops if fnmatchcase(op.scope, spec.scope)]
    if not chosen:
        scopes = [op.scope for op in graph.ops if op.scope]
        raise ConfigError(
            f"{where}: scope {spec.scope!r} matches no op's module path"
            f"{near(_plain(spec.scope), scopes)}; `spyrec inspect OUT` lists every op with its "
            f"module path")
    return chosen


def _plain(glob: str) -> str:
    """A glob without its wildcards, to look for near names."""
    return glob.translate(str.maketrans("", "", "*?[]"))


def _group_plan(graph: Graph, spec: GroupSpec, index: int, named: DimNames,
                sizes: dict[str, int], file: str) -> GroupPlan:
    where = group_where(file, index)
    ops = _select(graph, spec, where)
    levels = tuple(Level(dim, count) for dim, count in spec.loops)
    per_op: dict[str, list[str | None]] = {op.name: [] for op in ops}
    for level in levels:
        _check_level(level, sizes, where)
        carried = [(op, _carrier(op, named.op_vars[op.name], level.dim, where)) for op in ops]
        for op, var in carried:
            per_op[op.name].append(var)
        if all(var is None for _, var in carried):
            nodes = list(dict.fromkeys(op.node or op.name for op in ops))
            shown = ", ".join(nodes[:8]) + (f", … ({len(nodes)} nodes)" if nodes[8:] else "")
            raise ConfigError(
                f"{where}: loops: no op of the group carries dim {level.dim!r} (nodes: "
                f"{shown}); name {level.dim} on a dim these ops iterate, or drop the level")
        for op, var in carried:
            if var is not None:
                check_whole_sticks(graph, op, var, level.dim, level.count, where)
    return GroupPlan(index, tuple(op.name for op in ops), levels,
                     {name: tuple(v) for name, v in per_op.items()}, where)


def _check_level(level: Level, sizes: dict[str, int], where: str) -> None:
    if level.dim not in sizes:
        raise ConfigError(f"{where}: loops: dim {level.dim!r} is not named in dims"
                          f"{near(level.dim, sizes)}; named dims: {', '.join(sizes)}")
    size = sizes[level.dim]
    if size % level.count:
        divisors = [k for k in range(2, size + 1) if size % k == 0]
        close = sorted(sorted(divisors, key=lambda k: (abs(k - level.count), k))[:3])
        raise ConfigError(
            f"{where}: loops: {{{level.dim}: {level.count}}}: {level.count} does not divide "
            f"{level.dim}'s size {size}; choose a divisor such as "
            f"{', '.join(map(str, close)) or 1}")


def _carrier(op: Operation, op_vars: dict[str, str], dim: str, where: str) -> str | None:
    """The op's one variable named `dim`, or None."""
    found = [v for v, name in op_vars.items() if name == dim]
    if len(found) > 1:
        raise ConfigError(
            f"{where}: loops: {describe_op(op)} carries dim {dim!r} on {len(found)} of its "
            f"variables ({', '.join(found)}); a loop tiles one of them, so give those dims "
            f"different names in dims")
    return found[0] if found else None


def _check_disjoint(graph: Graph, groups: tuple[GroupPlan, ...], where: str) -> None:
    owner: dict[str, GroupPlan] = {}
    for plan in groups:
        for name in plan.ops:
            if name in owner:
                op = next(o for o in graph.ops if o.name == name)
                raise ConfigError(
                    f"{where}: {describe_op(op)} is selected by group {owner[name].index + 1} "
                    f"and group {plan.index + 1}; groups must be disjoint: narrow one group's "
                    f"ops or scope")
            owner[name] = plan
