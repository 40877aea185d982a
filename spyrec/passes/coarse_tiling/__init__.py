"""coarse_tiling — split the dims a tiling config names into counted loops around groups of ops.

Reads: the tiling config (`--tiling FILE.yaml`, or the pass option `config:`; DESIGN §6), buffer
layouts (tiles must be whole sticks and constant device-address shifts). Writes: per-tile
`ranges` and `loops` on the ops of each group, `per_tile` buffers (intermediates of one loop
body, the tile's shape), accumulators for reductions over a tiled dim, and the group's ops made
contiguous in `graph.ops`. Guarantees the tiling contract (DESIGN §4–5): every access to a full
buffer inside a loop moves by one constant device-address step per iteration, and each trip's
tile is exactly the untiled access there (proven, `ir/verify_loops.py tiled_access_problem`: a
view that wraps inside a later tile is refused); ops of one loop are consecutive; no op is
repeated by a loop it does not carry. Without a config, `--tiling auto`, an attention whose
scores do not fit on chip or a symbolic length it adds no loop.

`unroll: true` replaces each loop nest by its iterations (one op per iteration, indices moved to
the iteration's tile), which simulates bit-identically to the looped form.

The plan (which ops, which var carries each loop's dim) comes from `config.py`; the rewrite is
`transform.py`; the per-access proofs (boxes, advances, re-indexing) are `plan/tiles.py`
(planning knowledge staging shares).
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass
from pathlib import Path

from spyrec.errors import ConfigError
from spyrec.ir import Graph
from spyrec.passes.registry import REPORT_OMIT, CompileContext, Pass, register_pass

MODES = ("config", "auto")
ATTENTION = ("auto", "always", "never")
SYMBOLIC = ("sized", "tiled")


@register_pass("coarse_tiling")
@dataclass(frozen=True)
class CoarseTiling(Pass):
    config: str = ""        # tiling YAML (set by --tiling); empty: no loops
    unroll: bool = False    # emit the flat, unrolled form
    mode: str = "config"    # "config": apply `config`; "auto": choose one (--tiling auto)
    # attention as counted K/V loops with an online softmax (flash.py): "auto" where the
    # scores do not fit on chip, "always", or "never"; tiles 0: chosen by the cost model
    attention: str = "auto"
    query_tile: int = 0
    key_tile: int = 0
    head_tile: int = 0
    # ops walking a symbolic length outside attention: "sized" runs each once over the whole
    # length (its size follows the length), "tiled" in a loop of granularity-sized tiles
    symbolic: str = "sized"


    report_keys: ClassVar[dict] = {"tiling": None, "attention": None, "symbols": REPORT_OMIT}

    def _check_options(self) -> None:
        """Read and shape-check the config before the model is loaded (exit 2 on error)."""
        if self.attention not in ATTENTION:
            raise ConfigError(f"coarse_tiling.attention must be one of {', '.join(ATTENTION)}, "
                              f"got {self.attention!r}")
        for name in ("query_tile", "key_tile", "head_tile"):
            if getattr(self, name) < 0:
                raise ConfigError(f"coarse_tiling.{name} must be 0 (chosen) or a positive "
                                  f"number of rows/keys, got {getattr(self, name)}")
        if self.symbolic not in SYMBOLIC:
            raise ConfigError(f"coarse_tiling.symbolic must be one of {', '.join(SYMBOLIC)}, "
                              f"got {self.symbolic!r}")
        if self.mode not in MODES:
            raise ConfigError(f"coarse_tiling.mode must be one of {', '.join(MODES)}, got "
                              f"{self.mode!r}")
        if self.mode == "auto" and self.config:
            raise ConfigError(f"coarse_tiling: mode auto chooses the tiling itself, but config "
                              f"{self.config!r} is given too; drop one of them")
        if self.config:
            from spyrec.passes.coarse_tiling.config import read_tiling_file

            read_tiling_file(Path(self.config))

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        if self.attention != "never":
            self._run_attention(graph, ctx)
        if any(s.value_of is None for s in graph.symbols.values()):
            self._run_symbolic(graph, ctx)
        elif self.mode == "auto":
            self._run_auto(graph, ctx)
        elif self.config:
            self._run_config(graph, ctx)
        if graph.symbols:
            from spyrec.passes.coarse_tiling.symbolic import symbols_report

            ctx.report["symbols"] = symbols_report(graph)

    def _run_config(self, graph: Graph, ctx: CompileContext) -> None:
        """The loops the tiling file asks for."""
        from spyrec.passes.coarse_tiling.config import read_tiling_file, resolve
        from spyrec.passes.coarse_tiling.transform import tile_graph, unroll

        config = read_tiling_file(Path(self.config))
        plan = resolve(graph, config, Path(self.config).name)
        groups = tile_graph(graph, plan)
        added = unroll(graph) if self.unroll else 0
        ctx.report["tiling"] = {"config": str(self.config), "unrolled": self.unroll,
                                "unrolled_ops_added": added, "groups": groups}

    def _run_attention(self, graph: Graph, ctx: CompileContext) -> None:
        """Flash attention (attention.py) with the tiles the options, then the tiling file's
        `attention` entries, give."""
        from spyrec.passes.coarse_tiling.attention import tile_attention
        from spyrec.passes.coarse_tiling.spec import AttentionSpec, check_shape

        given = []
        if self.query_tile or self.key_tile or self.head_tile:
            given.append(AttentionSpec(None, self.query_tile, self.key_tile, self.head_tile))
        if self.config:
            from spyrec.passes.coarse_tiling.config import read_tiling_file

            given += check_shape(read_tiling_file(Path(self.config)), self.config).attention
        rows = tile_attention(graph, self.attention, given, ctx.planning,
                              sized=self.symbolic == "sized")
        if rows:
            ctx.report["attention"] = rows

    def _run_symbolic(self, graph: Graph, ctx: CompileContext) -> None:
        """A program with symbolic lengths: every op walking one in a loop bound by it
        (symbolic.py); a tiling of its own is not combined with that yet."""
        from spyrec.passes.coarse_tiling.symbolic import tile_symbolic

        if self.config or self.mode == "auto" or self.unroll:
            raise ConfigError(
                f"coarse_tiling: the program has symbolic lengths "
                f"({', '.join(graph.symbols)}), which spyrec tiles itself; --tiling, "
                f"mode auto and unroll are not supported with them yet: drop them")
        groups = tile_symbolic(graph, sized=self.symbolic == "sized",
                               params=ctx.planning.params)
        ctx.report["tiling"] = {"config": "symbolic lengths", "unrolled": False,
                                "unrolled_ops_added": 0, "groups": groups}

    def _run_auto(self, graph: Graph, ctx: CompileContext) -> None:
        """Choose a config (auto.py), then tile exactly as a `--tiling` file would."""
        from spyrec.passes.coarse_tiling.auto import WHERE, choose
        from spyrec.passes.coarse_tiling.config import resolve
        from spyrec.passes.coarse_tiling.transform import tile_graph, unroll

        choice = choose(graph, ctx.planning)
        groups = tile_graph(graph, resolve(graph, choice.config, WHERE)) if choice.config \
            else []
        added = unroll(graph) if self.unroll and groups else 0
        ctx.report["tiling"] = {"config": "auto", "unrolled": self.unroll,
                                "unrolled_ops_added": added, "groups": groups,
                                "auto": choice.to_json(),
                                "auto_config": choice.yaml_text +
                                _attention_yaml(ctx.report.get("attention") or [])}


def _attention_yaml(rows: list[dict]) -> str:
    """The flash tiles chosen, as the tiling file's `attention` entries (so that the file
    `--tiling auto` writes rebuilds the same program)."""
    if not rows:
        return ""
    lines = ["# flash attention: query and key tiles chosen by the cost model", "attention:"]
    for row in rows:
        lines += [f"  - ops: [{row['node']}]", f"    query_tile: {row['query_tile']}",
                  f"    key_tile: {row['key_tile']}", f"    head_tile: {row['head_tile']}"]
    return "\n".join(lines) + "\n"
