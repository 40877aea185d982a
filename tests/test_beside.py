"""spyrec.beside: a result computed in a forked child is the one the caller would compute,
and every way the child can fail falls back to computing it in the caller."""

from __future__ import annotations

import os
import signal
import time

import pytest

from spyrec.beside import Beside

PARENT = os.getpid()


def _in_child() -> bool:
    return os.getpid() != PARENT


def where_and_value():
    return os.getpid(), {"rows": [{"core": c, "bytes": c * 128} for c in range(32)]}


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True                 # reaped: no zombie left behind
    return False


def test_the_child_computes_the_value():
    job = Beside(where_and_value)
    assert job.forked
    pid = job._pid
    where, value = job.result()
    assert where not in (PARENT, None) and where == pid
    assert value == where_and_value()[1]
    assert _gone(pid) and not job.forked


def test_without_fork_the_caller_computes_it():
    job = Beside(where_and_value, fork=False)
    assert not job.forked
    assert job.result()[0] == PARENT


def test_no_fork_on_this_platform(monkeypatch):
    monkeypatch.delattr(os, "fork")
    job = Beside(where_and_value)
    assert not job.forked and job.result()[0] == PARENT


def test_an_error_in_the_child_is_raised_by_the_caller_with_its_own_traceback():
    calls = []

    def fails():
        calls.append(os.getpid())
        raise ValueError(f"bad value in {os.getpid()}")
    with pytest.raises(ValueError, match=f"bad value in {PARENT}"):
        Beside(fails).result()
    assert calls == [PARENT]        # the child's call appends in the child's memory only


def test_a_killed_child_falls_back():
    def dies():
        if _in_child():
            os.kill(os.getpid(), signal.SIGKILL)
        return "computed here"
    assert Beside(dies).result() == "computed here"


def test_a_child_that_exits_early_falls_back():
    def exits():
        if _in_child():
            os._exit(0)             # exit 0 with nothing written is no result
        return "computed here"
    assert Beside(exits).result() == "computed here"


def test_a_silent_child_is_stopped_after_the_timeout():
    """The child answers only after 60 s: a result computed here means the 0.3 s timeout
    fired (what happened, not how long it took, is asserted)."""
    def hangs():
        if _in_child():
            time.sleep(60)
            return "from the child"
        return "computed here"
    job = Beside(hangs, timeout_s=0.3)
    pid = job._pid
    assert job.result() == "computed here"
    assert _gone(pid)


def test_an_unpicklable_result_falls_back():
    def closure():
        local = 3
        return lambda: local        # a lambda does not pickle
    assert Beside(closure).result()() == 3


def test_a_result_not_taken_stops_the_child():
    def hangs():
        if _in_child():
            time.sleep(60)
        return None
    with Beside(hangs) as job:
        pid = job._pid
    assert _gone(pid) and not job.forked


def test_a_large_result_crosses_the_pipe_whole():
    big = bytes(range(256)) * (12 << 10)        # 3 MiB: many pipe buffers
    assert Beside(lambda: big).result() == big

