"""A whole plan's estimated time: what work division compares plans by, and `--tiling auto`
prices candidate tilings by.

Op by op, each split was priced while later readers' splits were assumptions; once every split
is known, an intermediate whose users do not all keep its writer's slices is priced in HBM
(`planned_producers`), and each op's neighbours' traffic counts in their own estimates (no
penalties). `plan/core_splits.py` compares the plans with and without K-splits so
(`whole_plan_us`); attention tiling prices a planned candidate so (`planned_time_us`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from spyrec.costmodel import DEFAULT_PARAMS, CostParams
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import nest_trips
from spyrec.plan.lx_placement import lx_slices_hold
from spyrec.plan.producers import Producers
from spyrec.plan.split_estimate import SplitCost, estimate_key, split_estimate
from spyrec.plan.split_plan import Plan, plan_of

def fair_share(p: CostParams) -> CostParams:
    """The cost model `p` with each core at its share of the card's bandwidth: how a plan
    fares if a core's own bandwidth is no more than that (`divide_work` weighs plans under
    both)."""
    return replace(p, core_bytes_per_s=p.hbm_bytes_per_s / p.cores)


def whole_plan_us(graph: Graph, plan: Plan, p: CostParams = DEFAULT_PARAMS
                  ) -> tuple[float, Callable[[], float]]:
    """The plan's time as the ops' estimates sum it once every split is known (one
    execution of each op), and a function giving it at each core's fair share of the card's
    bandwidth (`fair_share`). Both read one `planned_producers` (which buffers can be in LX:
    most of the time); ops alike but for names (a stack's layers: the same `estimate_key`
    and split) are priced once."""
    producers = planned_producers(graph, plan, p)
    keys = [(estimate_key(graph, producers.shape(op), producers), plan[op.name].key)
            for op in graph.ops]

    def total(params: CostParams) -> float:
        return sum(cost.time_us for _, cost in planned_estimates(graph, params, producers,
                                                                 keys))
    return total(p), lambda: total(fair_share(p))


def planned_time_us(graph: Graph, p: CostParams = DEFAULT_PARAMS) -> float:
    """A planned graph's estimated time: `whole_plan_us` of the plan it holds, with each op
    times its executions (the trips of its loops)."""
    return sum(cost.time_us * nest_trips(op.loops) for op, cost in planned_estimates(graph, p))


def planned_estimates(graph: Graph, p: CostParams = DEFAULT_PARAMS,
                      producers: Producers | None = None, keys: list[tuple] | None = None
                      ) -> list[tuple[Operation, SplitCost]]:
    """Each op's estimate under its split in `producers`' plan (`planned_producers`; without
    them, the graph's own plan); `keys`: one per op, ops of equal keys (`estimate_key` and
    split) priced once."""
    if producers is None:
        producers = planned_producers(graph, plan_of(graph), p)
    plan = producers.plan
    priced: dict = {}
    out = []
    for i, op in enumerate(graph.ops):
        key = i if keys is None else keys[i]
        if key not in priced:
            priced[key] = split_estimate(graph, producers.shape(op), plan.splits(op),
                                         producers, p, penalties=False)
        out.append((op, priced[key]))
    return out


def planned_producers(graph: Graph, plan: Plan, p: CostParams = DEFAULT_PARAMS) -> Producers:
    """The producers of `graph` under a whole `plan` (pricing with `p`), its LX candidates
    only the buffers whose users all give each core one slice (`lx_slices_problem`)."""
    every = Producers(graph, intermediates=True, plan=plan, params=p)
    uses: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        for name in dict.fromkeys(a.buffer for _, a in op.accesses()):
            uses.setdefault(name, []).append(i)
    memo: dict = {}          # the layers of a stack ask alike
    held = {name for name in every.lx_candidates
            if lx_slices_hold(graph, graph.buffers[name], uses.get(name, []), memo,
                              [every.planned(graph.ops[i]) for i in uses.get(name, [])])}
    return every.narrowed(held)
