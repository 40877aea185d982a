"""stage_inputs — read a program input or constant from HBM once when it is read alike again.

A decoder reads its input x four times (RMSNorm twice, its scale, the residual add); a tiled MLP
reads every weight once per token tile. Where accesses give each core the same slice at least
twice and the slice fits, one `identity` op copies it into an intermediate (`<name>__staged`,
or a per-tile `<name>__tile` inside a loop) that scratchpad_planning then keeps in LX, and
those accesses read the copy.

Reads: ops, accesses, layouts, core splits (after work_division and superdsc_legalize).
Writes: the copy buffers and ops, the reads re-pointed; a `stage_inputs` report row per staged
tensor. Guarantees: values unchanged; a copy only where the LX placement would hold it (the
full statement: `plan/staging.py`).

A thin driver over `plan/staging.py stage_inputs`, which `--tiling auto` calls too; this module
holds the options (`StagingOptions`, the pass's fields) and their checks.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass

from spyrec.errors import ConfigError
from spyrec.ir import Graph
from spyrec.passes.registry import CompileContext, Pass, register_pass
from spyrec.plan.lx_placement import check_lx_budget
from spyrec.plan.staging import StagingOptions, stage_inputs


@register_pass("stage_inputs")
@dataclass(frozen=True)
class StageInputs(StagingOptions, Pass):
    report_keys: ClassVar[dict] = {"stage_inputs": None}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        """Inputs and constants read from HBM once for several reads."""
        rows = report.get("stage_inputs")
        if not rows:
            return []
        lines = ["", f"staged inputs: {len(rows)} read from HBM once (once per tile in a "
                     f"loop) into LX copies"]
        return lines + [f"  {r['input']} -> {r['buffer']}: {r['reads']} reads"
                        f"{' each trip (a per-tile copy in the loop)' if r.get('per_tile') else ''}"
                        f", {r['bytes_per_core']} bytes/core, cores "
                        f"[{', '.join(f'{v}:{k}' for v, k in r['split'].items())}]"
                        for r in rows]

    def check_options(self) -> None:
        """Called when the pipeline is built, before the model is loaded."""
        if not 0 <= self.max_fraction <= 1:
            raise ConfigError(f"stage_inputs.max_fraction must be between 0 and 1 (a share of "
                              f"the LX budget), got {self.max_fraction}")
        check_lx_budget("stage_inputs.budget_bytes", self.budget_bytes)

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        self.check_options()
        ctx.report["stage_inputs"] = stage_inputs(graph, self)
