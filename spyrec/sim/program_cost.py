"""The cost estimate of an OutputProgram: how often its trace executes each op, per bundle,
given to the cost model (`cost.py`).

Apart from `runner.py` (simulate) on purpose: `spyrec compile` estimates the cost of what it
has just built (spyrec/driver.py) and should import the builder and the cost model only, not
the executor, memory model and directory readers a run needs.
"""

from __future__ import annotations

from collections import Counter

from spyrec.costmodel import CostParams
from spyrec.sim.cost import estimate
from spyrec.sim.program import OutputProgram


def program_cost(program: OutputProgram, params: CostParams | None = None) -> dict:
    """The data-independent cost estimate (the `cost` section of report.json), with the
    parameters the program was compiled with unless `params` says others."""
    params = params or program.manifest.cost_params
    bundles = {k.name: Counter() for k in program.manifest.kernels}
    for kernel, ex in program.trace:
        bundles[kernel][ex.file] += 1
    return estimate(program.ops, {k: dict(c) for k, c in bundles.items()}, params)
