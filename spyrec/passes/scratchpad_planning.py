"""scratchpad_planning — keep intermediates in the cores' LX scratchpads instead of HBM.

Which buffers: every intermediate (not a program input, output, constant or mutated buffer)
that is either a per-tile buffer of a loop body (coarse_tiling) or used only by ops outside
loops (issue 10 §1); `intermediates: false` keeps to the per-tile ones (issue 8).

Reads: `Buffer.per_tile` (coarse_tiling), layouts, `Operation.core_splits` and `loops`.
Writes: `Buffer.lx_address` (a per-core byte offset), the replicas of a writer whose output
stays in HBM dropped; a `scratchpad` report row per candidate.
Guarantees: each placed buffer's per-core slice fits the budget, every op using it gives each
core the same slice, buffers live together never share bytes, and every op using a whole LX
buffer has a SuperDSC form (the full statement: `plan/lx_placement.py`).

A thin driver over `plan/lx_placement.py` (`place_lx`, then `apply_lx`), which stage_inputs'
LX check and `--tiling auto` call too.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass

from spyrec.device import LX_USABLE_BYTES_PER_CORE
from spyrec.ir import Graph
from spyrec.passes.registry import CompileContext, Pass, register_pass
from spyrec.plan.lx_placement import apply_lx, check_lx_budget, place_lx


@register_pass("scratchpad_planning")
@dataclass(frozen=True)
class ScratchpadPlanning(Pass):
    budget_bytes: int = LX_USABLE_BYTES_PER_CORE
    enabled: bool = True
    # false: only the per-tile buffers of loop bodies (issue 8), as before issue 10
    intermediates: bool = True


    report_keys: ClassVar[dict] = {"scratchpad": None}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        """The LX plan: only when some buffer is a candidate."""
        plan = report.get("scratchpad")
        if not plan or not plan["buffers"]:
            return []
        lines = ["", f"scratchpad (LX per core): peak {plan['peak_bytes_per_core']} of "
                     f"{plan['budget_bytes']} bytes"]
        for row in plan["buffers"]:
            where = f"LX @{row['lx_address']}" if row["placed"] else f"HBM ({row['reason']})"
            lines.append(f"  {row['buffer']:<24} {row['bytes_per_core']:>10} bytes/core  "
                         f"{where}")
        return lines

    def check_options(self) -> None:
        check_lx_budget("scratchpad_planning.budget_bytes", self.budget_bytes)

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        self.check_options()
        placement = place_lx(graph, self.budget_bytes, self.intermediates, self.enabled,
                             memo={})     # the layers of a stack share their analyses
        apply_lx(graph, placement)
        ctx.report["scratchpad"] = {"budget_bytes": self.budget_bytes,
                                    "peak_bytes_per_core": placement.peak,
                                    "buffers": list(placement.rows.values())}
