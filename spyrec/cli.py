"""Command line: thin click commands over the library (DESIGN §1).

Every way out of `main` is one of DESIGN §1's exit codes with at most one line on stderr:
a `SpyrecError` prints its message and exits with the class's code, a click usage error keeps
click's format (exit 2), Ctrl-C is 130, and anything else is a bug in spyrec: exit 70 with one
line asking for a report (the traceback only under `-v` or SPYREC_DEBUG=1). Heavy modules
(torch, sympy, the simulator) are imported inside the commands, so `--help` and a bad option
answer at once.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

import click

from spyrec import __version__
from spyrec.errors import SpyrecError
from spyrec.hostmem import no_numpy_hugepage_advice
from spyrec.stdout import StdoutError, emit, stdout_error
from spyrec.stdout import flush as flush_stdout

INTERNAL_EXIT = 70
INTERRUPT_EXIT = 130


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="spyrec")
def cli() -> None:
    """spyrec: compile torch.export programs for IBM Spyre and simulate them.

    \b
    Commands arrive in this order: compile (a .pt2 into an output directory),
    run (simulate an output directory against inputs), inspect (layouts, plan, cost),
    verify (every file of an output directory against its build record),
    generate (greedy tokens over a directory's prefill and decode programs).
    """


def _verbosity(verbose: int, quiet: bool) -> int:
    return -1 if quiet else verbose


@cli.command("compile")
@click.argument("models", nargs=-1, required=True, type=click.Path(path_type=Path),
                metavar="MODEL.pt2...")
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Output directory (replaced atomically).")
@click.option("--pipeline", type=click.Path(path_type=Path),
              help="Pipeline YAML (default: configs/pipeline.yaml).")
@click.option("--tiling", type=click.Path(path_type=Path),
              help="Tiling YAML (examples in configs/tiling/): counted loops around groups of "
                   "ops (DESIGN §6).")
@click.option("--layouts", type=click.Path(path_type=Path),
              help="Stick-dim pins for inputs: {inputs: {NAME: {stick_dim: D}}}.")
@click.option("--set", "sets", multiple=True, metavar="PASS.OPTION=VALUE",
              help="Override one pipeline option (repeatable).")
@click.option("--dump-after", metavar="PASS|all", help="Print the IR after a pass to stderr.")
@click.option("--print-ir-after-all", "ir_dir", type=click.Path(path_type=Path), metavar="DIR",
              help="Write the IR after lowering and after every pass to DIR/NN_<pass>.ir.")
@click.option("--print-ir-before", metavar="PASS", help="Print the IR before a pass to stderr.")
@click.option("--verify-each", is_flag=True,
              help="Verify the IR after lowering and after every pass, and every core's "
                   "start address in the sdsc files against the IR (a failure is exit 70).")
@click.option("--list-passes", is_flag=True, is_eager=True, expose_value=False,
              callback=lambda ctx, _, value: _list_passes(ctx) if value else None,
              help="List every pass with its options and what it does, then exit.")
@click.option("--frontend", type=click.Choice(["auto", "fast", "torch"]), default="auto",
              show_default=True,
              help="fast: read the .pt2 without torch; torch: torch.export.load; auto: fast, "
                   "falling back to torch (with a note) when it must.")
@click.option("--self-contained", is_flag=True,
              help="Also copy MODEL.pt2 into the output directory (program.pt2), so run "
                   "--check works after the directory is moved or MODEL.pt2 is gone.")
@click.option("--timings", is_flag=True, help="Print per-pass wall time to stderr.")
@click.option("-v", "--verbose", count=True,
              help="Per-pass logging on stderr (and the traceback of an internal error).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
def compile_command(models, out_dir, pipeline, tiling, layouts, sets, dump_after, ir_dir,
                    print_ir_before, verify_each, frontend, self_contained, timings, verbose,
                    quiet):
    """Compile MODEL.pt2 (from torch.export.save) into an output directory.

    Several .pt2 files (a prefill and a decode step) make one directory of several programs,
    each named by its file stem (run --program NAME, spyrec generate)."""
    from spyrec.compiler import CompileOptions
    from spyrec.driver import compile_and_estimate
    from spyrec.progress import Progress

    ticker = Progress("spyrec compile", enabled=not quiet and verbose == 0)
    opts = CompileOptions(pipeline, tiling, layouts, list(sets), dump_after, timings,
                          _verbosity(verbose, quiet), frontend, print_ir_after_all=ir_dir,
                          print_ir_before=print_ir_before, verify_each=verify_each,
                          progress=ticker.step, self_contained=self_contained)
    try:
        if len(models) == 1:
            reports = {None: compile_and_estimate(models[0], out_dir, opts)}
        else:
            from spyrec.generate import write_serving_report
            from spyrec.multi_compile import compile_programs
            reports = compile_programs(list(models), out_dir,
                                       lambda m, d: compile_and_estimate(m, d, opts),
                                       write_serving_report)
    finally:
        ticker.done()
    for name, report in reports.items() if opts.verbose >= 0 else ():
        r = report["restickify"]
        where = out_dir if name is None else f"{out_dir} program {name}"
        click.echo(f"spyrec: wrote {where} ({report['ops']} ops, {r['count']} restickify)",
                   err=True)


def _list_passes(ctx: click.Context) -> None:
    from spyrec.passes.registry import describe_passes

    emit(describe_passes(), nl=False)
    ctx.exit(0)


@cli.command("inspect")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.argument("tensor", required=False)
@click.option("--svg", "svg_path", type=click.Path(path_type=Path),
              help="Draw TENSOR's stick layout (host grid coloured by stick) into FILE.svg.")
@click.option("--trace", "trace_path", type=click.Path(path_type=Path),
              help="Write the cost model as a Chrome/Perfetto trace (one lane per core).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def inspect_command(out_dir, tensor, svg_path, trace_path, as_json):
    """Show the layouts, restickifies and cost in OUT, or how TENSOR is laid out and accessed.

    With --svg or --trace the files are written and stdout stays empty (unless --json)."""
    import json

    from spyrec.inspect_dir import (check_output_files, inspect_data, inspect_directory,
                                    write_svg, write_trace)

    if svg_path is not None and tensor is None:
        raise click.UsageError("--svg draws one tensor: give TENSOR (spyrec inspect OUT "
                               "TENSOR --svg FILE)")
    check_output_files(out_dir, svg_path, trace_path)
    if svg_path is not None:
        write_svg(out_dir, tensor, svg_path)
        click.echo(f"spyrec: wrote {svg_path}", err=True)
    if trace_path is not None:
        write_trace(out_dir, trace_path)
        click.echo(f"spyrec: wrote {trace_path}", err=True)
    if as_json:
        emit(json.dumps(inspect_data(out_dir, tensor), indent=1))
    elif svg_path is None and trace_path is None:
        emit(inspect_directory(out_dir, tensor), nl=False)


@cli.command("verify")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress messages.")
def verify_command(out_dir, as_json, quiet):
    """Check every file of OUT against the build record in its manifest.

    \b
    Hashes every file (weights.bin tensor by tensor), checks that the reports carry the
    build's id and that the program verifies statically, and names files that are not
    the build's. `spyrec run` checks less on every run (docs/formats.md, "One build").
    Exit 0 when everything is as compile wrote it, 2 otherwise."""
    import json

    from spyrec.errors import InputFileError
    from spyrec.progress import Progress
    from spyrec.sim.integrity import verify_directory

    ticker = Progress("spyrec verify", enabled=not quiet)
    try:
        verdict = verify_directory(out_dir, ticker.step)
    finally:
        ticker.done()
    if as_json:
        emit(json.dumps(verdict.document(), indent=1))
    elif not verdict.problems:
        emit(verdict.summary())
    if verdict.problems:
        raise InputFileError(verdict.summary() if not as_json else
                             f"{out_dir}: {len(verdict.problems)} problem(s) (see the JSON)")


def _register_run_command() -> None:
    from spyrec.sim.command import run_command

    cli.add_command(run_command, "run")


_register_run_command()


def _register_generate_command() -> None:
    from spyrec.generate_command import generate_command

    cli.add_command(generate_command, "generate")


_register_generate_command()


def debugging(argv: list[str]) -> bool:
    """Whether to show tracebacks: `-v`/`--verbose` anywhere on the command line (any
    subcommand), or SPYREC_DEBUG set to anything but "" or "0"."""
    if os.environ.get("SPYREC_DEBUG", "") not in ("", "0"):
        return True
    return any(a == "--verbose" or (a.startswith("-v") and set(a[1:]) == {"v"}) for a in argv)


def internal_error_line(e: BaseException) -> str:
    """The one line a bug in spyrec prints: what broke, and how to report it."""
    text = " ".join(str(e).split())
    detail = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return (f"spyrec: internal error: {detail} — please report this with the command and "
            f"input (run with -v for the traceback)")


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: raised in the main thread so the work unwinds as it does on
    Ctrl-C (a compile's temporary directory and weights job removed, nothing half-written)."""


@contextlib.contextmanager
def _signals_unwind():
    """SIGTERM and SIGHUP raise `Terminated` while `main` runs, where their action is still
    the default (a parent's SIG_IGN, as `nohup` sets for SIGHUP, is kept)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum, frame):
        raise Terminated(signum)
    taken = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
            taken[sig] = signal.signal(sig, unwind)
    try:
        yield
    finally:
        for sig, previous in taken.items():
            signal.signal(sig, previous)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    no_numpy_hugepage_advice()      # large arrays 9x faster to first touch (spyrec/hostmem.py)
    try:
        with _signals_unwind():
            try:
                cli.main(args=argv, prog_name="spyrec", standalone_mode=False)
            finally:
                flush_stdout()
    except Terminated as e:
        click.echo(f"spyrec: terminated ({signal.Signals(e.args[0]).name})", err=True)
        sys.exit(128 + e.args[0])
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("spyrec: interrupted", err=True)
        sys.exit(INTERRUPT_EXIT)
    except StdoutError as e:
        if str(e):
            click.echo(f"spyrec: {e}", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(2)
    except SpyrecError as e:
        click.echo(f"spyrec: {e}", err=True)
        sys.exit(e.exit_code)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EPIPE, errno.EDQUOT) or e.filename is not None:
            _internal_error(argv, e)
        error = stdout_error(e)     # click's own printing (--help, --version) to a full disk
        if str(error):
            click.echo(f"spyrec: {error}", err=True)
        sys.exit(error.exit_code)
    except SystemExit as e:
        if e.code == 1 and hasattr(sys.stdout, "wrapped"):
            sys.exit(2)     # click's own exit for a closed pipe (its help, its version)
        raise
    except Exception as e:  # noqa: BLE001 - the last line of defence: a bug in spyrec
        _internal_error(argv, e)


def _internal_error(argv: list[str], e: BaseException) -> None:
    if debugging(argv):
        traceback.print_exc()
    click.echo(internal_error_line(e), err=True)
    sys.exit(INTERNAL_EXIT)


def entry() -> None:
    """The `spyrec` process (the console script, `python -m spyrec`): `main`, then an exit
    that skips tearing the interpreter down. A compile leaves its module-level caches and
    interned objects for the interpreter to free one by one at exit: 0.09-0.17 s after a
    compile of 816 ops, 0.14-0.24 s after 2,416 (measured from the last atexit handler to
    the process's end), for nothing. The exit keeps what a normal one does that matters: atexit
    handlers run (temporary directories' finalizers, torch's), the output streams are
    flushed, the exit status is the one `main` gave. With a non-daemon thread still running
    (which a normal exit would wait for) it exits normally. `main` itself, which tests call
    in-process, is unchanged."""
    try:
        main()
        code = 0
    except SystemExit as e:
        code = _exit_status(e.code)
    leave(code)


def _exit_status(code) -> int:
    """The process status `sys.exit(code)` gives: None 0, an int itself, anything else
    printed on stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def leave(code: int) -> None:
    """End the process with status `code` without the interpreter's teardown (`entry`)."""
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if others or run_exit_handlers is None:
        sys.exit(code)
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        if stream is None:                  # started with the descriptor closed
            continue
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe or stream: nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
