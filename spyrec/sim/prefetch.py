"""Read the weights from disk ahead of the ops that use them, a bounded window at a time.

Constants are a map of weights.bin (`sim/weights.constant_bytes`). When the page cache holds
the file (a run right after its compile, weights well under the machine's memory) every read
is a memory read. When it does not (Granite-8B width at 40 layers: 16.75 GB of weights on a
24 GiB machine that also caches the `.pt2`), each op would stop at its weight's first touch
and wait for the disk, one fault at a time, while the cores idle; and asking the kernel to
read the whole file ahead at once evicts the first layers' weights to make room for the last.

`Prefetcher` walks the trace's constants in execution order on a daemon thread and faults
their pages in (`MADV_POPULATE_READ` through libc, which blocks that thread only: ctypes
releases the GIL) while the ops compute, staying at most `window` bytes ahead of the op
that runs. The window is what the machine can hold beside the run (`window_bytes`: the
kernel's MemAvailable less `RESERVE_BYTES`, at least `WINDOW_BYTES`), so where the weights
fit the disk reads without a pause from the first op to the last. A fixed 2 GB window left
it idle whenever the reader was that far ahead, and on a disk that slows down after the
first ~12 GiB read (this test host: 1.9 GiB/s, then 0.48) those idle seconds came back at
the end: Granite-8B width at 40 layers waited ~8 s on its last layers' weights. Where the
kernel has no `MADV_POPULATE_READ` (Linux < 5.14) it asks for asynchronous read-ahead
(`MADV_WILLNEED`) of the same ranges instead (`_read_piece`). Reading ahead changes no
value: the pages are the file's either way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import stat
import threading
from functools import lru_cache

import numpy as np

MADV_WILLNEED = getattr(mmap, "MADV_WILLNEED", 3)
MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)
MADV_POPULATE_READ = 22            # Linux 5.14+: fault the range in, readable
WINDOW_BYTES = 2 << 30             # the least the pages may be read ahead of the running op
RESERVE_BYTES = 4 << 30            # memory left to the run and everything else (`window_bytes`)
PIECE_BYTES = 64 << 20             # one madvise call: the thread re-checks the window between
SMALL_BYTES = 512 << 20            # below this the whole file is read ahead at once


@lru_cache(maxsize=1)
def _madvise():
    """libc's madvise (None where it cannot be loaded)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def advise(view: np.ndarray, advice: int) -> bool:
    """madvise the pages under `view` (a 1-D uint8 view of a mapping); False if refused."""
    fn = _madvise()
    if fn is None or view.size == 0:
        return False
    page = mmap.PAGESIZE
    start = view.ctypes.data // page * page
    end = view.ctypes.data + view.size
    return fn(start, end - start, advice) == 0


