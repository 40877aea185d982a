"""A part of the program as a graph of its own, for a trial: `--tiling auto` and flash
attention price a candidate tiling by planning a copy of the ops it touches (`plan/trials.py`),
never the program itself, so a trial leaves nothing behind."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from spyrec.ir import Graph, Operation


def lacks_room(row: dict, budget: int) -> bool:
    """A per-tile buffer left in device memory because LX was too small (a larger count may
    fix it), not because its readers and writer split it differently across cores."""
    return row["bytes_per_core"] > budget or (row["reason"] or "").startswith("LX is full")


def subgraph(graph: Graph, nodes: set[str]) -> Graph:
    """The ops of `nodes` with copies of the buffers they touch: buffers they read but do not
    write are its inputs, buffers they write that anything else reads (or the program
    returns) its outputs — so tiling never makes those per-tile."""
    return subgraph_of(graph, lambda op: op.node in nodes)


def subgraph_of(graph: Graph, member: Callable[[Operation], bool]) -> Graph:
    """`subgraph` of the ops `member` selects."""
    ops = [replace(op, core_splits=None) for op in graph.ops if member(op)]
    members = {op.name for op in ops}
    touched = {a.buffer for op in ops for _, a in op.accesses()}
    written = {op.output.buffer for op in ops}
    outside = {a.buffer for op in graph.ops if op.name not in members
               for _, a in op.accesses()}
    keep = set(graph.outputs) | set(graph.mutated_buffers.values()) | outside
    buffers = {n: replace(b) for n, b in graph.buffers.items() if n in touched}
    return Graph(buffers, ops, [n for n in buffers if n not in written],
                 [n for n in buffers if n in written and n in keep],
                 {n: v for n, v in graph.constants.items() if n in touched})
