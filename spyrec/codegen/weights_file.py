"""`weights.bin`'s writer: every constant's device form streamed from the `.pt2` into one file.

The I/O engine of a compile (docs/formats.md "weights.bin"): a blob planned from layouts alone
(`WeightsBlob.plan`), each tensor converted a piece at a time into two reused page-aligned
buffers while a second thread writes the other's whole pages (`_PieceStream`), into a file
written in whole blocks, bypassing the page cache where the file system allows (`_BlockFile`).
The directory writer (`writer.py`) and the early job (`weights_job.py`) drive it.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

from spyrec.build_record import Crc32
from spyrec.ir import Graph
from spyrec.ir.values import PaddedConstant
from spyrec.ir.writes import constants_state
from spyrec.layout.storage import (
    STORAGE, PlacementError, device_rows, write_device_padded, write_device_rows,
)

WEIGHTS_FILE = "weights.bin"
WEIGHTS_ALIGNMENT = 4096        # bytes (a page); every tensor starts at a multiple
# host dtype -> the numpy dtype of its host array (bf16 as its 16-bit patterns)
HOST_NUMPY_DTYPES = {"float16": "f2", "bfloat16": "u2", "float32": "f4", "int32": "i4",
                     "int64": "i8", "int8": "i1", "bool": "b1",
                     "float8_e4m3fn": "u1", "float8_e5m2": "u1"}   # fp8: bit patterns


class WeightsBlob:
    """`weights.bin`: every constant in its **device form** (its layout's bytes, padding
    filled, little-endian storage dtype), in manifest order, each at a multiple of
    WEIGHTS_ALIGNMENT, zero bytes between. A run maps the file instead of converting the
    weights (docs/formats.md). Planned from layouts alone; the values are read only by
    `write`, one tensor at a time, through one reused buffer (the largest tensor's size).

    A constant holding the value of another one in a second layout (stick_layout's
    `__layout` copy of a tied embedding), or that value zero-padded at the end of its dims
    (split_padding's `__npad` lm_head of it), is not stored: its entry names the stored one
    (`relayout_of`, and `pad`) and the loader lays that value out again, once per run (the
    weights are on disk once: the table of Llama-3.2-1B is 525 MB)."""

    def __init__(self, entries: list[tuple], total: int, relayouts: dict[str, tuple],
                 constants: list, state: tuple[tuple, tuple]):
        self.entries = entries      # (buffer, offset, bytes, value) of the stored constants
        self.total = total
        self.relayouts = relayouts  # constant -> (the stored constant holding its value, pad)
        self.constants = constants  # every constant's buffer, in tensors order
        # what the file's bytes depend on, as planned (`ir.writes.constants_state`: the
        # constants, their layouts and values by id), and the values, held so the ids stay theirs
        self.key, self._held = state

    @classmethod
    def plan(cls, graph: Graph) -> "WeightsBlob":
        entries, offset, end = [], 0, 0
        stored: dict[int, str] = {}     # id of a value -> the stored constant holding it
        relayouts: dict[str, tuple] = {}   # constant -> (stored constant, pad or None)
        constants = [buf for buf in graph.buffers.values()
                     if buf.role == "constant" and buf.name in graph.constants]
        for buf in constants:
            value = graph.constants[buf.name]
            base, pad = (value.base, value.pad) if isinstance(value, PaddedConstant) else \
                (value, None)
            if id(base) in stored:
                relayouts[buf.name] = (stored[id(base)], pad)
                continue
            stored[id(value)] = buf.name
            nbytes = buf.layout.device_bytes
            entries.append((buf, offset, nbytes, value))
            end = offset + nbytes
            offset += -(-nbytes // WEIGHTS_ALIGNMENT) * WEIGHTS_ALIGNMENT
        return cls(entries, end, relayouts, constants, constants_state(graph))

    def section(self) -> dict:
        """The manifest's `weights` object: every constant in tensors order, stored ones with
        their `offset` and `bytes`, the others with the stored constant they relay out."""
        where = {buf.name: {"offset": o, "bytes": b} for buf, o, b, _ in self.entries}
        where |= {name: {"relayout_of": source, **({"pad": list(pad)} if pad else {})}
                  for name, (source, pad) in self.relayouts.items()}
        return {"file": WEIGHTS_FILE, "bytes": self.total, "alignment": WEIGHTS_ALIGNMENT,
                "tensors": [{"name": buf.name, "device_dtype": buf.layout.device_dtype,
                             "device_size": list(buf.layout.device_size), **where[buf.name]}
                            for buf in self.constants]}

    def write(self, path: Path, stop: threading.Event | None = None, *,
              skip: frozenset = frozenset(), done=None, reuse: bool = False) -> None:
        """Create `path` and stream every tensor's device form into it, a piece of about
        PIECE_BYTES at a time (`_pieces`): each piece is converted into one of two reused
        buffers while the other's bytes are written on a second thread (the conversion is
        numpy, the write the kernel's; both release the GIL, so the two overlap on two cores,
        within a tensor as well as between two), with the gap after each tensor (zeros) up to
        the next one's offset (`_PieceStream`). A set `stop` ends the writing between two
        pieces (`WeightsStopped`): the caller is abandoning the file, or starting over on a
        new plan, for which a tensor stopped part way is not written (`done` not called).

        With `reuse`, `path` may be a file an earlier plan's `write` began, written over
        (pages the file already has are reused, much cheaper than new ones); the entries
        `skip` names (`entry_identity`s) already hold exactly these bytes at these offsets
        and are left as they are. `done(identity, crc32)` is called for each entry once all
        its bytes are in the file, with the checksum of its bytes (the manifest's
        `weights.tensors[].crc32`, `build_record.Crc32`), made as each piece is."""
        plans = [(entry, _pieces(entry[0], entry[2])) for entry in self.entries]
        span = max((n for _, pieces in plans for _, n in pieces), default=0)
        with _BlockFile(path, reuse=reuse, direct=self.total >= DIRECT_MIN_BYTES) as f, \
                ThreadPoolExecutor(1, "spyrec-weights",
                                   initializer=background_priority) as writer, \
                _PieceStream(f, writer, span) as stream:
            for (buf, offset, nbytes, value), pieces in plans:
                identity = entry_identity(buf, offset, nbytes, value)
                if identity in skip:
                    continue
                host, pad = _host_values(buf, value)
                digest = Crc32()
                stream.begin(offset, digest)
                for rows, piece_bytes in pieces:
                    if stop is not None and stop.is_set():
                        raise WeightsStopped(path)
                    stream.piece(piece_bytes,
                                 lambda out: _device_form(buf, host, pad, out, rows))
                writes = stream.end()
                if done is not None and writes:
                    writes[-1].add_done_callback(_when_written(done, identity, writes, digest))
                elif done is not None:         # no bytes: nothing to wait for
                    done(identity, digest.hexdigest())
            stream.drain()
            f.finish(self.total)


# bytes of device form made and written at a time (`_pieces`): small enough that the two
# buffers cost little to fault in and the last tensor's conversion and write overlap, big
# enough that a piece's Python is nothing beside its copies
PIECE_BYTES = 16 << 20


def _pieces(buf, nbytes: int) -> list[tuple[range | None, int]]:
    """The pieces constant `buf` (`nbytes` of device form) is made in: (device rows, bytes)
    of about PIECE_BYTES each where its layout splits by rows (`device_rows`), else the
    whole tensor at once (rows None)."""
    layout, rows = buf.layout, buf.layout.device_size[0]
    if nbytes <= PIECE_BYTES or 0 in buf.host_size or \
            device_rows(tuple(buf.host_size), layout) is None:
        return [(None, nbytes)]
    row_bytes = nbytes // rows
    per = max(1, PIECE_BYTES // row_bytes)
    return [(range(a, min(a + per, rows)), (min(a + per, rows) - a) * row_bytes)
            for a in range(0, rows, per)]


class _PieceStream:
    """Pieces of consecutive tensors into a `_BlockFile` through two page-aligned buffers
    of `span` bytes (the largest piece) plus two pages. O_DIRECT wants whole pages at page
    offsets, and a piece may end inside a page: only its whole pages are written, and the
    rest is carried to the start of the other buffer, ahead of the next piece. A tensor's
    last piece is written whole, with zeros up to the next WEIGHTS_ALIGNMENT (where the next
    tensor begins)."""

    def __init__(self, f: "_BlockFile", writer: ThreadPoolExecutor, span: int):
        size = _round_up(span, WEIGHTS_ALIGNMENT) + 2 * WEIGHTS_ALIGNMENT
        self.f, self.writer = f, writer
        self.buffers = [_page_aligned(size), _page_aligned(size)]
        self.pending: list[Future | None] = [None, None]
        self.k = 0                  # the buffer the next piece goes into
        self.carry = 0              # bytes at its start that belong before that piece
        self.at = 0                 # the file offset of its byte 0
        self.writes: list[Future] = []
        self.digest = None          # the tensor's checksum, fed its bytes in order

    def __enter__(self) -> "_PieceStream":
        return self

    def __exit__(self, *exc) -> None:
        for job in self.pending:
            if job is not None:
                job.cancel()

    def _buffer(self, k: int) -> np.ndarray:
        """Buffer k % 2, once its last write is done."""
        if self.pending[k % 2] is not None:
            self.pending[k % 2].result()
        return self.buffers[k % 2]

    def _submit(self, block: np.ndarray) -> None:
        """Write `block` at the next offset on the writer thread."""
        job = self.writer.submit(self.f.write_at, self.at, block)
        self.pending[self.k % 2] = job
        self.writes.append(job)
        self.at += len(block)

    def begin(self, offset: int, digest) -> None:
        """A tensor starts at `offset`; its bytes feed `digest`."""
        self.carry, self.at, self.writes = 0, offset, []
        self.digest = digest

    def piece(self, nbytes: int, form: Callable[[np.ndarray], None]) -> None:
        """`form(out)` makes the next `nbytes` of the tensor in `out`, which feed the
        tensor's checksum (here, while they are in the cache: the writer thread is then
        only the disk's, which is most often the slower of the two); its whole pages are
        written."""
        block = self._buffer(self.k)
        end = self.carry + nbytes
        form(block[self.carry:end])
        self.digest.update(block[self.carry:end])
        cut = end - end % WEIGHTS_ALIGNMENT
        if cut:
            self._submit(block[:cut])
            self.k += 1
            self._buffer(self.k)[:end - cut] = block[cut:end]
        self.carry = end - cut

    def end(self) -> list[Future]:
        """Write what the tensor's last piece left, zero-filled to WEIGHTS_ALIGNMENT; the
        tensor's writes, in order."""
        if self.carry:
            block = self._buffer(self.k)
            block[self.carry:WEIGHTS_ALIGNMENT] = 0
            self._submit(block[:WEIGHTS_ALIGNMENT])
            self.k += 1
        self.carry = 0
        return self.writes

    def drain(self) -> None:
        for job in self.pending:
            if job is not None:
                job.result()


def entry_identity(buf, offset: int, nbytes: int, value) -> tuple:
    """What one stored tensor's bytes in weights.bin are a function of: its place (offset,
    bytes), its buffer's name, host size, host dtype and layout, and its value (by id: the
    caller holds the values it compares)."""
    return (offset, nbytes, buf.name, buf.host_size, buf.host_dtype, buf.layout, id(value))


def _when_written(done, identity: tuple, writes: list[Future], digest):
    """A callback for an entry's last write: `done(identity, crc32)` if every one of its
    `writes` finished without error (they run in order on one thread, so all are finished
    then)."""
    def callback(future: Future) -> None:
        if all(not w.cancelled() and w.exception() is None for w in writes):
            done(identity, digest.hexdigest())
    return callback


class WeightsStopped(Exception):
    """`WeightsBlob.write` was told to stop before the file was complete."""


def _host_values(buf, value) -> tuple[np.ndarray, tuple[int, ...]]:
    """Constant `buf`'s host values (mapped from the archive now, dropped after its pieces
    are made) and the zero padding after them (a `PaddedConstant`'s), checked against the
    buffer."""
    from spyrec.errors import InternalError

    base, pad = (value.base, value.pad) if isinstance(value, PaddedConstant) else \
        (value, (0,) * len(buf.host_size))
    host = base.load() if hasattr(base, "load") else np.asarray(base)
    expected = np.dtype(HOST_NUMPY_DTYPES[buf.host_dtype])
    padded = tuple(n + p for n, p in zip(host.shape, pad))
    if host.dtype.newbyteorder("=") != expected or len(pad) != host.ndim or \
            padded != tuple(buf.host_size):
        raise InternalError(f"weights: constant {buf.name!r} holds {host.dtype} "
                            f"{list(padded)}, its tensor is {buf.host_dtype} "
                            f"{list(buf.host_size)}; please report this")
    return host.astype(expected, copy=False), tuple(pad)


def _device_form(buf, host: np.ndarray, pad: tuple[int, ...], out: np.ndarray,
                 rows: range | None) -> None:
    """Write device rows `rows` (None: all) of constant `buf`'s device form into the bytes
    `out`, from its host values zero-padded by `pad` (`_host_values`)."""
    from spyrec.errors import UnsupportedProgram

    device = out.view(STORAGE[buf.layout.device_dtype])
    try:
        if rows is None:
            write_device_padded(device, 0, host, pad, buf.host_dtype, buf.layout, fill=True)
        else:
            write_device_rows(device, host, pad, buf.host_dtype, buf.layout, rows, fill=True)
    except PlacementError as e:
        raise UnsupportedProgram(f"constant '{buf.name}' ({buf.source or 'no source'}): "
                                 f"{e}") from None


# the nice value of compile's background threads (Linux): 0 is the passes' own
BACKGROUND_NICE = 10


def background_priority() -> None:
    """Give the calling thread a lower CPU priority than compile's main thread (on Linux a
    thread has its own nice value). The source hash and weights.bin run beside the passes on
    a 2-core machine: at equal priority the three busy threads shared the cores and the
    passes, the critical path of most compiles, got two thirds of one; niced, the passes
    keep a core and the background work takes what is left (and every core once the main
    thread waits for it). Nothing else changes: the same work, in the same order."""
    if not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except OSError:
        pass                        # a sandbox refusing it: the threads run as before


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def _page_aligned(nbytes: int) -> np.ndarray:
    """A zeroed uint8 buffer whose address is a multiple of the page size (whole pages per
    tensor: what a loader that maps or DMAs each tensor on its own wants)."""
    if nbytes == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=np.uint8)


