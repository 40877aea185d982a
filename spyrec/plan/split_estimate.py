"""The split estimate: the cost model's per-op time, evaluated on the IR for a candidate split.

work_division chooses each op's split by estimated time (issue 10 §2), so it needs the cost
model's numbers before any file exists. Planning knowledge (`plan/`), not a pass: work
division (`plan/core_splits.py`), chain moves (`plan/chain_moves.py`) and `--tiling auto`
price planned programs with it. The parameters, op cost classes and formulas (compute, memory,
ring, broadcast read share) are `spyrec/costmodel.py`'s, as the simulator's estimate
(`sim/cost.py`) uses them: one source for each; the HBM byte count is `plan/hbm_bytes.py`'s,
the compiler's one count (LX placement and tiling use it too):

- HBM bytes per core: for every accessed buffer, the sticks of core 0's slice × 128, where the
  sticks are the product of the extents (value ranges over the slice) of the access's device
  coordinates except the lanes (`hbm_bytes.access_sticks`). The bounding box equals the
  simulator's distinct-stick count for the dense accesses that layouts produce; an operand
  every core needs whole (a matmul weight under an M split) is therefore counted once per
  core, which is what the split decides. A gathered coordinate counts one stick per index
  element the slice reads (the simulator's footprint assumes the same: no repeated indices).
- Args in LX cost nothing (the cost model: LX is free in time). Before scratchpad_planning runs,
  a per-tile buffer is taken to be in LX when its per-core slice fits the budget and, for a
  read, when this split gives every core the same slice its writer gave it (the condition
  scratchpad_planning applies, `ir/lx.py`); a read that breaks it costs its bytes from HBM
  plus the writer's write of the whole buffer, which then has to go to HBM too.
- An input slice r cores read alike is charged max(8, r) / (8 r) of its bytes per core (the
  broadcast cohort rule, `CostParams.read_share`). Inside a loop, a program input or
  constant every trip reads in place (a tiled MLP's weight) is charged once over the trips:
  stage_inputs copies such a slice into LX before the loop when it fits, so one read serves
  them all.
- compute: matmul MACs / (per-core PT MAC rate × eff(M rows per core)); vector ops points ×
  weight / (lanes × clock); data movement none (`costmodel.compute_seconds`). memory:
  per-core bytes / min(the aggregate bandwidth / active cores, one core's own bandwidth)
  (`costmodel.memory_seconds`).
  time = max(compute, memory) + ring + per-op overhead + penalties, the ring of a K-split (a
  reduced var split over k cores) being (k − 1) × output elements × the partial-sum cost per
  element and hop (`costmodel.ring_us`); a K-split's output is priced in HBM
  (where the partials meet), and so are its readers' reads of it: the K-split itself is
  charged those reads of an intermediate that could otherwise stay in LX. Such penalties (and
  a writer's write an input breaks off LX) are traffic in other ops, so this op's compute does
  not hide them: they add to its time instead of joining its memory term (where they would
  make a split with more cores look no faster than one with fewer).

The simulator counts bytes from the sdsc files with its own code (sim/footprint.py), so
tests/passes/test_work_division_cost.py comparing the two is a real check, not a tautology.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from spyrec.costmodel import (
    DEFAULT_PARAMS, MATMUL, CostParams, card_seconds, compute_seconds, cost_class, fused_floor_us,
    matmul_m_vars, memory_seconds, ring_us,
)
from spyrec.device import LX_USABLE_BYTES_PER_CORE, STICK_BYTES
from spyrec.indexing import Indirect, Lin, Ranges, Var
from spyrec.indexing.sticks import stick_info
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import Access, nest_trips
from spyrec.plan.hbm_bytes import (
    access_sticks, coord_leaves, coord_span, core0_slice, readers_of_access,
)

if TYPE_CHECKING:
    from spyrec.plan.producers import Producers


@dataclass(frozen=True)
class SplitCost:
    """One op's estimated time under one split, with its parts (per execution)."""

    time_us: float
    compute_us: float
    memory_us: float
    hbm_bytes_per_core: int
    cores: int


