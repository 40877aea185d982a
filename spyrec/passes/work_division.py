"""work_division — split every op's iteration space across the cores.

Reads: op ranges and reduced vars, buffer layouts.  Writes: `Operation.core_splits`
({var: slices}, every iteration var present).
Guarantees: the product of splits is at most `cores`; every split divides its range evenly;
reduced vars are never split (a K-split needs a ring reduction, a later pass); a split of the
output's stick variable gives each core whole sticks.

Greedy: output vars outermost first, each taking the largest divisor of its range that the
remaining cores allow.
"""

from __future__ import annotations

from dataclasses import dataclass

from spyrec.device import CORES
from spyrec.ir import Graph, Operation
from spyrec.indexing.sticks import stick_info
from spyrec.passes.registry import CompileContext, Pass, register_pass


@register_pass("work_division")
@dataclass(frozen=True)
class WorkDivision(Pass):
    cores: int = CORES

    def check_options(self) -> None:
        """Called when the pipeline is built, before the model is loaded."""
        if not 1 <= self.cores <= CORES:
            from spyrec.errors import ConfigError
            raise ConfigError(f"work_division.cores must be between 1 and {CORES}, got "
                              f"{self.cores}")

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        self.check_options()
        for op in graph.ops:
            op.core_splits = self._split(graph, op)

    def _split(self, graph: Graph, op: Operation) -> dict[str, int]:
        out = graph.buffers[op.output.buffer]
        stick = stick_info(out.host_size, out.host_strides, out.layout, op.var_ranges,
                           op.output.index).stick_var
        e = out.layout.elems_per_stick
        splits = {v: 1 for v, _ in op.ranges}
        left = self.cores
        for v, n in op.ranges:
            if v in op.reduced or left == 1:
                continue
            units = n // e if v == stick else n
            if v == stick and n % e:
                continue
            d = _largest_divisor_at_most(units, left)
            splits[v] = d
            left //= d
        return splits


def _largest_divisor_at_most(n: int, limit: int) -> int:
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1
