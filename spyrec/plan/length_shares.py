"""How many cores run an op sized by a symbolic length at each length: its minimum share.

An op whose size is a symbolic length (`Operation.lengths`) keeps one core split at every
length; a var split k ways runs max(L / k, m(L)) values per busy core, the cores past the
length idle (`SymLength.share`). The floor m(L) trades compute for weight traffic: a
projection whose rows are split over every core at 128 tokens has each core read the whole
weight (once per broadcast cohort of 8), while a floor of 16 rows runs it on 8 cores that
read it once; at 512 tokens the best floor is larger, and from 32 x the floor on, every core
is busy whatever it is. One floor cannot serve every length (measured on Llama and Granite,
tiny, 128..2,048: 16 costs 512 tokens 1.13x the static program, 32 costs 128 tokens 1.28x).

So the floor is a step function of the length, one per symbol (every sized op of a symbol
shares it: a buffer one op writes and another reads is cut into the same slices at every
length, which LX residency needs), chosen after the splits are: for each admissible length,
the floor whose summed estimate over the symbol's split sized ops (`split_estimate.
sized_time_us`, times the trips a bound loop runs at that length) is least, among the floors
every split allows there (`legal`: whole sticks of a stick var, a share that fits the
maximum's slice, no idle core holding a partial sum). Candidates: none and the divisors of
the granularity, then the best moved one busy core at a time (`_refined`; the last busy
slice then ends at the length, short of a whole share). Ties keep the previous length's
floor (fewer steps). Measured (bench/symbolic.py, 31 lengths): Llama's worst overhead
against the static programs 1.106 with the divisors alone, 1.090 refined (256 tokens: a
floor of 20, 13 busy cores).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from spyrec.costmodel import DEFAULT_PARAMS, CostParams
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import nest_trips
from spyrec.ir.symbols import SymLength
from spyrec.plan.split_candidates import stick_vars
from spyrec.plan.producers import Producers
from spyrec.plan.split_estimate import estimate_key, offchip_accesses, sized_time_us


@dataclass(frozen=True)
class SplitVar:
    """One split var of a sized op: the op, its cores, its stick unit, is it reduced."""

    op: Operation
    cores: int
    unit: int
    reduced: bool


def choose_length_shares(graph: Graph, p: CostParams = DEFAULT_PARAMS) -> list[dict]:
    """Set each symbol's minimum-share steps (`SymLength.min_shares`) by the cost model, the
    ops' splits chosen; one report row per symbol (its steps and the estimated time of the
    ops they move at each length where floors differ, per floor)."""
    producers = Producers(graph, intermediates=True)
    rows = []
    for name in sorted({s for op in graph.ops for _, s in op.lengths}):
        symbol = graph.symbols[name]
        split = _split_vars(graph, name)
        if not split:
            graph.symbols[name] = replace(symbol, min_shares=())
            continue
        steps, priced = _steps(graph, symbol, split, producers, p)
        graph.symbols[name] = replace(symbol, min_shares=steps)
        rows.append({"symbol": name, "min_shares": [list(s) for s in steps],
                     "estimates_us": priced})
    return rows


def _split_vars(graph: Graph, name: str) -> list[SplitVar]:
    """The vars of `name`'s length that sized ops split over more than one core."""
    out = []
    for op in graph.ops:
        sticks = None
        for v, s in op.lengths:
            k = (op.core_splits or {}).get(v, 1)
            if s == name and k > 1:
                sticks = stick_vars(graph, op) if sticks is None else sticks
                out.append(SplitVar(op, k, sticks.get(v, 1), v in op.reduced))
    return out


def legal(symbol: SymLength, split: list[SplitVar], length: int, floor: int) -> bool:
    """Does `floor` at `length` keep every split valid (`SymLength.floor_allows`)?"""
    return all(symbol.floor_allows(length, floor, s.cores, s.unit, s.reduced) for s in split)


