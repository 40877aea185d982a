"""fusion — group a producer chain that stays on each core into one fused SuperDSC.

A matmul and its epilogue (scale, bias, residual add, SiLU/GELU, gating multiply, cast), the
flash attention tile body inside its K/V loops, a pointwise chain such as RMSNorm's: ops that
pass each other values through the core's LX become one `sdsc_<n>.json` whose `computeOp_`
lists them, each on its unit (PT for a matmul, SFP for the rest; reference/I §1a), and run as
one `sdsc_execute` (docs/formats.md, "Fused SuperDSCs"). The simulator executes the members in
order, exactly as the one-op files; the cost model times them as concurrent unit streams
(`CostParams.unit_overlap`).

Reads: ops, accesses, loops, core splits and LX placement (after scratchpad_planning).
Writes: `Operation.fused` (the group's name: its first member's); a `fusion` report row per
group. Guarantees: a group's members are consecutive, in one loop nest, on as many cores,
and every value one member passes another lives in LX (never an HBM address, never HBM
traffic; the full statement: `plan/fusion.py`). `enabled: false` leaves every op a one-op
SuperDSC: the files of the pipeline without this pass, byte for byte.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass

from spyrec.ir import Graph
from spyrec.passes.registry import CompileContext, Pass, register_pass
from spyrec.plan.fusion import fusion_groups, kept_bytes, unit_of


@register_pass("fusion")
@dataclass(frozen=True)
class Fusion(Pass):
    enabled: bool = True

    report_keys: ClassVar[dict] = {"fusion": None}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        """The fused SuperDSCs, one line each."""
        rows = report.get("fusion")
        if not rows:
            return []
        lines = ["", f"fused SuperDSCs: {len(rows)} ({sum(len(r['ops']) for r in rows)} ops); "
                     f"{sum(r['hbm_bytes_kept'] for r in rows)} bytes of intermediates kept "
                     f"in LX instead of an HBM round trip"]
        return lines + [f"  {r['name']}: {len(r['ops'])} compute ops ({r['units'].count('pt')} "
                        f"PT, {r['units'].count('sfp')} SFP), {len(r['kept'])} intermediates "
                        f"in LX ({r['hbm_bytes_kept']} bytes)" for r in rows]

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        rows = []
        for group in fusion_groups(graph) if self.enabled else []:
            for op in group.ops:
                op.fused = group.name
            rows.append({"name": group.name, "ops": [op.name for op in group.ops],
                         "units": [unit_of(op) for op in group.ops],
                         "kept": list(group.kept),
                         "hbm_bytes_kept": kept_bytes(graph, group)})
        ctx.report["fusion"] = rows
