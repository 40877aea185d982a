"""length_shares — how many cores run an op sized by a symbolic length, at each length.

An op whose size is a symbolic length (`Operation.lengths`, `symbolic_lengths.mode: sized`)
keeps one core split at every length; a var split k ways runs max(L / k, m(L)) values per
busy core, the cores past the length idle. This pass sets each symbol's minimum share m(L)
per admissible length by the cost model (`plan/length_shares.py`: a few busy cores read a
weight once, every core computes faster; the best trade moves with the length).

Reads: sized ops' lengths, core splits, accesses and layouts; the buffers work division
prices as LX. Writes: `SymLength.min_shares` of each symbol whose sized ops split it; a
`length_shares` report row per such symbol. Guarantees: at every admissible length each
split var's share fits the slice its core holds at the maximum, is whole sticks of a stick
var, and no reduced var idles a core (`SymLength.splits`). Runs after every pass that adds
split sized ops (superdsc_legalize, stage_inputs), so it prices and checks them all.
Disabled (`enabled: false`), each symbol keeps the one share coarse_tiling planned with.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass

from spyrec.ir import Graph
from spyrec.passes.registry import REPORT_OMIT, CompileContext, Pass, register_pass
from spyrec.plan.length_shares import choose_length_shares


@register_pass("length_shares")
@dataclass(frozen=True)
class LengthShares(Pass):
    enabled: bool = True

    report_keys: ClassVar[dict] = {"length_shares": REPORT_OMIT}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        """Each symbol's minimum share per busy core, by length."""
        lines = []
        for row in report.get("length_shares") or ():
            steps = ", ".join(f"{m} up to {upto}" for upto, m in row["min_shares"]) or "none"
            lines += ["", f"length shares: each busy core of an op sized by {row['symbol']} "
                          f"runs at least {steps} values of the length (by the cost model at "
                          f"each length)"]
        return lines

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        if self.enabled and graph.symbols:
            ctx.report["length_shares"] = choose_length_shares(graph, ctx.planning.params)
