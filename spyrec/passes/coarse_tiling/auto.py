"""`--tiling auto`: choose tiling groups and loop counts, and write the choice as a tiling YAML.

Why it is built this way: the tiling config (DESIGN §6) is the one decision record, so the
automatic mode only *writes configs*. Every candidate is a config dict that goes through the
same `resolve` (config.py) and `tile_graph` (transform.py) as a user's file; the winner is
returned as a dict and as YAML text the compiler writes to `OUT/tiling.yaml`, so passing that
file back with `--tiling` rebuilds exactly the same program. There is no second tiling path.

The algorithm (reference/G-tiling-and-lx.md §4.4, simplified):

1. **Dims**: every dim of size > 1 of every program input is a candidate loop dim, named
   `<input>_d<k>`; names propagate forward through the graph (dimnames.py).
2. **Groups**: maximal runs of consecutive ops whose FX nodes all carry the dim (on one var
   each, no gathers); each run is offered whole and, because today's work division re-reads
   a matmul's weight on every trip, also as its runs between matmuls.
3. **Counts**: divisors (> 1) of the dim's size, smallest first (whole sticks and other rules are
   `resolve`'s and `tile_graph`'s to check: a refused count is skipped, so is one whose tiles
   are not exactly the untiled access on every trip, a wrapped view's); the search along a
   run stops at the first count whose per-tile buffers all fit LX (a larger count can only
   re-read loop-invariant operands more often).
4. **Price**: the candidate is tiled on a copy of the run (a sub-graph holding only its ops,
   its boundary buffers as inputs and outputs), then planned as the pipeline's
   work_division, stage_inputs and scratchpad_planning passes plan it (the planning
   functions they drive: `plan/core_splits.py divide_work`, `plan/staging.py stage_inputs`,
   `plan/lx_placement.py place_lx`), and `hbm_bytes` (`plan/hbm_bytes.py`: the compiler's
   one count, the split estimate's too) counts the whole sticks each core's slice of every
   device-memory argument touches, times the executions. The run untiled is priced the same
   way: a tiling must move fewer bytes than not tiling.
5. **Choose**: per run the cheapest count (ties: the smaller count); then runs by saved bytes,
   greedily, skipping runs that overlap a chosen one or that `resolve` refuses together with
   the chosen ones. Identical runs (the layers of a decoder stack) are priced once. Last, the
   whole program is priced tiled and untiled, and the groups saving least are dropped until
   tiling moves fewer bytes (a run priced alone does not see its edges).

Limits (honest): only program inputs seed dims (not parameters), one loop level per group,
and the evaluation uses the default work_division (32 cores) and the LX budget given.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Callable

import yaml

from spyrec.device import MAX_LOOP_TRIPS
from spyrec.errors import ConfigError
from spyrec.ir import Graph, Operation
from spyrec.plan.tiling.config import resolve
from spyrec.plan.tiling.dimnames import DimNames, propagate
from spyrec.plan.tiling.transform import tile_graph
from spyrec.plan.hbm_bytes import hbm_bytes
from spyrec.plan.lx_placement import LxPlacement, apply_lx
from spyrec.plan.tiling.subgraphs import lacks_room, subgraph
from spyrec.plan.trials import Planning, place_trial, plan_trial

MAX_COUNTS_TRIED = 8       # counts priced per run before giving up on fitting LX
WHERE = "tiling.yaml (auto)"


@dataclass(frozen=True)
class Price:
    """What one candidate (or the untiled run) costs."""

    hbm_bytes: int
    lx_peak_bytes: int = 0      # per core
    per_tile: int = 0           # per-tile buffers the tiling made
    in_lx: int = 0              # of which scratchpad_planning placed in LX
    spilled: int = 0            # of which did not fit LX (capacity, not core mismatch)


@dataclass(frozen=True)
class Choice:
    """One chosen group: its dim, nodes and count, and its price tiled and untiled."""

    dim: str
    size: int
    nodes: tuple[str, ...]
    count: int
    tiled: Price
    untiled: Price

    @property
    def saved_bytes(self) -> int:
        return self.untiled.hbm_bytes - self.tiled.hbm_bytes


@dataclass
class AutoResult:
    config: dict | None            # the tiling document, or None when nothing beats untiled
    yaml_text: str
    groups: list[Choice] = field(default_factory=list)
    candidates: int = 0            # candidate configs priced
    runs: int = 0                  # distinct runs considered

    def to_json(self) -> dict:
        return {"groups": [{"dim": c.dim, "count": c.count, "nodes": list(c.nodes),
                            "hbm_bytes": c.tiled.hbm_bytes,
                            "untiled_hbm_bytes": c.untiled.hbm_bytes,
                            "lx_peak_bytes_per_core": c.tiled.lx_peak_bytes}
                           for c in self.groups],
                "candidates_priced": self.candidates, "runs": self.runs}


def choose(graph: Graph, planning: Planning = Planning(), source: str = "") -> AutoResult:
    """The tiling config `--tiling auto` applies to `graph` (after matmul_padding), each
    candidate planned as the pipeline plans (`planning`: its options, its LX budget)."""
    seeds = _seeds(graph)
    memo: dict[tuple, tuple[Choice | None, int]] = {}
    offers: list[tuple[str, int, Choice]] = []
    priced = 0
    for buf_name, dim, name, size in seeds:
        names = _names(graph, buf_name, dim, name, size)
        if names is None:
            continue
        for nodes in _runs(graph, names, name):
            key = (name, _signature(graph, nodes, names, name))
            if key not in memo:
                memo[key] = _best(graph, names, name, size, nodes, planning)
                priced += memo[key][1]
            best = memo[key][0]
            if best is not None:
                offers.append((buf_name, dim, replace(best, nodes=nodes)))
    chosen, dims = _select(graph, offers)
    chosen = _whole_program_check(graph, dims, chosen, planning)
    config = _config(graph, dims, chosen) if chosen else None
    result = AutoResult(config, "", chosen, priced, len(memo))
    result.yaml_text = _yaml(result, graph, dims, planning.lx_budget, source)
    return result


# --- candidates ----------------------------------------------------------------------------


def _seeds(graph: Graph) -> list[tuple[str, int, str, int]]:
    """(input, dim, dim name, size) for every dim of size > 1 of every program input."""
    out = []
    for inp in graph.inputs:
        base = re.sub(r"[^A-Za-z0-9_]", "_", inp)
        base = base if base[:1].isalpha() else f"t{base}"
        for d, size in enumerate(graph.buffers[inp].host_size):
            if size > 1:
                out.append((inp, d, f"{base}_d{d}", size))
    return out


def _names(graph: Graph, buf: str, dim: int, name: str, size: int) -> DimNames | None:
    rank = len(graph.buffers[buf].host_size)
    try:
        return propagate(graph, {buf: tuple(name if d == dim else None for d in range(rank))},
                         {name: size}, WHERE)
    except ConfigError:
        return None


def _carries(op: Operation, names: DimNames, name: str) -> int:
    """How many of `op`'s vars carry `name`."""
    return sum(1 for n in names.op_vars[op.name].values() if n == name)


