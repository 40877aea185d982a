"""Write the output directory (DESIGN §2) atomically and deterministically.

Everything is built in a temporary sibling directory and swapped into place at the end
(`spyrec.outdir`, which also decides what may be replaced), so a failed compile leaves no partial
directory and never destroys an earlier good one. JSON is
written with fixed formatting and the weights as one raw blob in a fixed order, so the same
input gives byte-identical files.

Weights are streamed: `build_outputs` lays `weights.bin` out from layouts alone (the
manifest's `weights` section), and the writer converts each tensor into its device form from
the `.pt2` archive a few device rows at a time (`StoredTensor.load` maps it;
`WeightsBlob.write`), so compile never holds the weights in memory. The source `.pt2` is not
copied (the manifest names its absolute path and SHA-256 for `run --check`) unless
`self_contained` asks for `program.pt2`.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import mmap
import os
import shutil
import stat
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from spyrec import __version__
from spyrec.codegen.bundle import RunCounts, bundle_file
from spyrec.codegen.opspec import op_spec, spec_tree
from spyrec.codegen.superdsc import superdsc_document
from spyrec.codegen.symbols import SymbolTable
from spyrec.errors import InputFileError
from spyrec.ir import Graph
from spyrec.ir.lx import lx_bytes_per_core
from spyrec.ir.symbols import SymLength
from spyrec.ir.writes import constants_state
from spyrec.ir.values import PaddedConstant
from spyrec.layout.storage import (
    STORAGE, PlacementError, device_rows, write_device_padded, write_device_rows,
)
from spyrec.outdir import check_output_dir, replace_directory

MANIFEST_FORMAT = "spyrec-manifest/3"
WEIGHTS_FILE = "weights.bin"
BUNDLE_FILE = "bundle.mlir"
WEIGHTS_ALIGNMENT = 4096        # bytes (a page); every tensor starts at a multiple
PROGRAM_COPY = "program.pt2"    # the source's copy, with --self-contained
# host dtype -> the numpy dtype of its host array (bf16 as its 16-bit patterns)
HOST_NUMPY_DTYPES = {"float16": "f2", "bfloat16": "u2", "float32": "f4", "int32": "i4",
                     "int64": "i8", "int8": "i1", "bool": "b1"}
OPSPECS_FORMAT = "spyrec-opspecs/1"


def dump_json(obj) -> str:
    """Readable and fast: the outer two levels one entry per line, anything deeper compact
    (json's C encoder runs only without `indent`; the indented encoder is pure Python)."""
    return _pretty(obj, 0) + "\n"


def _pretty(obj, depth: int) -> str:
    pad = " " * (depth + 1)
    if depth < 2 and isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(k)}: {_pretty(v, depth + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    if depth < 2 and isinstance(obj, list) and obj and isinstance(obj[0], (dict, list)):
        items = [pad + _pretty(v, depth + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * depth + "]"
    return _COMPACT.encode(obj)


# `json.dumps(obj, separators=(", ", ": "))` builds an encoder per call (only the default
# one is cached); one encoder with the same options prints the same text. Without the
# circular-reference check (the documents are trees codegen built), which costs a dict
# insert and delete per container: sdsc files 25% faster to encode (23 MB: 0.57 -> 0.42 s)
_COMPACT = json.JSONEncoder(separators=(", ", ": "), check_circular=False)


HASH_BLOCK = 4 << 20
# bytes of the source mapped at once: a map's pages count in the process's resident set
# until it is closed, so one map of a 16 GB source made compile's peak RSS 10 GB
HASH_WINDOW = 64 << 20


def sha256_of(path: Path) -> str:
    """The file's SHA-256, hashed from read-only maps of it, a window at a time, in 4 MiB
    blocks: no copy into the process (reading a 2.5 GB `.pt2` into a buffer cost 0.2-7 s of
    kernel time here, the maps ~0.02 s), and hashing a block releases the GIL, which a thread
    beside compile's busy main thread then waits for again (1 MiB blocks made the 2.5 GB hash
    take 10 s instead of 2). Each window is unmapped before the next, so the resident set
    holds one window. The source's weights are read through maps too
    (`frontend/program.py`). An empty file, or one that is not a regular file, is read
    instead."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or not st.st_size:
            return _sha256_read(f, h)
        for start in range(0, st.st_size, HASH_WINDOW):
            _hash_window(f.fileno(), start, min(HASH_WINDOW, st.st_size - start), h)
    return h.hexdigest()


def _hash_window(fd: int, start: int, length: int, h) -> None:
    with mmap.mmap(fd, length, access=mmap.ACCESS_READ, offset=start) as mapped:
        with memoryview(mapped) as view:
            for at in range(0, length, HASH_BLOCK):
                h.update(view[at:at + HASH_BLOCK])


def _sha256_read(f, h) -> str:
    """`sha256_of` by reads into one buffer."""
    block = bytearray(HASH_BLOCK)
    view = memoryview(block)
    while n := f.readinto(block):
        h.update(view[:n])
    return h.hexdigest()


class Sha256Job:
    """The source's SHA-256, computed on a daemon thread while compile works: hashing a 16 GB
    `.pt2` takes ~15 s of one core, and hashlib releases the GIL on large blocks. A daemon,
    so a compile that fails early exits at once instead of waiting for the hash."""

    def __init__(self, path: Path):
        self._digest: str | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(path,), daemon=True,
                                        name="spyrec-sha256")
        self._thread.start()

    def _run(self, path: Path) -> None:
        background_priority()
        try:
            self._digest = sha256_of(path)
        except OSError as e:          # raised where the digest is needed, naming the source
            self._error = InputFileError(
                f"{path}: cannot read it to record its SHA-256 in manifest.json "
                f"({e.strerror or e}); nothing was written. Check that the file is readable "
                f"and stays in place while spyrec compiles it.")
        except BaseException as e:     # re-raised where the digest is needed
            self._error = e

    def result(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._digest


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
        and are left as they are. `done(identity)` is called for each entry once all its
        bytes are in the file."""
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
                stream.begin(offset)
                for rows, piece_bytes in pieces:
                    if stop is not None and stop.is_set():
                        raise WeightsStopped(path)
                    stream.piece(piece_bytes,
                                 lambda out: _device_form(buf, host, pad, out, rows))
                writes = stream.end()
                if done is not None and writes:
                    writes[-1].add_done_callback(_when_written(done, identity, writes))
                elif done is not None:         # no bytes: nothing to wait for
                    done(identity)
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
        job = self.writer.submit(self.f.write_at, self.at, block)
        self.pending[self.k % 2] = job
        self.writes.append(job)
        self.at += len(block)

    def begin(self, offset: int) -> None:
        self.carry, self.at, self.writes = 0, offset, []

    def piece(self, nbytes: int, form: Callable[[np.ndarray], None]) -> None:
        """`form(out)` makes the next `nbytes` of the tensor in `out`; its whole pages are
        written."""
        block = self._buffer(self.k)
        end = self.carry + nbytes
        form(block[self.carry:end])
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


def _when_written(done, identity: tuple, writes: list[Future]):
    """A callback for an entry's last write: `done(identity)` if every one of its `writes`
    finished without error (they run in order on one thread, so all are finished then)."""
    def callback(future: Future) -> None:
        if all(not w.cancelled() and w.exception() is None for w in writes):
            done(identity)
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


@dataclass(frozen=True)
class BuiltOutput:
    """An output directory built in memory: every file by name, as written (`weights.bin` is a
    `WeightsBlob` the writer streams; manifest.json a `LateJson` while the source's hash is
    still running, its document's `source.sha256` None until written; opspecs.json and each
    sdsc file a `JsonDoc`, printed when first written or measured), and the documents
    some of them print: manifest.json's, every sdsc_<n>.json's by file name, and each
    bundle's executions as data
    (`bundle.bundle_file`). The documents are for whatever reads the output without the files
    (the cost estimate of report.json, spyrec/driver.py); they are plain JSON values, what
    parsing the texts gives. The executions are those at every symbolic length's maximum;
    `run_counts` says how often each bundle runs each file at other lengths (the cost curve),
    and `symbols` are the graph's symbolic lengths (none for a static program)."""

    files: dict[str, bytes | str | JsonDoc | LateJson | WeightsBlob]
    manifest: dict
    sdsc: dict[str, dict]
    executions: dict[str, list[tuple]]
    run_counts: dict[str, RunCounts]
    symbols: tuple[SymLength, ...] = ()


class JsonDoc:
    """A JSON file printed when first asked (`text`), then kept: opspecs.json and the sdsc
    documents, so that compile can fork its cost estimate (`spyrec.beside`) before spending
    ~1 ms per op on their text, and print them while the child estimates."""

    __slots__ = ("doc", "_text")

    def __init__(self, doc: dict):
        self.doc = doc
        self._text: str | None = None

    def text(self) -> str:
        if self._text is None:
            self._text = dump_json(self.doc)
        return self._text


def printed(content):
    """A built file's content as written: text for a document (`JsonDoc`, `LateJson`),
    anything else (bytes, str, a `WeightsBlob`, which streams itself) as it is."""
    return content.text() if isinstance(content, (JsonDoc, LateJson)) else content


class LateJson:
    """A JSON file whose document waits on a value another thread computes: the manifest's
    source SHA-256. The document is complete but for it, and is written after the cost
    estimate (`write_atomically`), so compile's main thread does not wait for the hash while
    it still has work: Granite-8B width at 16 layers waited 4.3 s for it before the estimate
    (the hash shares a core with weights.bin's conversion while the passes run)."""

    def __init__(self, doc: dict, fill: Callable[[dict], None]):
        self.doc = doc
        self._fill = fill

    def text(self) -> str:
        """The file's text, once `fill` has put the late value into the document."""
        self._fill(self.doc)
        return dump_json(self.doc)


def build_outputs(graph: Graph, source: Path, pipeline: list[dict], configs: dict,
                  report: dict, check: bool = True, self_contained: bool = False,
                  source_sha256: Sha256Job | None = None) -> BuiltOutput:
    """Every file of the output directory (pure: no disk writes). `check`: the emitter
    re-derives each core's start address from our coordinates (codegen/superdsc.py)."""
    specs = [op_spec(graph, op) for op in graph.ops]
    files: dict[str, bytes | str | WeightsBlob | LateJson] = {}
    sdsc: dict[str, dict] = {}
    symbols = SymbolTable()
    for i, (op, spec) in enumerate(zip(graph.ops, specs)):
        name = f"sdsc_{i}.json"
        accesses = list(op.accesses())
        bufs = [graph.buffers[a.buffer] for _, a in accesses]
        sdsc[name] = superdsc_document(i, spec, bufs, [r for r, _ in accesses], symbols, check)
        files[name] = JsonDoc(sdsc[name])
    sdsc_names = list(sdsc)
    tree = spec_tree(graph.ops, specs)
    files["opspecs.json"] = JsonDoc({"format": OPSPECS_FORMAT,
                                     "kernels": [{"name": "main", "specs": tree}]})
    lengths = tuple(graph.symbols.values())
    files[BUNDLE_FILE], executions, run_counts = bundle_file(
        sdsc_names, [op.loops for op in graph.ops],
        [symbols.of(i) for i in range(len(graph.ops))], lengths)
    blob = WeightsBlob.plan(graph)
    manifest_doc = manifest(graph, source, pipeline, configs, sdsc_names,
                            report.get("hbm_bytes", 0), blob, self_contained, source_sha256)
    files["manifest.json"] = dump_json(manifest_doc) if source_sha256 is None else \
        LateJson(manifest_doc, lambda doc: doc["source"].update(sha256=source_sha256.result()))
    if blob.entries:
        files[WEIGHTS_FILE] = blob
    auto = (report.get("tiling") or {}).get("auto_config")
    if auto is not None:   # --tiling auto: its choice, a config the user can pass back
        files["tiling.yaml"] = auto
    return BuiltOutput(files, manifest_doc, sdsc, {BUNDLE_FILE: executions},
                       {BUNDLE_FILE: run_counts}, lengths)


def manifest(graph: Graph, source: Path, pipeline: list[dict], configs: dict,
             sdsc_names: list[str], hbm_bytes: int, blob: WeightsBlob | None = None,
             self_contained: bool = False, source_sha256: Sha256Job | None = None) -> dict:
    tensors = []
    writers: dict[str, list] = {}       # buffer -> the ops writing it (`_lx_fields`)
    for op in graph.ops:
        writers.setdefault(op.output.buffer, []).append(op)
    for buf in graph.buffers.values():
        tensors.append({
            "name": buf.name, "role": buf.role, "host_shape": list(buf.host_size),
            "host_dtype": buf.host_dtype, **buf.layout.to_json(),
            "hbm_address": buf.hbm_address, "device_bytes": buf.layout.device_bytes,
            "source": buf.source, **_lx_fields(graph, buf, writers.get(buf.name, [])),
            **_symbolic_dims(graph, buf.name)})
    return {
        "format": MANIFEST_FORMAT, "spyrec_version": __version__,
        "source": {"file": source.name, "path": str(Path(source).resolve()),
                   # a hash still running is filled in when the file is written (`LateJson`)
                   "sha256": None if source_sha256 is not None else sha256_of(source),
                   "copy": PROGRAM_COPY if self_contained else None},
        "pipeline": pipeline, "configs": configs,
        "inputs": list(graph.inputs), "outputs": list(graph.outputs),
        **({"mutated_buffers": dict(graph.mutated_buffers)} if graph.mutated_buffers else {}),
        **_symbols(graph),
        **_lx_args(graph, sdsc_names),
        **_hbm_args(graph, sdsc_names),
        "tensors": tensors,
        "kernels": [{"name": "main", "bundle": BUNDLE_FILE, "ops": sdsc_names}],
        "hbm_bytes": hbm_bytes,
        "weights": (blob or WeightsBlob.plan(graph)).section(),
    }


def _symbols(graph: Graph) -> dict:
    """`symbols`: the graph's symbolic lengths (issue 30), which the simulator binds from the
    inputs' shapes or values; absent in a static program (its manifest is unchanged)."""
    if not graph.symbols:
        return {}
    return {"symbols": [{"name": s.name, "granularity": s.granularity, "minimum": s.minimum,
                         "maximum": s.maximum, "where": s.where, **_value_of(s),
                         **({"min_shares": [list(step) for step in s.min_shares]}
                            if s.min_shares else {})}
                        for s in graph.symbols.values()]}


def _value_of(symbol: SymLength) -> dict:
    """A length read from an input's value at run time: `value` {input, flat index, offset}
    (clamped to minimum..maximum); nothing for a dim of an input's shape."""
    v = symbol.value_of
    return {} if v is None else {"value": {"input": v.input, "index": v.index,
                                           "offset": v.offset}}


def _symbolic_dims(graph: Graph, name: str) -> dict:
    """An input's, output's or folded constant's `symbolic_dims` ({host dim: symbol};
    `host_shape` is at the maximum); nothing for a tensor without one."""
    dims = graph.symbolic_dims.get(name)
    return {"symbolic_dims": {str(d): s for d, s in sorted(dims.items())}} if dims else {}


def _lx_args(graph: Graph, sdsc_names: list[str]) -> dict:
    """`lx_args`: which tensor each LX arg of each op holds ({file: {arg index: name}}).

    SuperDSC names no tensors, and LX offsets are reused by tensors whose values never
    overlap in time (a loop body's per-tile buffers), so the offset alone cannot say which
    tensor an arg is; the simulator needs it to check lifetimes. Absent without LX."""
    table = {}
    for name, op in zip(sdsc_names, graph.ops):
        held = {str(i): a.buffer for i, (_, a) in enumerate(op.accesses())
                if graph.buffers[a.buffer].lx_address is not None}
        if held:
            table[name] = held
    return {"lx_args": table} if table else {}


def _hbm_args(graph: Graph, sdsc_names: list[str]) -> dict:
    """`hbm_args`: which tensor each HBM arg of each op holds, for args of tensors whose bytes
    other tensors reuse at other times (memory_planning); absent when nothing is shared.

    SuperDSC names no tensors: the simulator finds an arg's tensor by address, and once a dead
    intermediate's bytes hold another tensor an address inside them names two tensors."""
    spans = sorted((b.hbm_address, b.hbm_address + b.layout.device_bytes, b.name)
                   for b in graph.buffers.values()
                   if b.hbm_address is not None and b.layout.device_bytes)
    shared: set[str] = set()
    end, last = -1, ""
    for start, stop, name in spans:
        if start < end:
            shared |= {name, last}
        if stop > end:
            end, last = stop, name
    table = {}
    for file, op in zip(sdsc_names, graph.ops):
        held = {str(i): a.buffer for i, (_, a) in enumerate(op.accesses())
                if a.buffer in shared and graph.buffers[a.buffer].hbm_address is not None}
        if held:
            table[file] = held
    return {"hbm_args": table} if table else {}


def _lx_fields(graph: Graph, buf, writers: list) -> dict:
    """An LX tensor's per-core offset and bytes (issue 8 contract §2); nothing for HBM ones.
    `writers`: the ops writing `buf` (found once for every buffer, not per buffer)."""
    if buf.lx_address is None:
        return {}
    return {"lx_address": buf.lx_address,
            "lx_bytes_per_core": lx_bytes_per_core(graph, buf, writers)}


def write_atomically(out_dir: Path,
                     files: dict[str, bytes | str | JsonDoc | WeightsBlob | LateJson],
                     source: Path,
                     finalize=None, self_contained: bool = False, weights_job=None) -> None:
    """Write `files` (and, if `self_contained`, a copy of `source` as program.pt2) as `out_dir`,
    all or nothing.

    `spyrec.outdir` decides whether `out_dir` may be replaced and swaps the finished directory
    in. `finalize(tmp_dir) -> {name: text}` runs on the complete temporary directory before the
    swap, for files computed from the others (the report's cost estimate). `weights_job` (a
    `codegen.weights_job.WeightsJob` started during the passes) supplies weights.bin when it
    holds the same blob.
    """
    def build(tmp: Path) -> None:
        early = {name: content for name, content in files.items()
                 if isinstance(content, WeightsBlob) and weights_job is not None}
        late = {name: content for name, content in files.items()
                if isinstance(content, LateJson)}
        for name, content in files.items():
            if name not in early and name not in late:
                _write_file(tmp / name, content)
        if self_contained:
            shutil.copyfile(source, tmp / PROGRAM_COPY)
        for name, content in (finalize(tmp) if finalize else {}).items():
            _write_file(tmp / name, content)
        for name, content in late.items():  # after finalize: its value was still coming
            _write_file(tmp / name, content)
        for name, blob in early.items():    # last: finalize ran while it was still writing
            if not weights_job.take(blob, tmp / name):
                _write_file(tmp / name, blob)

    replace_directory(check_output_dir(out_dir), build)


def _write_file(path: Path, content: bytes | str | JsonDoc | LateJson | WeightsBlob) -> None:
    content = printed(content)
    if isinstance(content, str):
        content = content.encode("utf-8")
    if isinstance(content, WeightsBlob):
        content.write(path)
        return
    with open(path, "xb") as f:  # a fresh directory: never follow or reuse an existing entry
        f.write(content)
