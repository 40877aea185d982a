"""work_division — split every op's iteration space across the cores.

Reads: op ranges and reduced vars, buffer layouts, `Buffer.per_tile`.  Writes:
`Operation.core_splits` ({var: slices}, every iteration var present); a `work_division` report
row per op (chosen split and its estimated time beside the greedy split's).
Guarantees: the product of splits is at most `cores`; every split divides its range evenly;
a reduced var is split (a K-split: each core reduces its part, the partials meet in HBM at
the ring's cost) only by the cost strategy, only for ops whose partials combine
(`ir.ops.PARTIAL_SUMS`) outside loops, and never with its output in LX; a split of any
arg's stick variable gives each core whole sticks of that arg (a SuperDSC core starts at a
stick boundary of every tensor: its start address has no lane offset).

Choice (issue 10 §2): every split meeting those rules is a candidate (`candidates`), each is
estimated with the cost model's formulas (`split_cost.py`: per-core HBM sticks, replicated
reads of an operand every core needs included, compute, overhead) and the cheapest wins. A
matmul thus splits N (or M and N) when splitting M alone would make every core read the whole
weight. Ties keep the greedy split (below), so programs whose cost does not change stay
byte-identical; among other equal-cost splits, one giving each core the slices its producer
gave it (a per-tile buffer can then stay in LX) comes first. Op-by-op choices can leave a
chain split two ways (an intermediate between them then goes through HBM); chain moves
(`split_chains.py`, option `chain_moves`) change such chains together when the estimate says
so, replicating a producer where a reader splits a var the producer's output does not use
(option `replicas`; ir/lx.py): a decoder's qkv matmuls split batch x N on 32 cores, reading
the norm every N-core computed alike, and its attention follows on batch x heads. A buffer
several ops write (matmul_padding's fill of the padding rows and the copy of the data) has
its other writers' splits aligned to the main one's, so that it can live in LX.

Greedy: output vars outermost first, vars that are no arg's stick dim before stick vars (a
core then gets whole rows of sticks, as the reference's work division does: the published
512x512 transposed add splits its 512 columns over 32 cores, not 8 stick columns x 4), each
taking the largest divisor of its range that the remaining cores allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from spyrec.device import CORES
from spyrec.ir import Graph, Operation
from spyrec.ir.lx import REPLICA_VAR, data_writer, replicas, set_ranges, set_replicas
from spyrec.ir.ops import PARTIAL_SUMS
from spyrec.indexing.sticks import stick_info
from spyrec.passes.registry import CompileContext, Pass, register_pass

@register_pass("work_division")
@dataclass(frozen=True)
class WorkDivision(Pass):
    cores: int = CORES
    # cost: the cheapest split by the cost model; greedy: the fixed order (the baseline the
    # report compares with; also what a test uses to pin a split over a given core count)
    strategy: str = "cost"
    # price intermediates as LX, as scratchpad_planning (intermediates: true) places them: a
    # read free when this split keeps the writer's slices, a write free when the slice fits
    lx_intermediates: bool = True
    # change a disagreeing producer-consumer chain's splits together when cheaper
    # (split_chains.py; with strategy cost and lx_intermediates)
    chain_moves: bool = True
    # also split a reduced var (partial sums added in HBM, with the ring's cost) where the
    # estimate says so: sum/mean/max/min/matmul outside loops (strategy cost)
    k_split: bool = True
    # let chain moves replicate a producer (ir/lx.py) so that a reader split over vars its
    # input does not use (a matmul over batch x N) still reads that input from LX
    replicas: bool = True
    # keep a chain move that lowers the estimated time only while memory overlaps compute
    # (its serial time, compute + memory, grows): off by default, since such a move wins by
    # adding HBM traffic the estimate hides (the MLP's hidden through HBM to use 32 cores)
    overlap_moves: bool = False

    def check_options(self) -> None:
        """Called when the pipeline is built, before the model is loaded."""
        from spyrec.errors import ConfigError

        if not 1 <= self.cores <= CORES:
            raise ConfigError(f"work_division.cores must be between 1 and {CORES}, got "
                              f"{self.cores}")
        if self.strategy not in ("cost", "greedy"):
            raise ConfigError(f"work_division.strategy must be cost or greedy, got "
                              f"{self.strategy!r}")

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        self.check_options()
        from spyrec.passes.split_cost import Producers

        producers, memo = Producers(graph, self.lx_intermediates), {}
        for op in graph.ops:
            op.core_splits = None
        # first in program order, assuming an intermediate's readers will keep its slices
        rows = []
        for op in graph.ops:         # a reader prices its inputs with its writers' splits
            op.core_splits, row = self._split(graph, op, producers, memo)
            rows.append((op.core_splits, row))
        if self.strategy == "cost" and self.lx_intermediates:
            self._revisit(graph, producers, memo, rows)
            if self.chain_moves:
                self._move_chains(graph, producers, rows)
            self._align_cowriters(graph, producers, rows)
        ctx.report["work_division"] = summary([row for _, row in rows if row])

    def _align_cowriters(self, graph: Graph, producers, rows: list) -> None:
        """A buffer several ops write outside loops (matmul_padding's zero fill of the
        padding rows beside its copy of the data) lives in LX only if they give each core
        parts of one slice (scratchpad_planning's rule): each writer but the one writing the
        data (`ir/lx.py data_writer`) takes its cheapest split that does, if any."""
        from spyrec.passes.scratchpad_planning import lx_slices_problem
        from spyrec.passes.split_cost import estimate

        writers: dict[str, list[Operation]] = {}
        uses_of: dict[str, list[int]] = {}    # buffer -> indices of the ops accessing it
        for i, op in enumerate(graph.ops):
            writers.setdefault(op.output.buffer, []).append(op)
            for name in dict.fromkeys(a.buffer for _, a in op.accesses()):
                uses_of.setdefault(name, []).append(i)
        position = {id(op): i for i, op in enumerate(graph.ops)}
        for name, ops in writers.items():
            buf = graph.buffers[name]
            if len(ops) < 2 or name not in producers.lx_candidates or any(op.loops for op in ops):
                continue
            uses = uses_of[name]
            if lx_slices_problem(graph, buf, uses) is None:
                continue
            main = data_writer(ops)
            for op in ops:
                if op is main:
                    continue
                original, ranges = op.core_splits, op.ranges
                best, best_time, best_ranges = None, None, ranges
                for c in replica_candidates(graph, op, replicas(main), self.cores):
                    op.core_splits = c
                    if lx_slices_problem(graph, buf, uses) is None:
                        t = estimate(graph, op, c, producers).time_us
                        if best_time is None or t < best_time:
                            best, best_time, best_ranges = c, t, op.ranges
                set_ranges(op, best_ranges)
                op.core_splits = best or original
                producers.forget(op)
                if best is not None:
                    i = position[id(op)]
                    row = rows[i][1]
                    rows[i] = (best, row and {**row, "split": _text(best),
                                              "time_us": best_time})

    def _move_chains(self, graph: Graph, producers, rows: list) -> None:
        """Chains whose splits disagree change together when that is cheaper
        (split_chains.py); every row is then re-priced, since LX placement moved too."""
        from spyrec.passes.split_chains import ChainMoves

        cache: dict[tuple, list] = {}

        def options(op: Operation) -> list[dict[str, int]]:
            key = (op.name, op.ranges)             # a move may replicate op (ir/lx.py)
            if key not in cache:
                # no K-splits: a move keeps chains in LX, where partial sums cannot live
                cache[key] = candidates(op, stick_vars(graph, op), self.cores)
            return cache[key]
        moves = ChainMoves(graph, producers, options, self.replicas, self.overlap_moves)
        if not moves.run():
            return
        for i, op in enumerate(graph.ops):
            # the moves' memo of split_cost's estimate: the layers of a stack share it
            cost = moves.estimate(op, op.core_splits)
            row = rows[i][1]        # empty when the strategy leaves no row
            rows[i] = (op.core_splits, row and {
                **row, "split": _text(op.core_splits), "time_us": cost.time_us,
                "cores": cost.cores, "hbm_bytes_per_core": cost.hbm_bytes_per_core})

    def _revisit(self, graph: Graph, producers, memo: dict, rows: list) -> None:
        """Choose again, knowing every reader's split, for the ops whose output a reader
        takes in other slices (a reduction cannot split its reduced var, say) and for the
        readers of an op whose split that changes. Nothing else can change: knowing the
        readers only makes the other candidates of an op dearer."""
        changed: set[str] = set()
        for i, op in enumerate(graph.ops):
            writers = {producers.writers[a.buffer].name for a in op.reads()
                       if a.buffer in producers.writers}
            if producers.readers_keep(op, op.core_splits) and not writers & changed:
                continue
            before = op.core_splits
            op.core_splits, row = self._split(graph, op, producers, memo)
            producers.forget(op)
            rows[i] = (op.core_splits, row)
            if op.core_splits != before:
                changed.add(op.name)

    def _split(self, graph: Graph, op: Operation, producers, memo: dict) -> tuple[dict, dict]:
        """One op's split and its report row (the producers' splits are already chosen)."""
        sticks = stick_vars(graph, op)
        greedy = greedy_split(op, sticks, self.cores)
        if self.strategy == "greedy":
            return greedy, {}
        return choose(graph, op, sticks, greedy, self.cores, producers, memo, self.k_split)


def stick_vars(graph: Graph, op: Operation) -> dict[str, int]:
    """Stick var -> largest elements per stick among the args whose stick var it is."""
    sticks: dict[str, int] = {}
    for _, access in op.accesses():
        buf = graph.buffers[access.buffer]
        v = stick_info(buf.host_size, buf.host_strides, buf.layout, op.var_ranges,
                       access.index).stick_var
        if v is not None:
            sticks[v] = max(sticks.get(v, 1), buf.layout.elems_per_stick)
    return sticks


def greedy_split(op: Operation, sticks: dict[str, int], cores: int) -> dict[str, int]:
    """The fixed-order split (module docstring): the tie-breaker and the report's baseline."""
    splits = {v: 1 for v, _ in op.ranges}
    copies = replicas(op)
    splits.update({REPLICA_VAR: copies} if copies > 1 else {})
    left = cores // copies
    order = [(v, n) for v, n in op.ranges if v not in sticks] + \
        [(v, n) for v, n in op.ranges if v in sticks]
    for v, n in order:
        if v in op.reduced or v == REPLICA_VAR or left == 1:
            continue
        e = sticks.get(v, 1)
        if n % e:
            continue
        d = _largest_divisor_at_most(n // e, left)
        splits[v] = d
        left //= d
    return splits


def candidates(op: Operation, sticks: dict[str, int], cores: int,
               k_split: bool = False) -> list[dict[str, int]]:
    """Every valid split: per var a divisor of its range (of its sticks for a stick var; 1
    for a stick var whose range is not whole sticks, and for a reduced var unless `k_split`
    and the op's partials combine outside loops), product <= cores."""
    options = []
    partial = k_split and op.op in PARTIAL_SUMS and not op.loops
    for v, n in op.ranges:
        e = sticks.get(v, 1)
        if v == REPLICA_VAR:
            options.append((v, [n]))          # a replica var is split over all its copies
        elif v in op.reduced and not partial or n % e:
            options.append((v, [1]))
        else:
            options.append((v, [d for d in range(1, min(n // e, cores) + 1)
                                if (n // e) % d == 0]))
    out: list[dict[str, int]] = [{}]
    for v, ks in options:
        out = [{**s, v: k} for s in out for k in ks if _product(s) * k <= cores]
    return out


def replica_candidates(graph: Graph, op: Operation, copies: int,
                       cores: int) -> Iterator[dict[str, int]]:
    """The candidates of `op` run as `copies` replicas (1: once), its replica var placed
    slowest, then fastest, in core order (which cores hold which copy is what a co-writer
    or reader must match). Sets op's ranges before each split it yields: a caller keeping a
    split keeps `op.ranges` with it."""
    for first in (False, True) if copies > 1 else (False,):
        set_replicas(op, copies, first)
        yield from candidates(op, stick_vars(graph, op), cores)


def choose(graph: Graph, op: Operation, sticks: dict[str, int], greedy: dict[str, int],
           cores: int, producers, memo: dict | None = None,
           k_split: bool = False) -> tuple[dict[str, int], dict]:
    """The cheapest candidate; ties: the greedy split, then one matching the producers'.

    `memo` shares the estimates between ops that differ only in buffer names (the layers of a
    decoder stack) and touch no per-tile buffer (whose cost depends on its producer)."""
    from spyrec.passes.split_cost import estimate, estimate_key

    same = estimate_key(graph, op, producers)
    key = None if same is None else (same, cores)
    if memo is not None and key is not None and key in memo:
        base, costs = memo[key]
    else:
        base = estimate(graph, op, greedy, producers)
        costs = [(estimate(graph, op, c, producers), c)
                 for c in candidates(op, sticks, cores, k_split) if c != greedy]
        if memo is not None and key is not None:
            memo[key] = base, costs
    least = min([base.time_us] + [cost.time_us for cost, _ in costs])
    ties = [(cost, c) for cost, c in costs if cost.time_us == least]
    if base.time_us == least or not ties:
        best_cost, best = base, greedy
    else:
        best_cost, best = next(((cost, c) for cost, c in ties if producers.matches(op, c)),
                               ties[0])
    row = {"op": op.name, "node": op.node, "split": _text(best), "greedy_split": _text(greedy),
           "time_us": best_cost.time_us, "greedy_time_us": base.time_us,
           "hbm_bytes_per_core": best_cost.hbm_bytes_per_core,
           "greedy_hbm_bytes_per_core": base.hbm_bytes_per_core, "cores": best_cost.cores}
    return best, row


def summary(rows: list[dict]) -> dict:
    """The report section: every op's row and the totals (per execution of each op)."""
    return {"ops": rows, "changed": sum(1 for r in rows if r["split"] != r["greedy_split"]),
            "time_us": round(sum(r["time_us"] for r in rows), 6),
            "greedy_time_us": round(sum(r["greedy_time_us"] for r in rows), 6)}


def _text(splits: dict[str, int]) -> str:
    return "[" + ", ".join(f"{v}:{k}" for v, k in splits.items()) + "]"


def _product(splits: dict[str, int]) -> int:
    out = 1
    for k in splits.values():
        out *= k
    return out


def _largest_divisor_at_most(n: int, limit: int) -> int:
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1
