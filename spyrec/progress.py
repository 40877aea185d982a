"""Progress on stderr for work that takes longer than a second (DESIGN §1: stdout stays clean).

Nothing is shown until the delay has passed (DELAY_S, a second), so quick runs print nothing
extra. After that, on a terminal the current step rewrites one status line; in a log (stderr
not a TTY) a line is written at most once a second. `-q` turns it off (the caller passes
enabled=False).

`SPYREC_PROGRESS_DELAY=SECONDS` (a finite number >= 0, e.g. `0` or `2.5`) sets the delay: at
0 the first step of every command prints, whatever the machine's speed, which is how the test
suite runs (Makefile) so that no test passes or fails by how long a run happened to take. Any
other value (`-1`, `nan`, `1s`) is a ConfigError (exit 2) naming the variable and its value,
like `SPYREC_SIM_THREADS`: a typo that silently fell back to the default would hide itself.
The variable is read when a command starts (each `Progress`), not at import.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import TextIO

from spyrec.errors import ConfigError

DELAY_S = 1.0                       # before the first line, and between lines in a log
DELAY_ENV = "SPYREC_PROGRESS_DELAY"


def delay_s() -> float:
    """The delay before progress appears: SPYREC_PROGRESS_DELAY when set, else DELAY_S."""
    raw = os.environ.get(DELAY_ENV, "").strip()
    if not raw:
        return DELAY_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{DELAY_ENV}={raw!r}: give the seconds before progress appears as "
                          f"a number >= 0 (0 shows it at once), or unset it for the default "
                          f"{DELAY_S:g} s")
    return value


class Progress:
    def __init__(self, label: str, enabled: bool = True, stream: TextIO | None = None,
                 clock=time.monotonic, delay: float | None = None):
        self.label = label
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.delay = delay_s() if delay is None else delay
        self.start = clock()
        self.last = self.start
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.shown = False   # a status line is on a terminal and must be cleared
        self.written = False  # a log line was written (the first one is not rate-limited)

    def step(self, message: str) -> None:
        """Report the step now starting, if the work has run long enough to be worth it."""
        now = self.clock()
        if not self.enabled or now - self.start < self.delay:
            return
        if self.tty:
            self.stream.write(f"\r\033[K{self.label}: {message}"[:200])
            self.shown = True
        elif now - self.last >= DELAY_S or not self.written:
            self.stream.write(f"{self.label}: {message}\n")
            self.written = True
        else:
            return
        self.last = now
        self.stream.flush()

    def done(self) -> None:
        """Clear a terminal's status line, so the next message starts on a clean line."""
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False
