"""Lowerings of aten ops that copy into a fresh buffer: casts and clones, cat, and gathers
(advanced indexing, embedding).

A gather by an index list known at compile time is a static selection, one copy per run of
indices (`indexed.static_selection`); any other is one `identity` op with an indirect
coordinate (`indexed.emit_gather`). torch.gather, index_select and take_along_dim are in
`aten_training.py`.
"""

from __future__ import annotations

import numpy as np

from spyrec.frontend.context import LoweringContext, iteration_vars, names_of
from spyrec.frontend.indexed import (
    advanced_coordinates, advanced_shape, constant_values, distinct_indices, emit_gather,
    static_selection,
)
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue
from spyrec.ir import Access

# --- casts and clones ------------------------------------------------------------------------

MAX_COPIED_CONSTANT = 4096   # elements: index lists and small tables, never a weight


@lowering("aten._to_copy.default", "aten.to.dtype", "aten.clone.default",
          "aten.contiguous.default", "prims.convert_element_type.default")
def _copy(ctx, node, x, *args, **kwargs):
    """A copy on the device; a same-dtype copy of a small constant (an index list the torch
    front end reaches as `clone(lifted_tensor)`) is a constant itself, so that indexing with it
    stays a static selection (`indexed.static_selection`) instead of a runtime gather."""
    shape, dtype = ctx.out_meta()
    if dtype == x.dtype and 0 < x.numel <= MAX_COPIED_CONSTANT:
        values = constant_values(ctx, x)
        if values is not None:
            return ctx.new_constant(np.ascontiguousarray(values.reshape(shape)), dtype, "copy")
    return ctx.pointwise("identity", [x], out_dtype=dtype, shape=shape)


# --- cat -------------------------------------------------------------------------------------


@lowering("aten.cat.default")
def _cat(ctx, node, values, dim=0):
    return concatenate(ctx, values, dim)


def concatenate(ctx: LoweringContext, values: list[TensorValue], dim: int) -> TensorValue:
    """The current node's output: `values` one after the other along `dim` (one `identity`
    op each; empty ones are skipped)."""
    shape, dtype = ctx.out_meta()
    out = ctx.new_value(shape, dtype)
    dim = dim % len(shape)
    offset = 0
    for v in values:
        copy_at(ctx, out, v, dim, offset)
        offset += v.shape[dim]
    return out


def copy_at(ctx: LoweringContext, out: TensorValue, part: TensorValue, dim: int,
            offset: int) -> None:
    """`part` copied into `out` at `offset` along `dim` (one `identity` op; none when empty)."""
    if part.numel == 0:
        return
    cvars = iteration_vars(part.shape)
    at = list(cvars)
    at[dim] = cvars[dim] + offset
    ctx.emit("identity", out, list(zip(names_of(cvars), part.shape)),
             [Access(part.buffer, part.at(cvars))], out.at(at))


# --- gathers ---------------------------------------------------------------------------------


@lowering("aten.index.Tensor")
def _index(ctx, node, x, indices):
    """x[i, :, j, ...]: advanced indexing with any number of index tensors of any rank."""
    return advanced_index(ctx, x, list(indices))


@lowering("aten.embedding.default")
def _embedding(ctx, node, weight, idx, padding_idx=-1, scale_grad_by_freq=False,
               sparse=False):
    """weight[idx]; padding_idx only changes the gradient."""
    return gather(ctx, weight, 0, idx)


def advanced_index(ctx: LoweringContext, x: TensorValue, indices: list,
                   wrap: bool = True) -> TensorValue:
    """x[indices] as PyTorch's advanced indexing (None: a whole dim): a static selection when
    the indices are known at compile time, else one gather. `wrap`: negative indices count
    from the end once, as `x[i]` (False: they are out of range, as in embedding)."""
    indices = distinct_indices(ctx, x.shape, indices)
    static = static_selection(ctx, x, indices, wrap)
    if static is not None:
        return static
    shape = advanced_shape(x.shape, indices)
    return emit_gather(ctx, x, shape,
                       lambda cvars: advanced_coordinates(x.shape, indices, cvars, wrap))


def gather(ctx: LoweringContext, x: TensorValue, dim: int, idx: TensorValue) -> TensorValue:
    """out[pre, i, post] = x[pre, idx[i], post] (one identity op with an indirect coordinate);
    a negative idx is an error, as in eager's index_select and embedding."""
    return advanced_index(ctx, x, [None] * dim + [idx], wrap=False)

