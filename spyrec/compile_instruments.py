"""What watches a compile's passes (MLIR's pass instrumentation): the IR dumps and the verifier
(`passes/pipeline.py`), `-v`'s line per pass (`VerboseLog`), and the early start of
weights.bin (`EarlyWeights`: `codegen/weights_job.py` writes it on background threads while
the later passes run, once the passes that may change the constants have run).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from spyrec.passes.pipeline import Instrument, IRPrinter, Verifier


def log(opts, message: str) -> None:
    """A line on stderr, unless the compile is quiet (`CompileOptions.verbose` < 0)."""
    if opts.verbose >= 0:
        print(message, file=sys.stderr)


def constants_steps(pipeline: list) -> tuple[int, ...]:
    """The steps after which what weights.bin holds may have changed: the passes whose
    contract writes `constants`, in order ((0,), the lowering, if none does)."""
    return tuple(step for step, p in enumerate(pipeline, start=1)
                 if "constants" in p.contract.writes) or (0,)


class EarlyWeights(Instrument):
    """Starts writing weights.bin (`codegen/weights_job.py`) once the first step that may
    change the constants has run and been verified (this instrument comes after the
    verifier), and plans it again after each later such step. Not when the output's parent
    directory does not exist yet: a compile that fails later must not leave directories it
    created."""

    def __init__(self, steps: tuple[int, ...], target: Path):
        self.steps, self.target = steps, target
        self.job = None

    def after(self, step, name, graph, facts) -> None:
        if step not in self.steps:
            return
        if self.job is not None:
            self.job.replan(graph)
        elif step == self.steps[0] and self.target.parent.is_dir():
            from spyrec.codegen.weights_job import WeightsJob

            self.job = WeightsJob(graph, self.target)

    def __enter__(self) -> "EarlyWeights":
        return self

    def __exit__(self, *exc) -> None:
        if self.job is not None:    # a no-op once the file was taken
            self.job.discard()


@dataclass
class VerboseLog(Instrument):
    """`-v`: one line per pass as it finishes, with its wall time."""

    opts: object          # compile_plan.CompileOptions
    timings: list[dict]

    def after(self, step, name, graph, facts) -> None:
        if step > 0:
            log(self.opts, f"spyrec: {name}: {self.timings[-1]['wall_ms']:.1f} ms")


def instruments(opts, timings: list[dict]) -> list[Instrument]:
    """Dumps first, so a graph that fails verification is on disk for the report."""
    out: list[Instrument] = [IRPrinter(sys.stderr, opts.dump_after, opts.print_ir_before,
                                       opts.print_ir_after_all)]
    if opts.verbose > 0:
        out.append(VerboseLog(opts, timings))
    if opts.verify_each:
        out.append(Verifier())
    return out
