"""Progress on stderr for work that takes longer than a second (DESIGN §1: stdout stays clean).

Nothing is shown until a second has passed, so quick runs print nothing extra. After that, on a
terminal the current step rewrites one status line; in a log (stderr not a TTY) a line is
written at most once a second. `-q` turns it off (the caller passes enabled=False).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

DELAY_S = 1.0


class Progress:
    def __init__(self, label: str, enabled: bool = True, stream: TextIO | None = None,
                 clock=time.monotonic):
        self.label = label
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.last = self.start
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.shown = False   # a status line is on a terminal and must be cleared

    def step(self, message: str) -> None:
        """Report the step now starting, if the work has run long enough to be worth it."""
        now = self.clock()
        if not self.enabled or now - self.start < DELAY_S:
            return
        if self.tty:
            self.stream.write(f"\r\033[K{self.label}: {message}"[:200])
            self.shown = True
        elif now - self.last >= DELAY_S or self.last == self.start:
            self.stream.write(f"{self.label}: {message}\n")
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
