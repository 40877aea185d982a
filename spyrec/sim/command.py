"""`spyrec run OUT --inputs DATA.npz [-o OUTPUTS.npz] [--check] [--report] [--json] [-v|-q]`.

A thin click command over `run_directory.run_directory`, the run path the Python API shares
(DESIGN §1). The results a user asked for (the
`--check` table, the `--report` cost table, or with `--json` one JSON document holding both,
schemas/run.schema.json) go to stdout; progress goes to stderr, so stdout stays clean for
pipes. Errors are SpyrecError subclasses and `cli.main` maps them to exit codes:
2 for a bad input file or directory, 1 (CheckMismatch) when `--check` finds a difference.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from spyrec.outdir import RUN_OUTPUTS
from spyrec.progress import Progress
from spyrec.stdout import emit


@click.command("run")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--inputs", "inputs_path", required=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Input arrays (.npz, or .safetensors for bf16); keys are the program's "
                   "input names.")
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the outputs (.npz, or .safetensors by suffix; keys "
                   "output_0, …; written under exactly this name); default OUT/outputs.npz. "
                   "An existing file is replaced only if it is an .npz or .safetensors other "
                   "than the --inputs file.")
@click.option("--check", is_flag=True,
              help="Also run the source .pt2 in PyTorch eager and compare; exit 1 on a "
                   "mismatch. The .pt2 is --model, else OUT/program.pt2 (--self-contained), "
                   "else the path manifest.json records (its SHA-256 must match).")
@click.option("--model", "model_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The .pt2 OUT was compiled from, for --check (when it has moved).")
@click.option("--program", "program_name", metavar="NAME",
              help="In a directory of several programs, the one to run (its .pt2's stem).")
@click.option("--report", is_flag=True, help="Print the estimated cost per op.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document (outputs, --check results, --report cost).")
@click.option("-v", "--verbose", is_flag=True,
              help="Log every op as it runs (and the traceback of an internal error).")
@click.option("-q", "--quiet", is_flag=True, help="No progress messages.")
def run_command(out: Path, inputs_path: Path, output_path: Path | None, check: bool,
                model_path: Path | None, program_name: str | None, report: bool,
                as_json: bool, verbose: bool, quiet: bool) -> None:
    """Simulate the compiled program in OUT on the inputs in an .npz file."""
    from spyrec.programs_dir import resolve_program

    out = resolve_program(out, program_name)
    # Imported here, not at the top: `spyrec compile` and `--help` must not pay for them.
    from spyrec.sim.check import format_checks
    from spyrec.sim.cost import format_table
    from spyrec.sim.inputs import (OUTPUT_SUFFIXES, check_output_path, check_replaceable,
                                   npz_arrays, write_npz)
    from spyrec.sim.run_directory import run_directory, write_into_directory

    def progress(msg: str) -> None:
        if not quiet:
            click.echo(f"spyrec run: {msg}", err=True)

    ticker = Progress("spyrec run", enabled=not quiet and not verbose)

    def detail(msg: str) -> None:
        if verbose and not quiet:
            click.echo(f"spyrec run: {msg}", err=True)
        ticker.step(msg)

    def check_output() -> None:
        """-o PATH checked before the run and again before simulating, so a typo fails in a
        second rather than after the whole run."""
        if output_path is not None:
            check_output_path(output_path, "-o")
            check_replaceable(output_path, "-o", OUTPUT_SUFFIXES, out,
                              {"--inputs": inputs_path})

    check_output()
    outcome = run_directory(out, inputs_path, check=check, model=model_path, log=progress,
                            detail=detail, before_simulating=check_output)
    result = outcome.result
    ticker.done()
    arrays = npz_arrays(result.outputs, result.output_dtypes, result.names)
    if output_path is None:
        written = write_into_directory(outcome.files, RUN_OUTPUTS, arrays)
    else:
        check_output()
        write_npz(output_path, arrays)
        written = output_path
    progress(f"{len(result.outputs)} output(s) written to {written} ({result.wall_s:.2f} s)")
    if report and not as_json:
        emit(format_table(result.cost))
    if outcome.checks is not None and not as_json:
        emit(format_checks(outcome.checks))
    if as_json:
        emit(json.dumps(run_document(result, written, outcome.checks,
                                           result.cost if report else None), indent=1))
    mismatch = outcome.mismatch()
    if mismatch is not None:
        raise mismatch


def run_document(result, output_path: Path, checks: list | None, cost: dict | None) -> dict:
    """`run --json`: every key always present (null when not asked for). A max error that is
    not a finite number is null, as JSON has neither NaN nor infinity: NaN when no comparison
    was possible (`problem` says why), inf when NaN/Inf differ from eager
    (`nonfinite_mismatches` > 0, check.py)."""
    def number(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {
        "output_file": str(output_path),
        "wall_s": round(result.wall_s, 6),
        "outputs": [{"key": key, "tensor": name, "dtype": dtype, "shape": list(a.shape)}
                    for key, name, dtype, a in zip(result.names, _tensor_names(result),
                                                   result.output_dtypes, result.outputs)],
        "check": None if checks is None else [
            {"key": c.key or f"output_{c.index}", "tensor": c.name, "dtype": c.dtype,
             "ok": c.ok, "max_abs_err": number(c.max_abs), "max_rel_err": number(c.max_rel),
             "tolerance": c.tolerance, "mismatches": c.mismatches,
             "nonfinite_mismatches": c.nonfinite, "total": c.total,
             "problem": c.problem, "rule": c.rule,
             "reference": None if c.reference is None else {
                 "rms_err": c.reference.rms, "max_abs_err": c.reference.max_abs,
                 "eager_rms_err": c.reference.eager_rms,
                 "eager_max_abs_err": c.reference.eager_max_abs,
                 "allowed_rms_err": c.reference.allowed_rms,
                 "allowed_max_abs_err": c.reference.allowed_max_abs},
             "no_reference": c.no_reference} for c in checks],
        "cost": cost,
    }


def _tensor_names(result) -> list[str]:
    manifest = result.program.manifest
    return list(manifest.outputs) + [name for _, name in manifest.mutated_buffers]
