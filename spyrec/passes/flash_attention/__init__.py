"""flash_attention — attention whose scores would not fit on chip, as counted K/V loops with an online softmax.

Reads: buffer layouts (tiles are whole sticks), the symbolic lengths the program has, and the
`attention` entries of the tiling file (`--tiling FILE.yaml`, which sets this pass's `config`
as it sets coarse_tiling's; DESIGN §6). Writes: each attention it rewrites as a head loop
around a query-tile loop around a key-tile loop (`rewrite.py`), per-tile buffers and the
running max/sum accumulators, its loops bound to the key length where that is symbolic.

`mode`: "auto" rewrites an attention whose scores do not fit on chip, "always" every one it
recognizes (`sites.py`), "never" none (the scores stay materialized). Tiles 0 are chosen by the
cost model: every candidate priced by planning a copy of the attention as the pipeline will
(`search.py`, `plan/trials.py`, with the pipeline's options and `--set cost.NAME=VALUE`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from spyrec.errors import ConfigError
from spyrec.ir import Graph
from spyrec.passes.registry import CompileContext, Pass, register_pass

MODES = ("auto", "always", "never")


@register_pass("flash_attention")
@dataclass(frozen=True)
class FlashAttention(Pass):
    mode: str = "auto"      # "auto": where the scores do not fit on chip; "always"; "never"
    query_tile: int = 0     # rows of a query tile (0: chosen by the cost model)
    key_tile: int = 0       # keys of a key tile (0: chosen)
    head_tile: int = 0      # heads of a head tile (0: chosen)
    config: str = ""        # the tiling YAML whose `attention` entries give tiles (--tiling)

    report_keys: ClassVar[dict] = {"attention": None}

    def _check_options(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"flash_attention.mode must be one of {', '.join(MODES)}, "
                              f"got {self.mode!r}")
        for name in ("query_tile", "key_tile", "head_tile"):
            if getattr(self, name) < 0:
                raise ConfigError(f"flash_attention.{name} must be 0 (chosen) or a positive "
                                  f"number of rows/keys, got {getattr(self, name)}")
        if self.config:
            self._given()

    def _given(self) -> list:
        """The tiles the options, then the tiling file's `attention` entries, give."""
        from spyrec.plan.tiling.spec import AttentionSpec, check_shape
        from spyrec.tiling_file import read_tiling_file

        given = []
        if self.query_tile or self.key_tile or self.head_tile:
            given.append(AttentionSpec(None, self.query_tile, self.key_tile, self.head_tile))
        if self.config:
            given += check_shape(read_tiling_file(Path(self.config)), self.config).attention
        return given

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        if self.mode == "never":
            return
        from spyrec.passes.flash_attention.search import tile_attention

        sized = _symbolic_mode(ctx) == "sized"
        rows = tile_attention(graph, self.mode, self._given(), ctx.planning, sized=sized)
        if rows:
            ctx.report["attention"] = rows


def _symbolic_mode(ctx: CompileContext) -> str:
    """How symbolic_lengths will run the ops outside attention ("sized" unless the pipeline
    says otherwise): queries that ops run whole may take one tile of every query."""
    return ctx.planning.symbolic
