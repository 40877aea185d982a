"""A work-division plan as a value: every op's core split, and the one place it enters the IR.

Why a value: work division compares many plans (each op's candidate splits, the chains a move
re-splits, the plan with K-splits against the one without). It used to try each by writing
`Operation.core_splits` and replicas into the graph and restoring them by hand, and every cache
that remembered a writer's slices had to be told (`forget`) after each change. Here a trial is a
new `Plan` built from the old (`updated`, `with_split`, or a `Draft` one step fills and hands
over); the old one is still there to go back to, the graph is never touched, and every memo is
keyed by the values it depends on. `apply_plan` writes the chosen plan into the IR once, at the
end of `plan/core_splits.py divide_work`.

- `Split`: one op's split (slices per core dim, in the order the planner built them) and the
  core ranges it divides (`Operation.core_ranges`: a replicated op's copies included).
- `Plan`: an immutable mapping op name -> `Split`; an op it does not hold has no split yet.
  `Draft`: one planner step's plan while it builds it (changed in place, then a `Plan`).
- `shaped(op, core_ranges)`: `op` itself, or a copy with those core ranges (its copies), for
  the functions that read an op's core ranges (the split estimate, candidates, spans).
- `planned(op, split)`: a copy of `op` as the plan has it (split and ranges), for the LX slice
  rules, which read the splits of every op using a buffer.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from spyrec.ir import Graph, Operation
from spyrec.ir.graph import REPLICA_VAR
from spyrec.ir.lx import replica_fields, replica_split, set_core_ranges

CoreRanges = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Split:
    """One op's core split: `items` (dim, slices) in the order the planner built the split
    (report rows and the IR print it so), over `core_ranges`. Made by `Split.of`, which
    also fills the two forms the planner reads most: `key`, the items sorted (what memos
    compare: two orders of one split divide alike), and `splits`, the split as the IR holds
    it ({dim: slices}; shared, never to be changed)."""

    items: tuple[tuple[str, int], ...]
    core_ranges: CoreRanges
    key: tuple[tuple[str, int], ...] = field(compare=False, repr=False)
    splits: dict[str, int] = field(compare=False, repr=False)

    @classmethod
    def of(cls, splits: dict[str, int], core_ranges: CoreRanges) -> Split:
        items = tuple(splits.items())
        return cls(items, core_ranges, tuple(sorted(items)), splits)

    @property
    def replicas(self) -> int:
        """How many core groups run the op alike (`Operation.replicas`)."""
        return next((n for v, n in self.core_ranges if v == REPLICA_VAR), 1)

    @property
    def cores(self) -> int:
        return math.prod(k for _, k in self.items)

    def replicated(self, op: Operation, count: int, fastest: bool = False) -> Split:
        """This split of `op` run on `count` core groups (1: once): `ir/lx.py
        replica_split`, the rule `set_replicas` applies in place."""
        ranges, splits = replica_split(op.ranges, self.splits, count, fastest)
        return Split.of(splits, ranges)


class _Reads(Mapping):
    """What a planner reads of a plan or a draft: op name -> `Split`, and the op's fields
    as they hold them. `get` is the dict's own (planners ask it some 200,000 times a
    program, more than anything else they do), which is why these are not dataclasses."""

    __slots__ = ("_splits", "get")

    def __init__(self, splits: dict[str, Split]):
        self._splits = splits
        self.get = splits.get

    def __getitem__(self, name: str) -> Split:
        return self._splits[name]

    def __contains__(self, name: object) -> bool:
        return name in self._splits

    def __iter__(self) -> Iterator[str]:
        return iter(self._splits)

    def __len__(self) -> int:
        return len(self._splits)

    def with_split(self, name: str, split: Split) -> Plan:
        """A new plan: these splits, `name`'s changed."""
        return Plan({**self._splits, name: split})

    def ranges(self, op: Operation) -> CoreRanges:
        """`op`'s core ranges under this plan (those it came with, when it has no split)."""
        got = self.get(op.name)
        return op.core_ranges if got is None else got.core_ranges

    def splits(self, op: Operation) -> dict[str, int] | None:
        """`op`'s split under this plan ({dim: slices}), None when it has none yet."""
        got = self.get(op.name)
        return None if got is None else got.splits

    def key(self, op: Operation) -> tuple:
        """`op`'s split sorted (`Split.key`), () when it has none: what memos compare."""
        got = self.get(op.name)
        return () if got is None else got.key


class Plan(_Reads):
    """A plan: immutable. `updated` and `with_split` return new plans and leave this one as
    it is, so a trial that does not pay is dropped by keeping the old plan; nothing changes
    a plan after it is made."""

    __slots__ = ()

    def __init__(self, splits: Mapping[str, Split] | None = None):
        super().__init__(dict(splits or {}))

    def updated(self, changes: Mapping[str, Split]) -> Plan:
        """This plan with `changes`."""
        return Plan({**self._splits, **changes})

    def draft(self) -> Draft:
        """A draft starting from this plan (one copy)."""
        return Draft(self._splits)


class Draft(_Reads):
    """A plan being built by one step of the planner (work division's pass in program
    order, one chain move): changed in place (`set`) as the step goes, read by that step
    alone, and handed over as a `Plan` when it ends (`done`, no copy; the draft is then
    spent). Why not a new plan per change: a step changes ops one by one, and copying a
    long program's plan for each would make the planner quadratic in its length."""

    __slots__ = ()

    def __init__(self, splits: Mapping[str, Split] | None = None):
        super().__init__(dict(splits or {}))

    def set(self, name: str, split: Split) -> None:
        self._splits[name] = split

    def done(self) -> Plan:
        plan = Plan.__new__(Plan)
        _Reads.__init__(plan, self._splits)     # the dict adopted, not copied
        self._splits = self.get = None          # spent
        return plan


def plan_of(graph: Graph) -> Plan:
    """The plan a graph holds (after work division, or as an input gives it)."""
    return Plan({op.name: Split.of(dict(op.core_splits), op.core_ranges)
                 for op in graph.ops if op.core_splits is not None})


def apply_plan(graph: Graph, plan: Plan) -> None:
    """Write `plan` into `graph`: each op's `core_splits` and its copies (`ir/lx.py
    set_core_ranges`); an op the plan does not hold keeps its ranges and has no split. The
    only writer of a chosen plan."""
    for op in graph.ops:
        split = plan.get(op.name)
        if split is None:
            op.core_splits = None
            continue
        set_core_ranges(op, split.core_ranges)
        op.core_splits = dict(split.items)


def shaped(op: Operation, core_ranges: CoreRanges) -> Operation:
    """`op` with these core ranges: itself when they are its own, else a copy (a replicated
    trial), whose split is not to be read (pass it beside)."""
    if core_ranges == op.core_ranges:
        return op
    return replace(op, **replica_fields(core_ranges))


def planned(op: Operation, split: Split | None) -> Operation:
    """A copy of `op` holding `split` (its split and core ranges; None: no split). A
    shallow copy (the LX rules ask for thousands): only the split and the copies differ,
    never the iteration ranges, so what the op caches of those stays true."""
    out = copy.copy(op)
    if split is None:
        out.core_splits = None
        return out
    fields = replica_fields(split.core_ranges)
    assert fields["ranges"] == op.ranges, (op.name, split)
    out.core_splits = dict(split.items)
    out.replicas, out.replicas_fastest = fields["replicas"], fields["replicas_fastest"]
    return out
