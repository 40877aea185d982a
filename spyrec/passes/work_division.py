"""work_division — split every op's iteration space across the cores.

Reads: op ranges and reduced vars, buffer layouts, `Buffer.per_tile`.  Writes:
`Operation.core_splits` ({var: slices}, every core dim present) and, for an op chain moves
replicate (ir/lx.py), `Operation.replicas` and `replicas_fastest`; nothing else, and only
once: the plan is chosen as a value and then applied (`plan/split_plan.py apply_plan`). A
`work_division` report row per op (chosen split and its estimated time beside the greedy
split's).
Guarantees: the product of splits is at most `cores`; every split divides its range evenly;
a reduced var is split only by the cost strategy, for ops whose partials combine outside
loops, never with its output in LX; a split of an arg's stick variable gives each core whole
sticks of that arg; each core addresses at most 256 MiB of device memory per op (`ir/span.py`:
only splits that fit are candidates, an op none fits is refused with its span). Among splits
estimated within `spread_within` of the cheapest, the one on the most cores wins; a row of an
op on fewer cores says why (`fewer_cores`). With symbolic lengths, how many of a split's
cores run at each length is the length_shares pass's (`plan/length_shares.py`).

A thin driver: the choice is `plan/core_splits.py divide_work` (`plan_work`: candidates, the
split estimate, chain moves, replicas, co-writers; then `apply_plan`), shared with
`--tiling auto`, which plans its candidates the same way. This module holds the options
(`SplitOptions`, the pass's fields) and their checks.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass

from spyrec.errors import ConfigError
from spyrec.ir import Graph
from spyrec.passes.registry import CompileContext, Pass, register_pass
from spyrec.plan.core_splits import SplitOptions, check_split_options, divide_work


@register_pass("work_division")
@dataclass(frozen=True)
class WorkDivision(SplitOptions, Pass):
    report_keys: ClassVar[dict] = {"work_division": None}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        """The ops whose split differs from the greedy one (every op's row is in
        report.json)."""
        plan = report.get("work_division")
        if not plan:
            return []
        lines = ["", f"work division: {plan['changed']} of {len(plan['ops'])} ops split by "
                     f"cost, not greedily; estimated {plan['time_us']:.3f} us vs "
                     f"{plan['greedy_time_us']:.3f} us greedy (one execution of each op)"]
        return lines + [f"  {r['op']:<24} {r['split']} {r['time_us']:.3f} us, greedy "
                        f"{r['greedy_split']} {r['greedy_time_us']:.3f} us"
                        for r in plan["ops"] if r["split"] != r["greedy_split"]]

    def check_options(self) -> None:
        """Called when the pipeline is built, before the model is loaded."""
        check_split_options("work_division", self.cores, self.spread_within)
        if self.strategy not in ("cost", "greedy"):
            raise ConfigError(f"work_division.strategy must be cost or greedy, got "
                              f"{self.strategy!r}")

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        self.check_options()
        ctx.report["work_division"] = divide_work(graph, self, params=ctx.planning.params)
