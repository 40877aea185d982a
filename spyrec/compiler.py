"""`spyrec compile`: .pt2 -> Graph -> passes -> output directory.

Progress and `--dump-after` text go to stderr; nothing is printed on stdout. The driver only:
the options are checked before the model is loaded (`compile_plan.py`), the passes run with
their instruments (`compile_instruments.py`) in a tuned process (`process_tuning.py`), each
pass writes its own part of the report (`compile_report.py` assembles them), and the files
are written as one build (`codegen/writer.py`).

The report's cost section is the simulator's cost model applied to what was built, but the
compiler imports nothing of the simulator (tests/test_architecture.py): `compile_program` takes
the estimate as a function (`CostEstimate`) and spyrec/driver.py, above both, passes the
simulator's. The compiler times the estimate and writes its section with the report.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from spyrec.beside import Beside
from spyrec.compile_instruments import EarlyWeights, constants_steps, instruments, log
from spyrec.compile_plan import (  # noqa: F401 - CompileOptions and plan: the API's names
    CompileOptions, check_layout_names, plan,
)
from spyrec.compile_report import (
    assemble_report, elapsed_ms, report_json, report_text, sdsc_summary,
)
from spyrec.hostmem import no_automatic_collections
from spyrec.outdir import check_output_dir
from spyrec.passes.pipeline import cost_overrides, describe, run_passes
from spyrec.passes.registry import CompileContext
from spyrec.process_tuning import CollectWhenGrown, short_gil_slices

if TYPE_CHECKING:
    from spyrec.codegen.writer import BuiltOutput


def _phase(opts: CompileOptions, name: str) -> float:
    """Tell the progress display (if any) that phase `name` starts; its start time."""
    if opts.progress is not None:
        opts.progress(name)
    return time.perf_counter()


class CostEstimate(Protocol):
    """The cost of a built output directory: report.json's `cost` section, its table for
    report.txt and the cost curve (`cost_curve`: the estimate at each length of a program
    with symbolic lengths; empty without). `out_dir` is where the files are being written,
    for messages."""

    def __call__(self, output: BuiltOutput, out_dir: Path) -> tuple[dict, str, list[dict]]:
        ...


def compile_program(source: Path, out_dir: Path, opts: CompileOptions,
                    estimate_cost: CostEstimate) -> dict:
    """Compile `source` into `out_dir`; returns the report, its cost section from
    `estimate_cost` (report.schema.json requires one; spyrec/driver.py `compile_and_estimate`
    passes the simulator's)."""
    with no_automatic_collections(), short_gil_slices():
        return _compile(source, out_dir, opts, estimate_cost)


# From this many ops on, compile's cost estimate runs in a forked child (`spyrec.beside`)
# while the parent prints and writes the files: each is ~1 ms per op of Python, and in a
# program of few weights the other core is idle by then (beside a weights.bin still being
# written the three share the cores: Llama-3.2-1B d16 gains little). Below it, a fork
# (~10 ms) would cost more than it saves.
ESTIMATE_BESIDE_MIN_OPS = 128


def _compile(source: Path, out_dir: Path, opts: CompileOptions,
             estimate_cost: CostEstimate) -> dict:
    """`compile_program` itself: check, lower, run the passes, write."""
    checked = plan(source, out_dir, opts)
    # The heavy imports (torch, sympy, xDSL) only once every option is known to be good.
    from spyrec.codegen.writer import Sha256Job

    source_sha256 = Sha256Job(source)           # on a second thread, for the manifest
    timings: list[dict] = []
    program, graph = _lower(source, opts, checked, timings)
    ctx = checked.context()
    # weights.bin is written during the later passes; stopped and removed on any failure
    with EarlyWeights(constants_steps(checked.pipeline), check_output_dir(out_dir)) as early:
        watching = instruments(opts, timings) + [early, CollectWhenGrown()]
        for ins in watching:
            ins.after(0, "lower", graph, frozenset())
        run_passes(graph, checked.pipeline, ctx, watching, timings)
        t0 = _phase(opts, "codegen")
        report = assemble_report(graph, checked.pipeline, ctx.report, timings)
        report["frontend"] = {"requested": opts.frontend, "used": program.frontend,
                              "fallback_reason": program.fallback_reason or None}
        report["constant_folding"] = {"folded": program.constants_folded}
        output = _build(graph, source, opts, checked, ctx, source_sha256)
        timings.append({"name": "codegen", "wall_ms": elapsed_ms(t0)})
        left = _write(graph, source, out_dir, opts, output, report, estimate_cost, early.job,
                      checked.pipeline)
    for problem in left:
        log(opts, f"spyrec: note: could not remove the temporary {problem}; remove it by hand")
    if opts.timings:
        for row in timings:
            log(opts, f"{row['name']:>20}: {row['wall_ms']:9.1f} ms")
    return report


def _lower(source: Path, opts: CompileOptions, checked, timings: list[dict]):
    """The program read from `source` and its graph, lowered (with its symbolic lengths
    proven, `symbol_proof.py`) and checked against the options that name its parts."""
    from spyrec.frontend import load_program, lower_program
    from spyrec.frontend.limits import check_limits
    from spyrec.symbol_proof import attach_symbols

    t0 = _phase(opts, "load")
    program = load_program(source, opts.frontend, allow_symbols=True)
    timings.append({"name": "load", "wall_ms": elapsed_ms(t0)})
    if program.fallback_reason:
        log(opts, f"spyrec: note: using the torch front end: {program.fallback_reason}")
    t0 = _phase(opts, "lower")
    graph = lower_program(program)
    if program.symbols:
        attach_symbols(graph, program, source, opts.frontend)
    check_limits(graph)
    check_layout_names(checked.layouts, graph, opts.layouts)
    timings.append({"name": "lower", "wall_ms": elapsed_ms(t0)})
    return program, graph


def _build(graph, source: Path, opts: CompileOptions, checked, ctx: CompileContext,
           source_sha256) -> BuiltOutput:
    """Every file of the output directory, in memory (`codegen.build_outputs`)."""
    from spyrec.codegen import build_outputs

    configs = {"pipeline": checked.pipeline_path,
               "tiling": str(opts.tiling) if opts.tiling else None,
               "layouts": str(opts.layouts) if opts.layouts else None}
    return build_outputs(graph, source, describe(checked.pipeline), configs, ctx.report,
                         check=opts.verify_each, self_contained=opts.self_contained,
                         source_sha256=source_sha256,
                         cost_params=cost_overrides(checked.cost))


def _write(graph, source: Path, out_dir: Path, opts: CompileOptions, output: BuiltOutput,
           report: dict, estimate_cost: CostEstimate, weights_job,
           pipeline: list) -> list[str]:
    """Write the directory as one build, the cost estimate computed beside the files'
    printing (`spyrec.beside`) and put in the report; the temporaries left behind."""
    from spyrec.codegen import write_atomically

    t_cost = time.perf_counter()
    with Beside(lambda: estimate_cost(output, out_dir),
                fork=len(graph.ops) >= ESTIMATE_BESIDE_MIN_OPS) as estimate:
        # the sdsc files' text is printed here (and written), while a child estimates
        report["sdsc"] = sdsc_summary(output.files)

        def finalize(tmp: Path) -> dict[str, Callable[[str], str]]:
            report["cost"], cost_table, curve = estimate.result()
            if curve:
                report["cost_curve"] = curve
            report["passes"].append({"name": "cost_estimate", "wall_ms": elapsed_ms(t_cost)})

            def as_json(build: str) -> str:
                report["build"] = build
                return report_json(report)

            def as_text(build: str) -> str:
                report["build"] = build
                return report_text(report, pipeline) + "\n" + cost_table
            return {"report.json": as_json, "report.txt": as_text}

        return write_atomically(out_dir, output.files, source, finalize,
                                self_contained=opts.self_contained, weights_job=weights_job)
