"""Chain moves for work_division: change the splits of a producer-consumer chain together.

Planning knowledge (`plan/`), not a pass: `plan/core_splits.py divide_work` runs the moves
after choosing op by op; they price splits with `plan/split_estimate.py`.

Choosing op by op, each op takes the split that is cheapest given its producers, so a chain
of ops can settle on splits that disagree (qkv split over batch rows, the attention that reads
it over batch x heads): the intermediate between them must then go through HBM, and no single
op can fix that alone, because changing one reader helps only when every reader of the buffer
and everything downstream of it change too. A move does that (issue 10 §1, "plan work division
and LX together"):

- for an intermediate whose writer and a reader disagree, either the reader follows the
  writer (takes its cheapest split that keeps the writer's slices) or the writer follows the
  reader (its cheapest split whose slices the reader keeps);
- the change propagates: readers of a changed op's output that now disagree follow it, and
  writers of its inputs that it now disagrees with follow it, each op at most once per move;
- where the reader splits a var the buffer does not use (a matmul over batch x N: every
  N-core needs the same rows), the writer is *replicated* (ir/lx.py: a copy on each of those
  cores), and so up the chain while the copies' inputs must follow too;
- besides disagreements, a move may start at an op that more cores would make faster were
  its inputs in LX (a "lead": the batch-split qkv taking batch x N), its writers following;
- at a disagreement the reader-follows, writer-follows and writer-follows-replicated moves
  are each tried and the one that pays most is kept;
- the move is kept when the summed estimate of every op whose estimate it can change (the
  changed ops, their writers and their readers) goes down, and (unless `overlap_moves`) the
  summed serial time (compute + memory) does not go up: a move that wins only by hiding added
  HBM traffic behind compute is not kept. Sums leave out the split estimate's per-op
  penalties (the neighbours' own estimates count that traffic). Replicas no reader needs are
  dropped last.

The estimates are `split_estimate`'s, so a kept move lowers the cost model's time of the
program; scratchpad_planning then places what the splits allow, and the simulator checks the plan.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable

from spyrec.ir import Graph, Operation
from spyrec.ir.lx import set_core_ranges, set_replicas
from spyrec.plan.split_estimate import (
    Producers, SplitCost, estimate_key, first_box, index_vars, split_estimate,
)

# a move changes at most this many ops (a decoder layer is ~35): bounds a move's cost
MAX_OPS_PER_MOVE = 400


class ChainMoves:
    def __init__(self, graph: Graph, producers: Producers,
                 candidates: Callable[[Operation], list[dict[str, int]]],
                 replicas: bool = True, overlap_moves: bool = False):
        self.graph, self.producers, self.candidates = graph, producers, candidates
        self.replicas, self.overlap_moves = replicas, overlap_moves
        self.kept = 0
        self._times: dict[tuple, tuple[float, float]] = {}
        self._estimates: dict[tuple, SplitCost] = {}
        # disagreements whose move was not kept, without names: the layers of a stack repeat
        # them, and a move that did not pay in one layer does not in the next
        self._rejected: set[tuple] = set()
        # disagreements whose move was kept: which of the three starts paid most (the next
        # layer's same disagreement tries that one first, and the others only if it does not
        # pay there)
        self._chosen: dict[tuple, int] = {}
        # `_reader_follows` / `_writer_follows` results, keyed without names
        self._follows: dict[tuple, object] = {}
        # `_items` of each split dict seen (by id, the dict kept alive: splits are replaced,
        # never changed in place)
        self._items_of: dict[int, tuple[dict, tuple]] = {}
        self._links: dict[str, tuple] = {}                 # `_cost`
        self._linked: dict[str, tuple[list, list]] = {}    # `_neighbours`
        self._static: dict[str, tuple] = {}                # `_key`
        self._interned: dict[tuple, int] = {}

    def run(self, rounds: int = 2) -> set[str]:
        """Try a move at every disagreeing intermediate, `rounds` times over; the names of
        the ops whose split changed."""
        changed: set[str] = set()
        for _ in range(rounds):
            before = len(changed)
            for buffer, writer, reader, access in self._disagreements():
                if writer.core_splits is None or \
                        self.producers.same_slices(reader, access, reader.core_splits) \
                        is not False:
                    continue                    # an earlier move settled it
                key = self._pattern(writer, reader, access)
                if key in self._rejected:
                    continue
                starts = [lambda: self._reader_follows(writer, reader, access),
                          lambda: self._writer_follows(writer, reader, access, False),
                          lambda: self._writer_follows(writer, reader, access, True)]
                known = self._chosen.get(key)
                if known is not None:     # the start that paid most where this pattern was
                    probe = self._try(starts[known], keep=False)
                    if probe[0] is not None:
                        changed |= self._replay(probe[2])
                        continue
                probes = [self._try(start, keep=False) for start in starts]
                gains = [probe[0] for probe in probes]
                best = max(range(len(starts)), key=lambda i: gains[i] or 0.0)
                if gains[best] is None:
                    self._rejected.add(key)
                else:             # the move that pays most, of the three
                    self._chosen[key] = best
                    changed |= self._replay(probes[best][2])
            changed |= self._lead_moves()
            if len(changed) == before:
                break
        return changed | self._drop_unneeded_replicas()

    def _drop_unneeded_replicas(self) -> set[str]:
        """A replicated op whose readers all keep their slices without its copies (a later
        move took the reader that needed them back) computes once again; readers first, so
        a chain of copies unwinds from its end."""
        dropped = set()
        for op in reversed(self.graph.ops):
            if op.replicas == 1:
                continue
            ranges, split = op.core_ranges, op.core_splits
            set_replicas(op, 1)
            self.producers.forget(op)
            if all(self.producers.same_slices(r, a, r.core_splits) is not False
                   for r, a in self.producers.readers.get(op.output.buffer, ())):
                dropped.add(op.name)
            else:
                self._reshape(op, ranges, split)
        return dropped

    def _lead_moves(self) -> set[str]:
        """Moves started by a matmul taking more cores (`_lead`), each once per round; a
        pattern that did not pay is not tried again (the layers of a stack repeat it)."""
        changed: set[str] = set()
        for op in list(self.graph.ops):
            if op.core_splits is None or op.op != "batchmatmul":
                continue            # a matmul gains most from more cores; vector ops follow
            key = ("lead", op.op, op.core_ranges, self._items(op.core_splits), op.output.index,
                   tuple(a.index for a in op.inputs), tuple(
                       self._items(w.core_splits) for a in op.inputs
                       if (w := self.producers.writer(a.buffer, op)) is not None))
            if key in self._rejected:
                continue
            moved = self._try(lambda: self._lead(op))[1]
            if moved:
                changed |= moved
            else:
                self._rejected.add(key)
        return changed

    def _disagreements(self):
        p = self.producers
        for buffer in sorted(p.lx_candidates):
            writer = p.writers.get(buffer)
            for reader, access in p.readers.get(buffer, ()):
                if writer is not None and writer is not reader and \
                        p.same_slices(reader, access, reader.core_splits) is False:
                    yield buffer, writer, reader, access

    # --- one move ---------------------------------------------------------------------------

    def _try(self, start: Callable[[], list[Operation]], keep: bool = True) -> tuple:
        """Run a move: (its gain in estimated time, or None if it does not pay; the ops it
        changed; when not kept but it pays, the splits and ranges it gave them, for
        `_replay`). Kept if it pays and `keep`, else every split is restored."""
        self.old: dict[str, tuple[Operation, dict]] = {}
        region_before: dict[str, tuple[float, float]] = {}
        self._before = region_before
        queue = deque(start())
        while queue and len(self.old) <= MAX_OPS_PER_MOVE:
            queue.extend(self._follow(queue.popleft()))
        if not self.old:
            return None, set(), None
        if len(self.old) > MAX_OPS_PER_MOVE:  # never kept, whatever it gains: not priced
            self._restore()
            return None, set(), None
        region = self._region()              # every op a change can re-price
        after = [sum(c) for c in zip(*(self._cost(op) for op in region))]
        before = [sum(c) for c in zip(*(region_before[op.name] for op in region))]
        # faster, and (unless `overlap_moves`) no slower were no op's memory overlapped with
        # its compute: a move that wins only by hiding added HBM traffic behind compute is
        # not kept
        pays = after[0] < before[0] - 1e-9 and len(self.old) <= MAX_OPS_PER_MOVE and \
            (self.overlap_moves or after[1] <= before[1] + 1e-9)
        if pays and keep:
            self.kept += 1
            return before[0] - after[0], set(self.old), None
        moved = [(op, op.core_splits, op.core_ranges) for op, *_ in self.old.values()] \
            if pays else None
        self._restore()
        return (before[0] - after[0] if pays else None), set(), moved

    def _replay(self, moved: list[tuple[Operation, dict, tuple]]) -> set[str]:
        """Keep a move `_try` ran and restored: give its ops the splits it gave them. Running
        it again from the same splits would end there too (every step is a function of the
        splits; the memos only remember such functions)."""
        for op, split, ranges in moved:
            self._reshape(op, ranges, split)
        self.kept += 1
        return {op.name for op, *_ in moved}

    def _reader_follows(self, writer, reader, access) -> list[Operation]:
        # memoized without names (the layers of a stack repeat each step of a move): the
        # result is a function of the reader's estimate key (its structure, its writers' and
        # readers' splits: what `_estimate` and `same_slices` read), its split and which of
        # its accesses follows
        same = self._key(reader) if access.buffer in self.producers.lx_candidates else None
        key = None if same is None else (      # (the key holds the writer of an LX candidate)
            "reader", same, self._items(reader.core_splits),
            next(i for i, (_, a) in enumerate(reader.accesses()) if a is access))
        if key is not None and key in self._follows:
            split = self._follows[key]
        else:
            split = self._cheapest(reader, lambda c: self.producers.same_slices(
                reader, access, c) is not False)
            if key is not None:
                self._follows[key] = split
        return [reader] if split is not None and self._set(reader, split) else []

    def _writer_follows(self, writer, reader, access,
                        replicate: bool | None = None) -> list[Operation]:
        """The writer takes its cheapest split whose slices the reader keeps; when the reader
        splits vars the buffer does not use (every such core needs the same rows), the
        writer is replicated over them (ir/lx.py), its copies where those vars sit.
        `replicate`: None — only if no plain split keeps them; False — never; True — only
        replicated (a move's start tries each)."""
        def reader_keeps(c: dict[str, int]) -> bool:
            if first_box(self.graph, writer, writer.output, c) != want:
                return False            # the cheap test first: core 0's slice
            self._reshape(writer, writer.core_ranges, c)
            return self.producers.same_slices(reader, access, reader.core_splits) is not False

        if writer.name in self.old:
            return []
        # memoized without names, as `_reader_follows`: besides the writer's estimate key (its
        # structure, output buffer, inputs' writers' and readers' splits) and split, what the
        # steps below read is the reader's ranges, access and split, and its split before
        # this move (`_agreed_before`)
        same = self._key(writer)
        key = None
        if same is not None:
            was = self.old.get(reader.name)
            key = ("writer", replicate, same, self._items(writer.core_splits),
                   reader.core_ranges,
                   access.index, self._items(reader.core_splits),
                   None if was is None else (self._items(was[1]), was[2]))
            if key in self._follows:
                found = self._follows[key]
                if found is None:
                    return []
                self._set(writer, *found)
                return [writer]
        want = first_box(self.graph, reader, access, reader.core_splits)  # (after the memo)
        original, ranges = writer.core_splits, writer.core_ranges
        split = self._cheapest(writer, reader_keeps) if replicate is not True else None
        self._reshape(writer, ranges, original)
        copies = self._copies_needed(writer, reader, access) if split is None and \
            replicate is not False and self._agreed_before(writer, reader, access) else 1
        for first in ((False, True) if split is None and copies > 1 else ()):
            set_replicas(writer, copies, first)
            writer.core_splits = original     # so that the replicated split is a candidate
            split = self._cheapest(writer, reader_keeps)
            if split is not None:
                break
            self._reshape(writer, ranges, original)
        new_ranges = writer.core_ranges
        self._reshape(writer, ranges, original)
        if key is not None:
            self._follows[key] = None if split is None else (split, new_ranges)
        if split is None:
            return []
        self._set(writer, split, new_ranges)
        return [writer]

    def _agreed_before(self, writer: Operation, reader: Operation, access) -> bool:
        """Did `reader` keep `writer`'s slices of `access` before this move? Only then is
        the buffer worth copies: one already in HBM is read from there whatever the split."""
        if reader.name not in self.old:
            return True
        _, split, ranges = self.old[reader.name]
        now = reader.core_ranges, reader.core_splits
        self._reshape(reader, ranges, split)
        try:
            return self.producers.same_slices(reader, access, reader.core_splits) is not False
        finally:
            self._reshape(reader, *now)

    def _copies_needed(self, writer: Operation, reader: Operation, access) -> int:
        """How many copies of `writer`'s output the reader's split needs (1: none): the
        product of its splits over vars `access` does not use, when the writer may be
        replicated (its output can live in LX, outside loops)."""
        if not self.replicas or \
                writer.output.buffer not in self.producers.lx_candidates:
            return 1
        return _copies(reader.core_splits, access)

    def _copies_for(self, op: Operation, split: dict[str, int]) -> int:
        """The most copies `split` needs of an input an op writes (`_copies_needed`)."""
        return max([_copies(split, a) for a in op.inputs
                    if self.producers.writer(a.buffer, op) is not None], default=1)

    def _lead(self, op: Operation) -> list[Operation]:
        """Start a move at an op that a split over more cores would make faster were its
        inputs in LX (the cheapest by compute among those): its writers follow it, replicated
        where needed, and its readers follow them."""
        current = math.prod((op.core_splits or {}).values())
        best, best_key = None, (self._time(op) - 1e-9, 0, 0.0)
        for c in self.candidates(op):
            if math.prod(c.values()) <= current:
                continue
            cost = self._estimate(op, c)
            # fewest copies of its inputs the split needs, then the least re-read inputs (its
            # own traffic: what it causes in neighbours is priced with the move's region)
            key = (cost.compute_us, self._copies_for(op, c), cost.memory_us)
            if key < best_key:
                best, best_key = c, key
        return [op] if best is not None and self._set(op, best) else []

    def _follow(self, op: Operation) -> list[Operation]:
        """Bring op's readers and its inputs' writers in line with op's new split."""
        p, moved = self.producers, []
        if op.output.buffer in p.lx_candidates:
            for reader, access in p.readers.get(op.output.buffer, ()):
                if reader.name not in self.old and reader.core_splits is not None and \
                        p.same_slices(reader, access, reader.core_splits) is False:
                    moved += self._reader_follows(op, reader, access)
        for access in op.inputs:
            writer = p.writer(access.buffer, op)
            if writer is not None and writer.name not in self.old and \
                    access.buffer in p.lx_candidates and \
                    p.same_slices(op, access, op.core_splits) is False:
                moved += self._writer_follows(writer, op, access)
        return moved

    def _cheapest(self, op: Operation, keeps: Callable[[dict], bool]) -> dict | None:
        best, best_time = None, None
        original = op.core_splits
        for c in self.candidates(op):
            if c == original or not keeps(c):
                continue
            t = self._estimate(op, c).time_us
            if best_time is None or t < best_time:
                best, best_time = c, t
        return best

    def estimate(self, op: Operation, split: dict[str, int]) -> SplitCost:
        """`split_estimate` (with its penalties), from the moves' memo."""
        return self._estimate(op, split)

    def _estimate(self, op: Operation, split: dict[str, int],
                  penalties: bool = True) -> SplitCost:
        """`split_estimate`, memoized on `estimate_key` (the layers of a stack share
        their ops' estimates: a move through one layer re-prices what the last one did)."""
        # the key per call: `keeps` tests reshape the op's ranges
        key = (self._key(op), self._items(split), penalties)
        if key not in self._estimates:
            self._estimates[key] = split_estimate(self.graph, op, split, self.producers,
                                                  penalties=penalties)
        return self._estimates[key]

    def _key(self, op: Operation) -> tuple:
        """`estimate_key` of `op` in another form, equal exactly when it is
        equal: what it says of op's own structure (its op, reduced vars, loops, accesses'
        buffers and indices) and of a writer's or reader's fixed facts is worked out once
        per op and interned, leaving the ranges and splits to read per call (moves ask for
        the same ops again and again)."""
        got = self._static.get(op.name)
        if got is None:
            same = estimate_key(self.graph, op, self.producers)
            p, intern = self.producers, self._interned
            structure = (same[0],) + same[2:6]
            lx = []
            for _, a in op.accesses():
                w = p.writers.get(a.buffer)
                lx.append(None if a.buffer not in p.lx_candidates else
                          (False, None) if w is None or w is op else
                          (w, intern.setdefault(("writer", w.reduced, w.output.index),
                                                len(intern))))
            readers = None if same[7] is None else [
                (r, intern.setdefault(("reader", a.index), len(intern)))
                for r, a in p.readers.get(op.output.buffer, ())]
            got = self._static[op.name] = (
                intern.setdefault(("op", structure), len(intern)), lx, readers)
        sid, lx, readers = got
        items = self._items
        writers = []
        for w in lx:
            if w is None:
                writers.append(None)
            elif w[0] is False or w[0].core_splits is None:
                writers.append(())
            else:
                writers.append((w[0].core_ranges, w[1], items(w[0].core_splits)))
        return (sid, op.core_ranges, tuple(writers), None if readers is None else
                tuple([(r.core_ranges, i, items(r.core_splits)) for r, i in readers]))

    # --- bookkeeping ------------------------------------------------------------------------

    def _set(self, op: Operation, split: dict[str, int], ranges: tuple | None = None,
             record: bool = True) -> bool:
        """Give op `split` (and core `ranges`: its copies added or dropped)."""
        if record:
            if op.name in self.old:
                return False                      # each op changes once per move
            for o in self._neighbours(op):        # their cost before anything moved
                if o.name not in self._before:
                    self._before[o.name] = self._cost(o)
            self.old[op.name] = (op, op.core_splits, op.core_ranges)
        self._reshape(op, ranges or op.core_ranges, split)
        return True

    def _reshape(self, op: Operation, ranges: tuple, split: dict[str, int] | None) -> None:
        """Give op `ranges` and `split` itself, not a copy: split dicts are never changed
        in place, and the memos that remember a dict's sorted items (`_items`) then find
        the dict a move restores or a memoized step hands back."""
        set_core_ranges(op, ranges)
        op.core_splits = split
        self.producers.forget(op)

    def _restore(self) -> None:
        for op, split, ranges in self.old.values():
            self._reshape(op, ranges, split)

    def _neighbours(self, op: Operation) -> list[Operation]:
        """op, the writers of its inputs and its readers, those with a split (`Producers.
        writer`); who they may be is found once per op (moves ask ~50 times per op)."""
        links = self._linked.get(op.name)
        if links is None:
            p = self.producers
            links = self._linked[op.name] = (
                [w for a in op.inputs if (w := p.writers.get(a.buffer)) is not None
                 and w is not op],
                [r for r, _ in p.readers.get(op.output.buffer, ())])
        out = [op]
        out += [w for w in links[0] if w.core_splits is not None]
        out += [r for r in links[1] if r.core_splits is not None]
        return out

    def _region(self) -> list[Operation]:
        seen: dict[str, Operation] = {}
        for op, *_ in self.old.values():
            for o in self._neighbours(op):
                seen.setdefault(o.name, o)
        return list(seen.values())

    def _time(self, op: Operation) -> float:
        return self._cost(op)[0]

    def _cost(self, op: Operation) -> tuple[float, float]:
        """op's estimated (time, serial time: compute plus memory) under the current splits
        (memoized on what it depends on: its split, its writers' and its readers' splits)."""
        links = self._links.get(op.name)
        if links is None:       # op, the ops that may write its inputs, and its readers
            p = self.producers
            links = self._links[op.name] = (op,) + tuple(
                w for a in op.inputs if (w := p.writers.get(a.buffer)) is not None
                and w is not op) + tuple(r for r, _ in p.readers.get(op.output.buffer, ()))
        key = self._splits_key(op.name, links)
        if key not in self._times:
            cost = self._estimate(op, op.core_splits, penalties=False)
            self._times[key] = cost.time_us, cost.time_us + min(cost.compute_us,
                                                                 cost.memory_us)
        return self._times[key]

    def _splits_key(self, name: str, ops: tuple) -> tuple:
        """(name, each op's `_items` or None when it has no split yet): `_items` inlined,
        since moves build these keys hundreds of thousands of times."""
        items_of, key = self._items_of, [name]
        for o in ops:
            s = o.core_splits
            if s is None:
                key.append(None)
                continue
            got = items_of.get(id(s))
            if got is None or got[0] is not s:
                got = items_of[id(s)] = (s, tuple(sorted(s.items())))
            key.append(got[1])
        return tuple(key)

    def _items(self, splits: dict[str, int] | None) -> tuple:
        """`_items`, remembered per dict (moves ask for the same ops' splits again and
        again)."""
        if splits is None:
            return ()
        got = self._items_of.get(id(splits))
        if got is None or got[0] is not splits:
            got = self._items_of[id(splits)] = (splits, tuple(sorted(splits.items())))
        return got[1]

    def _pattern(self, writer: Operation, reader: Operation, access) -> tuple:
        return (writer.op, writer.core_ranges, self._items(writer.core_splits), writer.output.index,
                reader.op, reader.core_ranges, self._items(reader.core_splits), access.index)


def _copies(split: dict[str, int], access) -> int:
    """Cores of `split` that read each slice of `access` alike: its splits over the vars
    the access does not use (a writer must be copied that many times to serve them)."""
    used = index_vars(access.index)
    return math.prod(k for v, k in split.items() if v not in used)


def _items(splits: dict[str, int] | None) -> tuple:
    return tuple(sorted((splits or {}).items()))