def _runs(graph: Graph, names: DimNames, name: str) -> list[tuple[str, ...]]:
    """Node tuples: maximal runs of consecutive ops whose nodes carry `name` once per op
    (some op of the node carries it, none twice, none gathers), and their pieces between
    matmuls."""
    by_node: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        if op.node:
            by_node.setdefault(op.node, []).append(i)
    good = {node for node, idx in by_node.items()
            if idx == list(range(idx[0], idx[-1] + 1))
            and any(_carries(graph.ops[i], names, name) == 1 for i in idx)
            and all(_carries(graph.ops[i], names, name) <= 1 and not _gathers(graph.ops[i])
                    for i in idx)}
    runs: list[list[str]] = []
    prev = None
    for op in graph.ops:
        node = op.node if op.node in good else None
        if node is None:
            prev = None
            continue
        if prev is None or _block(op.scope) != _block(graph.ops[by_node[prev][0]].scope):
            runs.append([])
        if node != prev:
            runs[-1].append(node)
        prev = node
    out: list[tuple[str, ...]] = []
    for run in runs:
        out.append(tuple(run))
        piece: list[str] = []
        for node in run + [None]:
            if node is None or _is_matmul(graph, by_node[node]):
                if piece and len(piece) < len(run):
                    out.append(tuple(piece))
                piece = []
            else:
                piece.append(node)
    return list(dict.fromkeys(out))


def _block(scope: str) -> str:
    """The repeated block an op belongs to: its module path up to the first index
    (`layers.3.mlp.up` -> `layers.3`), or '' outside any. Runs are cut between blocks, so
    the layers of a stack are separate groups, priced once (they have one signature)."""
    parts = scope.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i + 1])
    return ""


def _gathers(op: Operation) -> bool:
    return bool(op.index_inputs) or bool(op.gathered())


def _is_matmul(graph: Graph, idx: list[int]) -> bool:
    return any(graph.ops[i].op == "batchmatmul" for i in idx)


