"""weights.bin mapped as the constants' device memory (docs/formats.md "weights.bin").

The file holds every constant in its device form, so a run maps it and hands each constant its
slice: nothing is converted or copied. A constant stored as another's value in a second layout
(`relayout_of`) is laid out from that one's bytes here.

The file is opened once, through the directory's handle (`files.OutputFiles`), checked against
the build (its size, and the stamp after its tensors: `spyrec/build_record.py`), and mapped
from that descriptor. A map dies with SIGBUS when its file is cut short under it, so while a
run reads the map it holds a read lease on the file (Linux `F_SETLEASE`): another process
that opens it for writing or truncates it is held by the kernel (up to
/proc/sys/fs/lease-break-time, 45 s) while this process is told (SIGIO); the run stops at the
next op, with nothing written, and releases the file (`WeightsFile.guarded`). Where no lease can
be had (not Linux, another owner, a file system without leases, a run off the main thread),
a file of up to `UNGUARDED_COPY_BYTES` is read into memory instead of mapped; a bigger one is
mapped unguarded (docs/formats.md says so).
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import signal
import threading
import weakref
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, Mapping

import numpy as np

from spyrec.build_record import STAMP_BYTES, read_stamp
from spyrec.errors import InputFileError
from spyrec.sim.prefetch import SMALL_BYTES
from spyrec.sim.specs import TensorSpec
from spyrec.sim.transfer import relaid_out

F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)      # Linux's values
UNGUARDED_COPY_BYTES = 256 << 20
RECOMPILE = "re-run spyrec compile"


class WeightsFile:
    """weights.bin of one build, open (`open`); `mapped()` is its tensors' bytes."""

    def __init__(self, fd: int, path: Path, nbytes: int):
        self.fd, self.path, self.nbytes = fd, path, nbytes
        self.broken = False             # set when another process writes or truncates it
        self._mapped: np.ndarray | None = None
        self._closer = weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, files, weights) -> WeightsFile | None:
        """The directory's weights.bin (`files`: an `OutputFiles` whose build record is
        known; `weights`: the manifest's checked table), after checking that it is this
        build's: as long as its tensors plus the stamp, the stamp naming the build. None
        when the program has no constants."""
        if weights is None or not weights.entries:
            return None
        path = files.label(weights.file)
        fd = files.open(weights.file, f"; it holds the program's weights (manifest.json "
                                      f"$.weights): {RECOMPILE}")
        try:
            _check_stamp(fd, path, weights.nbytes, files.build_id)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path, weights.nbytes)

    def mapped(self) -> np.ndarray:
        """The tensors' bytes (uint8): a copy-on-write map of the file, or under an unguarded
        run of a small file, a copy in memory (module docstring)."""
        if self._mapped is None:
            self._mapped = self._map() if self.nbytes else np.zeros(0, dtype=np.uint8)
        return self._mapped

    def _map(self) -> np.ndarray:
        if not _ACTIVE.get(self) and self.nbytes <= UNGUARDED_COPY_BYTES:
            data = np.empty(self.nbytes, dtype=np.uint8)
            if os.preadv(self.fd, [data], 0) != self.nbytes:
                raise InputFileError(f"{self.path}: shorter than manifest.json says; the file "
                                     f"is truncated or damaged: {RECOMPILE}")
            return data
        try:
            mapped = mmap.mmap(self.fd, self.nbytes, access=mmap.ACCESS_COPY)
        except (OSError, ValueError) as e:   # changed since the loader's size check
            raise InputFileError(f"{self.path}: cannot map it ({e}); the file is truncated "
                                 f"or damaged: {RECOMPILE}") from None
        if self.nbytes < SMALL_BYTES and hasattr(mapped, "madvise") and \
                hasattr(mmap, "MADV_WILLNEED"):
            mapped.madvise(mmap.MADV_WILLNEED)  # bigger files: read in order (prefetch.py)
        return np.frombuffer(mapped, dtype=np.uint8)

    @contextlib.contextmanager
    def guarded(self) -> Iterator[Callable[[], None]]:
        """While a run reads the map: hold a read lease on the file where one can be had
        (module docstring); yields `check()`, which the run calls between ops and which
        raises InputFileError once another process has started to change the file. The
        lease is released at the end, unless it was broken: then it goes when the last
        thread still reading lets the map go (the kernel holds the writer until then)."""
        leased = _lease(self)
        try:
            yield self._check
        finally:
            if leased:
                _release(self)

    def _check(self) -> None:
        if self.broken:
            raise InputFileError(
                f"{self.path}: another process opened it for writing or truncated it while "
                f"this run was reading it (spyrec compile never changes a build in place: it "
                f"writes a new directory); the run stopped and wrote nothing. Run again once "
                f"the directory stays as it is (spyrec verify checks every file).")

    def close(self) -> None:
        self._mapped = None
        self._closer()


