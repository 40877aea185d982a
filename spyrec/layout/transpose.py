"""`dst[...] = src` for the copies a layout change makes: fast when it transposes.

Why: a weight's device layout puts its sticks along a host dim that is not the host's
contiguous one (a linear weight `[out, in]` is stored with its sticks along `out`), so
writing `weights.bin` and relaying out a tied table are transposes of 2-byte elements.
numpy copies those one element per step of its inner loop, a strided 2-byte read each:
0.5 GB/s on the machines we measure, the largest single CPU cost of compiling an 8B model.

The same copy done in two passes moves words instead: first every group of
`lanes = word // itemsize` neighbours along the source's contiguous axis is moved as one word
into a scratch array ordered like the destination (a transpose of words), then each word is
spread into its `lanes` slots of the destination, whose contiguous axis the scratch already
follows (short strides both sides). A word is 16 bytes (numpy's `complex128`, only ever copied,
never computed with) where the contiguous extent is a whole number of them, else 8 (`uint64`).
Both passes are plain numpy copies of views; the bits move unchanged (no float conversion, NaN
payloads kept), so the result is identical to `np.copyto`.

The first pass reads the source across its rows: each word it takes is 16 bytes of a 64-byte
cache line whose other words the same pass takes only `lanes` destination rows later. The
copy is therefore done in blocks whose innermost destination axes walk at most
`BLOCK_WORDS` words (`_block`), so those lines are still in cache when their next words are
read; the blocks are about `chunk_bytes` each. Measured on a 12,800 x 4,096 fp16 weight (the
Granite-8B MLP's) on one core: 0.72 GB/s with 8-byte words over whole rows, 1.3 GB/s with
16-byte words in blocks (np.copyto: 0.25 GB/s).

Anything else (one shared contiguous axis, a conversion between dtypes, a contiguous extent
not a whole number of words, negative strides, small arrays) is `np.copyto` as before.
"""

from __future__ import annotations

import math

import numpy as np

# the word sizes tried, the largest first (a word is moved, never computed with)
WORDS = (np.dtype(np.complex128), np.dtype(np.uint64))
# below this many bytes the two passes' fixed cost is not worth it
MIN_BYTES = 1 << 16
# scratch per chunk of the destination's outermost axis: not small, because each chunk's numpy
# calls take the GIL again, and beside compile's busy main thread each take waits (2 MiB
# chunks kept both passes in cache, 10% faster alone, but starved the weights thread)
CHUNK_BYTES = 4 << 20
# the most words the first pass reads across source rows before it comes back to a row's next
# word (1024 x 64-byte lines: well inside a core's L2)
BLOCK_WORDS = 1024


def copy_strided(dst: np.ndarray, src: np.ndarray, *, min_bytes: int = MIN_BYTES,
                 chunk_bytes: int = CHUNK_BYTES, block_words: int = BLOCK_WORDS) -> None:
    """`dst[...] = src` (same shape; converting as assignment does when the dtypes differ),
    bit for bit; in two word-sized passes when the two arrays' contiguous axes differ and
    `dst` has at least `min_bytes` (module docstring), in blocks of about `chunk_bytes` whose
    first pass reads at most `block_words` words across the source's rows at a time."""
    if dst.shape != src.shape:
        raise ValueError(f"copy_strided: shapes {dst.shape} and {src.shape} differ")
    plan = _word_plan(dst, src, min_bytes)
    if plan is None:
        np.copyto(dst, src, casting="unsafe")     # what `dst[...] = src` does
        return
    a, order, word = plan
    lanes = word.itemsize // dst.itemsize
    outer = order[0]
    cut = _block(dst.shape, order, a, block_words)
    limited = list(dst.shape)
    if cut is not None:
        limited[cut[0]] = cut[1]
    per_outer = math.prod(limited) // max(limited[outer], 1) * dst.itemsize
    outer_step = max(1, chunk_bytes // max(per_outer, 1))
    if outer == a:
        outer_step = -(-outer_step // lanes) * lanes          # whole words
    if cut is not None and cut[0] == outer:
        outer_step, cut = min(outer_step, cut[1]), None
    for part in _pieces(dst.shape, outer, outer_step, cut):
        _two_passes(dst[part], src[part], a, order, word)


def _pieces(shape: tuple[int, ...], outer: int, outer_step: int,
            cut: tuple[int, int] | None):
    """Index tuples cutting axis `outer` every `outer_step` and `cut`'s axis every its step."""
    inner, inner_step = cut if cut is not None else (outer, shape[outer])
    for start in range(0, shape[outer], outer_step):
        for first in range(0, shape[inner], inner_step) if cut is not None else [0]:
            part = [slice(None)] * len(shape)
            part[outer] = slice(start, start + outer_step)
            if cut is not None:
                part[inner] = slice(first, first + inner_step)
            yield tuple(part)


def _word_plan(dst: np.ndarray, src: np.ndarray, min_bytes: int = MIN_BYTES
               ) -> tuple[int, list[int], np.dtype] | None:
    """(the source's contiguous axis, the destination's axes outermost first, the word) when
    the copy is a transpose the word passes serve, else None."""
    if dst.dtype != src.dtype or dst.nbytes < min_bytes or dst.ndim < 2:
        return None
    if any(s < 0 for s in dst.strides + src.strides):
        return None
    a, b = _unit_axis(src), _unit_axis(dst)
    if a is None or b is None or a == b:
        return None
    word = next((w for w in WORDS if w.itemsize >= 2 * dst.itemsize
                 and src.shape[a] % (w.itemsize // dst.itemsize) == 0), None)
    if word is None:
        return None
    order = sorted(range(dst.ndim), key=lambda i: (dst.shape[i] > 1, dst.strides[i]),
                   reverse=True)
    order = [i for i in order if dst.shape[i] > 1] + [i for i in order if dst.shape[i] <= 1]
    return a, order, word


def _block(shape: tuple[int, ...], order: list[int], a: int,
           block_words: int) -> tuple[int, int] | None:
    """(axis, step) to cut the destination at so that the first pass, between two words of
    one source line (one step of the word axis `a`), reads at most `block_words` words: the
    destination's axes inside `a` (innermost first) are walked in that time. None when they
    already walk few enough."""
    walked = 1
    for axis in reversed(order):
        if axis == a:
            return None
        if walked * shape[axis] > block_words:
            return axis, max(1, block_words // walked)
        walked *= shape[axis]
    return None


def _unit_axis(x: np.ndarray) -> int | None:
    """The one axis (longer than 1) along which `x`'s elements are adjacent, if any."""
    axes = [i for i, (n, s) in enumerate(zip(x.shape, x.strides))
            if n > 1 and s == x.itemsize]
    return axes[0] if len(axes) == 1 else None


def _two_passes(dst: np.ndarray, src: np.ndarray, a: int, order: list[int],
                word: np.dtype) -> None:
    lanes = word.itemsize // dst.itemsize
    # pass 1: words of `lanes` neighbours along a, into scratch in the destination's order
    words = np.moveaxis(np.moveaxis(src, a, -1).view(word), -1, a)
    scratch = np.empty([words.shape[i] for i in order], word)
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
