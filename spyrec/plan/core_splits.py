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
from spyrec.ir.span import op_span, span_problem
from spyrec.plan.chain_moves import move_chains
from spyrec.plan.cowriters import align_cowriters
from spyrec.plan.producers import Producers
from spyrec.plan.split_candidates import candidates, span_refusal, split_text, stick_vars
from spyrec.plan.split_choice import (
    choose, near_best, pick_split, sticks_and_greedy, summary, why_fewer,
)
from spyrec.plan.split_estimate import estimate_key, split_estimate
from spyrec.plan.split_plan import Draft, Plan, Split, apply_plan, shaped
from spyrec.plan.whole_plan import whole_plan_us

# split_padding ranks its paddings by work division's rule (`near_best`, `pick_split`)
__all__ = ["SplitOptions", "check_split_options", "divide_work", "near_best", "pick_split",
           "plan_work"]


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
                memo: dict | None = None, params: CostParams = DEFAULT_PARAMS) -> dict:
    """Give every op of `graph` its core split (`plan_work`, then `apply_plan`: the one
    write); the report section (`summary`)."""
    plan, report = plan_work(graph, options, memo, params)
    apply_plan(graph, plan)
    return report


def plan_work(graph: Graph, options: SplitOptions = SplitOptions(),
              memo: dict | None = None, params: CostParams = DEFAULT_PARAMS
              ) -> tuple[Plan, dict]:
    """Every op's core split as a `Plan`, `graph` left as it is, and the report section
    (`summary`), every estimate priced with the cost model's `params`. `memo`: estimates to share with other calls (`choose`'s keys hold no names
    and everything the estimates depend on, so the candidate tilings of one attention site
    share them).

    K-splits are chosen op by op, and one op's K-split re-splits its producers (to keep
    their slices in LX) in ways its own estimate does not see; so when the plan takes any,
    the plan without K-splits is made too and the two whole plans (`whole_plan_us`) are
    compared as single splits are (`near_best`): the cheaper, unless the other is within
    `spread_within` of it and cheaper when each core gets only its share of the card's
    bandwidth (the plan less exposed to the per-core figure). An op no split keeps within
    the span limit is refused first (every such op, one line each)."""
    refused = [m for m in (span_refusal(graph, op, options.cores) for op in graph.ops) if m]
    if refused:
        raise UnsupportedProgram("\n".join(refused))
    plan, report = _choose_plan(graph, options, {} if memo is None else memo, params)
    if options.strategy == "cost":
        _explain_fewer_cores(graph, plan, report["ops"], options, params)
    spans = [(op_span(graph, shaped(op, plan.ranges(op)), plan.splits(op))[0], op.name)
             for op in graph.ops]
    report["max_span_bytes"], report["max_span_op"] = max(spans, default=(0, None))
    return plan, report


def _explain_fewer_cores(graph: Graph, plan: Plan, rows: list[dict],
                         options: SplitOptions, params: CostParams) -> None:
    """Say in each row of an op taking 1 us or more on fewer than all the cores why:
    no split uses them all, or the estimate of the best that does (the op alone: chain moves
    and the whole-plan choice weigh its neighbours too). Ops alike but for names (a stack's
    layers) get one answer: it reads only what their `estimate_key` and split hold."""
    producers = Producers(graph, options.lx_intermediates, plan, params=params)
    by_name = {op.name: op for op in graph.ops}
    said: dict[tuple, str] = {}
    for row in rows:
        op = by_name.get(row["op"])
        if op is None or row["cores"] >= options.cores or row["time_us"] < 1.0:
            row.pop("fewer_cores", None)
            continue
        at = producers.shape(op)
        key = (estimate_key(graph, at, producers), plan[op.name].key)
        if key not in said:
            priced = [(split_estimate(graph, at, c, producers), c)
                      for c in candidates(graph, at, stick_vars(graph, at), options.cores,
                                          options.k_split)]
            chosen = split_estimate(graph, at, plan.splits(op), producers)
            said[key] = why_fewer(at, priced, chosen, options.cores)
        row["fewer_cores"] = said[key]


def _choose_plan(graph: Graph, options: SplitOptions, memo: dict, params: CostParams
                 ) -> tuple[Plan, dict]:
    """The plan with K-splits, or without them (`plan_work`), compared as each op chose
    its split; chain moves then improve the one taken (moving chains in both would double
    work division's time). The plan and the report section."""
    producers = Producers(graph, options.lx_intermediates, Plan(), params=params)
    with_k, rows = _divide(graph, producers, options, memo)
    if not (options.k_split and options.strategy == "cost" and options.lx_intermediates
            and _has_k_split(graph, with_k)):
        return _finish(graph, producers.at(with_k), rows, options)
    with_k_us, with_k_at_fair_share = whole_plan_us(graph, with_k, params)
    with_k_fair = with_k_at_fair_share()
    plain = replace(options, k_split=False)
    plain_plan, rows_plain = _divide(graph, producers, plain, memo)
    if not _better((with_k_us, with_k_fair), whole_plan_us(graph, plain_plan, params),
                   options.spread_within):
        return _finish(graph, producers.at(plain_plan), rows_plain, plain)
    return _finish(graph, producers.at(with_k), rows, options)


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


