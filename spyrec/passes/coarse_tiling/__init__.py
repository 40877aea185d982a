"""coarse_tiling — split the dims a tiling config names into counted loops around groups of ops.

Reads: the tiling config (`--tiling FILE.yaml`, or the pass option `config:`; DESIGN §6), buffer
layouts (tiles must be whole sticks and constant device-address shifts). Writes: per-tile
`ranges` and `loops` on the ops of each group, `per_tile` buffers (intermediates of one loop
body, the tile's shape), accumulators for reductions over a tiled dim, and the group's ops made
contiguous in `graph.ops`. Guarantees the tiling contract (DESIGN §4–5): every access to a full
buffer inside a loop moves by one constant device-address step per iteration, and each trip's
tile is exactly the untiled access there (proven, `ir/verify_loops.py tiled_access_problem`: a
view that wraps inside a later tile is refused); ops of one loop are consecutive; no op is
repeated by a loop it does not carry. Without a config or `--tiling auto` it adds no loop.

`unroll: true` replaces each loop nest by its iterations (one op per iteration, indices moved to
the iteration's tile), which simulates bit-identically to the looped form.

The tiling library is `plan/tiling/` (config resolution, dim names, the loop transform, the
per-access proofs in `plan/tiles.py`), shared with flash_attention and symbolic_lengths, which
run before this pass; `auto.py` here chooses a config for `--tiling auto`.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass
from pathlib import Path

from spyrec.errors import ConfigError
from spyrec.ir import Graph
from spyrec.passes.registry import CompileContext, Pass, register_pass

MODES = ("config", "auto")


@register_pass("coarse_tiling")
@dataclass(frozen=True)
class CoarseTiling(Pass):
    config: str = ""        # tiling YAML (set by --tiling); empty: no loops
    unroll: bool = False    # emit the flat, unrolled form
    mode: str = "config"    # "config": apply `config`; "auto": choose one (--tiling auto)

    report_keys: ClassVar[dict] = {"tiling": None}

    def _check_options(self) -> None:
        """Read and shape-check the config before the model is loaded (exit 2 on error)."""
        if self.mode not in MODES:
            raise ConfigError(f"coarse_tiling.mode must be one of {', '.join(MODES)}, got "
                              f"{self.mode!r}")
        if self.mode == "auto" and self.config:
            raise ConfigError(f"coarse_tiling: mode auto chooses the tiling itself, but config "
                              f"{self.config!r} is given too; drop one of them")
        if self.config:
            from spyrec.tiling_file import read_tiling_file

            read_tiling_file(Path(self.config))

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        if any(s.value_of is None for s in graph.symbols.values()):
            self._refuse_with_symbols(graph)
        elif self.mode == "auto":
            self._run_auto(graph, ctx)
        elif self.config:
            self._run_config(graph, ctx)

    def _refuse_with_symbols(self, graph: Graph) -> None:
        """A program with symbolic lengths is tiled by symbolic_lengths; a tiling of its own
        is not combined with that yet."""
        if self.config or self.mode == "auto" or self.unroll:
            raise ConfigError(
                f"coarse_tiling: the program has symbolic lengths "
                f"({', '.join(graph.symbols)}), which spyrec tiles itself; --tiling, "
                f"mode auto and unroll are not supported with them yet: drop them")

    def _run_config(self, graph: Graph, ctx: CompileContext) -> None:
        """The loops the tiling file asks for."""
        from spyrec.plan.tiling.config import resolve
        from spyrec.tiling_file import read_tiling_file
        from spyrec.plan.tiling.transform import tile_graph, unroll

        config = read_tiling_file(Path(self.config))
        plan = resolve(graph, config, Path(self.config).name)
        groups = tile_graph(graph, plan)
        added = unroll(graph) if self.unroll else 0
        ctx.report["tiling"] = {"config": str(self.config), "unrolled": self.unroll,
                                "unrolled_ops_added": added, "groups": groups}

    def _run_auto(self, graph: Graph, ctx: CompileContext) -> None:
        """Choose a config (auto.py), then tile exactly as a `--tiling` file would."""
        from spyrec.passes.coarse_tiling.auto import WHERE, choose
        from spyrec.plan.tiling.config import resolve
        from spyrec.plan.tiling.transform import tile_graph, unroll

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
