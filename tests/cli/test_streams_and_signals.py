"""Results piped into other tools and signals from the outside: a closed pipe, a full disk
behind stdout, SIGTERM mid-compile. Each is one of DESIGN §1's exits with at most one line,
never a traceback, an internal error (70), or click's exit 1 (a --check mismatch here)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.programs import Lambda, compile_pt2, export

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("streams")
    return compile_pt2(export(tmp, Lambda(lambda m, x: x * 2 + 1), (torch.randn(4, 8),)),
                       tmp / "out")


def _closed_pipe(*args):
    """Run spyrec with stdout a pipe whose reader is gone before anything is written."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "spyrec", *map(str, args)], stdout=write,
                              stderr=subprocess.PIPE, text=True, env=ENV)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [("inspect", "{out}", "--json"), ("inspect", "{out}"),
                                  ("verify", "{out}", "-q"), ("compile", "--list-passes"),
                                  ("--help",), ("--version",)])
def test_a_closed_pipe_is_exit_2_without_a_word(out, args):
    done = _closed_pipe(*(a.format(out=out) for a in args))
    assert done.returncode == 2, done.stderr
    assert done.stderr == "", done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("args", [("inspect", "{out}", "--json"), ("--version",)])
def test_a_full_disk_behind_stdout_is_one_line_exit_2(out, args):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "spyrec",
                               *(a.format(out=out) for a in args)],
                              stdout=full, stderr=subprocess.PIPE, text=True, env=ENV)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "spyrec: cannot write to standard output (No space left on device); the results "
        "were not delivered"]


def test_sigterm_mid_compile_unwinds_and_leaves_nothing(tmp_path):
    """The compile removes its temporary directory and its weights job, as on Ctrl-C, and
    exits 128 + 15 with one line."""
    pt2 = export(tmp_path, Lambda(lambda m, x: (x @ m.w).relu() @ m.w.t(),
                                  w=torch.randn(256, 512)), (torch.randn(64, 256),))
    process = subprocess.Popen([sys.executable, "-m", "spyrec", "compile", str(pt2), "-o",
                                str(tmp_path / "out"), "-v"], stderr=subprocess.PIPE,
                               text=True, env=ENV)
    first = process.stderr.readline()       # a pass started: the compile is under way
    assert first, "the compile printed nothing"
    process.send_signal(signal.SIGTERM)
    rest = process.stderr.read()
    assert process.wait(timeout=120) in (0, 143), rest
    if process.returncode == 143:           # (a very fast machine may finish first)
        assert rest.strip().splitlines()[-1] == "spyrec: terminated (SIGTERM)"
        assert "Traceback" not in rest
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    time.sleep(0)
