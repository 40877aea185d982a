"""The functional forms of in-place writes: `copy` and `index_copy`.

A program that writes a buffer in place (`cache.copy_(x)`, a static KV cache's
`keys.index_copy_(2, cache_position, k)`) reaches the lowering functionalized (torch's
`run_decompositions`, or `functionalize.py` for the fast front end): the write is a functional
op whose result is the buffer's new value, returned under the buffer's FQN (DESIGN §1).

`index_copy` is lowered without a scatter: for each index j, the positions s along `dim` where
`index[j] == s` (a compare of a compile-time arange with the index tensor) take `source`'s
slice j, the others keep `x` (`where3`): one compare and one where3 over x per index.
Selection, never arithmetic: exact in every dtype. With several indices the writes are applied
in index order, so a duplicate index takes the last source slice, as eager's CPU kernel does
(eager calls the result of duplicates undefined). An index outside 0..size-1 faults (exit 2),
as eager raises.
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.lower import iteration_vars, lowering, names_of, source_of
from spyrec.frontend.views import TensorValue
from spyrec.indexing import Indirect, as_lin
from spyrec.ir import Access

# One where3 over the whole destination per index: a write of more indices than this (a long
# prefill into a cache) would multiply the traffic; a true scatter is the way there.
MAX_INDEX_COPY_INDICES = 64


@lowering("aten.copy.default")
def _copy(ctx, node, dst, src, non_blocking=False):
    """`dst.copy_(src)` functionally: src broadcast to dst's shape, cast to dst's dtype."""
    shape, dtype = ctx.out_meta()
    return ctx.pointwise("identity", [src], out_dtype=dtype, shape=shape)


@lowering("aten.index_copy.default")
def _index_copy(ctx, node, x, dim, index, source):
    """x with x[..., index[j], ...] = source[..., j, ...] along `dim`.

    The indices are first read through a gather of the positions 0..size-1 (its value is the
    index itself): an index outside 0..size-1, which eager refuses ("index_copy_(): index -1
    is out of bounds"), faults in the simulator like any gather, instead of writing nothing.
    """
    where = source_of(node) or "unknown source line"
    if x.rank == 0:
        x, source = x.reshape([1]), source.reshape([1])
        dim = 0
    dim %= x.rank
    if index.rank == 0:
        index = index.reshape([1])
    count = index.numel
    if count > MAX_INDEX_COPY_INDICES:
        raise UnsupportedProgram(f"{node.name}: index_copy of {count} indices (more than "
                                 f"{MAX_INDEX_COPY_INDICES}) is not supported yet ({where})")
    size = x.shape[dim]
    shape, dtype = tuple(x.shape), x.dtype
    if count == 0:  # nothing written, but the result is a new tensor
        return ctx.pointwise("identity", [x], out_dtype=dtype, shape=shape)
    positions = _int_constant(ctx, "positions", np.arange(max(size, 2)), index.dtype)
    checked = _checked_indices(ctx, positions, index)
    positions = positions.slice(0, 0, size).reshape(
        [size if d == dim else 1 for d in range(x.rank)])
    out = x
    for j in range(count):
        i = checked.select(0, j).reshape([1] * x.rank)
        mask = ctx.pointwise("equal", [positions, i], out_dtype="bool",
                             shape=positions.shape)
        row = source.select(dim, j).unsqueeze(dim)
        out = ctx.pointwise("where3", [mask, row, out], out_dtype=dtype, shape=shape)
    return out


def _checked_indices(ctx, positions: TensorValue, index: TensorValue) -> TensorValue:
    """positions[index]: the index itself, read through a gather (range-checked). `positions`
    has at least two entries (a gather along a size-1 dim has no indirect coordinate)."""
    out = ctx.new_value((index.numel,), index.dtype, role="index")
    cvars = iteration_vars(out.shape)
    ctx.emit("identity", out, list(zip(names_of(cvars), out.shape)),
             [Access(positions.buffer, positions.at([as_lin(Indirect(index.buffer))]))],
             out.at(cvars), index_inputs=[Access(index.buffer, index.at(cvars))])
    return out


def _int_constant(ctx, base: str, values: np.ndarray, dtype: str) -> TensorValue:
    """A compile-time integer constant buffer in the index's dtype (values in constants.npz)."""
    values = np.ascontiguousarray(values, dtype=np.dtype(dtype))
    return ctx.new_constant(values, dtype, role=base)
