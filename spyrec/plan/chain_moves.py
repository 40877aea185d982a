"""Chain moves for work_division: change the splits of a producer-consumer chain together.

Planning knowledge (`plan/`), not a pass: `plan/core_splits.py plan_work` runs the moves
(`move_chains`) after choosing op by op; they take a plan and return a new one
(`plan/split_plan.py`), and price splits with `plan/split_estimate.py` through the memos of
`plan/move_pricing.py`. The steps of one move are `plan/chain_steps.py`'s.

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

A move is tried on a plan of its own: one that does not pay is dropped by keeping the plan
it started from (nothing is restored, the graph is never written). The estimates are
`split_estimate`'s, so a kept move lowers the cost model's time of the
program; scratchpad_planning then places what the splits allow, and the simulator checks the plan.
"""


from __future__ import annotations

from collections import deque
from typing import Callable

from spyrec.ir import Graph, Operation
from spyrec.plan.chain_steps import MAX_OPS_PER_MOVE, Move
from spyrec.plan.move_pricing import MovePricing
from spyrec.plan.producers import Producers
from spyrec.plan.split_estimate import SplitCost
from spyrec.plan.split_plan import Plan, Split

# a candidate list of an op at core ranges (its copies): `plan/core_splits.py _move_chains`
Candidates = Callable[[Operation, tuple], list[dict[str, int]]]


def move_chains(graph: Graph, producers: Producers, candidates: Candidates,
                replicas: bool = True, overlap_moves: bool = False
                ) -> tuple[Plan, ChainMoves | None]:
    """`producers`' plan with its disagreeing chains moved (module docstring), and the moves
    (for their memo of the estimates), None when no move was kept."""
    moves = ChainMoves(graph, producers, candidates, replicas, overlap_moves)
    changed = moves.run()
    return moves.plan, (moves if changed else None)


