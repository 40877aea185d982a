"""Who writes and reads each buffer, and which per-core slices a plan gives them.

The split estimate asks, for every candidate split of every op, whether a buffer it reads can
stay in LX: whether this split gives each core the slice the buffer's writer gave that core
(scratchpad_planning's condition (b)), whether the writer split a reduced var (partial sums
meet in HBM), whether the readers already chosen keep this op's slices. Those answers read the
other ops' splits, so they read a `Plan` (`plan/split_plan.py`), never the graph's fields: a
planner trying a plan asks `at(plan)` for the same facts under it.

What a graph fixes (the writers, the readers, the buffers that may live in LX, the inputs
stage_inputs may stage) is worked out once and shared by every `at`; so are the memos, which
are keyed by the values an answer depends on (no op's name or identity where its fields
suffice), so a memo filled under one plan answers truly under another.
"""

from __future__ import annotations

import copy

from spyrec.costmodel import DEFAULT_PARAMS, CostParams
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import REPLICA_VAR, Access
from spyrec.ir.lx import data_writer, keeps_slices, moves_with_loops, split_boxes
from spyrec.plan.split_estimate import first_box, index_vars
from spyrec.plan.split_plan import Plan, Split, plan_of, planned, shaped
from spyrec.plan.staging import stageable_inputs


class _Facts:
    """What `Producers` knows of a graph whatever the plan, and its memos (by value)."""

    def __init__(self, graph: Graph, intermediates: bool):
        self.readers: dict[str, list[tuple[Operation, Access]]] = {}
        looped: set[str] = set()
        all_writers: dict[str, list[Operation]] = {}
        for op in graph.ops:
            all_writers.setdefault(op.output.buffer, []).append(op)
            for a in op.reads():
                if a.buffer not in all_writers or data_writer(all_writers[a.buffer]) is not op:
                    self.readers.setdefault(a.buffer, []).append((op, a))
            if op.loops:
                looped.update(a.buffer for _, a in op.accesses()
                              if moves_with_loops(op, a.buffer))
        self.writers: dict[str, Operation] = {name: data_writer(ops)
                                              for name, ops in all_writers.items()}
        # the buffers scratchpad_planning may put in LX: per-tile ones, and with
        # `intermediates` every intermediate no loop moves over (its `_not_scratch`: looped
        # ops may read one in place)
        mutated = set(graph.mutated_buffers) | set(graph.mutated_buffers.values())
        self.stageable = stageable_inputs(graph)     # `split_estimate._staged_trips`
        self.lx_candidates = {
            name for name, buf in graph.buffers.items()
            if buf.per_tile or intermediates and buf.role == "intermediate"
            and name not in graph.inputs and name not in graph.outputs
            and name not in mutated and name not in looped}
        # buffer name -> the number of its (sizes, layout): what the slice answers read of it
        shapes: dict[tuple, int] = {}
        self.shape = {name: shapes.setdefault((buf.host_size, buf.layout), len(shapes))
                      for name, buf in graph.buffers.items()}
        self.same: dict[tuple, bool | None] = {}       # `same_slices`
        self.boxes: dict[tuple, object] = {}           # `boxes`
        self.planned: dict[tuple, Operation] = {}      # `planned`
        self.shaped: dict[tuple, Operation] = {}       # `shaped`


