"""Work division as a function: every op's core split, chosen by the cost model's estimate.

Why here and not in the pass: the split is planning knowledge two callers need — the
work_division pass (a thin driver that checks its options and writes the report row) and
`--tiling auto`, which plans each candidate tiling on a sub-graph exactly as the pipeline
would (`passes/coarse_tiling/auto.py`). Both call `divide_work`.

Writes `Operation.core_splits` ({var: slices}, every iteration var present) and, for a
replicated op, its ranges (`ir/lx.py`). Guarantees: the product of splits is at most `cores`;
every split divides its range evenly; a reduced var is split (a K-split: each core reduces its
part, the partials meet in HBM at the ring's cost) only by the cost strategy, only for ops
whose partials combine (`ir.ops.PARTIAL_SUMS`) outside loops, and never with its output in LX;
a split of any arg's stick variable gives each core whole sticks of that arg (a SuperDSC core
starts at a stick boundary of every tensor: its start address has no lane offset); each core
addresses at most 256 MiB of device memory per argument (`ir/span.py`; checked on the chosen
splits at the end, since a normal compile runs no verifier), and an op no split can bring
under it is refused (UnsupportedProgram, `split_candidates.span_refusal`).

Choice (issue 10 §2): every split meeting those rules is a candidate
(`plan/split_candidates.py`), each is estimated with the cost model's formulas
(`plan/split_estimate.py`: per-core HBM sticks, replicated reads of an operand every core needs
included, compute, overhead) and the cheapest wins. A matmul thus splits N (or M and N) when
splitting M alone would make every core read the whole weight. Ties keep the greedy split, so
programs whose cost does not change stay byte-identical; among other equal-cost splits, one
giving each core the slices its producer gave it (a per-tile buffer can then stay in LX) comes
first. Op-by-op choices can leave a chain split two ways (an intermediate between them then
goes through HBM); chain moves (`plan/chain_moves.py`, option `chain_moves`) change such
chains together when the estimate says so, replicating a producer where a reader splits a var
the producer's output does not use (option `replicas`; ir/lx.py): a decoder's qkv matmuls
split batch x N on 32 cores, reading the norm every N-core computed alike, and its attention
follows on batch x heads. A buffer several ops write (matmul_padding's fill of the padding rows
and the copy of the data) has its other writers' splits aligned to the main one's, so that it
can live in LX.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from spyrec.costmodel import DEFAULT_PARAMS, CostParams
from spyrec.device import CORES
from spyrec.errors import ConfigError, InternalError, UnsupportedProgram
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import nest_trips
from spyrec.ir.lx import data_writer, set_core_ranges
from spyrec.ir.span import op_span, span_problem
from spyrec.plan.chain_moves import ChainMoves
from spyrec.plan.lx_placement import lx_slices_hold, lx_slices_problem
from spyrec.plan.split_candidates import (
    candidates, greedy_split, replica_candidates, span_refusal, split_text, stick_vars,
)
from spyrec.plan.split_estimate import (
    Producers, SplitCost, estimate_key, split_estimate, time_floor_us,
)


# the cost model with each core at its share of the card's bandwidth: how a plan fares if a
# core's own bandwidth is no more than that (`divide_work` weighs plans under both)
FAIR_SHARE = replace(DEFAULT_PARAMS,
                     core_bytes_per_s=DEFAULT_PARAMS.hbm_bytes_per_s / DEFAULT_PARAMS.cores)


@dataclass(frozen=True)
class SplitOptions:
    """How work is divided (the work_division pass's options: the pass is these fields)."""

    cores: int = CORES
    # cost: the cheapest split by the cost model; greedy: the fixed order (the baseline the
    # report compares with; also what a test uses to pin a split over a given core count)
    strategy: str = "cost"
    # price intermediates as LX, as scratchpad_planning (intermediates: true) places them: a
    # read free when this split keeps the writer's slices, a write free when the slice fits
    lx_intermediates: bool = True
    # change a disagreeing producer-consumer chain's splits together when cheaper
    # (plan/chain_moves.py; with strategy cost and lx_intermediates)
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
    # among splits estimated within this fraction of the cheapest, take one on the most
    # cores: nearly as fast under the default per-core bandwidth, and much faster if a core's
    # own bandwidth is lower (costmodel.CostParams.core_bytes_per_s is a low-confidence figure)
    spread_within: float = 0.02


def check_split_options(pass_name: str, cores: int, spread_within: float) -> None:
    """The checks of the options a pass shares with work division (`cores`,
    `spread_within`): ConfigError naming `pass_name`'s option."""
    if not 1 <= cores <= CORES:
        raise ConfigError(f"{pass_name}.cores must be between 1 and {CORES}, got {cores}")
    if not 0 <= spread_within < 1:
        raise ConfigError(f"{pass_name}.spread_within must be at least 0 and below 1, got "
                          f"{spread_within}")


def divide_work(graph: Graph, options: SplitOptions = SplitOptions(),
                memo: dict | None = None) -> dict:
    """Give every op of `graph` its core split; the report section (`summary`). `memo`:
    estimates to share with other calls (`choose`'s keys hold no names and everything the
    estimates depend on, so the candidate tilings of one attention site share them).

    K-splits are chosen op by op, and one op's K-split re-splits its producers (to keep
    their slices in LX) in ways its own estimate does not see; so when the plan takes any,
    the plan without K-splits is made too and the two whole plans (`_whole_plan_us`) are
    compared as single splits are (`near_best`): the cheaper, unless the other is within
    `spread_within` of it and cheaper when each core gets only its share of the card's
    bandwidth (the plan less exposed to the per-core figure). An op no split keeps within
    the span limit is refused first (every such op, one line each)."""
    refused = [m for m in (span_refusal(graph, op, options.cores) for op in graph.ops) if m]
    if refused:
        raise UnsupportedProgram("\n".join(refused))
    start = [op.core_ranges for op in graph.ops]       # before any replica is added
    plan = _choose_plan(graph, options, start, {} if memo is None else memo)
    if options.strategy == "cost":
        _explain_fewer_cores(graph, plan["ops"], options)
    spans = [(op_span(graph, op, op.core_splits)[0], op.name) for op in graph.ops]
    plan["max_span_bytes"], plan["max_span_op"] = max(spans, default=(0, None))
    return plan


def _explain_fewer_cores(graph: Graph, rows: list[dict], options: SplitOptions) -> None:
    """Say in each row of an op taking 1 us or more on fewer than all the cores why:
    no split uses them all, or the estimate of the best that does (the op alone: chain moves
    and the whole-plan choice weigh its neighbours too). Ops alike but for names (a stack's
    layers) get one answer: it reads only what their `estimate_key` and split hold."""
    producers = Producers(graph, options.lx_intermediates)
    by_name = {op.name: op for op in graph.ops}
    said: dict[tuple, str] = {}
    for row in rows:
        op = by_name.get(row["op"])
        if op is None or row["cores"] >= options.cores or row["time_us"] < 1.0:
            row.pop("fewer_cores", None)
            continue
        key = (estimate_key(graph, op, producers), tuple(sorted(op.core_splits.items())))
        if key not in said:
            priced = [(split_estimate(graph, op, c, producers), c)
                      for c in candidates(graph, op, stick_vars(graph, op), options.cores,
                                          options.k_split)]
            chosen = split_estimate(graph, op, op.core_splits, producers)
            said[key] = _why_fewer(op, priced, chosen, options.cores)
        row["fewer_cores"] = said[key]


def _choose_plan(graph: Graph, options: SplitOptions, start: list, memo: dict) -> dict:
    """The plan with K-splits, or without them (`divide_work`), compared as each op chose
    its split; chain moves then improve the one taken (moving chains in both would double
    work division's time)."""
    producers, rows = _divide(graph, options, memo)
    if not (options.k_split and options.strategy == "cost" and options.lx_intermediates
            and _has_k_split(graph)):
        return _finish(graph, producers, rows, options)
    with_k = [(op.core_splits, op.core_ranges) for op in graph.ops]
    with_k_us, with_k_at_fair_share = _whole_plan_us(graph)
    with_k_fair = with_k_at_fair_share()
    for op, ranges in zip(graph.ops, start):
        set_core_ranges(op, ranges)
    plain = replace(options, k_split=False)
    producers_plain, rows_plain = _divide(graph, plain, memo)
    if not _better((with_k_us, with_k_fair), _whole_plan_us(graph), options.spread_within):
        return _finish(graph, producers_plain, rows_plain, plain)
    for op, (splits, ranges) in zip(graph.ops, with_k):
        set_core_ranges(op, ranges)
        op.core_splits = splits
    return _finish(graph, Producers(graph, options.lx_intermediates), rows, options)


def _better(a: tuple[float, float], b: tuple[float, Callable[[], float]],
            spread_within: float) -> bool:
    """Is the plan with (time, fair-share time) `a` better than `b` (its fair-share time
    computed only if needed): cheaper by more than `spread_within`, or within it and cheaper
    at the fair share."""
    if a[0] > b[0] * (1 + spread_within):
        return False
    if b[0] > a[0] * (1 + spread_within):
        return True
    return (a[1], a[0]) < (b[1](), b[0])


def _whole_plan_us(graph: Graph) -> tuple[float, Callable[[], float]]:
    """The plan's time as the ops' estimates sum it once every split is known (one
    execution of each op), and a function giving it at each core's fair share of the card's
    bandwidth (`FAIR_SHARE`; to be called before any split changes): an intermediate whose
    users do not all keep its writer's slices is priced in HBM (the ops were priced as they
    were chosen, when later readers' splits were assumptions), and each op's neighbours'
    traffic counts in their own estimates (no penalties). Both read one `planned_producers`
    (which buffers can be in LX: most of the time); ops alike but for names (a stack's
    layers: the same `estimate_key` and split) are priced once."""
    producers = planned_producers(graph)
    keys = [(estimate_key(graph, op, producers), tuple(sorted(op.core_splits.items())))
            for op in graph.ops]

    def total(p: CostParams) -> float:
        return sum(cost.time_us for _, cost in planned_estimates(graph, p, producers, keys))
    return total(DEFAULT_PARAMS), lambda: total(FAIR_SHARE)


def planned_time_us(graph: Graph, p: CostParams = DEFAULT_PARAMS) -> float:
    """A planned graph's estimated time: `_whole_plan_us` with each op times its executions
    (the trips of its loops)."""
    return sum(cost.time_us * nest_trips(op.loops) for op, cost in planned_estimates(graph, p))


def planned_estimates(graph: Graph, p: CostParams = DEFAULT_PARAMS,
                      producers: Producers | None = None, keys: list[tuple] | None = None
                      ) -> list[tuple[Operation, SplitCost]]:
    """Each op's estimate under the splits work division chose (`_whole_plan_us`);
    `producers`: the graph's `planned_producers`, when the caller has them; `keys`: one per
    op, ops of equal keys (`estimate_key` and split) priced once."""
    if producers is None:
        producers = planned_producers(graph)
    priced: dict = {}
    out = []
    for i, op in enumerate(graph.ops):
        key = i if keys is None else keys[i]
        if key not in priced:
            priced[key] = split_estimate(graph, op, op.core_splits, producers, p,
                                         penalties=False)
        out.append((op, priced[key]))
    return out


def planned_producers(graph: Graph) -> Producers:
    """The producers of a planned graph, its LX candidates only the buffers whose users all
    give each core one slice (`lx_slices_problem`)."""
    producers = Producers(graph, intermediates=True)
    uses: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        for name in dict.fromkeys(a.buffer for _, a in op.accesses()):
            uses.setdefault(name, []).append(i)
    memo: dict = {}          # the layers of a stack ask alike
    producers.lx_candidates = {
        name for name in producers.lx_candidates
        if lx_slices_hold(graph, graph.buffers[name], uses.get(name, []), memo)}
    return producers


def _has_k_split(graph: Graph) -> bool:
    return any(k > 1 and v in op.reduced for op in graph.ops
               for v, k in (op.core_splits or {}).items())


def _divide(graph: Graph, options: SplitOptions, memo: dict) -> tuple[Producers, list]:
    """Each op's split as `options` say, chosen in program order and revisited (chain moves
    are `_finish`'s); `memo`: `choose`'s, shared by the plans with and without K-splits (an
    op that reduces nothing has the same candidates in both). The producers and the rows."""
    producers = Producers(graph, options.lx_intermediates)
    for op in graph.ops:
        op.core_splits = None
    # first in program order, assuming an intermediate's readers will keep its slices
    rows = []
    for op in graph.ops:         # a reader prices its inputs with its writers' splits
        op.core_splits, row = _split(graph, op, producers, memo, options)
        rows.append((op.core_splits, row))
    if options.strategy == "cost" and options.lx_intermediates:
        _revisit(graph, producers, memo, rows, options)
    return producers, rows


def _finish(graph: Graph, producers: Producers, rows: list, options: SplitOptions) -> dict:
    """The plan taken, its chains moved and co-writers aligned; the report section."""
    if options.strategy == "cost" and options.lx_intermediates:
        if options.chain_moves:
            _move_chains(graph, producers, rows, options)
        _align_cowriters(graph, producers, rows, options)
    _check_spans(graph)
    return summary([row for _, row in rows if row])


def _check_spans(graph: Graph) -> None:
    """The span guarantee, checked on the splits chosen (normal compiles verify nothing
    else): every split came from the candidates, which all fit, so a core over the limit
    here is a planner's bug."""
    for op in graph.ops:
        problem = span_problem(graph, op, op.core_splits)
        if problem is not None:
            raise InternalError(f"work division left op {op.name!r} with cores "
                                f"{split_text(op.core_splits)}: {problem}; this is a spyrec "
                                f"bug, please report it with the command and input")


def _align_cowriters(graph: Graph, producers: Producers, rows: list,
                     options: SplitOptions) -> None:
    """A buffer several ops write outside loops (matmul_padding's zero fill of the
    padding rows beside its copy of the data) lives in LX only if they give each core
    parts of one slice (scratchpad_planning's rule): each writer but the one writing the
    data (`ir/lx.py data_writer`) takes its cheapest split that does, if any."""
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
            original, ranges = op.core_splits, op.core_ranges
            best, best_time, best_ranges = None, None, ranges
            # each candidate tried on the graph's op: the slice rule reads every user's split
            for trial_ranges, c in replica_candidates(graph, op, main.replicas, options.cores):
                set_core_ranges(op, trial_ranges)
                op.core_splits = c
                if lx_slices_problem(graph, buf, uses) is None:
                    t = split_estimate(graph, op, c, producers).time_us
                    if best_time is None or t < best_time:
                        best, best_time, best_ranges = c, t, trial_ranges
            set_core_ranges(op, best_ranges)
            op.core_splits = best or original
            producers.forget(op)
            if best is not None:
                i = position[id(op)]
                row = rows[i][1]
                rows[i] = (best, row and {**row, "split": split_text(best),
                                          "time_us": best_time})


def _move_chains(graph: Graph, producers: Producers, rows: list,
                 options: SplitOptions) -> None:
    """Chains whose splits disagree change together when that is cheaper
    (plan/chain_moves.py); every row is then re-priced, since LX placement moved too."""
    cache: dict[tuple, list] = {}

    def options_of(op: Operation) -> list[dict[str, int]]:
        key = (op.name, op.core_ranges)        # a move may replicate op (ir/lx.py)
        if key not in cache:
            # no K-splits: a move keeps chains in LX, where partial sums cannot live
            cache[key] = candidates(graph, op, stick_vars(graph, op), options.cores)
        return cache[key]
    moves = ChainMoves(graph, producers, options_of, options.replicas, options.overlap_moves)
    if not moves.run():
        return
    for i, op in enumerate(graph.ops):
        # the moves' memo of the split estimate: the layers of a stack share it
        cost = moves.estimate(op, op.core_splits)
        row = rows[i][1]        # empty when the strategy leaves no row
        rows[i] = (op.core_splits, row and {
            **row, "split": split_text(op.core_splits), "time_us": cost.time_us,
            "cores": cost.cores, "hbm_bytes_per_core": cost.hbm_bytes_per_core})


def _revisit(graph: Graph, producers: Producers, memo: dict, rows: list,
             options: SplitOptions) -> None:
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
        op.core_splits, row = _split(graph, op, producers, memo, options)
        producers.forget(op)
        rows[i] = (op.core_splits, row)
        if op.core_splits != before:
            changed.add(op.name)


def _split(graph: Graph, op: Operation, producers: Producers, memo: dict,
           options: SplitOptions) -> tuple[dict, dict]:
    """One op's split and its report row (the producers' splits are already chosen)."""
    sticks, greedy = _sticks_and_greedy(graph, op, options.cores, memo)
    if options.strategy == "greedy":
        return greedy, {}
    return choose(graph, op, sticks, greedy, options.cores, producers, memo, options.k_split,
                  options.spread_within)


def _sticks_and_greedy(graph: Graph, op: Operation, cores: int, memo: dict
                       ) -> tuple[dict[str, int], dict[str, int]]:
    """`stick_vars` and `greedy_split` of `op` (fresh dicts), from `memo` for an op alike but
    for names (the layers of a stack; `_divide` asks again for every op of the plan without
    K-splits and of `_revisit`): both read only the op's kind, ranges, reduced vars and loops
    and each access's index, buffer shape, layout and whether the buffer is in LX."""
    key = ("greedy", op.op, op.core_ranges, op.reduced, op.loops, op.var_ranges, cores,
           tuple((role, a.index, b.host_size, b.layout, b.lx_address is None)
                 for role, a in op.accesses() for b in (graph.buffers[a.buffer],)))
    found = memo.get(key)
    if found is None:
        sticks = stick_vars(graph, op)
        found = memo[key] = sticks, greedy_split(graph, op, sticks, cores)
    return dict(found[0]), dict(found[1])


def choose(graph: Graph, op: Operation, sticks: dict[str, int], greedy: dict[str, int],
           cores: int, producers: Producers, memo: dict | None = None,
           k_split: bool = False, spread_within: float = 0.0) -> tuple[dict[str, int], dict]:
    """The cheapest candidate, or within `spread_within` of it the one on the most cores
    (`_pick`); ties: the greedy split, then one matching the producers'. A row for an op on
    fewer cores than `cores` says why (`fewer_cores`).

    `memo` shares the estimates between ops that differ only in buffer names (the layers of a
    decoder stack) and their neighbours' splits' names (`estimate_key`)."""
    key = (estimate_key(graph, op, producers), cores, k_split and bool(op.reduced))
    if memo is not None and key in memo:
        base, costs = memo[key]
    else:
        base = split_estimate(graph, op, greedy, producers)
        costs = _priced_near(graph, op, base, [c for c in candidates(
            graph, op, sticks, cores, k_split) if c != greedy], producers, spread_within)
        if memo is not None:
            memo[key] = base, costs
    best_cost, best = _pick(op, [(base, greedy)] + costs, producers, spread_within)
    row = {"op": op.name, "node": op.node, "split": split_text(best),
           "greedy_split": split_text(greedy),
           "time_us": best_cost.time_us, "greedy_time_us": base.time_us,
           "hbm_bytes_per_core": best_cost.hbm_bytes_per_core,
           "greedy_hbm_bytes_per_core": base.hbm_bytes_per_core, "cores": best_cost.cores}
    return best, row


# the estimate rounds its time to 1e-6 us; a floor this far over the cheapest still loses
FLOOR_SLACK_US = 1e-5


def _priced_near(graph: Graph, op: Operation, base: SplitCost, splits: list[dict],
                 producers: Producers, spread_within: float) -> list[tuple[SplitCost, dict]]:
    """The estimates of `splits` (in their order) that `near_best` may pick beside `base`'s:
    priced in the order of their `time_floor_us`, and none once the next floor is over the
    cheapest so far by more than `spread_within` (each later one's estimate is at least its
    floor, so it cannot come within `spread_within` of the cheapest). Llama-3.2-1B d16: a
    third of work division's estimates skipped, the choices the same."""
    floors = [time_floor_us(op, c) for c in splits]
    best = base.time_us
    priced: dict[int, SplitCost] = {}
    for i in sorted(range(len(splits)), key=floors.__getitem__):
        if floors[i] > best * (1 + spread_within) + FLOOR_SLACK_US:
            break
        priced[i] = split_estimate(graph, op, splits[i], producers)
        best = min(best, priced[i].time_us)
    return [(priced[i], c) for i, c in enumerate(splits) if i in priced]


def _pick(op: Operation, priced: list[tuple[SplitCost, dict]], producers: Producers,
          spread_within: float) -> tuple[SplitCost, dict]:
    """`near_best` of the (estimate, split) pairs, the greedy one first; ties: the greedy
    split, then one keeping its producers' slices."""
    ties = near_best(priced, spread_within)
    if ties[0] is priced[0] or len(ties) == 1:
        return ties[0]
    return next(((cost, c) for cost, c in ties if producers.matches(op, c)), ties[0])


def near_best(priced: list[tuple[SplitCost, dict]], spread_within: float
              ) -> list[tuple[SplitCost, dict]]:
    """Among the pairs estimated within `spread_within` of the cheapest, those on the most
    cores (the least exposed to a core's own bandwidth, the model's least certain parameter:
    bench/hardware_plans.py prices plans under card/32 .. card), and of those the cheapest,
    in the order given. Only an estimate's `time_us` and `cores` are read (split_padding
    ranks its paddings with it too)."""
    least = min(cost.time_us for cost, _ in priced)
    near = [(cost, c) for cost, c in priced if cost.time_us <= least * (1 + spread_within)]
    most = max(cost.cores for cost, _ in near)
    low = min(cost.time_us for cost, _ in near if cost.cores == most)
    return [(cost, c) for cost, c in near if cost.cores == most and cost.time_us == low]


def pick_split(priced: list[tuple[SplitCost, dict]], spread_within: float
               ) -> tuple[SplitCost, dict]:
    """The first of `near_best`: work_division's rule without producers to match."""
    return near_best(priced, spread_within)[0]


def _why_fewer(op: Operation, priced: list[tuple[SplitCost, dict]], chosen: SplitCost,
               cores: int) -> str:
    """Why `op` runs on fewer than `cores` cores: no split uses them all (its ranges in
    split units), or the estimate of the best that does."""
    full = [(cost, c) for cost, c in priced if cost.cores == cores]
    if not full:
        ranges = ", ".join(f"{v}<{n}" for v, n in op.core_ranges)
        return (f"no split of [{ranges}] uses {cores} cores (a split divides its range, a "
                f"stick var in whole sticks)")
    cost, c = min(full, key=lambda x: x[0].time_us)
    return (f"its best split on {cores} cores, {split_text(c)}, is estimated "
            f"{cost.time_us:.3f} us against {chosen.time_us:.3f} us on {chosen.cores} (the op "
            f"alone; the plan weighs its neighbours too)")


def summary(rows: list[dict]) -> dict:
    """The report section: every op's row and the totals (per execution of each op)."""
    return {"ops": rows, "changed": sum(1 for r in rows if r["split"] != r["greedy_split"]),
            "time_us": round(sum(r["time_us"] for r in rows), 6),
            "greedy_time_us": round(sum(r["greedy_time_us"] for r in rows), 6)}
