"""Progress lines (spyrec/progress.py): silent for the first second (SPYREC_PROGRESS_DELAY
sets it), then rate-limited."""

import io
import os
import subprocess
import sys

import pytest

from spyrec import progress
from spyrec.errors import ConfigError
from spyrec.progress import Progress


@pytest.fixture(autouse=True)
def default_delay(monkeypatch):
    """These tests are about the default second: the suite itself runs with the delay at 0."""
    monkeypatch.delenv("SPYREC_PROGRESS_DELAY", raising=False)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_quiet_for_a_second_then_one_line_per_second_in_a_log():
    clock, stream = Clock(), io.StringIO()
    p = Progress("spyrec run", stream=stream, clock=clock)
    p.step("op 1")
    clock.now += 0.9
    p.step("op 2")
    assert stream.getvalue() == ""
    clock.now += 0.2
    p.step("op 3")
    clock.now += 0.5
    p.step("op 4")                      # within a second of the last line: dropped
    clock.now += 0.6
    p.step("op 5")
    p.done()
    assert stream.getvalue() == "spyrec run: op 3\nspyrec run: op 5\n"


def test_a_terminal_gets_one_rewritten_status_line_cleared_at_the_end():
    clock, stream = Clock(), Tty()
    p = Progress("spyrec compile", stream=stream, clock=clock)
    clock.now += 1.5
    p.step("stick_layout")
    p.step("work_division")
    p.done()
    assert stream.getvalue() == ("\r\x1b[Kspyrec compile: stick_layout"
                                 "\r\x1b[Kspyrec compile: work_division\r\x1b[K")


def test_disabled_prints_nothing():
    clock, stream = Clock(), Tty()
    p = Progress("spyrec run", enabled=False, stream=stream, clock=clock)
    clock.now += 5
    p.step("op")
    p.done()
    assert stream.getvalue() == ""


def test_the_delay_comes_from_the_environment(monkeypatch):
    """SPYREC_PROGRESS_DELAY=0: the first step prints at once, then a line a second as before
    (a clock that does not move prints one line, not one per step)."""
    clock, stream = Clock(), io.StringIO()
    monkeypatch.setenv("SPYREC_PROGRESS_DELAY", "0")
    p = Progress("spyrec run", stream=stream, clock=clock)
    p.step("op 1")
    p.step("op 2")
    clock.now += 1.0
    p.step("op 3")
    assert stream.getvalue() == "spyrec run: op 1\nspyrec run: op 3\n"
    monkeypatch.setenv("SPYREC_PROGRESS_DELAY", " 2.5 ")
    log = io.StringIO()
    later = Progress("spyrec run", stream=log, clock=clock)
    clock.now += 2.4
    later.step("early")
    clock.now += 0.1
    later.step("late")
    assert later.delay == 2.5 and log.getvalue() == "spyrec run: late\n"
    monkeypatch.setenv("SPYREC_PROGRESS_DELAY", "")
    assert Progress("spyrec run", stream=io.StringIO()).delay == progress.DELAY_S == 1.0


@pytest.mark.parametrize("raw", ["-1", "nan", "inf", "1s", "one"])
def test_a_bad_delay_is_a_config_error_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("SPYREC_PROGRESS_DELAY", raw)
    with pytest.raises(ConfigError, match=rf"SPYREC_PROGRESS_DELAY='{raw}': give the seconds "
                                          r"before progress appears as a number >= 0"):
        Progress("spyrec compile", stream=io.StringIO())


def test_a_bad_delay_is_exit_2_from_the_cli_before_any_work(tmp_path):
    env = {**os.environ, "SPYREC_PROGRESS_DELAY": "-3"}
    done = subprocess.run([sys.executable, "-m", "spyrec.cli", "compile",
                           str(tmp_path / "missing.pt2"), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2, done.stderr
    assert "SPYREC_PROGRESS_DELAY='-3'" in done.stderr and "Traceback" not in done.stderr
