"""How a compile runs in its process: what spyrec tunes about the interpreter around a compile.

Two settings, each measured (their docstrings say where): the interpreter's thread switch
interval while the background threads (the source's SHA-256, weights.bin) run beside the
passes (`short_gil_slices`), and a full garbage collection whenever the resident set has
grown a GiB since the last (`CollectWhenGrown`: compile pauses the automatic collector,
`hostmem.no_automatic_collections`, and this bounds what that can leave uncollected).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from typing import Callable

from spyrec.passes.pipeline import Instrument


@contextlib.contextmanager
def short_gil_slices(seconds: float = 0.0005):
    """Run with the interpreter switching threads every `seconds` instead of every 5 ms:
    compile's background threads (the source's SHA-256, weights.bin's conversion and writes)
    spend their time in numpy and the kernel without the GIL, but take it back between
    blocks, and beside the passes' pure-Python main thread each take waited up to a whole
    switch interval. Llama-3.2-1B d16: the hash took 10 s instead of 2, and the process used
    ~1.3 of 2 cores; with 0.5 ms, ~1.8 (3 paired runs: wall 0.97x, user time unchanged).
    The caller's interval comes back afterwards."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


COLLECT_AFTER_GROWTH = 1 << 30      # bytes of resident set between two collections


class CollectWhenGrown(Instrument):
    """After each pass, a full collection if the process's resident set (`rss`: bytes, or
    None where it cannot be read) is `COLLECT_AFTER_GROWTH` over what it was at the last
    one: the bound on what `no_automatic_collections` can leave uncollected."""

    def __init__(self, rss: Callable[[], int | None] | None = None):
        self.rss = rss or resident_bytes
        self.mark = self.rss()
        self.collections = 0

    def after(self, step, name, graph, facts) -> None:
        now = self.rss()
        if now is None or self.mark is None or now - self.mark < COLLECT_AFTER_GROWTH:
            return
        gc.collect()
        self.collections += 1
        self.mark = self.rss()


def resident_bytes() -> int | None:
    """This process's resident set in bytes (Linux `/proc/self/statm`), else None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
