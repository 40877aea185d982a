"""An arg's accesses over a chunk as one strided view of the arena, when they are one.

DESIGN §8 asks the simulator to read and write through strided views, not per-element offset
arrays: at real width a weight's int64 offsets are four times its own bytes. Most accesses
allow it. When every device coordinate of an arg depends on at most one iteration var, the
element offset is a sum of per-var terms, `f_v(i)`, each a 1-D array over the var's range
(cheap: the chunk's range, not its points). A term that is affine is one axis of a strided
view; a stick layout's term is affine by pieces (`(i // 64) * S + i % 64`), a mixed-radix
number whose digits are the view's axes: `digits` finds them from the values of `f_v`
themselves, not from the expression, and checks every value against them, so the view reads
exactly the elements the offsets name.

A var whose range is not a whole number of the outer digit's blocks (a vocab of 49,155 in
sticks of 64) is padded up to one: a read takes the padded box (whose extra points are
memory-safe, checked, and dropped), a write assigns only the valid sub-boxes. Anything else
(a gather, a coordinate over two vars, an LX arg with its per-core arenas) keeps the offset
path in `access`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from spyrec.layout.storage import valid_boxes
from spyrec.sim.torch_kernels import cast_copy

Digits = tuple[tuple[int, int], ...]     # (extent, stride in elements), outermost first


def digits(f: np.ndarray) -> Digits | None:
    """Mixed-radix digits of a 1-D offset term (f[0] == 0): f(i) = sum(digit_k(i) * stride_k)
    with i = sum(digit_k * prod(inner extents)); None when f has no such form."""
    n = len(f)
    if n == 1:
        return ((1, 0),)
    step = np.diff(f)
    inner = int(step[0])
    breaks = np.flatnonzero(step != inner)
    if not len(breaks):
        return ((n, inner),)
    period = int(breaks[0]) + 1                       # f is affine on [0, period)
    starts = f[::period]
    i = np.arange(n, dtype=np.int64)
    if not np.array_equal(f, starts[i // period] + (i % period) * inner):
        return None
    outer = digits(starts - starts[0])
    return None if outer is None else outer + ((period, inner),)


def padded_length(ds: Digits) -> int:
    return math.prod(e for e, _ in ds)


@dataclass(frozen=True)
class Strided:
    """An arg's access over one chunk: per chunk axis its digits and valid length (1 and
    ((1, 0),) on axes the arg does not vary along), from element `offset` of the arg's view."""

    offset: int
    axes: tuple[Digits, ...]
    lengths: tuple[int, ...]

    @classmethod
    def from_terms(cls, terms: list[np.ndarray], shape: tuple[int, ...],
                   limit: int) -> "Strided | None":
        """From per-coordinate offset terms (each broadcastable over the chunk `shape`), or
        None if one varies along two axes, a term has no digit form, or the padded box
        leaves [0, limit) elements of the view."""
        form = cls.of_terms(terms, shape)
        return form if form is not None and form.fits(limit) else None

    @classmethod
    def of_terms(cls, terms: list[np.ndarray], shape: tuple[int, ...]) -> "Strided | None":
        """`from_terms` before the bounds check (`fits`): the form depends only on the
        terms, so one form serves every arg accessed alike, wherever it is."""
        rank = len(shape)
        offset, per_axis = 0, [None] * rank
        for term in terms:
            axes = [a for a, n in enumerate(term.shape) if n > 1]
            if len(axes) > 1:
                return None
            if not axes:
                offset += int(term.reshape(-1)[0]) if term.size else 0
                continue
            a = axes[0]
            flat = term.reshape(-1)
            per_axis[a] = flat if per_axis[a] is None else per_axis[a] + flat
        axes_digits, lengths = [], []
        for a, f in enumerate(per_axis):
            if f is None:
                axes_digits.append(((1, 0),))
                lengths.append(1)
                continue
            offset += int(f[0])
            ds = digits(f - f[0])
            if ds is None:
                return None
            axes_digits.append(ds)
            lengths.append(len(f))
        return cls(offset, tuple(axes_digits), tuple(lengths))

    def fits(self, limit: int) -> bool:
        """Whether every element of the padded box lies in [0, limit) of the view."""
        digits_ = [d for ds in self.axes for d in ds]
        lo = self.offset + sum(min(0, (e - 1) * s) for e, s in digits_)
        hi = self.offset + sum(max(0, (e - 1) * s) for e, s in digits_)
        return lo >= 0 and hi < limit

    @property
    def padded(self) -> bool:
        return any(padded_length(ds) != n for ds, n in zip(self.axes, self.lengths))

    def view(self, base: np.ndarray, writeable: bool = False) -> np.ndarray:
        shape = tuple(e for ds in self.axes for e, _ in ds)
        strides = tuple(s * base.itemsize for ds in self.axes for _, s in ds)
        return np.lib.stride_tricks.as_strided(base[self.offset:], shape, strides,
                                               writeable=writeable)

    def read(self, base: np.ndarray, dtype: np.dtype, arena_order: bool = False
             ) -> np.ndarray:
        """The values at every point as `dtype`, shaped like the chunk (1 on unused axes):
        one pass over the arena, converting as it copies.

        With `arena_order` the copy runs in the arena's own order: the new array's axes are
        laid out by their innermost digit's stride, largest first, and returned transposed to
        the chunk's order. A weight whose stick runs along N (an lm_head: sticks of vocab) is
        then copied along its sticks, not across them (5 -> 1.7 ns per element here), and
        comes back as the (K, N) operand BLAS reads without another copy. Only for matmuls:
        numpy sums a reduced axis pairwise only when it is the contiguous one, so other
        kernels get the chunk's own (C) order."""
        padded = [padded_length(ds) for ds in self.axes]
        order = list(range(len(self.axes)))
        if arena_order:
            order.sort(key=self._inner_stride, reverse=True)
        grouped = [e for a in order for e, _ in self.axes[a]]
        out = np.empty(grouped, dtype=dtype)
        source = self.view(base, writeable=base.flags.writeable)
        cast_copy(out, source.transpose(self._digit_order(order)))
        values = out.reshape([padded[a] for a in order]).transpose(np.argsort(order))
        if not self.padded:
            return values
        return values[tuple(slice(0, n) for n in self.lengths)]

    def _inner_stride(self, axis: int) -> float:
        """How far apart (elements) an axis's consecutive points are; axes of one point first."""
        if padded_length(self.axes[axis]) == 1:
            return math.inf
        return abs(self.axes[axis][-1][1])

    def _digit_order(self, order: list[int]) -> list[int]:
        """The permutation of `view`'s digit axes that lists the digits of `order`'s axes."""
        first, start = [], 0
        for ds in self.axes:
            first.append(start)
            start += len(ds)
        return [first[a] + i for a in order for i in range(len(self.axes[a]))]

    def write(self, base: np.ndarray, values: np.ndarray) -> None:
        """Assign `values` (the chunk's shape, 1 on unused axes) to exactly the valid points."""
        box = self.view(base, writeable=True)
        pieces = [valid_boxes([e for e, _ in ds], n) for ds, n in zip(self.axes, self.lengths)]
        for combo in itertools.product(*pieces):
            index = tuple(i for _, ix, _ in combo for i in ix)
            source = tuple(r for r, _, _ in combo)
            shape = tuple(n for _, _, sh in combo for n in sh)
            box[index] = values[source].reshape(shape)
