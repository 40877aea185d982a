"""A failed command's stderr: one error line, last, after nothing but progress lines.

Progress appears once a command has run for SPYREC_PROGRESS_DELAY seconds (spyrec/progress.py;
`make test` sets 0), so whether a progress line precedes the error depends on the delay and on
the machine's speed, never on the error. Tests assert on the error line they care about
(`error_line`), not on stderr being exactly one line.
"""

from __future__ import annotations

PROGRESS = ("spyrec compile: ", "spyrec run: ")   # the labels of spyrec/progress.py's lines


def error_line(stderr: str) -> str:
    """The one line of `stderr` that is not progress; it must be the last (nothing after the
    error) and there must be no other (no traceback, no second message)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    others = [line for line in lines if not line.startswith(PROGRESS)]
    assert len(others) == 1 and lines[-1] == others[0], stderr
    return others[0]