def first_box(graph: Graph, op: Operation, access: Access, splits: dict[str, int],
              core_ranges: tuple[tuple[str, int], ...] | None = None) -> tuple:
    """Core 0's box of device coordinates (lanes excluded), as `ir/lx.py core_boxes`, of `op`
    at `core_ranges` (a plan's: its copies; its own when None)."""
    buf = graph.buffers[access.buffer]
    ranges = op.core_ranges if core_ranges is None else core_ranges
    return _first_box_of(buf.host_size, buf.host_strides, buf.layout, ranges, access.index,
                         tuple(splits.get(v, 1) for v, _ in ranges))


@lru_cache(maxsize=1 << 14)
def _first_box_of(host_size, host_strides, layout, var_ranges, index, splits) -> tuple:
    """`_first_box` on hashable facts (memoized: every candidate of every reader asks)."""
    ranges = Ranges({Var(v): (0, n - 1) for v, n in var_ranges})
    coords = stick_info(host_size, host_strides, layout, ranges, index).coords
    extent = {v: n // k for (v, n), k in zip(var_ranges, splits)}
    return tuple(coord_span(c, tuple((v, extent[v]) for v in coord_leaves(c)[0]))
                 for c in coords[:-1])


@lru_cache(maxsize=1 << 14)
def index_vars(index: Lin) -> frozenset[str]:
    """The iteration vars an access index uses (memoized: asked per candidate split)."""
    return frozenset(a.name for a in index.free_atoms() if isinstance(a, Var))


def split_estimate(graph: Graph, op: Operation, splits: dict[str, int],
                   producers: Producers | None = None, p: CostParams | None = None,
                   penalties: bool = True) -> SplitCost:
    """The cost model's time for one execution of `op` split as `splits` (`producers`: to
    tell whether a per-tile buffer it reads stays in LX, the other ops split as their plan
    says; without it every read is HBM). `op` is read at its own core ranges: a planner
    pricing a replicated trial passes the op so shaped (`Producers.shaped`).
    `penalties`: charge an op the HBM traffic its split causes in its neighbours (the
    writer's write of an input it breaks off LX, a K-split's readers' reads) — what an op
    chosen alone must weigh; a sum over writers and readers (chain moves) counts those in
    the neighbours' own estimates, so it leaves them out. `p`: the cost model's parameters,
    by default those of `producers` (the planner's: `--set cost.NAME=VALUE`)."""
    if p is None:
        p = producers.params if producers is not None else DEFAULT_PARAMS
    extent = core0_slice(op, splits)
    active = math.prod(splits.values())
    k_split = _k_split(op, splits)
    short = _at_minimum(graph, op, extent, splits)
    offchip, moved, penalty = _offchip(graph, op, splits, extent, k_split, producers, p)
    memory_s = memory_seconds(moved, active, p)
    compute_s = _compute_s(op, extent, p)
    ring = _ring_us(op, k_split, p)
    # the neighbours' added traffic does not overlap this op's compute: it is time added
    time_s = max(compute_s, memory_s) + (card_seconds(penalty, p) if penalties else 0)
    if short:   # an op the size of a symbolic length serves its shortest too (`_at_minimum`)
        extent_short, weight, busy, busy_splits = short
        moved_short = _moved_at(graph, op, offchip, extent_short, busy_splits, p)
        time_s += weight * max(_compute_s(op, extent_short, p),
                               memory_seconds(moved_short, busy, p))
    return SplitCost(time_us=round(time_s * 1e6 + ring + p.op_overhead_us, 6),
                     compute_us=round(compute_s * 1e6, 6), memory_us=round(memory_s * 1e6, 6),
                     hbm_bytes_per_core=round(moved), cores=active)


def _offchip(graph: Graph, op: Operation, splits: dict[str, int], extent: dict[str, int],
             k_split: int, producers: Producers | None, p: CostParams
             ) -> tuple[list[tuple[Access, bool]], float, int]:
    """The accesses `op` split as `splits` makes in HBM ((access, is it a read) each), the
    bytes one core moves for them, and the bytes its split makes its neighbours move (a
    writer's write of an input it breaks off LX, a K-split's readers' reads)."""
    offchip: list[tuple[Access, bool]] = []
    moved = penalty = 0
    for is_input, access in [(True, a) for a in op.reads()] + [(False, op.output)]:
        buf = graph.buffers[access.buffer]
        sticks = access_sticks(graph, op, access, extent)
        candidate = buf.per_tile if producers is None else buf.name in producers.lx_candidates
        in_lx = candidate and sticks * STICK_BYTES <= LX_USABLE_BYTES_PER_CORE
        if not is_input and k_split > 1:
            in_lx = False             # partial sums meet in HBM (its writer pays the write)
            if candidate and producers is not None:   # and its readers read it from there,
                penalty += buf.layout.device_bytes * len(producers.readers.get(buf.name, ()))
        elif in_lx and is_input and producers is not None and producers.partial(access.buffer, op):
            in_lx = False
        elif in_lx and is_input:
            keeps = producers.same_slices(op, access, splits) if producers else False
            if keeps is False:
                in_lx = False
                penalty += buf.layout.device_bytes
        elif in_lx and producers is not None and not producers.readers_keep(op, splits):
            in_lx = False             # a reader takes other slices: the output goes to HBM
        if not in_lx:
            offchip.append((access, is_input))
            share = p.read_share(readers_of_access(op, access, splits)) if is_input else 1
            moved += sticks * STICK_BYTES * share / _staged_trips(op, access, sticks, producers)
    return offchip, moved, penalty


def _moved_at(graph: Graph, op: Operation, offchip: list[tuple[Access, bool]],
              extent: dict[str, int], busy_splits: dict[str, int], p: CostParams) -> float:
    """Bytes one busy core moves for the `offchip` accesses (`_offchip`) with slice extents
    `extent`, the busy slices `busy_splits` sharing its reads."""
    moved = 0.0
    for access, is_input in offchip:
        readers = readers_of_access(op, access, busy_splits) if is_input else 1
        moved += access_sticks(graph, op, access, extent) * STICK_BYTES * \
            (p.read_share(readers) if is_input else 1)
    return moved


def offchip_accesses(graph: Graph, op: Operation, producers: Producers,
                     p: CostParams = DEFAULT_PARAMS) -> list[tuple[Access, bool]]:
    """The accesses `op`, split as `producers`' plan splits it, makes in HBM ((access, is it
    a read) each), as `split_estimate` decides them: what `sized_time_us` prices."""
    splits = producers.plan.splits(op)
    return _offchip(graph, op, splits, core0_slice(op, splits), _k_split(op, splits),
                    producers, p)[0]


def sized_time_us(graph: Graph, op: Operation, offchip: list[tuple[Access, bool]],
                  lengths: dict[str, int], floors: dict[str, int],
                  p: CostParams = DEFAULT_PARAMS) -> float:
    """One execution of an op whose size is a symbolic length (`Operation.lengths`), split
    as its `core_splits`, at `lengths` (symbol -> length) when each busy core of a var of
    symbol s runs max(length / k, `floors[s]`) values (`SymLength.share`; the slices past
    the length idle): what the length_shares pass (`plan/length_shares.py`) compares. `offchip`: its
    `offchip_accesses` (LX residency and penalties are the maximum's, as `split_estimate`
    prices them)."""
    splits = op.core_splits
    extent, busy = core0_slice(op, splits), dict(splits)
    for v, name in op.lengths:
        n, k = lengths[name], splits.get(v, 1)
        extent[v] = n if k <= 1 else max(n // k, floors.get(name, 0))
        busy[v] = -(-n // extent[v])                # the last busy slice may be short
    moved = _moved_at(graph, op, offchip, extent, busy, p)
    time_s = max(_compute_s(op, extent, p), memory_seconds(moved, math.prod(busy.values()), p))
    return time_s * 1e6 + _ring_us(op, _k_split(op, splits), p) + p.op_overhead_us


def _at_minimum(graph: Graph, op: Operation, extent: dict[str, int], splits: dict[str, int]
                ) -> tuple[dict[str, int], float, int, dict[str, int]] | None:
    """For an op whose size is a symbolic length (`Operation.lengths`): one busy core's slice
    at the symbols' minima (`SymLength.share`), the weight of that end, the cores busy there
    and the split counting only busy slices (None for others). Its split is chosen
    once for every length, so `split_estimate` prices it as its time at the maximum plus its
    time at the minimum scaled up to the maximum's length (weight maximum / minimum, times
    the trips a bound loop around it runs at the minimum over those at the maximum: its
    share of the program at each end): a split that is cheap only at one end (rows over
    every core, each re-reading a whole weight at 128 tokens) loses to one that serves both.
    LX residency is the maximum's, which holds at every length. The estimate's `time_us`
    is that sum; its other parts are the maximum's."""
    if not op.lengths:
        return None
    short, weight, busy_splits = dict(extent), 1.0, dict(splits)
    for v, name in op.lengths:
        symbol, k = graph.symbols[name], splits.get(v, 1)
        short[v] = symbol.share(symbol.minimum, k)
        busy_splits[v] = -(-symbol.minimum // short[v])     # the slices past it idle
        weight = max(weight, symbol.maximum / symbol.minimum)
    for loop in op.loops:       # a loop bound by a length runs fewer trips at the minimum
        if loop.bound is not None and graph.symbols[loop.bound.symbol].value_of is None:
            symbol = graph.symbols[loop.bound.symbol]
            weight *= loop.bound.count(symbol.minimum) / loop.bound.count(symbol.maximum)
    return short, weight, math.prod(busy_splits.values()), busy_splits


def time_floor_us(op: Operation, splits: dict[str, int], p: CostParams = DEFAULT_PARAMS
                  ) -> float:
    """A lower bound of `split_estimate(..., splits, ..., p).time_us`, whatever the producers
    and penalties: its compute, ring and per-op overhead (the estimate adds the larger of
    compute and memory, and penalties only add), without the accesses' sticks that make the
    estimate dear; the same terms, from the same functions. Rounding: the estimate rounds to
    1e-6 us; compare with that slack."""
    return (_compute_s(op, core0_slice(op, splits), p) * 1e6
            + _ring_us(op, _k_split(op, splits), p) + p.op_overhead_us)


def _k_split(op: Operation, splits: dict[str, int]) -> int:
    """How many cores share each reduction (the product of the reduced vars' splits)."""
    return math.prod(k for v, k in splits.items() if v in op.reduced)


def _ring_us(op: Operation, k_split: int, p: CostParams) -> float:
    """The ring that combines a K-split's partial sums (`costmodel.ring_us`)."""
    return ring_us(k_split, math.prod(n for v, n in op.core_ranges if v not in op.reduced), p)


def _staged_trips(op: Operation, access: Access, sticks: int,
                  producers: Producers | None) -> int:
    """The loop trips one HBM read of `access` serves: its op's trips (`nest_trips`: those a
    trip span runs, exactly, not the counts' product) for a program
    input or constant that stage_inputs may copy into LX once before the loop (every read of
    it in place: `plan/staging.py read_in_place`; this one not gathered, its core slice within
    LX) — a tiled MLP's weights — else 1. Charging such a read per trip would price a split
    by traffic the program never moves. Optimistic where stage_inputs then does not serve
    this access (disabled, `max_fraction`, no LX room, or another slicing read more often)."""
    trips = nest_trips(op.loops)
    if trips == 1 or producers is None or access.buffer not in producers.stageable or \
            sticks * STICK_BYTES > LX_USABLE_BYTES_PER_CORE or \
            any(isinstance(leaf, Indirect) for leaf in access.index.free_atoms()):
        return 1
    return trips


def estimate_key(graph: Graph, op: Operation, producers: Producers) -> tuple:
    """What `estimate` of `op` depends on besides the split, without buffer names (the layers
    of a decoder stack share it, so work division and chain moves memoize estimates on it;
    so do the ops of the flash candidates `--tiling auto` plans). Per access: the buffer's
    sizes, strides, layout, whether stage_inputs may stage it, the index (a gather's index
    tensor by name); per loop its count, tiled vars and trip span. A buffer that may live in
    LX (an intermediate, or a per-tile buffer) adds what decides whether a split keeps its
    writer's slices (the writer's ranges, reduced vars, split and output access) and, for op's
    output, its readers'."""
    accesses = [a for _, a in op.accesses()]
    bufs = [graph.buffers[a.buffer] for a in accesses]
    lx = []
    for a in accesses:
        if a.buffer not in producers.lx_candidates:
            lx.append(None)
            continue
        writer = producers.writer(a.buffer, op)
        theirs = None if writer is None else producers.plan[writer.name]
        lx.append(() if writer is None else (theirs.core_ranges, writer.reduced,
                                            writer.output.index, theirs.key))
    return (op.op, op.core_ranges, op.reduced,
            tuple((lp.count, lp.tiled, lp.span) for lp in op.loops),
            tuple(graph.buffers[a.buffer].host_size for a in op.index_inputs),
            tuple((b.host_size, b.host_strides, b.layout, b.name in producers.stageable,
                   a.index) for a, b in zip(accesses, bufs)),
            tuple(lx), producers.reader_splits(op)
            if op.output.buffer in producers.lx_candidates else None)


def compute_floor_us(graph: Graph, cores: int, p: CostParams = DEFAULT_PARAMS,
                     fused: bool = False) -> float:
    """A lower bound of `core_splits.planned_time_us` under every work division of `graph`
    on at most `cores` cores: each op's compute spread evenly over all of them at the PT
    array's full efficiency, times its executions. An op's estimate is at least its compute
    (memory overlaps it, rings and penalties only add), a core's slice holds at least
    1/`cores` of the points, and a matmul's efficiency is at most 1; so a candidate whose
    floor is over a plan already priced need not be planned to know it loses. `fused`: the
    bound of `plan/fusion.fused_planned_time_us` instead, where the PT array's and the SFP's
    work may overlap (`costmodel.fused_floor_us`)."""
    by_unit = {"pt": 0.0, "sfp": 0.0}
    for op in graph.ops:
        points = math.prod(n for _, n in op.ranges) / cores
        by_unit["pt" if op.op == "batchmatmul" else "sfp"] += \
            compute_seconds(cost_class(op.op), points, 1 << 30, p) * nest_trips(op.loops) * 1e6
    return fused_floor_us(by_unit, p) if fused else sum(by_unit.values())


def _compute_s(op: Operation, extent: dict[str, int], p: CostParams) -> float:
    """One core's compute time for a slice of extents `extent` (costmodel's formula)."""
    klass = cost_class(op.op)
    rows = math.prod(extent[v] for v in _m_vars(op)) if klass == MATMUL else 1
    return compute_seconds(klass, math.prod(extent.values()), rows, p)


def _m_vars(op: Operation) -> set[str]:
    """Matmul M (`costmodel.matmul_m_vars`) of `op`'s first two operands."""
    x, y = op.inputs[:2]
    return matmul_m_vars(set(index_vars(x.index)), set(index_vars(y.index)), op.reduced)