class _BlockFile:
    """A new file written in whole blocks at given offsets (gaps stay zero); `finish` cuts it
    to its exact size, the last block having been written whole.

    Writes bypass the page cache (O_DIRECT) where the file system takes them: on the VM we
    measure on, putting a page into the page cache costs the kernel 2-3.5 s per GB once the
    host has reclaimed the guest's free memory (a plain `dd` of Granite-8B width's 7.2 GB at 16
    layers: 15-25 s, 14-24 s of it system time), which made writing the weights the whole
    critical path of a big compile; the same bytes written direct take 6.5 s, 1.3 s of it
    system time (disk-bound). The price: the first `spyrec run` after a compile reads the
    weights from disk instead of the page cache (later runs find them cached, as they would
    after any reboot or cache drop), so `WeightsBlob.write` asks for it only for files of
    DIRECT_MIN_BYTES or more. The blocks `WeightsBlob.write` hands over are
    page-aligned buffers of whole pages at page offsets, what O_DIRECT asks; a file system that
    refuses O_DIRECT, or a block that is not aligned, is written through the page cache."""

    def __init__(self, path: Path, reuse: bool = False, direct: bool = True):
        # a fresh directory: never an existing entry, unless it is the file an earlier plan
        # of the same job began (`reuse`), written over in place
        flags = os.O_WRONLY | os.O_CREAT | (0 if reuse else os.O_EXCL) | \
            getattr(os, "O_CLOEXEC", 0)
        self.fd = os.open(path, flags, 0o644)
        self.direct = direct and _set_direct(self.fd, True)

    def __enter__(self) -> "_BlockFile":
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)

    def write_at(self, offset: int, block: np.ndarray) -> None:
        view = memoryview(block).cast("B")
        done = 0
        while done < len(view):
            if self.direct and not _direct_aligned(view[done:], offset + done):
                self.direct = _set_direct(self.fd, False)
            try:
                done += os.pwrite(self.fd, view[done:], offset + done)
            except OSError as e:
                if not (self.direct and e.errno == errno.EINVAL):
                    raise
                self.direct = _set_direct(self.fd, False)   # then again through the cache
                if self.direct:         # the flag would not come off: not a retry forever
                    raise

    def finish(self, size: int) -> None:
        os.ftruncate(self.fd, size)


DIRECT_ALIGNMENT = 4096     # the largest logical block size O_DIRECT may ask alignment to
# weights.bin files at least this big are written direct (`_BlockFile`); smaller ones through
# the page cache, where the fill costs little and the run that follows finds them (the
# threshold above which `spyrec run` prefetches the weights itself, sim/prefetch.py)
DIRECT_MIN_BYTES = 512 << 20


def _direct_aligned(view: memoryview, offset: int) -> bool:
    """Whether a write of `view` at `offset` meets O_DIRECT's alignment: its address, length
    and file offset all multiples of DIRECT_ALIGNMENT."""
    address = np.frombuffer(view, np.uint8).ctypes.data if len(view) else 0
    return not (address % DIRECT_ALIGNMENT or len(view) % DIRECT_ALIGNMENT
                or offset % DIRECT_ALIGNMENT)


def _set_direct(fd: int, on: bool) -> bool:
    """Turn O_DIRECT on or off for `fd`; whether it is on afterwards (False where the
    platform has no O_DIRECT or the file system refuses it)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | flag if on else flags & ~flag)
    except OSError:
        return False if on else bool(flags & flag)
    return on
