"""The steps of one chain move: who follows whom, and which split each takes.

A move (`plan/chain_moves.py`) starts at one op (a reader taking its writer's slices, a writer
taking its reader's, a matmul taking more cores) and spreads: each changed op's readers and its
inputs' writers that now disagree with it follow it, each op at most once per move. A `Move`
holds the plan it is making (`plan`, a `Draft` of its own: the plan it started from is
untouched, and `ChainMoves._try` takes the draft as the new plan only if the move pays), the
split each changed op had before it (`old`) and the cost of each neighbour before anything
moved (`before`), which is what the move is weighed by.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

from spyrec.ir import Operation
from spyrec.ir.graph import with_copies
from spyrec.plan.split_estimate import first_box, index_vars
from spyrec.plan.split_plan import Plan, Split

if TYPE_CHECKING:
    from spyrec.plan.chain_moves import ChainMoves

# a move changes at most this many ops (a decoder layer is ~35): bounds a move's cost
MAX_OPS_PER_MOVE = 400


class Move:
    """One move over `moves`' graph, from `plan` (module docstring)."""

    def __init__(self, moves: ChainMoves, plan: Plan):
        self.moves, self.graph, self.pricing = moves, moves.graph, moves.pricing
        self.old: dict[str, tuple[Operation, Split]] = {}
        self.before: dict[str, tuple[float, float]] = {}
        self.plan = plan.draft()
        self.view = moves.producers.at(self.plan)

    def region(self) -> list[Operation]:
        """Every op whose estimate a change of this move can change: the changed ops, their
        writers and their readers."""
        seen: dict[str, Operation] = {}
        for op, _ in self.old.values():
            for o in self.pricing.neighbours(self.plan, op):
                seen.setdefault(o.name, o)
        return list(seen.values())

    def follow(self, op: Operation) -> list[Operation]:
        """Bring op's readers and its inputs' writers in line with op's new split."""
        moved = []
        if op.output.buffer in self.view.lx_candidates:
            for reader, access in self.view.readers.get(op.output.buffer, ()):
                if reader.name not in self.old and reader.name in self.plan and \
                        self._disagrees(reader, access):
                    moved += self.reader_follows(op, reader, access)
        for access in op.inputs:
            writer = self.view.writer(access.buffer, op)
            if writer is not None and writer.name not in self.old and \
                    access.buffer in self.view.lx_candidates and self._disagrees(op, access):
                moved += self.writer_follows(writer, op, access)
        return moved

    def _disagrees(self, reader: Operation, access) -> bool:
        """Does `reader`, as the plan splits it, take other slices of `access` than its
        writer gave?"""
        return self.view.same_slices(self.view.shape(reader), access,
                                     self.plan.splits(reader)) is False

    def reader_follows(self, writer: Operation, reader: Operation, access) -> list[Operation]:
        """The reader takes its cheapest split that keeps the writer's slices."""
        # memoized without names (the layers of a stack repeat each step of a move): the
        # result is a function of the reader's estimate key (its structure, its writers' and
        # readers' splits: what the estimate and `same_slices` read), its split and which of
        # its accesses follows
        ranges = self.plan.ranges(reader)
        key = None
        if access.buffer in self.view.lx_candidates:   # (the key holds its writer then)
            key = ("reader", self.pricing.key(self.plan, reader, ranges),
                   self.plan.key(reader),
                   next(i for i, (_, a) in enumerate(reader.accesses()) if a is access))
        follows = self.moves.follows
        if key is not None and key in follows:
            split = follows[key]
        else:
            shape = self.view.shape(reader)
            split = self._cheapest(reader, ranges, lambda c: self.view.same_slices(
                shape, access, c) is not False, self.plan.splits(reader))
            if key is not None:
                follows[key] = split
        return [reader] if split is not None and self._set(reader, Split.of(split, ranges)) \
            else []

    def writer_follows(self, writer: Operation, reader: Operation, access,
                       replicate: bool | None = None) -> list[Operation]:
        """The writer takes its cheapest split whose slices the reader keeps; when the reader
        splits vars the buffer does not use (every such core needs the same rows), the
        writer is replicated over them (ir/lx.py), its copies where those vars sit.
        `replicate`: None — only if no plain split keeps them; False — never; True — only
        replicated (a move's start tries each)."""
        if writer.name in self.old:
            return []
        # memoized without names, as `reader_follows`: besides the writer's estimate key
        # (its structure, output buffer, inputs' writers' and readers' splits) and split,
        # what the steps below read is the reader's ranges, access and split, and its split
        # before this move (`_agreed_before`)
        plan, follows = self.plan, self.moves.follows
        was = self.old.get(reader.name)
        key = ("writer", replicate, self.pricing.key(plan, writer, plan.ranges(writer)),
               plan.key(writer), plan.ranges(reader), access.index, plan.key(reader),
               None if was is None else (was[1].key, was[1].core_ranges))
        if key in follows:
            found = follows[key]
            if found is None:
                return []
            self._set(writer, Split.of(*found))
            return [writer]
        split, ranges = self._writer_split(writer, reader, access, replicate)
        follows[key] = None if split is None else (split, ranges)
        if split is None:
            return []
        self._set(writer, Split.of(split, ranges))
        return [writer]

    def _writer_split(self, writer: Operation, reader: Operation, access,
                      replicate: bool | None) -> tuple[dict | None, tuple]:
        """`writer_follows`' choice: (split or None, its core ranges)."""
        plan = self.plan
        want = first_box(self.graph, reader, access, plan.splits(reader), plan.ranges(reader))
        original, ranges = plan.splits(writer), plan.ranges(writer)

        def reader_keeps(at: tuple) -> Callable[[dict], bool]:
            def keeps(c: dict[str, int]) -> bool:
                if first_box(self.graph, writer, writer.output, c, at) != want:
                    return False            # the cheap test first: core 0's slice
                trial = plan.with_split(writer.name, Split.of(c, at))
                view = self.view.at(trial)
                return view.same_slices(view.shape(reader), access,
                                        trial.splits(reader)) is not False
            return keeps

        split = None if replicate is True else \
            self._cheapest(writer, ranges, reader_keeps(ranges), original)
        copies = self._copies_needed(writer, reader, access) if split is None and \
            replicate is not False and self._agreed_before(reader, access) else 1
        for first in ((False, True) if split is None and copies > 1 else ()):
            copied = with_copies(writer.ranges, copies, first)
            # the original split (unreplicated) excluded: its replicated form is a candidate
            split = self._cheapest(writer, copied, reader_keeps(copied), original)
            if split is not None:
                return split, copied
        return split, ranges

    def _agreed_before(self, reader: Operation, access) -> bool:
        """Did `reader` keep its writer's slices of `access` before this move? Only then is
        the buffer worth copies: one already in HBM is read from there whatever the split."""
        if reader.name not in self.old:
            return True
        split = self.old[reader.name][1]      # (its answer reads not the reader's entry)
        return self.view.same_slices(self.view.shaped(reader, split.core_ranges), access,
                                     split.splits) is not False

    def _copies_needed(self, writer: Operation, reader: Operation, access) -> int:
        """How many copies of `writer`'s output the reader's split needs (1: none): the
        product of its splits over vars `access` does not use, when the writer may be
        replicated (its output can live in LX, outside loops)."""
        if not self.moves.replicas or writer.output.buffer not in self.view.lx_candidates:
            return 1
        return _copies(self.plan.splits(reader), access)

    def _copies_for(self, op: Operation, split: dict[str, int]) -> int:
        """The most copies `split` needs of an input an op writes (`_copies_needed`)."""
        return max([_copies(split, a) for a in op.inputs
                    if self.view.writer(a.buffer, op) is not None], default=1)

    def lead(self, op: Operation) -> list[Operation]:
        """Start a move at an op that a split over more cores would make faster were its
        inputs in LX (the cheapest by compute among those): its writers follow it, replicated
        where needed, and its readers follow them."""
        plan = self.plan
        current = math.prod((plan.splits(op) or {}).values())
        ranges = plan.ranges(op)
        best, best_key = None, (self.pricing.time(plan, op) - 1e-9, 0, 0.0)
        for c in self.moves.candidates(op, ranges):
            if math.prod(c.values()) <= current:
                continue
            cost = self.pricing.estimate(plan, op, Split.of(c, ranges))
            # fewest copies of its inputs the split needs, then the least re-read inputs (its
            # own traffic: what it causes in neighbours is priced with the move's region)
            key = (cost.compute_us, self._copies_for(op, c), cost.memory_us)
            if key < best_key:
                best, best_key = c, key
        return [op] if best is not None and self._set(op, Split.of(best, ranges)) else []

    def _cheapest(self, op: Operation, ranges: tuple, keeps: Callable[[dict], bool],
                  original: dict | None) -> dict | None:
        """The cheapest candidate of `op` at core `ranges` but `original` that `keeps`
        accepts, estimated with the other ops as the plan has them."""
        best, best_time = None, None
        for c in self.moves.candidates(op, ranges):
            if c == original or not keeps(c):
                continue
            t = self.pricing.estimate(self.plan, op, Split.of(c, ranges)).time_us
            if best_time is None or t < best_time:
                best, best_time = c, t
        return best

    def _set(self, op: Operation, split: Split) -> bool:
        """Give op `split` in this move's plan, once per move; the costs of its neighbours
        before anything moved are recorded first."""
        if op.name in self.old:
            return False                      # each op changes once per move
        for o in self.pricing.neighbours(self.plan, op):
            if o.name not in self.before:
                self.before[o.name] = self.pricing.cost(self.plan, o)
        self.old[op.name] = (op, self.plan.get(op.name))
        self.plan.set(op.name, split)
        return True


def _copies(split: dict[str, int], access) -> int:
    """Cores of `split` that read each slice of `access` alike: its splits over the vars
    the access does not use (a writer must be copied that many times to serve them)."""
    used = index_vars(access.index)
    return math.prod(k for v, k in split.items() if v not in used)
