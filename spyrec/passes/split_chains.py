"""Chain moves for work_division: change the splits of a producer-consumer chain together.

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
- the move is kept when the estimated time of every op whose estimate it can change (the
  changed ops, their writers and their readers) goes down, else undone.

The estimates are split_cost.py's, so a kept move lowers the cost model's time of the program;
scratchpad_planning then places what the splits allow, and the simulator checks the plan.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from spyrec.ir import Graph, Operation
from spyrec.passes.split_cost import Producers, estimate

# a move changes at most this many ops (a decoder layer is ~35): bounds a move's cost
MAX_OPS_PER_MOVE = 400


class ChainMoves:
    def __init__(self, graph: Graph, producers: Producers,
                 candidates: Callable[[Operation], list[dict[str, int]]]):
        self.graph, self.producers, self.candidates = graph, producers, candidates
        self.kept = 0
        self._times: dict[tuple, float] = {}
        # disagreements whose move was not kept, without names: the layers of a stack repeat
        # them, and a move that did not pay in one layer does not in the next
        self._rejected: set[tuple] = set()

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
                for start in (self._reader_follows, self._writer_follows):
                    moved = self._try(lambda: start(writer, reader, access))
                    if moved:
                        changed |= moved
                        break
                else:
                    self._rejected.add(key)
            if len(changed) == before:
                break
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

    def _try(self, start: Callable[[], list[Operation]]) -> set[str]:
        """Run a move; keep it if it lowers the estimated time, else restore every split."""
        self.old: dict[str, tuple[Operation, dict]] = {}
        region_before: dict[str, float] = {}
        self._before = region_before
        queue = deque(start())
        while queue and len(self.old) <= MAX_OPS_PER_MOVE:
            queue.extend(self._follow(queue.popleft()))
        if not self.old:
            return set()
        region = self._region()              # every op a change can re-price
        after = sum(self._time(op) for op in region)
        before = sum(region_before[op.name] for op in region)
        if after < before - 1e-9 and len(self.old) <= MAX_OPS_PER_MOVE:
            self.kept += 1
            return set(self.old)
        self._restore()
        return set()

    def _reader_follows(self, writer, reader, access) -> list[Operation]:
        split = self._cheapest(reader, lambda c: self.producers.same_slices(
            reader, access, c) is not False)
        return [reader] if split is not None and self._set(reader, split) else []

    def _writer_follows(self, writer, reader, access) -> list[Operation]:
        def reader_keeps(c: dict[str, int]) -> bool:
            self._set(writer, c, record=False)
            return self.producers.same_slices(reader, access, reader.core_splits) is not False

        original = writer.core_splits
        split = self._cheapest(writer, reader_keeps)
        self._set(writer, original, record=False)
        return [writer] if split is not None and self._set(writer, split) else []

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
            t = estimate(self.graph, op, c, self.producers).time_us
            if best_time is None or t < best_time:
                best, best_time = c, t
        return best

    # --- bookkeeping ------------------------------------------------------------------------

    def _set(self, op: Operation, split: dict[str, int], record: bool = True) -> bool:
        if record:
            if op.name in self.old:
                return False                      # each op changes once per move
            for o in self._neighbours(op):        # their cost before anything moved
                self._before.setdefault(o.name, self._time(o))
            self.old[op.name] = (op, op.core_splits)
        op.core_splits = dict(split)
        self.producers.forget(op)
        return True

    def _restore(self) -> None:
        for op, split in self.old.values():
            op.core_splits = split
            self.producers.forget(op)

    def _neighbours(self, op: Operation) -> list[Operation]:
        p = self.producers
        out = [op]
        out += [w for a in op.inputs if (w := p.writer(a.buffer, op)) is not None]
        out += [r for r, _ in p.readers.get(op.output.buffer, ()) if r.core_splits is not None]
        return out

    def _region(self) -> list[Operation]:
        seen: dict[str, Operation] = {}
        for op, _ in self.old.values():
            for o in self._neighbours(op):
                seen.setdefault(o.name, o)
        return list(seen.values())

    def _time(self, op: Operation) -> float:
        """op's estimate under the current splits (memoized on what it depends on: its split,
        its writers' and its readers' splits)."""
        p = self.producers
        key = (op.name, _items(op.core_splits),
               tuple(_items(w.core_splits) for a in op.inputs
                     if (w := p.writer(a.buffer, op)) is not None),
               tuple(_items(r.core_splits) for r, _ in p.readers.get(op.output.buffer, ())))
        if key not in self._times:
            self._times[key] = estimate(self.graph, op, op.core_splits, p).time_us
        return self._times[key]

    @staticmethod
    def _pattern(writer: Operation, reader: Operation, access) -> tuple:
        return (writer.op, writer.ranges, _items(writer.core_splits), writer.output.index,
                reader.op, reader.ranges, _items(reader.core_splits), access.index)


def _items(splits: dict[str, int] | None) -> tuple:
    return tuple(sorted((splits or {}).items()))
