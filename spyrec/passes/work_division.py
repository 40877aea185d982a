"""work_division — split every op's iteration space across the cores.

Reads: op ranges and reduced vars, buffer layouts.  Writes: `Operation.core_splits`
({var: slices}, every iteration var present).
Guarantees: the product of splits is at most `cores`; every split divides its range evenly;
reduced vars are never split (a K-split needs a ring reduction, a later pass); a split of any
arg's stick variable gives each core whole sticks of that arg (a SuperDSC core starts at a
stick boundary of every tensor: its start address has no lane offset).

Greedy: output vars outermost first, vars that are no arg's stick dim before stick vars (a
core then gets whole rows of sticks, as the reference's work division does: the published
512x512 transposed add splits its 512 columns over 32 cores, not 8 stick columns x 4), each
taking the largest divisor of its range that the remaining cores allow.
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
        sticks: dict[str, int] = {}     # stick var -> largest elements per stick among its args
        for _, access in op.accesses():
            buf = graph.buffers[access.buffer]
            v = stick_info(buf.host_size, buf.host_strides, buf.layout, op.var_ranges,
                           access.index).stick_var
            if v is not None:
                sticks[v] = max(sticks.get(v, 1), buf.layout.elems_per_stick)
        splits = {v: 1 for v, _ in op.ranges}
        left = self.cores
        order = [(v, n) for v, n in op.ranges if v not in sticks] + \
            [(v, n) for v, n in op.ranges if v in sticks]
        for v, n in order:
            if v in op.reduced or left == 1:
                continue
            e = sticks.get(v, 1)
            if n % e:
                continue
            d = _largest_divisor_at_most(n // e, left)
            splits[v] = d
            left //= d
        return splits


def _largest_divisor_at_most(n: int, limit: int) -> int:
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1
