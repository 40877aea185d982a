"""Running an output directory, the one path `spyrec run` and `spyrec.run` share.

The directory is opened once (`files.OutputFiles`) and everything the run reads comes through
that handle, so a compile that replaces the directory meanwhile cannot mix two builds into one
run. What can be checked without simulating is checked first (the `--check` reference, the
inputs), so a mistake fails in a second rather than after the whole run. The outputs a run
writes into its own directory (`outputs.npz` by default) go into the directory it read, and
only while the path still names it: a run that ends after a recompile does not put the old
build's outputs into the new one.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from spyrec.errors import CheckMismatch, InputFileError, OutputDirError
from spyrec.sim.files import OutputFiles

Log = Callable[[str], None]


@dataclass
class RunOutcome:
    """A finished run: its result (`runner.SimResult`), the directory's handle, and the
    `--check` rows when asked (`against`: what the outputs were compared with)."""

    result: object
    files: OutputFiles
    checks: list | None = None
    against: str = "PyTorch eager"

    def mismatch(self) -> CheckMismatch | None:
        """The CheckMismatch a failed `--check` raises (None when every output passed)."""
        from spyrec.sim.check import describe_failure

        bad = [c for c in self.checks or () if not c.ok]
        if not bad:
            return None
        return CheckMismatch(f"{len(bad)} of {len(self.checks)} outputs differ from "
                             f"{self.against} beyond tolerance: "
                             + "; ".join(describe_failure(c) for c in bad))


def run_directory(out: str | Path, inputs: Mapping[str, np.ndarray] | str | Path, *,
                  check: bool = False, model: Path | None = None,
                  log: Log = lambda _: None, detail: Log = lambda _: None,
                  before_simulating: Callable[[], None] = lambda: None) -> RunOutcome:
    """Simulate output directory `out` on `inputs` (host arrays by input name, or the path of
    an .npz/.safetensors file), with `--check` when asked (`model`: the .pt2 to run in eager
    instead of the recorded source). `log` says what the run does next, `detail` reports every
    op; `before_simulating()` runs once everything that can be checked without simulating
    has passed (the CLI checks its -o path there)."""
    from spyrec.sim import foreign
    from spyrec.sim.check import check_outputs
    from spyrec.sim.reference_program import check_reference_program
    from spyrec.sim.directory import is_foreign
    from spyrec.sim.inputs import check_inputs, read_inputs
    from spyrec.sim.runner import simulate

    if model is not None and not check:
        raise InputFileError(f"--model {model}: only --check reads it; add --check")
    files, program = _load(out, log)
    expected = reference = None
    if check and is_foreign(files):   # no eager model: the manifest names expectations
        expected = foreign.expected_outputs(files.path, program.manifest)
    elif check:     # the source .pt2 is there, unchanged, callable with the manifest's inputs
        reference = check_reference_program(files, list(program.manifest.inputs), model)
    if isinstance(inputs, (str, os.PathLike)):
        arrays = read_inputs(program.manifest, inputs)
    else:
        arrays = check_inputs(program.manifest, dict(inputs))
    before_simulating()
    result = simulate(files.path, arrays, log=detail, program=program)
    outcome = RunOutcome(result, files)
    if expected is not None:
        outcome.checks = foreign.check_expected(program.manifest, expected, result.outputs)
        outcome.against = "the expected outputs"
    elif check:
        log(f"running {reference} in PyTorch eager for --check")
        outcome.checks = check_outputs(files.path, program.manifest, arrays, result.outputs,
                                       reference)
    return outcome


READ_ATTEMPTS = 3


def _load(out, log: Log):
    """The directory opened and read; read again from the start when a compile replaced it
    while it was being read (a watch loop recompiling it): a run then runs the new build
    whole, never a mix. Given up after READ_ATTEMPTS."""
    from spyrec.sim.directory import load_output_dir, open_output_dir
    from spyrec.sim.files import DirectoryReplaced
    from spyrec.sim.prefetch import begin_run

    for attempt in range(READ_ATTEMPTS):
        files = open_output_dir(out)
        begin_run(files)     # torch if needed, then the disk works while the directory is read
        try:
            return files, load_output_dir(files)
        except DirectoryReplaced:
            if attempt == READ_ATTEMPTS - 1 or not isinstance(out, (str, os.PathLike)):
                raise
            log(f"{files.path} was replaced while it was read: reading the new build")
            files.close()


def write_into_directory(files: OutputFiles, name: str, arrays: dict[str, np.ndarray]) -> Path:
    """Write `arrays` as .npz file `name` into the directory the run read, replacing an
    earlier one whole; refused when the path no longer names that directory."""
    if files.replaced():
        raise OutputDirError(
            f"{files.path}: was replaced (recompiled, moved or deleted) while this run ran; "
            f"its outputs belong to the build the run read, so they were not written into "
            f"what is there now. Run again, or give -o PATH to keep a run's outputs.")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    files.replace_file(name, buffer.getvalue())
    return files.label(name)
