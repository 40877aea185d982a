"""The record that binds an output directory's files into one build, and the hashing it uses.

Every file of an output directory belongs to one build (DESIGN §2). manifest.json's `build`
section is the record: the build's `id` and, for every other file, either its size and SHA-256
(the files a compile writes deterministically: the sdsc files, the bundle, opspecs.json,
tiling.yaml, a self-contained copy of the source) or `"stamp": true` for the files that carry
the id themselves (weights.bin ends with a stamp line after its tensors, and each of its
constants has a checksum in `weights.tensors[].crc32`, `Crc32`; report.json has a `build` key
and report.txt a `build` line: their wall times make them differ from one compile to the
next). The id is the SHA-256 of the manifest's own canonical JSON with the id left empty, so
it covers every byte of the build: the records of the other files, each constant's
checksum, the source's SHA-256. The same inputs give the same id.

`spyrec run` reads each file through one handle on the directory and compares the records of
what it reads; `spyrec verify` hashes everything (docs/formats.md, "One build").

Stdlib only: the compiler writes the record, the simulator checks it, and `spyrec compile`'s
output-directory check reads it before anything heavy is imported.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import stat
import zlib
from pathlib import Path

STAMP_PREFIX = b"spyrec-build "
ID_HEX = 64
STAMP_BYTES = len(STAMP_PREFIX) + ID_HEX + 1     # the prefix, the id, a newline


def build_id(manifest: dict) -> str:
    """The id of the build `manifest` records: the SHA-256 of its canonical JSON (sorted keys,
    no spaces) with `build.id` empty."""
    build = dict(manifest.get("build") or {}, id="")
    text = json.dumps(dict(manifest, build=build), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def stamp(build: str) -> bytes:
    """The line weights.bin ends with, after its last tensor's bytes."""
    return STAMP_PREFIX + build.encode("ascii") + b"\n"


def read_stamp(fd: int, at: int) -> str | None:
    """The build id of the stamp at byte `at` of the open file `fd` (where its tensors end),
    or None when there is no well-formed stamp there."""
    data = os.pread(fd, STAMP_BYTES + 1, at)
    if len(data) != STAMP_BYTES or not data.startswith(STAMP_PREFIX) or \
            not data.endswith(b"\n"):
        return None
    text = data[len(STAMP_PREFIX):-1].decode("ascii", "replace")
    return text if all(c in "0123456789abcdef" for c in text) else None


class Crc32:
    """A CRC-32 with hashlib's interface (`update`, `hexdigest`: 8 hex digits): each stored
    constant's checksum in `weights.tensors[].crc32`. Not SHA-256, for its cost: weights.bin
    is most of a build (16 GB at Granite-8B width) and is hashed while compile writes it,
    on the cores the passes use; SHA-256 ran ~1.1 GB/s there and made a Llama-3.2-1B 16-layer
    compile 1.28x slower, CRC-32 ~3.5 GB/s. It finds any accidental change (a burst up to 32
    bits always); the build's id, a SHA-256 over the manifest, covers the checksums."""

    def __init__(self) -> None:
        self.value = 0

    def update(self, data) -> None:
        self.value = zlib.crc32(data, self.value)     # releases the GIL on large blocks

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


def crc32_range(fd: int, start: int, length: int) -> str:
    """`Crc32` of `length` bytes of open file `fd` from byte `start` (a page multiple)."""
    crc = Crc32()
    for at in range(start, start + length, HASH_WINDOW):
        _hash_window(fd, at, min(HASH_WINDOW, start + length - at), crc)
    return crc.hexdigest()


def file_record(data: bytes) -> dict:
    """A deterministic file's entry in `build.files`."""
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

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


def sha256_range(fd: int, start: int, length: int) -> str:
    """The SHA-256 of `length` bytes of open file `fd` from byte `start` (a page multiple),
    hashed from maps a window at a time (`sha256_of`)."""
    h = hashlib.sha256()
    for at in range(start, start + length, HASH_WINDOW):
        _hash_window(fd, at, min(HASH_WINDOW, start + length - at), h)
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