def _signature(graph: Graph, nodes: tuple[str, ...], names: DimNames, name: str) -> tuple:
    """The run's structure with buffer names replaced by first-seen positions: equal for
    the repeated layers of a stack, so each distinct run is priced once."""
    chosen = set(nodes)
    ops = [op for op in graph.ops if op.node in chosen]
    sub = subgraph(graph, chosen)
    local: dict[str, int] = {}
    sig = []
    for op in ops:
        accesses = []
        for role, a in op.accesses():
            buf = graph.buffers[a.buffer]
            num = local.setdefault(a.buffer, len(local))
            kind = ("in" if a.buffer in sub.inputs else "out" if a.buffer in sub.outputs
                    else buf.role)
            accesses.append((role, num, buf.host_size, buf.host_dtype, kind,
                             buf.layout, str(a.index), names.buffers[a.buffer]))
        sig.append((op.op, op.ranges, op.reduced, str(op.constants), tuple(accesses),
                    tuple(sorted(names.op_vars[op.name].items()))))
    return tuple(sig)


# --- pricing -------------------------------------------------------------------------------


def _best(graph: Graph, names: DimNames, name: str, size: int, nodes: tuple[str, ...],
          planning: Planning) -> tuple[Choice | None, int]:
    """The cheapest count for the run (None if no count beats the run untiled), and how many
    candidates were priced."""
    base = _price(graph, names, name, nodes, None, planning)
    best: Choice | None = None
    tried = 0
    for count in _divisors(size):
        if tried >= MAX_COUNTS_TRIED:
            break
        price = _price(graph, names, name, nodes, count, planning)
        if price is None:
            continue
        tried += 1
        if price.hbm_bytes < base.hbm_bytes and \
                (best is None or price.hbm_bytes < best.tiled.hbm_bytes):
            best = Choice(name, size, nodes, count, price, base)
        if not price.spilled:
            break
    return best, tried + 1


def _divisors(n: int) -> list[int]:
    """Loop counts to try: a count of 1 is not tiling (one trip, the same working set) and
    only keeps an op out of what the untiled program may do (a K-split, a staged input)."""
    return [k for k in range(2, min(n, MAX_LOOP_TRIPS) + 1) if n % k == 0]


def _price(graph: Graph, names: DimNames, name: str, nodes: tuple[str, ...],
           count: int | None, planning: Planning) -> Price | None:
    """Tile the run (or not, `count` None) on a sub-graph, plan it (`_planned`) and count its
    device-memory bytes; None when `resolve` refuses it."""
    def config(sub: Graph) -> dict:          # the run's boundary inputs carry the dim
        dims = {b: [name if n == name else "_" for n in names.buffers[b]]
                for b in sub.inputs if name in names.buffers[b]}
        return {"dims": dims, "groups": [{"ops": list(nodes), "loops": [{name: count}]}]}
    planned = _planned(graph, set(nodes), None if count is None else config, planning)
    if planned is None:
        return None
    sub, placement = planned
    rows = list(placement.rows.values())
    spilled = sum(1 for r in rows if not r["placed"] and lacks_room(r, planning.lx_budget))
    return Price(hbm_bytes(sub, planning.params), placement.peak, len(rows),
                 sum(1 for r in rows if r["placed"]), spilled)


def _planned(graph: Graph, nodes: set[str], config: Callable[[Graph], dict] | None,
             planning: Planning) -> tuple[Graph, LxPlacement] | None:
    """The ops of `nodes` on a sub-graph, tiled by `config(sub)` (None: untiled), planned as
    the pipeline's passes plan them, with their configured options (`plan/trials.py`): work
    division, staging, LX placement. None when `resolve` refuses the config."""
    sub = subgraph(graph, nodes)
    if config is not None:
        try:
            tile_graph(sub, resolve(sub, config(sub), WHERE))
        except ConfigError:
            return None
    plan_trial(sub, planning)
    placement = place_trial(sub, planning)
    apply_lx(sub, placement)
    return sub, placement


# --- choosing and writing ------------------------------------------------------------------


def _select(graph: Graph, offers: list[tuple[str, int, Choice]]) -> tuple[list[Choice], dict]:
    """Runs by saved bytes, greedily: no two overlap, and `resolve` accepts them together."""
    chosen: list[Choice] = []
    dims: dict[str, dict[int, str]] = {}    # input -> {dim: name}
    ranked = sorted(offers, key=lambda o: (-o[2].saved_bytes, o[2].count, o[2].nodes))
    for check_each in (False, True):   # all at once first; one by one if resolve refuses
        chosen, dims, taken = [], {}, set()
        for buf_name, d, offer in ranked:
            if taken & set(offer.nodes):
                continue
            trial_dims = {k: dict(v) for k, v in dims.items()}
            if trial_dims.get(buf_name, {}).get(d, offer.dim) != offer.dim:
                continue
            trial_dims.setdefault(buf_name, {})[d] = offer.dim
            trial = chosen + [offer]
            if check_each and not _resolves(graph, trial_dims, trial):
                continue
            chosen, dims = trial, trial_dims
            taken |= set(offer.nodes)
        if check_each or not chosen or _resolves(graph, dims, chosen):
            break
    order = {op.node: i for i, op in reversed(list(enumerate(graph.ops)))}
    chosen.sort(key=lambda c: order[c.nodes[0]])
    return chosen, dims


