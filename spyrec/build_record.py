"""The record that binds an output directory's files into one build, and the hashing it uses.

Stdlib only: the compiler writes the record, the simulator checks it, and `spyrec compile`'s
output-directory check reads it before anything heavy is imported.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import stat
from pathlib import Path

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