class ChainMoves:
    """Moves over one plan, kept one after another (`run`). What: at every intermediate
    whose writer and a reader split it differently (a "disagreement", the buffer then goes
    through HBM), try the three ways to make them agree (the reader follows the writer, the
    writer follows the reader, replicated or not) and keep the one that lowers the summed
    estimate of the ops it touches most; then try the "lead" moves that give a matmul more
    cores; last, drop the copies of replicated ops no reader needs any more. Why: choosing
    op by op cannot fix a chain split two ways, since changing one op pays only when its
    neighbours change too (module docstring).

    State: `plan`, the plan so far (a value: a move is tried on a plan of its own, `Move`,
    and kept by taking that plan); the memos that make a decoder's layers cheap to move
    (`pricing`: estimates; `follows`: each step's result; `_rejected`: patterns whose move
    did not pay; `_chosen`: which start paid most), all keyed by values without names."""

    def __init__(self, graph: Graph, producers: Producers, candidates: Candidates,
                 replicas: bool = True, overlap_moves: bool = False):
        self.graph, self.producers, self.candidates = graph, producers, candidates
        self.replicas, self.overlap_moves = replicas, overlap_moves
        self.plan = producers.plan
        self.pricing = MovePricing(graph, producers)
        self.kept = 0
        # `Move.reader_follows` / `Move.writer_follows` results, keyed without names
        self.follows: dict[tuple, object] = {}
        # disagreements whose move was not kept, without names: the layers of a stack repeat
        # them, and a move that did not pay in one layer does not in the next
        self._rejected: set[tuple] = set()
        # disagreements whose move was kept: which of the three starts paid most (the next
        # layer's same disagreement tries that one first, and the others only if it does not
        # pay there)
        self._chosen: dict[tuple, int] = {}

    def estimate(self, op: Operation, split: Split) -> SplitCost:
        """`split_estimate` (with its penalties) of `op` under the plan, from the memo."""
        return self.pricing.estimate(self.plan, op, split)

    def run(self, rounds: int = 2) -> set[str]:
        """Try a move at every disagreeing intermediate, `rounds` times over; the names of
        the ops whose split changed."""
        changed: set[str] = set()
        for _ in range(rounds):
            before = len(changed)
            for writer, reader, access in self._disagreements():
                changed |= self._settle(writer, reader, access)
            changed |= self._lead_moves()
            if len(changed) == before:
                break
        return changed | self._drop_unneeded_replicas()

    def _settle(self, writer: Operation, reader: Operation, access) -> set[str]:
        """The move that pays most of the three starts at one disagreement, kept (the ops
        it changed), unless an earlier move settled it or its pattern did not pay before."""
        view = self.producers.at(self.plan)
        if writer.name not in self.plan or view.same_slices(
                view.shape(reader), access, self.plan.splits(reader)) is not False:
            return set()                    # an earlier move settled it
        key = self._pattern(writer, reader, access)
        if key in self._rejected:
            return set()
        starts = [lambda move: move.reader_follows(writer, reader, access),
                  lambda move: move.writer_follows(writer, reader, access, False),
                  lambda move: move.writer_follows(writer, reader, access, True)]
        known = self._chosen.get(key)
        if known is not None:     # the start that paid most where this pattern was
            probe = self._try(starts[known], keep=False)
            if probe[0] is not None:
                return self._replay(probe[2])
        probes = [self._try(start, keep=False) for start in starts]
        gains = [probe[0] for probe in probes]
        best = max(range(len(starts)), key=lambda i: gains[i] or 0.0)
        if gains[best] is None:
            self._rejected.add(key)
            return set()
        self._chosen[key] = best           # the move that pays most, of the three
        return self._replay(probes[best][2])

    def _drop_unneeded_replicas(self) -> set[str]:
        """A replicated op whose readers all keep their slices without its copies (a later
        move took the reader that needed them back) computes once again; readers first, so
        a chain of copies unwinds from its end."""
        dropped = set()
        for op in reversed(self.graph.ops):
            split = self.plan.get(op.name)
            if split is None or split.replicas == 1:
                continue
            trial = self.plan.with_split(op.name, split.replicated(op, 1))
            view = self.producers.at(trial)
            if all(view.same_slices(view.shape(r), a, trial.splits(r)) is not False
                   for r, a in view.readers.get(op.output.buffer, ())):
                dropped.add(op.name)
                self.plan = trial
        return dropped

    def _lead_moves(self) -> set[str]:
        """Moves started by a matmul taking more cores (`Move.lead`), each once per round;
        a pattern that did not pay is not tried again (the layers of a stack repeat it)."""
        changed: set[str] = set()
        for op in self.graph.ops:
            split = self.plan.get(op.name)
            if split is None or op.op != "batchmatmul":
                continue            # a matmul gains most from more cores; vector ops follow
            view = self.producers.at(self.plan)
            key = ("lead", op.op, split.core_ranges, split.key, op.output.index,
                   tuple(a.index for a in op.inputs), tuple(
                       self.plan.key(w) for a in op.inputs
                       if (w := view.writer(a.buffer, op)) is not None))
            if key in self._rejected:
                continue
            moved = self._try(lambda move: move.lead(op))[1]
            if moved:
                changed |= moved
            else:
                self._rejected.add(key)
        return changed

    def _disagreements(self):
        """(writer, reader, access) of each intermediate that may live in LX whose reader
        takes other slices than its writer gave, under the plan as it is when asked."""
        p = self.producers
        for buffer in sorted(p.lx_candidates):
            writer = p.writers.get(buffer)
            for reader, access in p.readers.get(buffer, ()):
                if writer is None or writer is reader:
                    continue
                view = p.at(self.plan)
                if view.same_slices(view.shape(reader), access,
                                    self.plan.splits(reader) or {}) is False:
                    yield writer, reader, access

    def _try(self, start: Callable[[Move], list[Operation]], keep: bool = True) -> tuple:
        """Run a move on a plan of its own: (its gain in estimated time, or None if it does
        not pay; the ops it changed, when kept; when not kept but it pays, the splits it gave
        them, for `_replay`). Kept (the plan taken) if it pays and `keep`."""
        move = Move(self, self.plan)
        queue = deque(start(move))
        while queue and len(move.old) <= MAX_OPS_PER_MOVE:
            queue.extend(move.follow(queue.popleft()))
        if not move.old or len(move.old) > MAX_OPS_PER_MOVE:
            return None, set(), None   # nothing moved, or too much: never kept, not priced
        region = move.region()              # every op a change can re-price
        after = [sum(c) for c in zip(*(self.pricing.cost(move.plan, op) for op in region))]
        before = [sum(c) for c in zip(*(move.before[op.name] for op in region))]
        # faster, and (unless `overlap_moves`) no slower were no op's memory overlapped with
        # its compute: a move that wins only by hiding added HBM traffic behind compute is
        # not kept
        pays = after[0] < before[0] - 1e-9 and \
            (self.overlap_moves or after[1] <= before[1] + 1e-9)
        if pays and keep:
            self.kept += 1
            self.plan = move.plan.done()
            return before[0] - after[0], set(move.old), None
        moved = {name: move.plan.get(name) for name in move.old} if pays else None
        return (before[0] - after[0] if pays else None), set(), moved

    def _replay(self, moved: dict[str, Split]) -> set[str]:
        """Keep a move `_try` ran on a plan of its own: give its ops the splits it gave
        them. Running it again from the same plan would end there too (every step is a
        function of the plan; the memos only remember such functions)."""
        self.plan = self.plan.updated(moved)
        self.kept += 1
        return set(moved)

    def _pattern(self, writer: Operation, reader: Operation, access) -> tuple:
        plan = self.plan
        return (writer.op, plan.ranges(writer), plan.key(writer), writer.output.index,
                reader.op, plan.ranges(reader), plan.key(reader), access.index)
