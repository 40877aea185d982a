"""`make test`: the whole suite as CI runs it, in parallel pytest processes (issue 56).

Settings. Every run has `SPYREC_PROGRESS_DELAY=0`: progress lines appear at the first step of
every command, so a test that would break on a progress line breaks on every machine, not only
on a loaded one where a run happened to take over a second (spyrec/progress.py). The whole
suite runs with `SPYREC_SIM_THREADS=7`, more workers than CI's cores, so big ops' chunks
finish out of order; then the tests where the count changes what runs (`ONE_THREAD`) run
again with `SPYREC_SIM_THREADS=1`, everything on the calling thread: results may not depend
on the count (spyrec/sim/threads.py).

Parallel. The suite is ~700 CPU-seconds of mostly single-threaded Python; one process took
10-12 minutes on 2 idle cores. The jobs below (the suite split by directory, and the
one-thread run) go to as many pytest processes as this process may use cores (at least 2),
longest first; each job's output is printed whole when it ends, then a line per job with its
wall time. The split is by directory so a module's shared fixtures (compiled samples) are
built once; `SHARD_A` holds the directories whose tests took about half the time when it was
measured (DEVELOPERS.md), and every test not under them runs in the other job, so a new test
file is never left out. The jobs share pytest's numbered temporary directories (each session
locks its own; the last three are kept, as with one process).

    python -m tests.run_suite [-j N] [PYTEST_ARGS...]   # extra args go to every job
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BASE_ENV = {"SPYREC_PROGRESS_DELAY": "0"}
MAIN_THREADS = "7"

# About half of the suite's time (DEVELOPERS.md, "Test targets", says when it was measured).
SHARD_A = ["tests/models", "tests/differential", "tests/codegen", "tests/packaging",
           "tests/opinfo", "tests/snapshots"]

# Where the thread count changes what runs: ops in several chunks on the pool (at the
# default 2**22 points per chunk, only test_threads' ops, which it shrinks: counted from
# `threads.run_all` calls with more than one item over tests/sim, differential and models),
# and relaid-out constants (tied tables), built on the calling thread at 1; then the sample
# programs end to end. The whole of tests/sim, differential and models passed at 1 and 7.
ONE_THREAD = ["tests/sim/test_threads.py", "tests/sim/test_relayouts.py",
              "tests/passes/test_constant_layouts.py", "tests/passes/test_split_padding.py",
              "tests/differential/test_programs.py"]


@dataclass
class Job:
    name: str
    args: list[str]
    env: dict[str, str]
    code: int | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0    # user + system, of pytest and the processes it waited for
    output: str = field(default="", repr=False)


def jobs(extra: list[str]) -> list[Job]:
    """The suite in two halves at MAIN_THREADS workers, then the one-thread subset."""
    main = {**BASE_ENV, "SPYREC_SIM_THREADS": MAIN_THREADS}
    ignored = [f"--ignore={d}" for d in SHARD_A]
    return [
        Job("suite, first half", [*SHARD_A, *extra], main),
        Job("suite, second half", ["tests", *ignored, *extra], main),
        Job("one simulator thread", [*ONE_THREAD, *extra],
            {**BASE_ENV, "SPYREC_SIM_THREADS": "1"}),
    ]


def run(job: Job) -> None:
    """One pytest process; its combined output is kept for printing when it ends."""
    env = {**os.environ, **job.env}
    cmd = [sys.executable, "-m", "pytest", "-q", *job.args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    job.output = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)     # its own CPU time, not the other jobs'
    proc.returncode = job.code = os.waitstatus_to_exitcode(status)
    job.seconds = time.monotonic() - start
    job.cpu_seconds = usage.ru_utime + usage.ru_stime


def run_all(todo: list[Job], workers: int) -> None:
    """`todo` in order on `workers` threads, each printing a job's output when it ends."""
    lock, queue = threading.Lock(), list(todo)

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                job = queue.pop(0)
                print(f"===== started: {job.name} ({_settings(job)})", flush=True)
            run(job)
            with lock:
                print(f"===== {job.name} ({_settings(job)}): exit {job.code}, "
                      f"{job.seconds:.0f} s, {job.cpu_seconds:.0f} CPU-s =====", flush=True)
                print(job.output, end="", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # not Linux
        return os.cpu_count() or 1


def _settings(job: Job) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(job.env.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-j", "--jobs", type=int, default=None,
                        help="pytest processes at once (default: the usable cores, >= 2)")
    args, extra = parser.parse_known_args(argv)
    workers = args.jobs or max(2, _usable_cores())
    todo = jobs(extra)
    start = time.monotonic()
    run_all(todo, min(workers, len(todo)))
    print(f"===== {time.monotonic() - start:.0f} s in all, {min(workers, len(todo))} "
          f"at once =====")
    # pytest's 5 is "no tests collected": an error for the suite, not for a filtered run (-k)
    passed = (0, 5) if extra else (0,)
    for job in todo:
        print(f"  {'ok  ' if job.code in passed else 'FAIL'} {job.seconds:5.0f} s "
              f"{job.cpu_seconds:5.0f} CPU-s  {job.name}")
    return 0 if all(job.code in passed for job in todo) else 1


if __name__ == "__main__":
    sys.exit(main())
