"""The functional forms of in-place writes: `copy` and `index_copy`.

A program that writes a buffer in place (`cache.copy_(x)`, a static KV cache's
`keys.index_copy_(2, cache_position, k)`) reaches the lowering functionalized (torch's
`run_decompositions`, or `functionalize.py` for the fast front end): the write is a functional
op whose result is the buffer's new value, returned under the buffer's FQN (DESIGN §1).

`index_copy` is lowered without a scatter: for each index j, the positions s along `dim` where
`index[j] == s` (a compare of a compile-time arange with the index tensor) take `source`'s slice
j, the others keep `x` (`where3`). Selection, never arithmetic: exact in every dtype. With
several indices the writes are applied in index order, so a duplicate index takes the last
source slice, as eager's CPU kernel does (eager calls the result of duplicates undefined).
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.lower import contiguous_value, lowering, source_of
from spyrec.frontend.views import TensorValue
from spyrec.ir import Buffer

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
    """x with x[..., index[j], ...] = source[..., j, ...] along `dim` (negative indices wrap)."""
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
    positions = np.arange(size, dtype=np.int64).reshape(
        [size if d == dim else 1 for d in range(x.rank)])
    arange = _int_constant(ctx, "positions", positions, index.dtype)
    shape, dtype = tuple(x.shape), x.dtype
    out = x
    for j in range(count):
        i = index.select(0, j).reshape([1] * x.rank)
        # a negative index counts from the end, as eager: i + size where i < 0
        wrapped = _wrap(ctx, i, size)
        mask = ctx.pointwise("equal", [arange, wrapped], out_dtype="bool",
                             shape=positions.shape)
        row = source.select(dim, j).unsqueeze(dim) if source.rank == x.rank else source
        out = ctx.pointwise("where3", [mask, row, out], out_dtype=dtype, shape=shape)
    if out is x:  # no index: x unchanged, but the result is a new tensor
        out = ctx.pointwise("identity", [x], out_dtype=dtype, shape=shape)
    return out


def _wrap(ctx, i: TensorValue, size: int) -> TensorValue:
    negative = ctx.pointwise("lesserthan", [i], out_dtype="bool", shape=i.shape,
                             constants={"scalar": 0, "scalar_side": "rhs"})
    shifted = ctx.pointwise("add", [i], out_dtype=i.dtype, shape=i.shape,
                            constants={"scalar": int(size), "scalar_side": "rhs"})
    return ctx.pointwise("where3", [negative, shifted, i], out_dtype=i.dtype, shape=i.shape)


def _int_constant(ctx, base: str, values: np.ndarray, dtype: str) -> TensorValue:
    """A compile-time integer constant buffer in the index's dtype (values in constants.npz)."""
    values = np.ascontiguousarray(values, dtype=np.dtype(dtype))
    name = ctx.graph.fresh_name(f"{ctx.node.name}_{base}")
    buf = ctx.graph.add_buffer(Buffer(name, tuple(values.shape), dtype, "constant",
                                      source=source_of(ctx.node)))
    ctx.graph.constants[name] = values
    return contiguous_value(buf)
