"""weights.bin mapped as the constants' device memory (docs/formats.md "weights.bin").

The file holds every constant in its device form, so a run maps it and hands each constant its
slice: nothing is converted or copied. A constant stored as another's value in a second layout
(`relayout_of`) is laid out from that one's bytes here.
"""

from __future__ import annotations

import mmap
from functools import partial
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from spyrec.errors import InputFileError
from spyrec.sim.prefetch import SMALL_BYTES
from spyrec.sim.specs import TensorSpec
from spyrec.sim.transfer import relaid_out


def constant_bytes(out_dir: Path, weights, tensors: Mapping[str, TensorSpec],
                   later: dict[str, Callable[[], None]] | None = None
                   ) -> dict[str, np.ndarray]:
    """Each constant's device bytes (uint8), mapped copy-on-write from OUT/weights.bin: the
    file holds them in device form, so they become the constants' HBM as they are. The
    kernel is asked to read the whole file ahead (`MADV_WILLNEED`, asynchronous), so the
    pages arrive while the first ops run instead of one fault at a time when an op first
    reads them. Above `SMALL_BYTES` the runner's `Prefetcher` reads them in execution order
    instead, a window ahead of the ops (the whole file at once could evict the first layers'
    weights to make room for the last).
    `weights` is the loader's checked `Weights` table (manifest `weights`); the file's size
    was checked too. A constant stored as another's value in its own layout (`relayout_of`)
    is laid out here from that one's bytes, in memory (`tensors`: the manifest's); with
    `later`, its bytes are left unwritten and `later[name]` is the call that writes them (the
    runner lays it out on a thread while the ops before its first reader run)."""
    if weights is None or not weights.entries:
        return {}
    if weights.nbytes == 0:         # only empty constants: an empty file cannot be mapped
        return {e.name: np.zeros(e.nbytes, dtype=np.uint8) for e in weights.entries}
    path = Path(out_dir) / weights.file
    try:
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), weights.nbytes, access=mmap.ACCESS_COPY)
    except (OSError, ValueError) as e:   # changed since the loader's size check
        raise InputFileError(f"{path}: cannot map it ({e}); the file is truncated or "
                             f"damaged: re-run spyrec compile") from None
    if weights.nbytes < SMALL_BYTES and hasattr(mapped, "madvise") and \
            hasattr(mmap, "MADV_WILLNEED"):
        mapped.madvise(mmap.MADV_WILLNEED)     # bigger files: read in order (sim/prefetch.py)
    data = np.frombuffer(mapped, dtype=np.uint8)
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