def window_bytes(meminfo: str = "/proc/meminfo") -> int:
    """How far ahead of the running op the weights may be read: the memory the kernel says
    is available without swapping (MemAvailable: free pages plus the page cache it can drop)
    less `RESERVE_BYTES` for the run's own arrays and the rest of the machine, and never
    less than `WINDOW_BYTES`; `WINDOW_BYTES` where that is not known (not Linux)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) << 10
                    return max(WINDOW_BYTES, available - RESERVE_BYTES)
    except (OSError, ValueError, IndexError):
        pass
    return WINDOW_BYTES


def begin_run(out_dir) -> None:
    """What a run does before it reads its directory: import torch when the program is big
    enough to multiply through it (weights.bin of `TORCH_FROM_BYTES` or more:
    sim/torch_kernels.py), then start reading the weights (`read_ahead_early`). In that
    order: torch's ~0.5 GB of libraries and thousands of small files, read behind the
    weights' 64 MiB pieces, took 3.5-7.9 s to import instead of 0.9, and a Granite-8B-width
    d40 prefill with nothing cached ran 35.5 s instead of 25.2 (the import's page faults
    stalled the reading of the directory too). A missing or small weights.bin imports
    nothing (the run's own checks name what is wrong)."""
    from spyrec.sim.torch_kernels import TORCH_FROM_BYTES, use_torch

    if _regular_file_bytes(out_dir, "weights.bin") >= TORCH_FROM_BYTES:
        use_torch()
    read_ahead_early(out_dir)


def _directory(out_dir) -> tuple[str, int | None]:
    """The path of `out_dir` (a path, or an `OutputFiles` handle) and the descriptor to open
    its files relative to (None: open by path)."""
    fd = getattr(out_dir, "fd", None)
    return os.fspath(getattr(out_dir, "path", out_dir)), fd


def _open_weights(out_dir) -> int:
    path, fd = _directory(out_dir)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if fd is None:
        return os.open(os.path.join(path, "weights.bin"), flags)
    return os.open("weights.bin", flags, dir_fd=fd)


def _regular_file_bytes(out_dir, name: str) -> int:
    """The size of `name` in `out_dir` if it is a regular file (a symlink to one included),
    else 0."""
    path, fd = _directory(out_dir)
    try:
        info = os.stat(name, dir_fd=fd) if fd is not None else \
            os.stat(os.path.join(path, name))
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def read_ahead_early(out_dir, nbytes: int | None = None) -> threading.Thread | None:
    """Start reading the first `nbytes` (default `window_bytes()`) of OUT/weights.bin from
    disk on a daemon thread, and return at once: called before the directory is read and
    checked, which takes seconds at 8B scale (the manifest, every sdsc file, the bundle),
    while the disk would otherwise idle until `Prefetcher` starts. weights.bin holds the
    constants in manifest order, the order the program first uses them, so these are the
    bytes `Prefetcher` then finds read (compile writes the file past the page cache: the
    first run after it reads from disk).

    The pages are faulted in piece by piece through a mapping of its own (`_read_ahead`),
    as `Prefetcher` does: a single `POSIX_FADV_WILLNEED` over the range is cut by the
    kernel to its read-ahead size (8 MiB here), so asking for 2 GB read 8 MiB. A missing,
    small or non-regular file is not read; no value depends on any of this. The thread, for
    those who wait for it."""
    thread = threading.Thread(target=_read_ahead, args=(out_dir, nbytes),
                              daemon=True, name="spyrec-read-ahead")
    thread.start()
    return thread


def _read_ahead(out_dir, nbytes: int | None) -> None:
    """`read_ahead_early`'s thread. A truncated file cannot kill it: populating a page past
    the end fails (EFAULT) instead of raising SIGBUS, and read-ahead advice is only advice."""
    path = os.path.join(_directory(out_dir)[0], "weights.bin")
    try:
        # (non-blocking: a FIFO named weights.bin must not hold the thread)
        fd = _open_weights(out_dir)
    except OSError:
        return
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size < SMALL_BYTES:
            return
        mapped = mmap.mmap(fd, info.st_size, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return
    finally:
        os.close(fd)
    try:
        _small_files_first(_directory(out_dir)[0], path)
        _populate(mapped, window_bytes() if nbytes is None else nbytes)
    finally:
        mapped.close()      # the pages stay in the page cache


def _small_files_first(out_dir: str, weights: str) -> None:
    """Ask for every other regular file of the directory (the manifest, the sdsc files, the
    bundle: a few MB), each whole, before the weights: the loader reads them one by one
    while this thread keeps the disk busy, and queued behind 64 MiB pieces of weights each
    waited its turn (Granite-8B width at 40 layers: loading took 9.4 s instead of 4)."""
    advice = getattr(os, "POSIX_FADV_WILLNEED", None)
    if advice is None:
        return
    try:
        with os.scandir(out_dir) as entries:
            files = [e.path for e in entries
                     if e.path != weights and e.is_file(follow_symlinks=False)]
    except OSError:
        return
    for name in files:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, advice)
        except OSError:
            pass
        finally:
            os.close(fd)


def _populate(mapped: mmap.mmap, nbytes: int) -> None:
    """Read the first `nbytes` of `mapped` into the page cache, a piece at a time: each
    piece faulted in, then unmapped again (`MADV_DONTNEED` keeps a file's pages cached), so
    the process's resident set does not count them twice while `Prefetcher` maps them too.
    Its views die here, so the caller can close the map."""
    view = np.frombuffer(mapped, dtype=np.uint8)
    populate = True
    for lo in range(0, min(view.size, nbytes), PIECE_BYTES):
        piece = view[lo:min(lo + PIECE_BYTES, nbytes)]
        populate = _read_piece(piece, populate)
        if populate:
            advise(piece, MADV_DONTNEED)


def _read_piece(piece: np.ndarray, populate: bool) -> bool:
    """Fault `piece` in (`MADV_POPULATE_READ`), or where the kernel refuses that (an older
    one), ask for read-ahead of it instead; whether populating still works."""
    if populate and advise(piece, MADV_POPULATE_READ):
        return True
    advise(piece, MADV_WILLNEED)
    return False


class Prefetcher:
    """Faults in each step's constants ahead of the step (module docstring).

    `steps[i]` lists the constant byte views execution i reads (each view read once, at its
    first step); `at(i)` says execution i is about to run; `close()` stops the thread."""

    def __init__(self, steps: list[list[np.ndarray]], window: int | None = None):
        self._order = _first_uses(steps)        # [(step, view)] in execution order
        self._window = window_bytes() if window is None else window
        self._current = 0
        self._stopped = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="spyrec-prefetch")
        self._thread.start()

    def at(self, step: int) -> None:
        with self._changed:
            self._current = step
            self._changed.notify()

    def close(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify()
        self._thread.join()

    def _run(self) -> None:
        populate = True
        ahead: list[tuple[int, int]] = []       # (step, bytes) read, not yet run
        for step, view in self._order:
            for lo in range(0, view.size, PIECE_BYTES):
                piece = view[lo:lo + PIECE_BYTES]
                if not self._wait_for_room(ahead, piece.size):
                    return
                populate = _read_piece(piece, populate)
                ahead.append((step, piece.size))

    def _wait_for_room(self, ahead: list[tuple[int, int]], nbytes: int) -> bool:
        """Block until `nbytes` more fit in the window past the running step; False when
        closed."""
        with self._changed:
            while True:
                if self._stopped:
                    return False
                ahead[:] = [(s, n) for s, n in ahead if s >= self._current]
                if not ahead or sum(n for _, n in ahead) + nbytes <= self._window:
                    return True
                self._changed.wait()


def _first_uses(steps: list[list[np.ndarray]]) -> list[tuple[int, np.ndarray]]:
    seen: set[int] = set()
    order = []
    for i, views in enumerate(steps):
        for view in views:
            key = view.ctypes.data
            if key not in seen and view.size:
                seen.add(key)
                order.append((i, view))
    return order
