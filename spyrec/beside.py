"""One pure computation on the machine's other core while the caller goes on: a forked child.

Why: the end of a compile is two independent, GIL-bound pieces of Python, the JSON text and
writes of the output's files and the cost estimate of report.json (about 0.9 and 1.0 s at
Llama-3.2-1B d16 prefill); a thread would only take turns with the writer. A forked child
shares the parent's memory copy-on-write, so it starts from the documents already built
without copying them, and sends back only its result, pickled.

Contract: `fn` is pure (it reads the parent's objects and writes nothing: no files, no shared
state) and its result pickles. Whatever goes wrong on the way — no `os.fork` here, the
fork or the pipe refused, the child raising, killed, silent past `timeout_s`, or its result
unreadable — `result()` runs `fn` in the caller instead: the same value, or the same exception
with its own traceback. The child never returns into the caller's code: it leaves through
`os._exit` (no atexit handlers, no buffered output flushed twice, no temporary directory
removed by a `finally` that belongs to the parent).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
import warnings
from typing import Callable, Generic, TypeVar

T = TypeVar("T")

# A child silent for this long is taken for stuck (a lock another thread of the parent held
# when it forked) and `fn` runs in the caller: a wrong guess costs time, never a result.
TIMEOUT_S = 120.0


class Beside(Generic[T]):
    """`fn()` computed in a forked child from now on; `result()` gives it (module docstring)."""

    def __init__(self, fn: Callable[[], T], fork: bool = True, timeout_s: float = TIMEOUT_S):
        """`fork` False: no child; `result()` computes `fn` (callers with small work)."""
        self._fn = fn
        self._timeout_s = timeout_s
        self._pid: int | None = None
        self._fd: int | None = None
        if fork:
            self._start()

    def _start(self) -> None:
        if not hasattr(os, "fork"):
            return
        try:
            read_fd, write_fd = os.pipe()
        except OSError:
            return
        try:
            with warnings.catch_warnings():     # 3.12+: fork beside threads (see TIMEOUT_S)
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            return
        if pid == 0:
            os.close(read_fd)
            _child(self._fn, write_fd)          # never returns
        os.close(write_fd)
        self._pid, self._fd = pid, read_fd

    @property
    def forked(self) -> bool:
        """Whether a child is computing it (else `result()` computes it)."""
        return self._pid is not None

    def result(self) -> T:
        """The child's result, or `fn()` computed here when the child gave none."""
        data = self._collect()
        if data is not None:
            try:
                return pickle.loads(data)
            except Exception:                   # unreadable: computed again below
                pass
        return self._fn()

    def cancel(self) -> None:
        """Stop the child, if any (the caller no longer needs its result)."""
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except OSError:
                pass
        self._reap()

    def _collect(self) -> bytes | None:
        """The child's pickled result, or None (no child, or it failed)."""
        if self._fd is None:
            return None
        chunks: list[bytes] = []
        deadline = time.monotonic() + self._timeout_s
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                    self.cancel()               # silent too long
                    return None
                chunk = os.read(self._fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError:
            self.cancel()
            return None
        status = self._reap()
        return b"".join(chunks) if status == 0 and chunks else None

    def _reap(self) -> int | None:
        """Close the pipe, wait for the child; its exit code (None: no child)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        pid, self._pid = self._pid, None
        if pid is None:
            return None
        try:
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        except ChildProcessError:
            return None

    def __enter__(self) -> "Beside[T]":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()                           # a result not taken: the child is not needed


def _child(fn: Callable[[], object], write_fd: int) -> None:
    """The forked child: `fn()` pickled into the pipe, then `os._exit` (0 only when all of it
    was written). An interrupt meant for the parent's process group ends it quietly."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        data = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
        code = 0
    except BaseException:
        pass
    finally:
        os._exit(code)
