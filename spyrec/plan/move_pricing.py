"""What chain moves pay: each op's estimate under a plan, memoized on what it depends on.

A move (`plan/chain_moves.py`) re-prices the same ops again and again: every candidate of every
op it reaches, and the region around each change before and after. The estimate of an op under
a split depends on the op's structure and core ranges, the split, and its writers' and readers'
splits (`split_estimate.estimate_key`), never on names; so the layers of a decoder stack share
their ops' estimates, and a move through one layer re-prices what the last one did. Every memo
here is keyed by those values (a plan is a value, `plan/split_plan.py`), so an answer found
under one plan holds under every other plan that agrees on them: nothing is forgotten when a
plan changes.
"""

from __future__ import annotations

from spyrec.ir import Graph, Operation
from spyrec.plan.producers import Producers
from spyrec.plan.split_estimate import SplitCost, estimate_key, split_estimate
from spyrec.plan.split_plan import Plan, Split


class MovePricing:
    """Memoized split estimates of `graph`'s ops under plans (`producers`: the graph's
    writers and readers; asked `at` each plan)."""

    def __init__(self, graph: Graph, producers: Producers):
        self.graph, self.producers = graph, producers
        self._estimates: dict[tuple, SplitCost] = {}          # `estimate`
        self._times: dict[tuple, tuple[float, float]] = {}    # `cost`
        self._links: dict[str, tuple] = {}                    # `cost`
        self._linked: dict[str, tuple[list, list]] = {}       # `neighbours`
        self._static: dict[str, tuple] = {}                   # `key`
        self._interned: dict[tuple, int] = {}

    def estimate(self, plan: Plan, op: Operation, split: Split,
                 penalties: bool = True) -> SplitCost:
        """`split_estimate` of `op` split as `split` (at its core ranges) while the other
        ops are as `plan` has them, memoized on `key` (op's own entry in `plan` is not read:
        an op's estimate does not depend on its current split)."""
        key = (self.key(plan, op, split.core_ranges), split.key, penalties)
        got = self._estimates.get(key)
        if got is None:
            producers = self.producers.at(plan)
            got = self._estimates[key] = split_estimate(
                self.graph, producers.shaped(op, split.core_ranges), split.splits, producers,
                penalties=penalties)
        return got

    def key(self, plan: Plan, op: Operation, core_ranges: tuple) -> tuple:
        """`estimate_key` of `op` at `core_ranges` under `plan` in another form, equal exactly
        when it is equal: what it says of op's own structure (its op, reduced vars, loops,
        accesses' buffers and indices) and of a writer's or reader's fixed facts is worked out
        once per op and interned, leaving the ranges and splits to read per call (moves ask
        for the same ops again and again)."""
        got = self._static.get(op.name)
        if got is None:
            got = self._static[op.name] = self._static_key(plan, op)
        sid, lx, readers = got
        writers = []
        for w in lx:
            if w is None:
                writers.append(None)
                continue
            theirs = None if w[0] is False else plan.get(w[0].name)
            writers.append(() if theirs is None else (theirs.core_ranges, w[1], theirs.key))
        return (sid, core_ranges, tuple(writers), None if readers is None else
                tuple([(plan.ranges(r), i, plan.key(r)) for r, i in readers]))

    def _static_key(self, plan: Plan, op: Operation) -> tuple:
        """The part of `key` no plan changes: op's interned structure, per access the
        writer (with its interned fixed facts) of an LX candidate, and op's output's
        readers (with their accesses' interned indices) if it is one."""
        producers = self.producers.at(plan)
        same = estimate_key(self.graph, op, producers)
        intern = self._interned
        structure = (same[0],) + same[2:6]
        lx = []
        for _, a in op.accesses():
            w = producers.writers.get(a.buffer)
            lx.append(None if a.buffer not in producers.lx_candidates else
                      (False, None) if w is None or w is op else
                      (w, intern.setdefault(("writer", w.reduced, w.output.index),
                                            len(intern))))
        readers = None if same[7] is None else [
            (r, intern.setdefault(("reader", a.index), len(intern)))
            for r, a in producers.readers.get(op.output.buffer, ())]
        return intern.setdefault(("op", structure), len(intern)), lx, readers

    def cost(self, plan: Plan, op: Operation) -> tuple[float, float]:
        """op's estimated (time, serial time: compute plus memory) under `plan`, without
        penalties (a region's sum counts the neighbours' traffic in their own estimates);
        memoized on what it depends on: its split and its writers' and readers' splits."""
        links = self._links.get(op.name)
        if links is None:       # op, the ops that may write its inputs, and its readers
            p = self.producers
            links = self._links[op.name] = (op,) + tuple(
                w for a in op.inputs if (w := p.writers.get(a.buffer)) is not None
                and w is not op) + tuple(r for r, _ in p.readers.get(op.output.buffer, ()))
        key = [op.name]
        for o in links:
            split = plan.get(o.name)
            key.append(None if split is None else split.key)
        key = tuple(key)
        got = self._times.get(key)
        if got is None:
            cost = self.estimate(plan, op, plan[op.name], penalties=False)
            got = self._times[key] = cost.time_us, cost.time_us + min(cost.compute_us,
                                                                      cost.memory_us)
        return got

    def time(self, plan: Plan, op: Operation) -> float:
        return self.cost(plan, op)[0]

    def neighbours(self, plan: Plan, op: Operation) -> list[Operation]:
        """op, the writers of its inputs and its readers, those with a split in `plan`; who
        they may be is found once per op (moves ask ~50 times per op)."""
        links = self._linked.get(op.name)
        if links is None:
            p = self.producers
            links = self._linked[op.name] = (
                [w for a in op.inputs if (w := p.writers.get(a.buffer)) is not None
                 and w is not op],
                [r for r, _ in p.readers.get(op.output.buffer, ())])
        out = [op]
        out += [w for w in links[0] if w.name in plan]
        out += [r for r in links[1] if r.name in plan]
        return out
