"""`spyrec compile` as users get it: the compiler's output directory, with the simulator's cost
estimate of what was built in its report (report.json `cost`, the table in report.txt).

The one place the compiler and the simulator meet. The compiler imports nothing of the
simulator (tests/test_architecture.py): the cost model reads what a compile produced, as
`spyrec run` reads it, so it belongs to the simulator, and the compiler takes the estimate as a
function (`compiler.CostEstimate`). It runs from the documents codegen has just built, in memory
(`codegen.writer.BuiltOutput`, `sim.program.program_from_documents`): re-reading the files,
schema-checking them and parsing the bundle's MLIR would cost more than codegen itself
(issue 11), and would check nothing the builder does not. The CLI, the Python API, the tests'
and the benchmarks' compiles all come through `compile_and_estimate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from spyrec.compiler import CompileOptions, compile_program

if TYPE_CHECKING:
    from spyrec.codegen.writer import BuiltOutput
    from spyrec.ir.symbols import SymLength

CURVE_POINTS = 33       # cost-curve lengths at most (a long ladder is sampled evenly)


def compile_and_estimate(source: Path, out_dir: Path, opts: CompileOptions) -> dict:
    """Compile `source` into `out_dir`, its report with the cost section; returns the report."""
    return compile_program(source, out_dir, opts, estimate_cost)


def estimate_cost(output: BuiltOutput, out_dir: Path) -> tuple[dict, str, list[dict]]:
    """The cost section of a built output directory, its table and its cost curve
    (`compiler.CostEstimate`):
    the numbers `spyrec inspect` and `spyrec run --report` give once the files are written
    (tests/sim/test_cost_from_memory.py). Not verified: `verify_program` checks files a user
    hands to `spyrec run`, and would cost compile a third of the estimate to re-check its own
    output."""
    from spyrec.sim.cost import format_table
    from spyrec.sim.program import program_from_documents
    from spyrec.sim.program_cost import program_cost

    program = program_from_documents(out_dir, output.manifest, output.sdsc, output.executions)
    cost = program_cost(program)
    return cost, format_table(cost), cost_curve(output, cost, program.ops)


def cost_curve(output: BuiltOutput, cost: dict, ops: dict | None = None) -> list[dict]:
    """report.json `cost_curve` of a program with symbolic lengths (empty without): its
    estimated time and HBM traffic at each length of `curve_lengths`, from `cost` (the
    estimate at the maxima, whose per-execution rows hold at every length for an op in a
    bound loop: a symbolic length changes how often it runs, never what one run moves) and,
    for an op whose own size is a length (`ops`, by file: `OpSpec.lengths`), its cost at
    that length."""
    from spyrec.sim.cost import SizedCosts, cost_at

    kernels = output.manifest["kernels"]
    sized = SizedCosts(ops or {}, min_shares={s.name: s.min_shares for s in output.symbols
                                              if s.min_shares})
    return [{"lengths": lengths, **cost_at(
                cost, {k["name"]: output.run_counts[k["bundle"]].at(lengths) for k in kernels},
                resized=sized.rows(lengths))}
            for lengths in curve_lengths(output.symbols)]


def curve_lengths(symbols: tuple[SymLength, ...]) -> Iterator[dict[str, int]]:
    """Every admissible length when a ladder has at most CURVE_POINTS, else CURVE_POINTS
    evenly spaced ones from the minimum to the maximum. Several symbols move together, each
    at the same fraction of its ladder (their product would be too many points to read)."""
    if not symbols:
        return
    ladders = [s.values() for s in symbols]
    points = min(CURVE_POINTS, max(len(v) for v in ladders))
    steps = max(points - 1, 1)
    for k in range(points):     # k/steps of the way along each ladder, rounded half up
        yield {s.name: v[(2 * k * (len(v) - 1) + steps) // (2 * steps)]
               for s, v in zip(symbols, ladders)}
