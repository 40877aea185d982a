"""One op's split: the cheapest candidate by the split estimate, or nearly as cheap on more cores.

Work division chooses op by op in program order (`plan/core_splits.py`), each op priced with
its producers' splits as the plan so far holds them (`plan/producers.py`); split_padding ranks
its paddings by the same rule (`near_best`, `pick_split`). Estimates are memoized on what they
depend on without names (`estimate_key`), so the layers of a decoder stack are priced once.
"""

from __future__ import annotations

from spyrec.ir import Graph, Operation
from spyrec.plan.producers import Producers
from spyrec.plan.split_candidates import candidates, greedy_split, split_text, stick_vars
from spyrec.plan.split_estimate import SplitCost, estimate_key, split_estimate, time_floor_us


def sticks_and_greedy(graph: Graph, op: Operation, cores: int, memo: dict
                       ) -> tuple[dict[str, int], dict[str, int]]:
    """`stick_vars` and `greedy_split` of `op` (fresh dicts), from `memo` for an op alike but
    for names (the layers of a stack; `core_splits._divide` asks again for every op of the
    plan without K-splits and of `_revisit`): both read only the op's kind, ranges, reduced
    vars and loops and each access's index, buffer shape, layout and whether the buffer is in
    LX."""
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
    floors = [time_floor_us(op, c, producers.params) for c in splits]
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


def why_fewer(op: Operation, priced: list[tuple[SplitCost, dict]], chosen: SplitCost,
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
