"""Which attention sites become flash loops, and with which tiles (the rewrite is flash.py).

A site is considered when its materialized scores cannot sit in one core's LX (smaller ones
are left to work division and LX placement, which keep them on chip). Its tiles are then
chosen by the cost model: each candidate (query rows × key columns) is rewritten on a copy of
the site alone, planned as the pipeline plans it (work division, staging, LX placement in the
budget), and priced by the split estimate times the executions of each op; a candidate whose
per-tile buffers do not all fit LX is dropped. The cheapest flash form replaces the site when
it is cheaper than the site materialized and planned the same way (mode `always`: whenever
one fits). Identical sites (the layers of a decoder) are priced once.

Tiles may also be given (`query_tile`, `key_tile`: pass options, or `attention:` in the
tiling YAML); they must divide the sizes, and are checked like the chosen ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase

from spyrec.device import LX_USABLE_BYTES_PER_CORE
from spyrec.errors import ConfigError
from spyrec.ir import Graph
from spyrec.passes.coarse_tiling.auto import subgraph_of
from spyrec.passes.coarse_tiling.spec import AttentionSpec
from spyrec.passes.coarse_tiling.flash import AttentionSite, FlashTiles, find_sites, rewrite
from spyrec.plan.core_splits import divide_work, planned_time_us
from spyrec.plan.lx_placement import apply_lx, place_lx
from spyrec.plan.staging import stage_inputs

MAX_TRIPS = 65535                 # a loop bound the backend accepts (reference/G §4.1 item 7)
KEY_TILES = (64, 128, 256, 512)   # key columns per tile: whole fp16 sticks
MAX_QUERY_TILES = 6               # query tile sizes priced per site (the largest divisors)


@dataclass(frozen=True)
class Priced:
    """One candidate: its tiles (None: materialized), estimated µs, LX peak per core."""

    tiles: FlashTiles | None
    time_us: float
    lx_peak: int = 0


def tile_attention(graph: Graph, mode: str, given: list[AttentionSpec] = (),
                   budget: int = LX_USABLE_BYTES_PER_CORE) -> list[dict]:
    """Rewrite every site `mode` ("auto" or "always") selects, with the tiles of the first
    `given` entry matching its node (a tile it leaves 0 is chosen); one report row per
    site."""
    rows, memo = [], {}
    for n, site in enumerate(find_sites(graph)):
        spec = _given_for(graph, site, given)
        if spec is not None and spec.query_tile and spec.key_tile:
            choice = Priced(given_tiles(site, spec.query_tile, spec.key_tile), math.nan)
        else:
            if mode == "auto" and spec is None and _scores_bytes(graph, site) <= budget:
                continue
            fixed = (spec.query_tile, spec.key_tile) if spec is not None else (0, 0)
            if any(fixed):
                given_tiles(site, *fixed)            # a given tile must divide its size
            key = (_signature(graph, site), fixed)
            if key not in memo:
                memo[key] = _choose(graph, site, "always" if spec else mode, budget, fixed)
            choice = memo[key]
            if choice.tiles is None:
                continue
        row = rewrite(graph, site, choice.tiles, f"fa{n}")
        rows.append(row | {"estimated_us": None if math.isnan(choice.time_us)
                           else round(choice.time_us, 3)})
    return rows


def _given_for(graph: Graph, site: AttentionSite, given) -> AttentionSpec | None:
    node = next(o.node for o in graph.ops if o.name == site.out) or ""
    return next((g for g in given if g.ops is None or
                 any(fnmatchcase(node, glob) for glob in g.ops)), None)


def given_tiles(site: AttentionSite, query_tile: int, key_tile: int) -> FlashTiles:
    """The tiles a user gave (0: the whole dim), checked against the site's sizes."""
    tiles = FlashTiles(query_tile or site.queries, key_tile or site.keys)
    for what, size, tile in (("query_tile", site.queries, tiles.queries),
                             ("key_tile", site.keys, tiles.keys)):
        if tile < 1 or size % tile:
            raise ConfigError(f"attention {what}={tile} does not divide the "
                              f"{size} {'queries' if what == 'query_tile' else 'keys'} of "
                              f"op {site.out}; choose a divisor of {size}")
    trips = max(tiles.counts(site))
    if trips > MAX_TRIPS:
        raise ConfigError(f"attention tiles {tiles.queries}x{tiles.keys} of op {site.out} "
                          f"make a loop of {trips} trips, over the hardware's {MAX_TRIPS}; "
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
            fixed: tuple[int, int] = (0, 0)) -> Priced:
    """The cheapest flash form of `site` (ties: the larger query tile, which re-reads K and V
    fewer times), or `Priced(None, …)` when none fits LX or (mode auto) the site
    materialized is cheaper. Query tiles are tried from the largest down and the search
    stops at the first whose best is no faster than a larger one's (smaller query tiles only
    re-read K and V more often); a tile at least as large in both dims as one that did not
    fit LX is not priced."""
    best = None
    too_big: list[FlashTiles] = []
    for queries in [fixed[0]] if fixed[0] else _query_tiles(site):
        row = None
        for keys in [fixed[1]] if fixed[1] else _key_tiles(site):
            tiles = FlashTiles(queries, keys)
            if any(queries >= t.queries and keys >= t.keys for t in too_big):
                continue
            priced = _price(graph, site, tiles, budget)
            if priced is None:
                too_big.append(tiles)
            elif row is None or round(priced.time_us, 3) < round(row.time_us, 3):
                row = priced
        if row is None:
            continue
        if best is not None and round(row.time_us, 3) >= round(best.time_us, 3):
            break
        if best is None or round(row.time_us, 3) < round(best.time_us, 3):
            best = row
    if best is None:
        return Priced(None, math.inf)
    if mode == "auto":
        plain = _price(graph, site, None, budget)
        if plain is not None and plain.time_us <= best.time_us:
            return plain
    return best


def _query_tiles(site: AttentionSite) -> list[int]:
    """Divisors of the queries whose loop the hardware can count, the largest first."""
    divisors = [d for d in range(1, site.queries + 1)
                if site.queries % d == 0 and site.queries // d <= MAX_TRIPS]
    return divisors[::-1][:MAX_QUERY_TILES]


def _key_tiles(site: AttentionSite) -> list[int]:
    """Whole-stick key tiles that divide the keys (or all the keys), the smallest first."""
    return [t for t in KEY_TILES if site.keys % t == 0 and site.keys // t <= MAX_TRIPS] \
        or [site.keys]


def _price(graph: Graph, site: AttentionSite, tiles: FlashTiles | None,
           budget: int) -> Priced | None:
    """The site alone, rewritten with `tiles` (None: as it is), planned and priced; None when
    a per-tile buffer does not fit LX."""
    names = set(site.ops)
    sub = subgraph_of(graph, lambda op: op.name in names)
    if tiles is not None:
        rewrite(sub, site, tiles, "price")
    divide_work(sub)
    stage_inputs(sub)
    placement = place_lx(sub, budget)
    if any(not row["placed"] for name, row in placement.rows.items()
           if sub.buffers[name].per_tile):
        return None
    apply_lx(sub, placement)
    return Priced(tiles, planned_time_us(sub), placement.peak)