def _check_stamp(fd: int, path: Path, nbytes: int, build: str | None) -> None:
    size = os.fstat(fd).st_size
    if size != nbytes + STAMP_BYTES:
        raise InputFileError(f"{path}: {size} bytes, manifest.json says {nbytes} "
                             f"($.weights.bytes) plus the {STAMP_BYTES}-byte build stamp; the "
                             f"file is truncated or damaged: {RECOMPILE}")
    found = read_stamp(fd, nbytes)
    if found is None:
        raise InputFileError(f"{path}: no build stamp after its tensors (byte {nbytes}); the "
                             f"file is damaged or from an older spyrec: {RECOMPILE}")
    if build is not None and found != build:
        raise InputFileError(f"{path}: belongs to build {found[:12]}, manifest.json to build "
                             f"{build[:12]}: the directory mixes files of different compiles; "
                             f"{RECOMPILE}")


# --- the lease --------------------------------------------------------------------------------

# guarded files -> whether their lease is held; the SIGIO handler marks them all broken (a
# Python handler is not told which descriptor; one run at a time guards one file)
_ACTIVE: dict[WeightsFile, bool] = {}
_previous_handler = None


def _on_lease_break(signum, frame) -> None:
    for weights in _ACTIVE:
        weights.broken = True


def _lease(weights: WeightsFile) -> bool:
    """Take a read lease on `weights` (its SIGIO handler first: the default action of SIGIO
    ends the process); False where none can be had."""
    global _previous_handler
    if threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "SIGIO"):
        return False
    if not _ACTIVE:
        _previous_handler = signal.signal(signal.SIGIO, _on_lease_break)
    try:
        fcntl.fcntl(weights.fd, F_SETLEASE, fcntl.F_RDLCK)
    except OSError:             # EAGAIN: open for writing; EACCES: not ours; EINVAL: no leases
        _restore_handler()
        return False
    _ACTIVE[weights] = True
    return True


def _release(weights: WeightsFile) -> None:
    if not weights.broken:
        try:
            fcntl.fcntl(weights.fd, F_SETLEASE, fcntl.F_UNLCK)
        except OSError:
            pass
    del _ACTIVE[weights]
    _restore_handler(keep_ignoring=weights.broken)


def _restore_handler(keep_ignoring: bool = False) -> None:
    """Give SIGIO back once no file is guarded; while a broken lease may still be held (by a
    map some thread still reads), ignore it rather than let its default end the process."""
    if _ACTIVE:
        return
    previous = _previous_handler
    if keep_ignoring and previous in (signal.SIG_DFL, None):
        previous = signal.SIG_IGN
    signal.signal(signal.SIGIO, previous if previous is not None else signal.SIG_DFL)


def constant_bytes(weights_file: WeightsFile | None, weights, tensors: Mapping[str, TensorSpec],
                   later: dict[str, Callable[[], None]] | None = None
                   ) -> dict[str, np.ndarray]:
    """Each constant's device bytes (uint8), from the map of weights.bin (`weights_file`,
    opened and checked by the loader; `WeightsFile.mapped`): the file holds them in device
    form, so they become the constants' HBM as they are. The kernel is asked to read the
    whole file ahead (`MADV_WILLNEED`, asynchronous), so the pages arrive while the first ops
    run instead of one fault at a time when an op first reads them. Above `SMALL_BYTES` the
    runner's `Prefetcher` reads them in execution order instead, a window ahead of the ops
    (the whole file at once could evict the first layers' weights to make room for the last).
    `weights` is the loader's checked `Weights` table (manifest `weights`). A constant stored
    as another's value in its own layout (`relayout_of`) is laid out here from that one's
    bytes, in memory (`tensors`: the manifest's); with `later`, its bytes are left unwritten
    and `later[name]` is the call that writes them (the runner lays it out on a thread while
    the ops before its first reader run)."""
    if weights is None or not weights.entries:
        return {}
    if weights.nbytes == 0:         # only empty constants: nothing to map
        return {e.name: np.zeros(e.nbytes, dtype=np.uint8) for e in weights.entries}
    data = weights_file.mapped()
    found = {e.name: data[e.offset:e.offset + e.nbytes] for e in weights.entries
             if e.relayout_of is None}
    for e in weights.entries:
        if e.relayout_of is None:
            continue
        if later is None:
            found[e.name] = relaid_out(found[e.relayout_of], tensors[e.relayout_of],
                                       tensors[e.name], e.pad)
            continue
        found[e.name] = np.empty(e.nbytes, dtype=np.uint8)    # pages untouched until laid out
        later[e.name] = partial(relaid_out, found[e.relayout_of], tensors[e.relayout_of],
                                tensors[e.name], e.pad, found[e.name])
    return found
