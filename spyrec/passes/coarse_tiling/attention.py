"""Which attention sites become flash loops, with which tiles (the rewrite is flash.py)."""

from __future__ import annotations

from spyrec.device import CORES, LX_USABLE_BYTES_PER_CORE
from spyrec.errors import ConfigError
from spyrec.ir import Graph
from spyrec.passes.coarse_tiling.flash import AttentionSite, FlashTiles, find_sites, rewrite


def tile_attention(graph: Graph, mode: str, query_tile: int, key_tile: int) -> list[dict]:
    """Rewrite every site `mode` selects; one report row per site rewritten."""
    rows = []
    for n, site in enumerate(find_sites(graph)):
        if mode == "auto" and _scores_bytes(graph, site) <= CORES * LX_USABLE_BYTES_PER_CORE:
            continue
        tiles = FlashTiles(query_tile or site.queries, key_tile or min(site.keys, 128))
        _check_tiles(site, tiles)
        rows.append(rewrite(graph, site, tiles, f"fa{n}"))
    return rows


def _scores_bytes(graph: Graph, site: AttentionSite) -> int:
    op = next(o for o in graph.ops if o.name == site.scores)
    return graph.buffers[op.output.buffer].layout.device_bytes


def _check_tiles(site: AttentionSite, tiles: FlashTiles) -> None:
    for what, size, tile in (("query_tile", site.queries, tiles.queries),
                             ("key_tile", site.keys, tiles.keys)):
        if tile < 1 or size % tile:
            raise ConfigError(f"coarse_tiling.{what}={tile} does not divide the attention's "
                              f"{size} {'queries' if what == 'query_tile' else 'keys'} "
                              f"(op {site.out}); choose a divisor of {size}")
