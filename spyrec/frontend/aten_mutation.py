"""The functional forms of in-place writes: `copy` and the scatters.

A program that writes a buffer in place (`cache.copy_(x)`, a static KV cache's
`keys.index_copy_(2, cache_position, k)`, `cache[:, pos] = k`) reaches the lowering
functionalized (torch's `run_decompositions`, or `functionalize.py` for the fast front end): the
write is a functional op whose result is the buffer's new value, returned under the buffer's FQN
(DESIGN §1).

Every indexed write (`index_copy`, `index_put`, `scatter`, `scatter_add`, `index_add`) is a true
scatter (`indexed.emit_scatter`): a copy of the destination, then one op whose output index
holds the index tensor's value. Copy rather than update in place: the IR is single-assignment
(a buffer keeps the value it was made with, so a reader of the old cache before the write and
one after both stay right, and `spyrec run` can run a directory twice from the same constants);
the cost is one pass over the destination, which memory_planning removes where the program
cannot tell the two apart (`plan/inplace.py`: the rows land in the buffer's own memory).

Duplicate indices: `scatter: add` sums every contribution (fp32, rounded once); `assign` lets
the later iteration point win, which is what eager's CPU kernels do for index_copy, index_put
and scatter (eager calls it undefined). Out-of-range indices fault in the simulator (exit 2).
"""

from __future__ import annotations

from spyrec.frontend.aten_pointwise import binary
from spyrec.frontend.aten_scatter_views import masked_put
from spyrec.frontend.context import Scalar
from spyrec.frontend.indexed import (
    IndexUse, advanced_coordinates, advanced_shape, check_index, distinct_indices, emit_scatter,
)
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue
from spyrec.indexing import Indirect, as_lin


@lowering("aten.copy.default")
def _copy(ctx, node, dst, src, non_blocking=False):
    """`dst.copy_(src)` functionally: src broadcast to dst's shape, cast to dst's dtype."""
    shape, dtype = ctx.out_meta()
    return ctx.pointwise("identity", [src], out_dtype=dtype, shape=shape)


@lowering("aten.index_put.default")
def _index_put(ctx, node, x, indices, values, accumulate=False):
    """x with x[indices] = values (or += with accumulate), values broadcast to x[indices]."""
    masked = masked_put(ctx, x, list(indices), values, accumulate)
    if masked is not None:  # x[mask] = v: a select, no data-dependent shape
        return masked
    indices = distinct_indices(ctx, x.shape, list(indices))
    shape = advanced_shape(x.shape, indices)
    src = values.value if isinstance(values, Scalar) else values
    return emit_scatter(ctx, x, shape,
                        lambda cvars: advanced_coordinates(x.shape, indices, cvars), src,
                        "add" if accumulate else "assign")


def _along(ctx, x: TensorValue, dim: int, index: TensorValue, source, mode: str):
    """x with x[..., index[j], ...] (=|+=) source[..., j, ...] along `dim` (1-D index; a
    negative index is an error, as in eager's index_copy and index_add)."""
    if x.rank == 0:
        out = _along(ctx, x.reshape([1]), 0, index.reshape([1]),
                     source.reshape([1]) if isinstance(source, TensorValue) else source, mode)
        return out.reshape([])
    dim %= x.rank
    index = index.reshape([1]) if index.rank == 0 else index
    indices = distinct_indices(ctx, x.shape, [None] * dim + [index])
    shape = advanced_shape(x.shape, indices)
    return emit_scatter(ctx, x, shape,
                        lambda cvars: advanced_coordinates(x.shape, indices, cvars, False),
                        source, mode)


@lowering("aten.index_copy.default")
def _index_copy(ctx, node, x, dim, index, source):
    return _along(ctx, x, dim, index, source, "assign")


@lowering("aten.index_add.default")
def _index_add(ctx, node, x, dim, index, source, alpha=1):
    if alpha != 1:
        source = binary(ctx, "mul", source, alpha, out_dtype=x.dtype)
    return _along(ctx, x, dim, index, source, "add")


def _scatter(ctx, x: TensorValue, dim: int, index: TensorValue, src, mode: str):
    """out[..., index[p], ...] (=|+=) src[p] along `dim`, p over index's shape (torch.scatter:
    index has x's rank; src is read at p, or is a number)."""
    if x.rank == 0:
        out = _scatter(ctx, x.reshape([1]), 0, index.reshape([1]),
                       src.reshape([1]) if isinstance(src, TensorValue) else src, mode)
        return out.reshape([])
    dim %= x.rank
    check_index(ctx, index)
    if isinstance(src, TensorValue) and src.shape != index.shape:
        src = _crop(src, index.shape)

    def coordinates(cvars):
        coords = list(cvars)
        coords[dim] = as_lin(Indirect(index.buffer))
        return coords, [IndexUse(index, index.at(cvars), x.shape[dim], 0)]
    return emit_scatter(ctx, x, index.shape, coordinates, src, mode)


def _crop(src: TensorValue, shape) -> TensorValue:
    """The leading `shape` block of src (torch.scatter reads src only where index has data)."""
    for d, n in enumerate(shape):
        if src.shape[d] != n:
            src = src.slice(d, 0, n)
    return src


@lowering("aten.scatter.src")
def _scatter_src(ctx, node, x, dim, index, src):
    return _scatter(ctx, x, dim, index, src, "assign")


@lowering("aten.scatter.value")
def _scatter_value(ctx, node, x, dim, index, value):
    return _scatter(ctx, x, dim, index, value, "assign")


@lowering("aten.scatter_add.default")
def _scatter_add(ctx, node, x, dim, index, src):
    return _scatter(ctx, x, dim, index, src, "add")