def _has_k_split(graph: Graph, plan: Plan) -> bool:
    return any(k > 1 and v in op.reduced for op in graph.ops
               for v, k in plan[op.name].items)


def _divide(graph: Graph, producers: Producers, options: SplitOptions, memo: dict
            ) -> tuple[Plan, list]:
    """Each op's split as `options` say, chosen in program order and revisited (chain moves
    are `_finish`'s); `memo`: `choose`'s, shared by the plans with and without K-splits (an
    op that reduces nothing has the same candidates in both). The plan and the rows."""
    # first in program order, assuming an intermediate's readers will keep its slices
    draft, rows = Draft(), []
    at = producers.at(draft)
    for op in graph.ops:         # a reader prices its inputs with its writers' splits
        split, row = _split(graph, op, at, memo, options)
        draft.set(op.name, Split.of(split, op.core_ranges))
        rows.append((split, row))
    plan = draft.done()
    if options.strategy == "cost" and options.lx_intermediates:
        plan = _revisit(graph, producers.at(plan), memo, rows, options)
    return plan, rows


def _finish(graph: Graph, producers: Producers, rows: list, options: SplitOptions
            ) -> tuple[Plan, dict]:
    """`producers`' plan, its chains moved and co-writers aligned; and the report section."""
    plan = producers.plan
    if options.strategy == "cost" and options.lx_intermediates:
        if options.chain_moves:
            plan = _move_chains(graph, producers, rows, options)
        plan = align_cowriters(graph, producers.at(plan), rows, options.cores)
    _check_spans(graph, plan)
    return plan, summary([row for _, row in rows if row])


def _check_spans(graph: Graph, plan: Plan) -> None:
    """The span guarantee, checked on the splits chosen (normal compiles verify nothing
    else): every split came from the candidates, which all fit, so a core over the limit
    here is a planner's bug."""
    for op in graph.ops:
        splits = plan.splits(op)
        problem = span_problem(graph, shaped(op, plan.ranges(op)), splits)
        if problem is not None:
            raise InternalError(f"work division left op {op.name!r} with cores "
                                f"{split_text(splits)}: {problem}; this is a spyrec "
                                f"bug, please report it with the command and input")


def _move_chains(graph: Graph, producers: Producers, rows: list,
                 options: SplitOptions) -> Plan:
    """Chains whose splits disagree change together when that is cheaper
    (plan/chain_moves.py); every row is then re-priced, since LX placement moved too."""
    cache: dict[tuple, list] = {}

    def options_of(op: Operation, ranges: tuple) -> list[dict[str, int]]:
        key = (op.name, ranges)        # a move may replicate op (ir/lx.py)
        if key not in cache:
            # no K-splits: a move keeps chains in LX, where partial sums cannot live
            at = shaped(op, ranges)
            cache[key] = candidates(graph, at, stick_vars(graph, at), options.cores)
        return cache[key]
    plan, moves = move_chains(graph, producers, options_of, options.replicas,
                              options.overlap_moves)
    if moves is None:
        return plan
    for i, op in enumerate(graph.ops):
        # the moves' memo of the split estimate: the layers of a stack share it
        cost = moves.estimate(op, plan[op.name])
        row = rows[i][1]        # empty when the strategy leaves no row
        splits = plan.splits(op)
        rows[i] = (splits, row and {
            **row, "split": split_text(splits), "time_us": cost.time_us,
            "cores": cost.cores, "hbm_bytes_per_core": cost.hbm_bytes_per_core})
    return plan


def _revisit(graph: Graph, producers: Producers, memo: dict, rows: list,
             options: SplitOptions) -> Plan:
    """Choose again, knowing every reader's split, for the ops whose output a reader
    takes in other slices (a reduction cannot split its reduced var, say) and for the
    readers of an op whose split that changes. Nothing else can change: knowing the
    readers only makes the other candidates of an op dearer. The plan revisited."""
    changed: set[str] = set()
    draft = producers.plan.draft()
    at = producers.at(draft)
    for i, op in enumerate(graph.ops):
        writers = {at.writers[a.buffer].name for a in op.reads() if a.buffer in at.writers}
        before = draft.splits(op)
        if at.readers_keep(op, before) and not writers & changed:
            continue
        split, row = _split(graph, op, at, memo, options)
        draft.set(op.name, Split.of(split, op.core_ranges))
        rows[i] = (split, row)
        if split != before:
            changed.add(op.name)
    return draft.done()


def _split(graph: Graph, op: Operation, producers: Producers, memo: dict,
           options: SplitOptions) -> tuple[dict, dict]:
    """One op's split and its report row (the producers' splits are already chosen)."""
    sticks, greedy = sticks_and_greedy(graph, op, options.cores, memo)
    if options.strategy == "greedy":
        return greedy, {}
    return choose(graph, op, sticks, greedy, options.cores, producers, memo, options.k_split,
                  options.spread_within)