def _whole_program_check(graph: Graph, dims: dict, chosen: list[Choice],
                         planning: Planning) -> list[Choice]:
    """Drop the groups that save least until the whole program, tiled, moves fewer bytes
    than untiled. A run is priced alone, so what tiling does at its edges is unseen there: an
    intermediate that fed the run from LX goes to device memory once the run reads it tile by
    tile, and the untiled program may split a reduction (a K-split) a loop does not allow."""
    untiled = _whole_price(graph, None, planning)
    chosen = sorted(chosen, key=lambda c: -c.saved_bytes)
    while chosen:
        config = _config(graph, {b: {d: n for d, n in named.items()
                                     if any(c.dim == n for c in chosen)}
                                 for b, named in dims.items()}, chosen)
        tiled = _whole_price(graph, config, planning)
        if tiled is not None and tiled < untiled:
            break
        chosen = chosen[:-1]
    return chosen


def _whole_price(graph: Graph, config: dict | None, planning: Planning) -> int | None:
    """Device-memory bytes of the whole program tiled by `config` (None: untiled); None when
    `resolve` refuses the config."""
    planned = _planned(graph, {op.node for op in graph.ops},
                       None if config is None else lambda sub: config, planning)
    return None if planned is None else hbm_bytes(planned[0], planning.params)


def _resolves(graph: Graph, dims: dict, chosen: list[Choice]) -> bool:
    try:
        resolve(graph, _config(graph, dims, chosen), WHERE)
    except ConfigError:
        return False
    return True


def _config(graph: Graph, dims: dict[str, dict[int, str]], chosen: list[Choice]) -> dict:
    return {"dims": {b: [named.get(d, "_") for d in range(len(graph.buffers[b].host_size))]
                     for b, named in dims.items()},
            "groups": [{"ops": list(c.nodes), "loops": [{c.dim: c.count}]} for c in chosen]}


def _flow(value) -> str:
    """One-line YAML for a list or mapping (a plain scalar would get a `...` end marker)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name) else json.dumps(name)


def _yaml(result: AutoResult, graph: Graph, dims: dict, budget: int, source: str) -> str:
    """The chosen config in DESIGN §6 form, with a comment per group (working set, bytes)."""
    of = f" for {source}" if source else ""
    lines = [f"# Tiling chosen by `spyrec compile --tiling auto`{of}.",
             "# Check it in, edit it, and pass it back with --tiling FILE: the same file gives",
             "# the same program. Bytes are estimated device-memory (HBM) traffic, whole",
             "# sticks per core (spyrec/passes/coarse_tiling/auto.py); the working set is the",
             f"# LX bytes per core of the group's per-tile buffers (budget {budget:,}).",
             f"# Priced {result.candidates} candidate configs over {result.runs} distinct "
             f"groups of ops."]
    if result.config is None:
        lines += ["#", "# No tiling moves fewer bytes than the untiled program, so nothing is",
                  "# tiled: this file (no groups) gives the untiled program.",
                  "dims: {}", "groups: []"]
        return "\n".join(lines) + "\n"
    saved = sum(c.saved_bytes for c in result.groups)
    lines += [f"# In total the groups below save {saved:,} bytes of device-memory traffic.",
              "dims:"]
    lines += [f"  {_key(name)}: {_flow(names)}" for name, names in result.config["dims"].items()]
    lines.append("groups:")
    for i, (c, group) in enumerate(zip(result.groups, result.config["groups"]), start=1):
        fit = (f"{c.tiled.in_lx} of {c.tiled.per_tile} per-tile buffers in LX"
               + (f", {c.tiled.spilled} too large for LX" if c.tiled.spilled else ""))
        lines += [f"  # group {i}: {len(c.nodes)} nodes, {c.dim} (size {c.size}) in {c.count} "
                  f"trips of {c.size // c.count}; working set {c.tiled.lx_peak_bytes:,} "
                  f"bytes/core ({fit});",
                  f"  # estimated {c.tiled.hbm_bytes:,} bytes moved, untiled "
                  f"{c.untiled.hbm_bytes:,}",
                  f"  - ops: {_flow(group['ops'])}",
                  f"    loops: {_flow(group['loops'])}"]
    return "\n".join(lines) + "\n"


__all__ = ["AutoResult", "Choice", "Price", "choose", "subgraph"]
