"""Lay out the relaid-out constants on a worker thread while the ops before their readers run.

A constant that holds another's value in its own layout (manifest `weights.tensors[]
.relayout_of`: a tied embedding's lm_head layout) is not in weights.bin; `spyrec run` builds
its bytes from the stored one (`sim/weights.constant_bytes`). Built before the first op, the
table of Llama-3.2-1B (525 MB) held each run up by 2.4-5.0 s on the test host, whose fresh
pages fill at ~0.3 GB/s, though its only reader is the last op. So each is built on one
worker thread from the start, and an op that reads one waits for it first (`ready`): the
bytes every op reads are the same as before, only the time moves. With
`SPYREC_SIM_THREADS=1` they are built at once, on the calling thread.
Measured on that program, whole `spyrec run` processes, 5 alternating pairs: wall 12.5 ->
11.8 s (median ratio 0.95); peak RSS 3.07 -> 3.55 GB, since the layout's host-order
temporary now lives beside the layers' values. The gain is larger when the host's memory
is cold, since the thread then waits on page faults instead of holding up the ops.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable

from spyrec.sim import threads


class Relayouts:
    """The pending layouts by constant name; started when made."""

    def __init__(self, jobs: dict[str, Callable[[], None]]):
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[str, Future] = {}
        if jobs and threads.count() == 1:
            for lay_out in jobs.values():
                lay_out()
        elif jobs:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="spyrec-relayout")
            self._pending = {name: self._pool.submit(fn) for name, fn in jobs.items()}

    def __bool__(self) -> bool:
        return bool(self._pending)

    def ready(self, names: Iterable[str]) -> None:
        """Return once every constant of `names` still being laid out is done (its error,
        if it failed, raised here)."""
        for name in names:
            job = self._pending.pop(name, None)
            if job is not None:
                job.result()

    def finish(self) -> None:
        """Wait for all of them (before the outputs are read: a constant may be one)."""
        self.ready(list(self._pending))
        self.close()

    def close(self) -> None:
        """Drop what has not started (a run that failed first); one being laid out ends on
        its own (its bytes are nobody's any more)."""
        for job in self._pending.values():
            job.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
