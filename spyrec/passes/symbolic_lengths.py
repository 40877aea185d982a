"""symbolic_lengths — every op walking a symbolic length (a dim exported dynamic) bound by it at run time.

Reads: buffer layouts, the program's symbolic lengths (`Graph.symbols`, proven by
`symbol_proof.py` when the program was loaded) and flash_attention's loops over them. Writes:
`mode: sized` runs each such op once over the whole length, its size following the length
(`Operation.lengths`; length_shares later prices its core share per length); `mode: tiled`
puts the ops in loops of granularity-sized tiles whose trip count follows the length. The
library is `plan/tiling/symbolic.py` (its proofs also serve the front end). The `symbols`
report says, per length, its range and what runs over it; `symbolic_tiling` the groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spyrec.errors import ConfigError
from spyrec.ir import Graph
from spyrec.passes.registry import REPORT_OMIT, CompileContext, Pass, register_pass

MODES = ("sized", "tiled")


@register_pass("symbolic_lengths")
@dataclass(frozen=True)
class SymbolicLengths(Pass):
    # "sized": each op runs once over the whole length (its size follows the length);
    # "tiled": in a loop of granularity-sized tiles
    mode: str = "sized"

    report_keys: ClassVar[dict] = {"symbols": REPORT_OMIT, "symbolic_tiling": REPORT_OMIT}

    def _check_options(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"symbolic_lengths.mode must be one of {', '.join(MODES)}, "
                              f"got {self.mode!r}")

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        from spyrec.plan.tiling.symbolic import symbols_report, tile_symbolic

        if any(s.value_of is None for s in graph.symbols.values()):
            groups = tile_symbolic(graph, sized=self.mode == "sized",
                                   params=ctx.planning.params)
            ctx.report["symbolic_tiling"] = {"mode": self.mode, "groups": groups}
        if graph.symbols:
            ctx.report["symbols"] = symbols_report(graph)
