"""Which attention sites become flash loops, and with which tiles (the rewrite is flash.py).

A site is considered when its materialized scores cannot sit in one core's LX (smaller ones
are left to work division and LX placement, which keep them on chip). Its tiles (heads ×
query rows × key columns) are then chosen by the cost model: each candidate is rewritten on
a copy of the site alone, planned as the pipeline plans it (work division, staging, LX
placement in the budget), and priced by the split estimate times the executions of each op;
a candidate whose per-tile buffers do not all fit LX is dropped (most before they are
planned, by a floor of the LX they need). Among the candidates within `NEAR` of the fastest
the one moving the fewest HBM bytes wins; it replaces the site when it is cheaper than the
site materialized and planned the same way (mode `always`: whenever one fits). Identical
sites (the layers of a decoder) are priced once. A choice needing over half of LX per core
is then checked in the program (`_fits_in_program`: the values live around a site share LX)
and chosen again within half when the program would leave its per-tile buffers in HBM.

Tiles may also be given (`query_tile`, `key_tile`, `head_tile`: pass options, or
`attention:` in the tiling YAML); they must divide the sizes, fit LX and pass the rewrite's
proof, else the compile is refused naming the tile and the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

from spyrec.device import CORES, MAX_LOOP_TRIPS, STICK_BYTES
from spyrec.errors import ConfigError, UnsupportedProgram
from spyrec.ir import Graph
from spyrec.plan.tiling.spec import AttentionSpec
from spyrec.passes.flash_attention.rewrite import rewrite
from spyrec.passes.flash_attention.sites import (
    AttentionSite, FlashTiles, find_sites, unshare_masks,
)
from spyrec.passes.flash_attention.masks import runtime_key_limit
from spyrec.plan.tiling.symbolic import (
    bind_attention_loops, keys_symbol, site_lengths, symbol_names,
)
from spyrec.plan.hbm_bytes import hbm_bytes
from spyrec.plan.lx_placement import apply_lx
from spyrec.plan.split_estimate import compute_floor_us
from spyrec.plan.tiling.subgraphs import lacks_room, subgraph_of
from spyrec.plan.trials import Planning, place_trial, plan_trial
from spyrec.plan.fusion import fused_planned_time_us
from spyrec.plan.whole_plan import planned_time_us

KEY_TILES = (128, 256, 512)       # key columns per tile: whole fp16 sticks
SYMBOLIC_KEY_TILES = (32, 64)     # also tried under a symbolic length's granularity
MAX_QUERY_TILES = 2               # query tile sizes priced per head tile (the largest that may fit)
NEAR = 0.02                       # estimates this close are a tie: the least traffic wins
# `auto` keeps a site whose scores exceed one core's LX materialized only if its chain fits in
# this fraction of LX per core (1/2): it is priced alone, with LX empty, while in the program
# the values live around it share LX. Measured: HF Llama (tiny width) at 1,600 tokens, scores
# 1.28 MB per core priced 79 us alone (flash 81 us), then found LX holding 0.4 MB of other
# values, went to HBM and cost 1,500 us per layer; flash is planned with per-tile buffers.
MATERIALIZED_LX_SHARE = 2
# A flash candidate is priced alone too, with LX empty. When the one chosen needs more than
# this fraction of LX per core (1/2) for its per-tile buffers, the program is planned with it
# (every site of its signature rewritten) and, should LX placement leave one of its per-tile
# buffers in HBM (every trip would then go to HBM), the site is chosen again with that
# fraction of the budget. Measured: HF Llama (tiny width) at 1,856 tokens took a 1,856-key
# tile needing 861 KB of LX per core; in the program 774 KB of other values were live beside
# the second layer's, its scores tile went to HBM and the program cost 3,589 us (455 us now).
LX_SHARE = 2
# a query row takes over 2 KB of LX per core at head dim 128 (`_lx_floor`): query tiles that
# give a core more rows than this are not priced
MAX_ROWS_PER_CORE = 1024


@dataclass(frozen=True)
class Priced:
    """One candidate: its tiles (None: materialized), estimated µs, the next cheapest
    candidates (taken in order when the proof of a cheaper one fails), and its HBM bytes."""

    tiles: FlashTiles | None
    time_us: float
    runners_up: tuple["Priced", ...] = ()
    hbm_bytes: int = 0


# a candidate not planned: its compute alone is slower than one already priced
OUTPRICED = Priced(None, math.inf)


def tile_attention(graph: Graph, mode: str, given: list[AttentionSpec] = (),
                   planning: Planning = Planning(), sized: bool = False) -> list[dict]:
    """Rewrite every site `mode` ("auto" or "always") selects, with the tiles of the first
    `given` entry matching its node (a tile it leaves 0 is chosen); one report row per
    site. Candidates are planned as the pipeline plans (`planning`: its configured options,
    its LX budget, the cost model's parameters). `sized`: a symbolic number of queries may
    be one tile of every query, whose ops the symbolic pass then sizes by the length
    (`query_tile_allowed`)."""
    rows, memo = [], {}
    budget = planning.lx_budget
    sites = find_sites(graph)
    if unshare_masks(graph, sites):
        sites = find_sites(graph)
    _check_given_name_sites(graph, sites, given)
    named = symbol_names(graph) if graph.symbols and sites else None
    lengths = [site_lengths(graph, site, named) for site in sites] if named else []
    for n, site in enumerate(sites):
        spec = _given_for(graph, site, given)
        symbolic = lengths[n] if lengths else (None, None)
        site_mode = mode
        if any(symbolic):
            site = replace(site, **{
                f"{what}_granule": graph.symbols[name].granularity
                for what, name in zip(("query", "key"), symbolic) if name})
            if symbolic[0]:
                site = replace(site, query_shortest=graph.symbols[symbolic[0]].minimum,
                               query_whole=sized)
            site_mode = "always"   # a symbolic length is tiled, or nothing runs at every length
        elif (filled := runtime_key_limit(graph, site)) is not None:
            symbolic = (None, keys_symbol(graph, site, filled))
            site_mode = "always"   # the key loop then runs only over the filled cache
        if spec is not None and spec.query_tile and spec.key_tile:
            choice = Priced(given_tiles(site, spec.query_tile, spec.key_tile, spec.head_tile),
                            math.nan)
            check_fits(graph, site, choice.tiles, budget, planning)
        else:
            if site_mode == "auto" and spec is None and _scores_bytes(graph, site) <= budget:
                continue
            fixed = (spec.query_tile, spec.key_tile, spec.head_tile) if spec is not None \
                else (0, 0, 0)
            if any(fixed):
                given_tiles(site, *fixed)            # a given tile must divide its size
            key = (_signature(graph, site), fixed, site.query_granule, site.key_granule)
            if key not in memo:
                site_mode = "always" if spec else site_mode
                memo[key] = _choose(graph, site, site_mode, budget, fixed, planning)
                if not _fits_in_program(graph, memo[key], site, sites[n + 1:], budget,
                                        planning):
                    memo[key] = _choose(graph, site, site_mode, budget // LX_SHARE, fixed,
                                        planning)
            choice = memo[key]
            if choice.tiles is None:
                continue
        row, choice = _rewrite_first_proven(graph, site, choice, f"fa{n}")
        if row is not None and any(symbolic):
            bind_attention_loops(graph, f"fa{n}", symbolic, choice.tiles)
        if row is not None:
            rows.append(row | {"estimated_us": None if math.isnan(choice.time_us)
                               else round(choice.time_us, 3)})
    return rows


def _rewrite_first_proven(graph: Graph, site: AttentionSite, choice: Priced, key: str):
    """Rewrite with the cheapest candidate whose tiles the proof accepts (candidates are
    priced unproven: the proof is the expensive part); given tiles are refused outright."""
    for option in (choice, *choice.runners_up):
        try:
            return rewrite(graph, site, option.tiles, key), option
        except ConfigError:
            if math.isnan(choice.time_us):
                raise
    return None, choice


def _node_of(graph: Graph, site: AttentionSite) -> str:
    return next(o.node for o in graph.ops if o.name == site.out) or ""


def _given_for(graph: Graph, site: AttentionSite, given) -> AttentionSpec | None:
    node = _node_of(graph, site)
    return next((g for g in given if g.ops is None or
                 any(fnmatchcase(node, glob) for glob in g.ops)), None)


def _check_given_name_sites(graph: Graph, sites: list[AttentionSite], given) -> None:
    """A tiling-file entry whose `ops` globs name no attention of the program is a typo (or
    a file for another model): refused, with the attentions there are."""
    nodes = [_node_of(graph, site) for site in sites]
    for g in given:
        if g.ops is not None and not any(fnmatchcase(n, glob) for n in nodes
                                         for glob in g.ops):
            there = ", ".join(sorted(set(nodes))) or "none"
            raise ConfigError(f"{g.where}: ops {list(g.ops)} match no attention of the "
                              f"program (its attentions' nodes: {there}); fix the globs or "
                              f"drop the entry")


def given_tiles(site: AttentionSite, query_tile: int, key_tile: int,
                head_tile: int = 0) -> FlashTiles:
    """The tiles a user gave (0: the whole dim), checked against the site's sizes."""
    tiles = FlashTiles(query_tile or site.queries, key_tile or site.keys, head_tile)
    if head_tile and site.heads % head_tile:
        raise ConfigError(f"attention head_tile={head_tile} does not divide the {site.heads} "
                          f"heads of {site.named}; choose a divisor of {site.heads}")
    for what, size, granule, tile in (
            ("query_tile", site.queries, site.query_granule, tiles.queries),
            ("key_tile", site.keys, site.key_granule, tiles.keys)):
        if tile < 1 or size % tile:
            raise ConfigError(f"attention {what}={tile} does not divide the "
                              f"{size} {'queries' if what == 'query_tile' else 'keys'} of "
                              f"{site.named}; choose a divisor of {size}")
        if granule and granule % tile and not (what == "query_tile" and
                                               query_tile_allowed(site, tile)):
            raise ConfigError(f"attention {what}={tile} does not divide every length of "
                              f"the {'queries' if what == 'query_tile' else 'keys'} of "
                              f"{site.named}, a multiple of {granule}; choose a divisor of "
                              f"{granule}")
    trips = max(tiles.counts(site))
    if trips > MAX_LOOP_TRIPS:
        raise ConfigError(f"attention tiles {tiles.queries}x{tiles.keys} of {site.named} "
                          f"make a loop of {trips} trips, over the hardware's {MAX_LOOP_TRIPS}; "
                          f"choose larger tiles")
    return tiles


def _scores_bytes(graph: Graph, site: AttentionSite) -> int:
    op = next(o for o in graph.ops if o.name == site.scores)
    return graph.buffers[op.output.buffer].layout.device_bytes


def _signature(graph: Graph, site: AttentionSite) -> tuple:
    """What decides a site's price: its ops' kinds, ranges and constants, and the shapes,
    dtypes and layouts of what they read from outside."""
    ops = [o for o in graph.ops if o.name in site.ops]
    written = {o.output.buffer for o in ops}
    outside = sorted({(a.buffer, a.index) for o in ops for a in o.reads()
                      if a.buffer not in written}, key=str)
    return (tuple((o.op, o.ranges, o.reduced, str(o.constants)) for o in ops),
            tuple((graph.buffers[b].host_size, graph.buffers[b].host_dtype,
                   graph.buffers[b].layout, str(i)) for b, i in outside))


def _choose(graph: Graph, site: AttentionSite, mode: str, budget: int,
            fixed: tuple[int, int, int] = (0, 0, 0), planning: Planning = Planning()
            ) -> Priced:
    """The cheapest flash form of `site` (ties: the larger tiles, which re-read K and V
    fewer times), or `Priced(None, …)` when none fits LX or (mode auto) the site
    materialized is cheaper. For each head tile (all heads first), query tiles are tried
    from the largest down and that search stops at the first whose best is no faster than
    a larger one's (smaller query tiles only re-read K and V more often); a tile at least as
    large in every dim as one that did not fit LX is not priced."""
    best = None
    too_big: list[FlashTiles] = []
    priced_all: list[Priced] = []
    memo: dict = {}       # the candidates' split estimates (ops alike in several tilings)
    for heads in [fixed[2]] if fixed[2] else _head_tiles(graph, site):
        before = best
        for queries in [fixed[0]] if fixed[0] else _query_tiles(site, heads, budget):
            row = None
            for keys in [fixed[1]] if fixed[1] else _key_tiles(site):
                tiles = FlashTiles(queries, keys, heads)
                if any(queries >= t.queries and keys >= t.keys and heads >= t.heads
                       for t in too_big):
                    continue
                beat = math.inf if best is None else best.time_us * (1 + NEAR)
                priced = None if _lx_floor(site, tiles) > budget else \
                    _price(graph, site, tiles, budget, planning, beat, memo)
                if priced is None:
                    too_big.append(tiles)
                    continue
                if priced is OUTPRICED:
                    continue
                priced_all.append(priced)
                if row is None or round(priced.time_us, 3) < round(row.time_us, 3):
                    row = priced
            if row is None:
                continue
            if best is not None and row.time_us > best.time_us * (1 + NEAR) \
                    and best.tiles.heads == heads:
                break
            if best is None or round(row.time_us, 3) < round(best.time_us, 3):
                best = row
        here = [p.time_us for p in priced_all if p.tiles.heads == heads]
        if before is not None and best is before and \
                (not here or min(here) > before.time_us * (1 + NEAR)):
            break                  # fewer heads per tile did not pay: fewer still will not
    if best is None:
        return Priced(None, math.inf)
    best = _least_traffic_near(priced_all, best.time_us)
    best = replace(best, runners_up=tuple(sorted((p for p in priced_all if p is not best),
                                                 key=lambda p: p.time_us)))
    if mode == "auto":
        try:
            plain = _price(graph, site, None, budget // MATERIALIZED_LX_SHARE, planning,
                           memo=memo)
        except UnsupportedProgram:
            plain = None                 # materialized, no split fits the per-core span
        if plain is not None and plain.time_us <= best.time_us:
            return plain
    return best


def _fits_in_program(graph: Graph, choice: Priced, site: AttentionSite,
                     later: list[AttentionSite], budget: int, planning: Planning) -> bool:
    """Whether `choice` for `site`, priced alone, keeps its per-tile buffers in LX in the
    program: trivially when its LX floor is within `budget // LX_SHARE` (the rest of LX is
    left to the values live around it); else a copy of the program with `site` and every
    site of `later` of its signature (the other layers, which take the same choice)
    rewritten is planned as the pipeline plans it (work division, staging, LX placement),
    and none of their per-tile buffers may be left out of LX for want of room. Where that
    program cannot be planned (another site still materialized over the per-core span, a
    rewrite its proof refuses), the choice stands: the pipeline decides later."""
    if choice.tiles is None or _lx_floor(site, choice.tiles) <= budget // LX_SHARE:
        return True
    signature = _signature(graph, site)
    sites = [site] + [other for other in later if _signature(graph, other) == signature]
    trial = subgraph_of(graph, lambda op: True)
    before = set(trial.buffers)
    try:
        for n, site in enumerate(sites):
            rewrite(trial, site, choice.tiles, f"fit{n}", check=False)
        plan_trial(trial, planning)
    except (ConfigError, UnsupportedProgram):
        return True
    ours = {name for name in set(trial.buffers) - before if trial.buffers[name].per_tile}
    placement = place_trial(trial, planning, budget)
    return not any(not row["placed"] and lacks_room(row, budget)
                   for name, row in placement.rows.items() if name in ours)


def _lx_floor(site: AttentionSite, tiles: FlashTiles) -> int:
    """An estimate from below of the LX bytes per core the tiles need, without planning
    them: the query tile, the fp32 accumulator and this tile's product, six row statistics
    at a stick per row, and the fp32 score tile the score steps share, spread evenly over
    the cores (planned tiles have needed about 1.1x this). A candidate over the budget by
    this count is not planned; were the count ever too high, a candidate that fits would be
    missed, never a wrong program made."""
    rows = (tiles.heads or site.heads) * tiles.queries
    per_row = 2 * site.head_dim + 2 * 4 * site.value_dim + 6 * STICK_BYTES + 4 * tiles.keys
    return rows * per_row // CORES


def _least_traffic_near(priced: list[Priced], fastest_us: float) -> Priced:
    """Among the candidates within `NEAR` of the fastest, the one moving the fewest HBM bytes
    (then the faster): when the estimates are that close, a plan that re-reads K and V less
    is the one least exposed to the bandwidth figures the cost model is least sure of (the
    rule work division applies to core counts)."""
    near = [p for p in priced if p.time_us <= fastest_us * (1 + NEAR)]
    return min(near, key=lambda p: (p.hbm_bytes, p.time_us))


def _head_tiles(graph: Graph, site: AttentionSite) -> list[int]:
    """All heads (no head loop), then halves down to an eighth; none with gathered K/V."""
    op = next(o for o in graph.ops if o.name == site.scores)
    shape = graph.buffers[op.output.buffer].host_size
    heads = shape[-3] if len(shape) >= 3 else 1
    if site.gathers or heads == 1:
        return [heads]
    return [h for h in (heads, heads // 2, heads // 4, heads // 8)
            if h >= 1 and heads % h == 0]


def _query_tiles(site: AttentionSite, heads: int, budget: int) -> list[int]:
    """Divisors of the queries whose loop the hardware can count and whose tile, with the
    smallest key tile, is not over the LX budget by `_lx_floor` (at most `MAX_ROWS_PER_CORE`
    rows per core), the largest first: the first `MAX_QUERY_TILES` that may fit. Queries
    that ops may run whole over a symbolic length (`AttentionSite.query_whole`) take one tile
    of every query when it may fit: a query loop's tile would be at most the shortest length
    (`query_tile_allowed`), re-reading K and V length / tile times at the longest, and the
    whole tile's ops run each length's own queries."""
    smallest = _key_tiles(site)[0]
    if site.query_whole and heads * site.queries <= MAX_ROWS_PER_CORE * CORES and \
            _lx_floor(site, FlashTiles(site.queries, smallest, heads)) <= budget:
        return [site.queries]
    divisors = [d for d in range(1, site.queries + 1)
                if query_tile_allowed(site, d) and site.queries // d <= MAX_LOOP_TRIPS
                and heads * d <= MAX_ROWS_PER_CORE * CORES
                and _lx_floor(site, FlashTiles(d, smallest, heads)) <= budget]
    return divisors[::-1][:MAX_QUERY_TILES]


def query_tile_allowed(site: AttentionSite, tile: int) -> bool:
    """A query tile divides the queries; over a symbolic number of queries, it divides the
    granularity (every length is whole tiles) or is whole granules dividing the maximum, up
    to the shortest length (which then runs whole tiles, and no length computes a tile's
    worth of rows past itself): the query loop runs ceil(length / tile) trips. The extra
    rows are harmless: flash computes each output row from its own query row alone, the
    keys stop at the length (key tiles divide the granularity), and those rows land in the
    output's padding, which every reader skips (its readers are bound to the length,
    `symbolic.padding_problems`). Larger tiles re-read K and V fewer times."""
    if site.queries % tile:
        return False
    if site.query_whole and tile == site.queries:
        return True      # no query loop: the ops run the length's queries (sized)
    granule = site.query_granule
    # (a tile of every query makes no query loop for the length to bound)
    return not granule or granule % tile == 0 or (
        tile % granule == 0 and tile < site.queries and tile <= site.query_shortest)


def _key_tiles(site: AttentionSite) -> list[int]:
    """Whole-stick key tiles that divide the keys (or all the keys), the smallest first; for
    a symbolic number of keys, those that divide its granularity (the tile proof refuses one
    that splits a stick)."""
    if site.key_granule:
        return [t for t in SYMBOLIC_KEY_TILES + KEY_TILES
                if site.key_granule % t == 0 and site.keys // t <= MAX_LOOP_TRIPS] \
            or [site.key_granule]
    return [t for t in KEY_TILES if site.keys % t == 0 and site.keys // t <= MAX_LOOP_TRIPS] \
        or [site.keys]


def _price(graph: Graph, site: AttentionSite, tiles: FlashTiles | None,
           budget: int, planning: Planning, beat: float = math.inf,
           memo: dict | None = None) -> Priced | None:
    """The site alone, rewritten with `tiles` (None: as it is), planned and priced; None when
    a per-tile buffer does not fit LX; `OUTPRICED` when even its compute spread perfectly
    over the cores (`compute_floor_us`) takes longer than `beat` (planning it, most of a
    candidate's price, is then skipped: it can neither win nor tie)."""
    planned = _planned(graph, site, tiles, planning, check=False, beat=beat, memo=memo)
    if planned is None or planned is OUTPRICED:
        return planned                       # None: tiles that do not move by whole sticks
    placement = place_trial(planned, planning, budget)
    if _spilled(planned, placement, budget, every=tiles is None):
        return None
    apply_lx(planned, placement)
    return Priced(tiles, _time_us(planned, planning),
                  hbm_bytes=hbm_bytes(planned, planning.params))


def _time_us(planned: Graph, planning: Planning) -> float:
    """A planned candidate's time as the pipeline will run it: its tile body one fused
    SuperDSC where the fusion pass runs (`plan/fusion.py`), else one op after another."""
    if planning.fusion:
        return fused_planned_time_us(planned, planning.params)
    return planned_time_us(planned, planning.params)


def check_fits(graph: Graph, site: AttentionSite, tiles: FlashTiles, budget: int,
               planning: Planning = Planning()) -> None:
    """Given tiles whose per-tile buffers cannot all be in LX are refused, with the bytes
    per core they need (a per-tile buffer left in HBM would be re-read every trip)."""
    planned = _planned(graph, site, tiles, planning, check=True)
    placement = place_trial(planned, planning, budget)
    if not _spilled(planned, placement, budget):
        return
    need = place_trial(planned, planning, 1 << 40).peak
    raise ConfigError(f"attention tiles of {tiles.queries} queries x {tiles.keys} keys x "
                      f"{tiles.heads or site.heads} heads of {site.named} need {need:,} bytes "
                      f"of LX per core for their per-tile buffers, over the {budget:,} a core "
                      f"has; choose smaller tiles (or leave them to the cost model)")


def _planned(graph: Graph, site: AttentionSite, tiles: FlashTiles | None,
             planning: Planning, check: bool, beat: float = math.inf,
             memo: dict | None = None) -> Graph | Priced | None:
    """A copy of the site alone, rewritten with `tiles` (None: as it is) and planned as the
    pipeline plans it (`plan_trial`: work division sharing `memo`, staging); None when
    `tiles` fail their proof, `OUTPRICED` when its compute floor is over `beat`."""
    names = set(site.ops)
    sub = subgraph_of(graph, lambda op: op.name in names)
    if tiles is not None:
        try:
            rewrite(sub, site, tiles, "price", check=check)
        except ConfigError:
            if check:
                raise
            return None
    if compute_floor_us(sub, planning.split.cores, planning.params, planning.fusion) > beat:
        return OUTPRICED
    plan_trial(sub, planning, memo)
    return sub


def _spilled(graph: Graph, placement, budget: int, every: bool = False) -> bool:
    """Whether a per-tile buffer (`every`: any intermediate, for the materialized form, whose
    price assumes its chain in LX) is left out of LX for want of room (one left in HBM
    because its readers take other cores' slices is priced there, not refused)."""
    return any(not row["placed"] and lacks_room(row, budget)
               for name, row in placement.rows.items()
               if graph.buffers[name].per_tile or
               every and graph.buffers[name].role == "intermediate")
