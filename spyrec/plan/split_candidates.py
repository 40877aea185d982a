"""The core splits an op may take: every valid one, the greedy one, and those of a replicated op.

Split candidates are planning knowledge several steps share: work_division chooses among them
(`plan/core_splits.py`), chain moves re-choose among them (`plan/chain_moves.py`) and
stage_inputs looks among them for the split of a copy that gives each core the slice its
readers take (`plan/staging.py`). They live here, below all three, so that none of them
imports another for this (they were work_division's; stage_inputs imported that pass).

Rules: per var a divisor of its range (of its sticks for a stick var, so a core starts at a
stick boundary of every tensor; 1 for a stick var whose range is not whole sticks, and for a
reduced var unless K-splits are allowed and the op's partials combine outside loops,
`ir.ops.PARTIAL_SUMS`); a replicated op's copies (ir/lx.py) split over all of them; the product
at most the cores; each core within the 256 MiB span limit (`ir/span.py`: a split that
leaves a core addressing more of an argument is no candidate; an embedding gather then splits
its table's stick var, a decode LM head its K or N).

Greedy: output vars outermost first, vars that are no arg's stick dim before stick vars (a
core then gets whole rows of sticks, as the reference's work division does: the published
512x512 transposed add splits its 512 columns over 32 cores, not 8 stick columns x 4), each
taking the largest divisor of its range that the remaining cores allow.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Iterator

from spyrec.device import MAX_SPAN_BYTES
from spyrec.errors import UnsupportedProgram
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import REPLICA_VAR
from spyrec.ir.lx import replica_fields, replica_ranges
from spyrec.ir.ops import PARTIAL_SUMS
from spyrec.ir.span import fits, op_span, outermost
from spyrec.ir.symbols import SymLength
from spyrec.ir.walks import stick_vars  # noqa: F401  (planning modules import it from here)


def greedy_split(graph: Graph, op: Operation, sticks: dict[str, int], cores: int
                 ) -> dict[str, int]:
    """The fixed-order split (module docstring): the tie-breaker and the report's baseline.
    One that leaves a core over the span limit gives way to the fitting candidate that
    splits the earliest vars of that order most (a K-split only when nothing else fits: the
    limit is the hardware's); UnsupportedProgram when no valid split fits."""
    ranges = divisible_ranges(graph, op, sticks)
    greedy = _greedy(op, ranges, sticks, cores)
    if fits(graph, op, greedy):
        return greedy
    fitting = [s for s in _valid(op, ranges, sticks, cores, k_split=True)
               if fits(graph, op, s)]
    if not fitting:
        raise UnsupportedProgram(span_refusal(graph, op, cores))
    order = _greedy_order(ranges, sticks)
    return max(fitting, key=lambda s: (not any(s[v] > 1 for v in op.reduced),
                                       tuple(s[v] for v, _ in order)))


def candidates(graph: Graph, op: Operation, sticks: dict[str, int], cores: int,
               k_split: bool = False) -> list[dict[str, int]]:
    """Every valid split (module docstring) that keeps each core within the span limit,
    product <= cores; a reduced var is split only with `k_split`. A split never widens a
    core's span, so when the whole op fits on one core every split does (the common case,
    answered without asking per split)."""
    valid = _valid(op, divisible_ranges(graph, op, sticks), sticks, cores, k_split)
    if fits(graph, op, {}):
        return valid
    return [s for s in valid if fits(graph, op, s)]


def span_refusal(graph: Graph, op: Operation, cores: int) -> str | None:
    """Why no valid split of `op` (a K-split included) keeps each core within the span
    limit — the op, its source line, the tensor, the smallest span a split reaches, the limit
    and what to do — or None when one does."""
    if fits(graph, op, {}):
        return None
    sticks = stick_vars(graph, op)
    valid = _valid(op, divisible_ranges(graph, op, sticks), sticks, cores, k_split=True)
    if any(fits(graph, op, s) for s in valid):
        return None
    best = min(valid, key=lambda s: op_span(graph, op, s)[0])
    span, access = op_span(graph, op, best)
    _, dim, extent = outermost(graph, op, access, best)
    size = list(graph.buffers[access.buffer].layout.device_size)
    where = f"op {op.name!r}" + (f" ({op.source})" if op.source else "")
    return (f"{where}: no core split keeps each core within the {MAX_SPAN_BYTES >> 20} MiB "
            f"per-core span limit: at best (cores {split_text(best)}) a core addresses "
            f"{span / 2**20:.1f} MiB of {access.buffer!r}, {extent} steps of device dim {dim} "
            f"of {size} and everything inside them; tile the op with --tiling FILE.yaml "
            f"(examples in configs/tiling/) so that each tile spans less")


def divisible_ranges(graph: Graph, op: Operation, sticks: dict[str, int] | None = None
                     ) -> tuple[tuple[str, int], ...]:
    """The op's core ranges as far as a split must divide them: a var running a symbolic
    length (`Operation.lengths`) counts its granularity, which divides every admissible
    length, so each core gets length / k values at each (or its minimum share where that
    is more, the cores past the length idle), and only as many ways as `SymLength.splits`
    allows where the symbol's minimum share binds (each busy core whole sticks of a stick
    var and a share that fits its slice at the maximum; a reduced var no idle cores): the
    divisors of the largest such k (each of them is allowed too: a floor binding at k'
    cores binds at k, a multiple; with a granularity not a power of two this may leave
    out some allowed k that does not divide the largest, a conservative choice)."""
    if not op.lengths:
        return op.core_ranges
    unit = {}
    for v, name in op.lengths:
        e = (sticks or {}).get(v, 1)
        unit[v] = most_ways(graph.symbols[name], e, v in op.reduced) * e
    return tuple((v, math.gcd(n, unit[v]) if v in unit else n) for v, n in op.core_ranges)


@lru_cache(maxsize=1 << 10)
def most_ways(symbol: SymLength, unit: int = 1, reduced: bool = False) -> int:
    """The most cores a var of `symbol`'s length may be split over (`SymLength.splits`)."""
    return max(k for k in range(1, symbol.granularity + 1)
               if symbol.granularity % k == 0 and symbol.splits(k, unit, reduced))


def _greedy(op: Operation, ranges: tuple[tuple[str, int], ...], sticks: dict[str, int],
            cores: int) -> dict[str, int]:
    """The fixed-order split, whatever its span (`ranges`: `divisible_ranges`)."""
    splits = {v: 1 for v, _ in ranges}
    copies = op.replicas
    splits.update({REPLICA_VAR: copies} if copies > 1 else {})
    left = cores // copies
    for v, n in _greedy_order(ranges, sticks):
        if v in op.reduced or v == REPLICA_VAR or left == 1:
            continue
        e = sticks.get(v, 1)
        if n % e:
            continue
        d = _largest_divisor_at_most(n // e, left)
        splits[v] = d
        left //= d
    return splits


def _greedy_order(ranges: tuple[tuple[str, int], ...], sticks: dict[str, int]
                  ) -> list[tuple[str, int]]:
    """Vars that are no arg's stick dim first, then stick vars, each in core order."""
    return [(v, n) for v, n in ranges if v not in sticks] + \
        [(v, n) for v, n in ranges if v in sticks]


def _valid(op: Operation, ranges: tuple[tuple[str, int], ...], sticks: dict[str, int],
           cores: int, k_split: bool = False) -> list[dict[str, int]]:
    """Every split the rules allow (module docstring), whatever its span (`ranges`:
    `divisible_ranges`)."""
    options = []
    partial = k_split and op.op in PARTIAL_SUMS and not op.loops
    for v, n in ranges:
        e = sticks.get(v, 1)
        if v == REPLICA_VAR:
            options.append((v, [n]))          # copies are split over all of them
        elif v in op.reduced and not partial or n % e:
            options.append((v, [1]))
        else:
            options.append((v, [d for d in range(1, min(n // e, cores) + 1)
                                if (n // e) % d == 0]))
    out: list[dict[str, int]] = [{}]
    for v, ks in options:
        out = [{**s, v: k} for s in out for k in ks if _product(s) * k <= cores]
    return out


def replica_candidates(graph: Graph, op: Operation, copies: int, cores: int
                       ) -> Iterator[tuple[tuple[tuple[str, int], ...], dict[str, int]]]:
    """(core ranges, split) for every candidate of `op` run as `copies` replicas (1: once),
    its copies placed slowest, then fastest, in core order (which cores hold which copy is
    what a co-writer or reader must match). `op` is left as it is: a caller taking a split
    takes its core ranges with it (a `plan/split_plan.py Split` holds both)."""
    for first in (False, True) if copies > 1 else (False,):
        ranges = replica_ranges(op, copies, first)
        shaped = op if ranges == op.core_ranges else replace(op, **replica_fields(ranges))
        for split in candidates(graph, shaped, stick_vars(graph, shaped), cores):
            yield ranges, split


def split_text(splits: dict[str, int]) -> str:
    """`[c0:4, c1:8]`: a split as report rows and messages show it."""
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
