"""The simulator's worker threads: one per host core, for the chunks of big ops.

numpy releases the GIL in its conversions, ufunc loops and BLAS calls, so plain threads run a
big op's chunks on every core. The BLAS stays single-threaded (`spyrec.sim.blas`): OpenBLAS's
own pool spins and degrades by an order of magnitude on busy cores, while these threads block.
Measured here (2 cores, a Granite-8B MLP projection, 128 x 4096 @ 4096 x 12800 from fp16):
one thread over 1024-column chunks 0.31 s, two threads 0.13 s. Chunks of 2^22 points per arg
(1024 such columns) keep the Python work per chunk (views, LX stick tags: ~3 ms) small next to
the arithmetic: a Granite-8B-width 4-layer prefill ran in 7.3-7.8 s with 2^20-point chunks,
5.9-6.6 s with 2^22.
`SPYREC_SIM_THREADS` sets the count (1: everything on the calling thread).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Callable, Iterable, TypeVar

from spyrec.errors import ConfigError
from spyrec.sim.chunking import MAX_CHUNK_POINTS

T = TypeVar("T")

CHUNK_POINTS = MAX_CHUNK_POINTS     # per arg per chunk: the chunks a single thread runs
MAX_THREADS = 256


@lru_cache(maxsize=1)
def count() -> int:
    """Worker threads: SPYREC_SIM_THREADS (1 to 256), else the cores this process may run on."""
    raw = os.environ.get("SPYREC_SIM_THREADS", "").strip()
    if raw:
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_THREADS:
            raise ConfigError(f"SPYREC_SIM_THREADS={raw!r}: give a whole number of worker "
                              f"threads from 1 to {MAX_THREADS}, or unset it to use every "
                              f"core this process may run on")
        return int(raw)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:      # not Linux
        return max(1, os.cpu_count() or 1)


@lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=count(), thread_name_prefix="spyrec-sim")


def run_all(fn: Callable[[T], None], items: Iterable[T]) -> None:
    """fn(item) for every item on the worker threads; the first failure (in item order) is
    raised here once every item has finished, so no chunk is still writing after a fault. An
    interrupt while waiting cancels the items not yet started (exit is not held up by them)."""
    if count() == 1:
        for item in items:
            fn(item)
        return
    futures = [_pool().submit(fn, item) for item in items]
    try:
        errors = [f.exception() for f in futures]
    except BaseException:       # Ctrl-C while waiting: chunks not started never start
        for f in futures:
            f.cancel()
        raise
    failed = next((e for e in errors if e is not None), None)
    if failed is not None:
        raise failed