class Producers:
    """Who wrote each buffer and read it (`writers`, `readers`), which buffers may live in
    LX (`lx_candidates`), and under `plan` the slices each writer gave its buffer. Without a
    plan, the one the graph holds (`plan_of`). `intermediates`: every intermediate no loop
    moves over may live in LX (work division's `lx_intermediates`), else per-tile buffers
    only (`narrowed`: fewer, `whole_plan.planned_producers`). `params`: the cost model's
    parameters every estimate under these producers prices with (`split_estimate`)."""

    def __init__(self, graph: Graph, intermediates: bool = False, plan: Plan | None = None,
                 facts: _Facts | None = None, params: CostParams = DEFAULT_PARAMS):
        self.graph = graph
        self.params = params
        self.facts = facts or _Facts(graph, intermediates)
        self.plan = plan_of(graph) if plan is None else plan
        self.readers, self.writers = self.facts.readers, self.facts.writers
        self.lx_candidates, self.stageable = self.facts.lx_candidates, self.facts.stageable

    def at(self, plan: Plan) -> Producers:
        """The same facts, and memos, under another plan."""
        return Producers(self.graph, plan=plan, facts=self.facts, params=self.params)

    def narrowed(self, lx_candidates: set[str]) -> Producers:
        """The same under the same plan, but only `lx_candidates` may live in LX (the
        memos, which do not depend on it, shared)."""
        facts = copy.copy(self.facts)
        facts.lx_candidates = lx_candidates
        return Producers(self.graph, plan=self.plan, facts=facts, params=self.params)

    def writer(self, buffer: str, reader: Operation) -> Operation | None:
        """The op that wrote `buffer` before `reader`, once the plan gives it a split."""
        op = self.writers.get(buffer)
        return None if op is None or op.name == reader.name or self.plan.get(op.name) is None \
            else op

    def shape(self, op: Operation) -> Operation:
        """`op` with the core ranges the plan gives it (`split_plan.shaped`)."""
        return self.shaped(op, self.plan.ranges(op))

    def shaped(self, op: Operation, core_ranges: tuple) -> Operation:
        """`split_plan.shaped`, one copy per op and core ranges (a replicated trial)."""
        if core_ranges == op.core_ranges:
            return op
        key = (op.name, core_ranges)
        got = self.facts.shaped.get(key)
        if got is None:
            got = self.facts.shaped[key] = shaped(op, core_ranges)
        return got

    def planned(self, op: Operation) -> Operation:
        """A copy of `op` holding its split under the plan (`split_plan.planned`), for the
        LX slice rules; one per distinct split."""
        split = self.plan.get(op.name)
        key = (op.name, split)
        got = self.facts.planned.get(key)
        if got is None:
            got = self.facts.planned[key] = planned(op, split)
        return got

    def partial(self, buffer: str, reader: Operation) -> bool:
        """Did `buffer`'s writer split a reduced var (a K-split)? Its output then holds
        partial sums added in HBM, so every reader reads it from there."""
        op = self.writer(buffer, reader)
        return op is not None and any(k > 1 and v in op.reduced
                                      for v, k in self.plan[op.name].items)

    def boxes(self, buffer: str):
        """Each core's box of `buffer` as its writer's split under the plan writes it."""
        op = self.writers[buffer]
        split = self.plan[op.name]
        key = (self.facts.shape[buffer], split.core_ranges, split.key, op.output.index)
        got = self.facts.boxes.get(key, self)
        if got is self:
            got = self.facts.boxes[key] = split_boxes(self.graph.buffers[buffer],
                                                      split.core_ranges, split.key, op.output)
        return got

    def same_slices(self, op: Operation, access: Access, splits: dict[str, int]) -> bool | None:
        """Does `splits` give each core of `op` (its core ranges as given: `shape`) the slice
        of `access`'s buffer its writer gave that core (scratchpad_planning's condition
        (b))? None: no writer split or a gather.

        Memoized on everything the answer depends on (the buffer's shape and layout, which
        work division does not change, not its name: the layers of a stack share answers;
        op's ranges and access; the split; the writer's ranges, reduced vars, split and
        output access): chain moves ask again for every candidate of every op a move
        reaches, and moves reach the same ops again and again."""
        writer = self.writer(access.buffer, op)
        if writer is None:
            return None
        theirs = self.plan[writer.name]
        key = (self.facts.shape[access.buffer], op.core_ranges, access.index,
               tuple(sorted(splits.items())), theirs.core_ranges, writer.reduced, theirs.key,
               writer.output.index)
        got = self.facts.same.get(key, self)
        if got is self:
            got = self.facts.same[key] = self._same_slices(op, access, splits, writer, theirs)
        return got

    def _same_slices(self, op: Operation, access: Access, splits: dict[str, int],
                     writer: Operation, theirs: Split) -> bool | None:
        """`same_slices` computed (its writer known to have a split, `theirs`)."""
        if self.partial(access.buffer, op):
            return False                  # partial sums: every core holds a different part
        used = index_vars(access.index)
        if theirs.replicas == 1 and any(k > 1 and v not in used for v, k in splits.items()):
            return False                  # other cores' slices, unless replicated for it
        if first_box(self.graph, op, access, splits) != \
                first_box(self.graph, writer, writer.output, theirs.splits,
                          theirs.core_ranges):
            return False                  # the cheap test first: core 0's slice
        boxes = self.boxes(access.buffer)
        if boxes is None:
            return None
        mine = split_boxes(self.graph.buffers[access.buffer], op.core_ranges,
                           tuple(sorted(splits.items())), access)
        return keeps_slices(mine, boxes)

    def readers_keep(self, op: Operation, splits: dict[str, int]) -> bool:
        """Does every reader of `op`'s output (op at its core ranges as given) whose split the
        plan already holds (work_division's later rounds) give each core the slice `splits`
        gives it? True while none is chosen: the first round assumes the readers follow."""
        buf = self.graph.buffers[op.output.buffer]
        mine = None
        for reader, access in self.readers.get(buf.name, ()):
            theirs = self.plan.get(reader.name)
            if theirs is None:
                continue
            used = index_vars(access.index)
            stray = any(k > 1 and v not in used for v, k in theirs.items)
            if stray and splits.get(REPLICA_VAR, 1) == 1 or \
                    first_box(self.graph, op, op.output, splits) != \
                    first_box(self.graph, reader, access, theirs.splits, theirs.core_ranges):
                return False              # the cheap tests first, as `same_slices`
            if mine is None:
                mine = split_boxes(buf, op.core_ranges, tuple(sorted(splits.items())),
                                   op.output)
            if mine is None or not keeps_slices(
                    split_boxes(buf, theirs.core_ranges, theirs.key, access), mine):
                return False
        return True

    def reader_splits(self, op: Operation) -> tuple:
        """What `readers_keep` depends on, without names (work_division's memo key)."""
        plan = self.plan
        return tuple((plan.ranges(r), a.index, plan.key(r))
                     for r, a in self.readers.get(op.output.buffer, ()))

    def matches(self, op: Operation, splits: dict[str, int]) -> bool:
        """Does `splits` keep every producer's slices (the tie-break toward LX)?"""
        return all(self.same_slices(op, a, splits) is not False for a in op.inputs)
