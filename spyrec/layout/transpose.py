"""`dst[...] = src` for the copies a layout change makes: fast when it transposes.

Why: a weight's device layout puts its sticks along a host dim that is not the host's
contiguous one (a linear weight `[out, in]` is stored with its sticks along `out`), so
writing `weights.bin` and relaying out a tied table are transposes of 2-byte elements.
numpy copies those one element per step of its inner loop, a strided 2-byte read each:
0.5 GB/s on the machines we measure, the largest single CPU cost of compiling an 8B model.

The same copy done in two passes moves 8-byte words instead: first every group of
`lanes = 8 // itemsize` neighbours along the source's contiguous axis is moved as one
`uint64` into a scratch array ordered like the destination (a transpose of words), then each
word is spread into its `lanes` slots of the destination, whose contiguous axis the scratch
already follows (short strides both sides). Both passes are plain numpy copies of views; the
bits move unchanged (no float conversion, NaN payloads kept), so the result is identical to
`np.copyto`. Measured on a 2048 x 8192 fp16 weight: 0.51 GB/s -> 1.4 GB/s on one core.

Anything else (one shared contiguous axis, a conversion between dtypes, a contiguous extent
not a whole number of words, negative strides, small arrays) is `np.copyto` as before.
"""

from __future__ import annotations

import numpy as np

WORD = np.dtype(np.uint64)
# below this many bytes the two passes' fixed cost is not worth it
MIN_BYTES = 1 << 16
# scratch per chunk of the destination's outermost axis: not small, because each chunk's numpy
# calls take the GIL again, and beside compile's busy main thread each take waits (2 MiB
# chunks kept both passes in cache, 10% faster alone, but starved the weights thread)
CHUNK_BYTES = 4 << 20


def copy_strided(dst: np.ndarray, src: np.ndarray, *, min_bytes: int = MIN_BYTES,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
    """`dst[...] = src` (same shape; converting as assignment does when the dtypes differ),
    bit for bit; in two word-sized passes when the two arrays' contiguous axes differ and
    `dst` has at least `min_bytes` (module docstring), `chunk_bytes` of it at a time."""
    if dst.shape != src.shape:
        raise ValueError(f"copy_strided: shapes {dst.shape} and {src.shape} differ")
    plan = _word_plan(dst, src, min_bytes)
    if plan is None:
        np.copyto(dst, src, casting="unsafe")     # what `dst[...] = src` does
        return
    a, order = plan
    outer = order[0]
    step = _chunk(dst, outer, a, chunk_bytes)
    for start in range(0, dst.shape[outer], step):
        part = [slice(None)] * dst.ndim
        part[outer] = slice(start, start + step)
        _two_passes(dst[tuple(part)], src[tuple(part)], a, order)


def _word_plan(dst: np.ndarray, src: np.ndarray, min_bytes: int = MIN_BYTES
               ) -> tuple[int, list[int]] | None:
    """(the source's contiguous axis, the destination's axes outermost first) when the copy
    is a transpose the word passes serve, else None."""
    if dst.dtype != src.dtype or dst.nbytes < min_bytes or dst.ndim < 2:
        return None
    lanes = WORD.itemsize // dst.itemsize
    if lanes < 2 or any(s < 0 for s in dst.strides + src.strides):
        return None
    a, b = _unit_axis(src), _unit_axis(dst)
    if a is None or b is None or a == b or src.shape[a] % lanes:
        return None
    order = sorted(range(dst.ndim), key=lambda i: (dst.shape[i] > 1, dst.strides[i]),
                   reverse=True)
    order = [i for i in order if dst.shape[i] > 1] + [i for i in order if dst.shape[i] <= 1]
    return a, order


def _unit_axis(x: np.ndarray) -> int | None:
    """The one axis (longer than 1) along which `x`'s elements are adjacent, if any."""
    axes = [i for i, (n, s) in enumerate(zip(x.shape, x.strides))
            if n > 1 and s == x.itemsize]
    return axes[0] if len(axes) == 1 else None


def _chunk(dst: np.ndarray, outer: int, a: int, chunk_bytes: int) -> int:
    """How many positions of the outermost axis one pass pair handles (the scratch is the
    same size as that slab of the destination)."""
    if outer == a:
        return dst.shape[outer]
    per_position = dst.nbytes // max(dst.shape[outer], 1)
    return max(1, chunk_bytes // max(per_position, 1))


def _two_passes(dst: np.ndarray, src: np.ndarray, a: int, order: list[int]) -> None:
    lanes = WORD.itemsize // dst.itemsize
    # pass 1: words of `lanes` neighbours along a, into scratch in the destination's order
    words = np.moveaxis(np.moveaxis(src, a, -1).view(WORD), -1, a)
    scratch = np.empty([words.shape[i] for i in order], WORD)
    np.copyto(scratch.transpose(np.argsort(order)), words)
    # pass 2: each word's lanes into their slots; axis a of dst split into (word, lane)
    spread = scratch.view(dst.dtype).reshape(scratch.shape + (lanes,))
    n = dst.ndim
    axes = []
    for i in range(n):
        axes.append(order.index(i))
        if i == a:
            axes.append(n)                       # the lane axis follows its word axis
    shape = dst.shape[:a] + (dst.shape[a] // lanes, lanes) + dst.shape[a + 1:]
    strides = dst.strides[:a] + (dst.strides[a] * lanes, dst.strides[a]) + dst.strides[a + 1:]
    target = np.lib.stride_tricks.as_strided(dst, shape, strides, writeable=True)
    np.copyto(target, spread.transpose(axes))
