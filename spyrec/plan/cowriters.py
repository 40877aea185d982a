"""Co-writers: a buffer several ops write gets one split per core from all of them.

matmul_padding writes a padded buffer twice outside loops: a zero fill of the padding rows and
the copy of the data. The buffer can live in LX only if both give each core parts of one slice
(scratchpad_planning's rule, `plan/lx_placement.py lx_slices_problem`), which choosing op by
op does not see: the fill is cheapest split its own way. So after the splits are chosen (and
chains moved), each writer but the one writing the data (`ir/lx.py data_writer`) takes its
cheapest split that does, if any, as replicated as the data writer (`plan/core_splits.py`).
"""

from __future__ import annotations

from spyrec.ir import Graph, Operation
from spyrec.ir.lx import data_writer
from spyrec.plan.lx_placement import lx_slices_problem
from spyrec.plan.producers import Producers
from spyrec.plan.split_candidates import replica_candidates, split_text
from spyrec.plan.split_estimate import split_estimate
from spyrec.plan.split_plan import Plan, Split, shaped


def align_cowriters(graph: Graph, producers: Producers, rows: list, cores: int) -> Plan:
    """`producers`' plan with each co-written LX candidate's other writers aligned (module
    docstring); `rows` (split, report row per op) updated where a writer's split changed."""
    writers: dict[str, list[Operation]] = {}
    uses_of: dict[str, list[int]] = {}    # buffer -> indices of the ops accessing it
    position: dict[str, int] = {}
    for i, op in enumerate(graph.ops):
        position[op.name] = i
        writers.setdefault(op.output.buffer, []).append(op)
        for name in dict.fromkeys(a.buffer for _, a in op.accesses()):
            uses_of.setdefault(name, []).append(i)
    plan = producers.plan
    for name, ops in writers.items():
        if len(ops) < 2 or name not in producers.lx_candidates or any(op.loops for op in ops):
            continue
        uses = uses_of[name]
        if _problem(graph, producers.at(plan), name, uses) is None:
            continue
        main = data_writer(ops)
        for op in ops:
            if op is main:
                continue
            best = _cheapest_aligned(graph, producers.at(plan), op, uses,
                                     plan[main.name].replicas, cores)
            if best is None:
                continue
            split, time_us = best
            plan = plan.with_split(op.name, split)
            i = position[op.name]
            row = rows[i][1]
            rows[i] = (split.splits, row and {**row, "split": split_text(split.splits),
                                              "time_us": time_us})
    return plan


def _cheapest_aligned(graph: Graph, producers: Producers, op: Operation, uses: list[int],
                      copies: int, cores: int) -> tuple[Split, float] | None:
    """`op`'s cheapest split, run as `copies` replicas, under which every op using its
    output gives each core one slice of it (each candidate priced in the plan it makes:
    the slice rule reads every user's split), and its estimated time; None if none does."""
    plan = producers.plan
    best, best_time = None, None
    for ranges, c in replica_candidates(graph, producers.shape(op), copies, cores):
        trial = producers.at(plan.with_split(op.name, Split.of(c, ranges)))
        if _problem(graph, trial, op.output.buffer, uses) is None:
            t = split_estimate(graph, shaped(op, ranges), c, trial).time_us
            if best_time is None or t < best_time:
                best, best_time = Split.of(c, ranges), t
    return None if best is None else (best, best_time)


def _problem(graph: Graph, producers: Producers, name: str, uses: list[int]) -> str | None:
    """`lx_slices_problem` of buffer `name` under `producers`' plan."""
    return lx_slices_problem(graph, graph.buffers[name], uses,
                             [producers.planned(graph.ops[i]) for i in uses])