def _steps(graph: Graph, symbol: SymLength, split: list[SplitVar], producers: Producers,
           p: CostParams) -> tuple[tuple[tuple[int, int], ...], dict[str, dict[str, float]]]:
    """The cheapest legal floor at each length, as (up to length, floor) steps; and at each
    length where floors cut the splits differently, each one's estimate (us) of the ops
    whose cuts it changes."""
    candidates = [0] + [d for d in range(1, symbol.granularity + 1)
                        if symbol.granularity % d == 0]
    # ops alike (a stack's layers: `estimate_key`) priced once, each with its split vars
    # of this symbol and its HBM accesses at the maximum
    by_op: dict[str, list[SplitVar]] = {}
    for s in split:
        by_op.setdefault(s.op.name, []).append(s)
    alike: dict[tuple, list] = {}
    for own in by_op.values():
        op = own[0].op
        key = (estimate_key(graph, op, producers), tuple(sorted(op.core_splits.items())),
               op.lengths, tuple(loop.bound for loop in op.loops))
        if key in alike:
            alike[key][0] += 1
        else:
            alike[key] = [1, op, offchip_accesses(graph, op, producers, p), own]
    widest = max(s.cores for s in split)
    chosen: list[int] = []
    priced: dict[str, dict[str, float]] = {}
    for length in symbol.values():
        options: dict[tuple, int] = {}     # one floor per way of cutting the splits
        for m in candidates:
            if legal(symbol, split, length, m):
                options.setdefault(_cuts(split, length, m), m)
        if len(options) > 1:
            costs: dict[int, float] = {}
            times: dict[tuple, float] = {}    # (group, its cuts) -> time: most keep theirs

            def cost(m: int) -> float:
                if m not in costs:
                    total = 0.0
                    for g, (n, op, offchip, own) in enumerate(alike.values()):
                        key = (g, _cuts(own, length, m))
                        if key not in times:
                            times[key] = n * _time_at(graph, op, offchip, symbol, length, m, p)
                        total += times[key]
                    costs[m] = total
                return costs[m]
            pick = min(options.values(), key=cost)
            pick = _refined(symbol, split, length, widest, pick, cost)
            priced[str(length)] = {str(m): round(t, 3) for m, t in sorted(costs.items())}
        else:
            pick = next(iter(options.values()))
        previous = chosen[-1] if chosen else None
        if previous is not None and legal(symbol, split, length, previous) and \
                _cuts(split, length, previous) == _cuts(split, length, pick):
            pick = previous         # the same cuts: fewer steps
        chosen.append(pick)
    steps: list[tuple[int, int]] = []
    for length, m in zip(symbol.values(), chosen):
        if steps and steps[-1][1] == m:
            steps[-1] = (length, m)
        else:
            steps.append((length, m))
    return (() if all(m == 0 for _, m in steps) else tuple(steps)), priced


# busy-core counts `_refined` tries past the last that lowered the cost (the cost is not
# convex in them: a broadcast cohort of 8 cores reads a weight once)
PATIENCE = 3


def _refined(symbol: SymLength, split: list[SplitVar], length: int, widest: int, floor: int,
             cost) -> int:
    """`floor` moved one busy core at a time (of the widest split) while `cost` falls: the
    divisors of the granularity give 4, 8, 16, 32 busy cores at most lengths, the best
    often lies between (Llama, 256 tokens: 13 busy cores, a share of 20 values, the last
    busy slice cut at the length). A floor no split allows is skipped, not a stop; a floor
    that leaves every core busy is kept (fewer busy cores only cost more there)."""
    def busy(m: int) -> int:
        return -(-length // max(length // widest, m))
    best = floor
    if busy(floor) == widest:       # every core busy: the floor does not bind
        return best
    for step in (-1, 1):
        b, misses = busy(floor) + step, 0
        while 1 <= b <= widest and misses < PATIENCE:
            m = -(-length // b)
            b += step
            if b - step == widest or not legal(symbol, split, length, m):
                continue
            if cost(m) < cost(best):
                best, misses = m, 0
            else:
                misses += 1
    return best


def _cuts(split: list[SplitVar], length: int, floor: int) -> tuple[int, ...]:
    """Each split var's share at `length` with `floor`."""
    return tuple(max(length // s.cores, floor) for s in split)


def _time_at(graph: Graph, op: Operation, offchip: list, symbol: SymLength,
             length: int, floor: int, p: CostParams) -> float:
    """`op`'s estimated time over its executions at `length` with `floor`."""
    trips = nest_trips(op.loops)
    for loop in op.loops:        # a loop bound by the length runs fewer trips below it
        if loop.bound is not None and loop.bound.symbol == symbol.name:
            trips = trips * loop.bound.count(length) / loop.bound.count(symbol.maximum)
    lengths = {name: (length if name == symbol.name else graph.symbols[name].maximum)
               for _, name in op.lengths}
    return trips * sized_time_us(graph, op, offchip, lengths, {symbol.name: floor}, p)
