"""Host memory settings for spyrec's own processes (the CLI), measured on the target hosts.

numpy asks the kernel for transparent huge pages (`madvise(MADV_HUGEPAGE)`) on every large
array. Where the kernel's THP `defrag` setting is `madvise` (the common default), each such
first touch may compact memory synchronously: on the 2-core 24 GiB test host, zero-filling a
fresh 800 MB array took 6.4 s with the advice and 0.72 s without. spyrec's compile and
simulator allocate arrays of that size per weight and per op, so the CLI turns the advice off
for its own process, the same switch as numpy's documented `NUMPY_MADVISE_HUGEPAGE=0`; a user
who set that variable keeps their choice. Library callers (`spyrec.api`) are left alone: the
setting belongs to their process.

Compile and run also pause the cyclic garbage collector while they work
(`no_automatic_collections`), for themselves and library callers alike, giving the caller's
setting back afterwards.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys


def no_numpy_hugepage_advice() -> bool:
    """Turn numpy's huge-page advice off unless NUMPY_MADVISE_HUGEPAGE says otherwise;
    whether it is off now. Before numpy is imported this only sets that variable (numpy reads
    it at import), so `spyrec --help` still imports nothing heavy."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return os.environ["NUMPY_MADVISE_HUGEPAGE"] == "0"
    if "numpy" not in sys.modules:
        os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"
        return True
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:          # numpy 1.x
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return False
    _set_madvise_hugepage(False)
    return True


@contextlib.contextmanager
def no_automatic_collections():
    """Run with the cyclic garbage collector's automatic collections off. Compile and run
    build millions of small objects (index expressions, memo keys, op specs) and keep most
    of them to the end, and they make almost no cycles, so each collection only re-scanned
    live objects: at a first-generation threshold of 50,000, a Llama-3.2-1B d16 compile's 43
    collections took 0.33 s and freed 1,270 objects, a 2,416-op program's 70 took 0.84 s and
    freed 391 (issue 26); a Granite-8B-width d8 prefill run's 551 took 0.23 s (4% of its
    wall). Reference counting frees everything else as before (compile also collects
    between passes should its resident set grow a GiB: `process_tuning.CollectWhenGrown`). The
    caller's setting comes back afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
