"""Progress lines (spyrec/progress.py): silent for the first second, then rate-limited."""

import io

from spyrec.progress import Progress


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
