"""Tensor values during lowering: a buffer seen through a view, as a pure index expression.

A `TensorValue` is (buffer, view shape, dtype, index) where `index` is the flat host-element
index into the buffer's storage, written in the view's own dim variables `v0, v1, …`. View ops
(reshape, permute, slice, expand, …) only compose index expressions — they never copy — and an
operation reading the value substitutes its iteration variables for `v0, v1, …`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from spyrec.indexing import Lin, Ranges, Var, as_lin, const, floordiv, mod, substitute, var
from spyrec.indexing.simplify import simplify_lin
from spyrec.layout import contiguous_strides


def view_var(i: int) -> Var:
    return Var(f"v{i}")


@dataclass(frozen=True)
class TensorValue:
    buffer: str
    shape: tuple[int, ...]
    dtype: str
    index: Lin          # flat storage index in view vars v0..v{rank-1}

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def at(self, indices: Sequence[Lin]) -> Lin:
        """The storage index of element `indices` (expressions in some op's variables)."""
        assert len(indices) == self.rank, (indices, self.shape)
        return substitute(self.index, {view_var(i): as_lin(x) for i, x in enumerate(indices)})

    def with_index(self, shape: Sequence[int], index: Lin) -> "TensorValue":
        """A view of the same buffer: `shape`, and `index` written in the new view's own
        variables v0, v1, ... (simplified over their ranges). Every view op ends here."""
        shape = tuple(int(n) for n in shape)
        ranges = Ranges({view_var(i): (0, max(n, 1) - 1) for i, n in enumerate(shape)})
        return TensorValue(self.buffer, shape, self.dtype, simplify_lin(index, ranges))

    # --- view operations (all pure index arithmetic) ---------------------------------------

    def reshape(self, shape: Sequence[int]) -> "TensorValue":
        shape = list(shape)
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            shape[shape.index(-1)] = self.numel // known if known else 0
        assert math.prod(shape) == self.numel, (self.shape, shape)
        new_strides = contiguous_strides(shape)
        flat = sum((var(f"v{i}").scale(s) for i, s in enumerate(new_strides)), const(0))
        old_strides = contiguous_strides(self.shape)
        old = [mod(floordiv(flat, s), n) if n > 1 else const(0)
               for s, n in zip(old_strides, self.shape)]
        return self.with_index(shape, self.at(old))

    def permute(self, dims: Sequence[int]) -> "TensorValue":
        dims = [d % self.rank for d in dims]
        old = [const(0)] * self.rank
        for new_pos, d in enumerate(dims):
            old[d] = var(f"v{new_pos}")
        return self.with_index([self.shape[d] for d in dims], self.at(old))

    def transpose(self, a: int, b: int) -> "TensorValue":
        if self.rank == 0:  # torch allows dims 0 and -1 on a 0-d tensor: nothing moves
            return self
        dims = list(range(self.rank))
        a, b = a % max(self.rank, 1), b % max(self.rank, 1)
        dims[a], dims[b] = dims[b], dims[a]
        return self.permute(dims)

    def expand(self, shape: Sequence[int]) -> "TensorValue":
        shape = list(shape)
        lead = len(shape) - self.rank
        old = []
        for i, n in enumerate(self.shape):
            target = shape[lead + i]
            if target == -1:
                shape[lead + i] = n
            old.append(const(0) if n == 1 else var(f"v{lead + i}"))
        return self.with_index(shape, self.at(old))

    def unsqueeze(self, dim: int) -> "TensorValue":
        dim = dim % (self.rank + 1)
        old = [var(f"v{i if i < dim else i + 1}") for i in range(self.rank)]
        return self.with_index(self.shape[:dim] + (1,) + self.shape[dim:], self.at(old))

    def squeeze(self, dims: Sequence[int] | None = None) -> "TensorValue":
        if self.rank == 0:  # dim 0 / -1 of a scalar is the scalar itself: nothing to drop
            return self
        if dims is None:
            dims = [i for i, n in enumerate(self.shape) if n == 1]
        drop = {d % self.rank for d in dims if self.shape[d % self.rank] == 1}
        keep = [i for i in range(self.rank) if i not in drop]
        old = [const(0)] * self.rank
        for new_pos, i in enumerate(keep):
            old[i] = var(f"v{new_pos}")
        return self.with_index([self.shape[i] for i in keep], self.at(old))

    def slice(self, dim: int, start: int | None, end: int | None, step: int = 1) -> "TensorValue":
        dim = dim % self.rank
        n = self.shape[dim]
        start, end, _ = slice(start, end, step).indices(n)
        length = max(0, -(-(end - start) // step))
        old = [var(f"v{i}") for i in range(self.rank)]
        old[dim] = var(f"v{dim}").scale(step) + start
        shape = list(self.shape)
        shape[dim] = length
        return self.with_index(shape, self.at(old))

    def remap(self, shape: Sequence[int], coords: Sequence[Lin]) -> "TensorValue":
        """The view whose element (v0, v1, …) of `shape` is this value's element `coords`
        (expressions in the new view's vars): a static selection such as x[..., [2, 3], :]."""
        return self.with_index(shape, self.at(coords))

    def select(self, dim: int, index: int) -> "TensorValue":
        dim = dim % self.rank
        index = index % self.shape[dim]
        old = [var(f"v{i if i < dim else i - 1}") for i in range(self.rank)]
        old[dim] = const(index)
        return self.with_index(self.shape[:dim] + self.shape[dim + 1:], self.at(old))


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        sizes = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        assert len(sizes) <= 1, shapes
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_index(value: TensorValue, out_vars: Sequence[Lin]) -> Lin:
    """Index of `value` read at output point `out_vars` under right-aligned broadcasting."""
    lead = len(out_vars) - value.rank
    return value.at([const(0) if n == 1 else out_vars[lead + i]
                     for i, n in enumerate(value.shape)])
