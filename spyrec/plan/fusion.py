"""Which consecutive ops become one fused SuperDSC (issue 58): the grouping the fusion pass
applies, as a function of the graph alone.

A fused SuperDSC lists several `computeOp_` entries, each on its unit (reference/I §1a: PT
for a matmul, SFP for vector and transcendental work), fed through the core's FIFOs and LX.
So a group is a producer chain that stays on each core: op b joins the group ending in op a
when

- b runs in the same loop nest as the group (the same `loop_identity`: one `sdsc_execute`
  per trip runs the whole group) on as many cores;
- b reads a buffer some member writes, and every buffer it reads from a member is held in
  LX (scratchpad_planning placed it: each core finds its own slice there, and the value
  never travels through HBM);
- neither is an op the fused form does not carry: an index check, a gather or scatter
  (indirect accesses), an op sized by a symbolic length. (A replicated op joins like any
  other: each core runs its copy into its own LX, as its one-op file says.)

An op that reads no member's value but only feeds the group after it (its output in LX, read
by a member; a causal mask computed inside the K/V loop) joins that group. Ops that are not
joined stay one-op SuperDSCs. The grouping changes no value: the members
run in program order, each as its one-op file would (the simulator proves it bit for bit,
tests/passes/test_fusion.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spyrec.costmodel import DEFAULT_PARAMS, CostParams, fused_us
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import loop_identity, nest_trips


@dataclass(frozen=True)
class FusionGroup:
    """One fused SuperDSC: its member ops (program order) and the intermediates its members
    pass each other in LX (written and read inside the group)."""

    ops: tuple[Operation, ...]
    kept: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.ops[0].name


def unit_of(op: Operation) -> str:
    """The unit a member runs on (`exUnit`): the PT array for a matmul, else the SFP."""
    return "pt" if op.op == "batchmatmul" else "sfp"


def _fusible(op: Operation) -> bool:
    return (op.core_splits is not None and not op.index_inputs and not op.is_scatter
            and not op.lengths and op.op != "wrapindex")


def _cores(op: Operation) -> int:
    return math.prod(op.core_splits.values())


def fusion_groups(graph: Graph) -> list[FusionGroup]:
    """Every group of two or more ops (see the module docstring), in program order."""
    runs: list[list[int]] = []
    for i, op in enumerate(graph.ops):
        if runs and runs[-1][-1] == i - 1 and _joins(graph, [graph.ops[k] for k in runs[-1]], op):
            runs[-1].append(i)
        elif _fusible(op):
            runs.append([i])
    runs = _with_feeders(graph, runs)
    return [FusionGroup(tuple(ops), _kept(ops)) for ops in
            ([graph.ops[k] for k in run] for run in runs if len(run) > 1)]


def _with_feeders(graph: Graph, runs: list[list[int]]) -> list[list[int]]:
    """`runs` with each lone op that only feeds the run after it (a causal mask computed in
    the K/V loop, read by the body's `where`) moved into that run: it reads no member's
    value, but the run reads its output from LX, in the same loop nest on as many cores."""
    out: list[list[int]] = []
    for run in runs:
        if out and len(out[-1]) == 1 and out[-1][0] == run[0] - 1:
            feeder = graph.ops[out[-1][0]]
            members = [graph.ops[k] for k in run]
            if _same_place(feeder, members[0]) and \
                    graph.buffers[feeder.output.buffer].lx_address is not None and \
                    any(a.buffer == feeder.output.buffer for m in members for a in m.reads()):
                out[-1] = out[-1] + run
                continue
        out.append(list(run))
    return out


def _kept(ops: list[Operation]) -> tuple[str, ...]:
    """The buffers a member writes and a later member reads, in order of first read."""
    written: set[str] = set()
    kept: dict[str, None] = {}
    for op in ops:
        kept.update((a.buffer, None) for a in op.reads() if a.buffer in written)
        written.add(op.output.buffer)
    return tuple(kept)


def _same_place(a: Operation, b: Operation) -> bool:
    """One loop nest, as many cores."""
    return loop_identity(a.loops) == loop_identity(b.loops) and _cores(a) == _cores(b)


def _joins(graph: Graph, run: list[Operation], op: Operation) -> bool:
    """Whether `op` continues `run` (consecutive members so far)."""
    if not _fusible(op) or not _same_place(run[-1], op):
        return False
    written = {m.output.buffer for m in run}
    from_group = [a.buffer for a in op.reads() if a.buffer in written]
    return bool(from_group) and all(graph.buffers[b].lx_address is not None
                                    for b in from_group)


def kept_bytes(graph: Graph, group: FusionGroup) -> int:
    """The HBM bytes the group's intermediates would move as one-op SuperDSCs through HBM:
    each written once and read once per read access, per trip of the group's loops."""
    trips = nest_trips(group.ops[0].loops)
    total = 0
    for name in group.kept:
        nbytes = graph.buffers[name].layout.device_bytes
        reads = sum(1 for op in group.ops for a in op.reads() if a.buffer == name)
        total += nbytes * (1 + reads) * trips
    return total


def fused_estimate_us(graph: Graph, ops: tuple[Operation, ...],
                      p: CostParams = DEFAULT_PARAMS) -> dict[str, float]:
    """The compiler's estimate of one execution of `ops` (a group, split and LX-placed) as a
    fused SuperDSC: each member's split estimate (`plan/split_estimate.py`) gives its compute
    on its unit and its memory time, summed per stream, and `costmodel.fused_us` (the
    simulator's formula, `sim/fused_cost.py`) times the streams. What a planner pricing a
    tile of a fused body weighs (`unit_overlap` included: at 0 it is the members' sum)."""
    from spyrec.plan.hbm_bytes import core0_slice
    from spyrec.plan.producers import Producers
    from spyrec.plan.split_estimate import split_estimate

    producers = Producers(graph, intermediates=True, params=p)
    units = {"pt": 0.0, "sfp": 0.0, "memory": 0.0}
    serial = points = 0.0
    for op in ops:
        cost = split_estimate(graph, op, op.core_splits, producers, p, penalties=False)
        units[unit_of(op)] += cost.compute_us
        units["memory"] += cost.memory_us
        serial += max(cost.compute_us, cost.memory_us)
        points = max(points, math.prod(core0_slice(op, op.core_splits).values()))
    return {**fused_us(units, serial, int(points), p), **units, "serial_us": serial}


def fused_planned_time_us(graph: Graph, p: CostParams = DEFAULT_PARAMS) -> float:
    """A planned, LX-placed graph's estimated time with the fusion pass's groups timed as
    fused SuperDSCs (`fused_estimate_us`) and every other op as one-op SuperDSCs
    (`whole_plan.planned_time_us`'s terms), each times the trips of its loops: what a
    planner pricing a candidate tiling weighs when the pipeline fuses (flash attention's
    tile search, issue 58)."""
    from spyrec.plan.whole_plan import planned_estimates

    groups = fusion_groups(graph)
    grouped = {op.name for group in groups for op in group.ops}
    total = sum(cost.time_us * nest_trips(op.loops)
                for op, cost in planned_estimates(graph, p) if op.name not in grouped)
    return total + sum(fused_estimate_us(graph, group.ops, p)["time_us"] *
                       nest_trips(group.ops[0].loops) for group in groups)

