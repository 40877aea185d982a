"""Writes into a view, functionally: slice_scatter, select_scatter, masked_scatter and fill.

`out[..., a:b, ...] = src` (torch's functional `slice_scatter`, what `view_writes.py` makes of
`x[:, t] = v` into a fresh tensor, RecurrentGemma's scan output and DeepSeek-V3's MoE output)
is a new tensor: the destination copied outside the written box and `src` copied into it, each
element written once (no op overwrites another's output). `masked_scatter(x, mask, source)`
(the multimodal towers placing image or audio features at their placeholder tokens) takes
source elements in order at the true positions of the mask: the k-th true position (row-major)
reads source's flat element k, found by a running count of the mask.
"""

from __future__ import annotations

import math

from spyrec.frontend.aten_copies import copy_at, gather
from spyrec.frontend.aten_pointwise import binary, filled
from spyrec.frontend.aten_scan import scan_add
from spyrec.frontend.context import LoweringContext
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue


@lowering("aten.slice_scatter.default")
def _slice_scatter(ctx, node, x, src, dim=0, start=None, end=None, step=1):
    dim %= x.rank
    start, end, step = slice(start, end, step).indices(x.shape[dim])
    if step != 1:
        ctx.refuse(f"with step {step}", "write a contiguous slice (step 1)")
    return box_scatter(ctx, x, src, dim, start, max(start, end))


@lowering("aten.select_scatter.default")
def _select_scatter(ctx, node, x, src, dim, index):
    dim %= x.rank
    index %= x.shape[dim]
    return box_scatter(ctx, x, src.unsqueeze(dim), dim, index, index + 1)


def box_scatter(ctx: LoweringContext, x: TensorValue, src: TensorValue, dim: int, start: int,
                end: int) -> TensorValue:
    """x with x[..., start:end, ...] (along `dim`) replaced by src (broadcast to the box)."""
    shape, dtype = ctx.out_meta()
    out = ctx.new_value(shape, dtype)
    for lo, hi in ((0, start), (end, x.shape[dim])):
        if hi > lo:
            copy_at(ctx, out, x.slice(dim, lo, hi), dim, lo)
    if end > start:
        box = list(x.shape)
        box[dim] = end - start
        copy_at(ctx, out, src.expand(box) if tuple(src.shape) != tuple(box) else src, dim,
                  start)
    return out


@lowering("aten.fill.Scalar", "aten.fill.Tensor")
def _fill(ctx, node, x, value):
    """`x.fill_(value)` functionally: a new tensor of x's shape, every element `value`."""
    shape, dtype = ctx.out_meta()
    if isinstance(value, TensorValue):
        return ctx.pointwise("identity", [value], out_dtype=dtype, shape=shape)
    return filled(ctx, shape, dtype, value)


def masked_put(ctx, x: TensorValue, indices: list, values, accumulate: bool):
    """`x[mask] = values` (index_put with one boolean mask over x's leading dims), or None
    for any other form. Values that broadcast over the selected rows (a number, a row of
    the trailing dims) make a select (`where`, or an add of it under `accumulate`); values
    with one row per true position are placed in order, as masked_scatter places them."""
    mask = indices[0] if len(indices) == 1 else None
    if not isinstance(mask, TensorValue) or mask.dtype != "bool" or \
            tuple(mask.shape) != tuple(x.shape[:mask.rank]):
        return None
    trailing = x.shape[mask.rank:]
    wide = mask.reshape(list(mask.shape) + [1] * len(trailing)).expand(x.shape)
    value = values if isinstance(values, TensorValue) else None
    if value is not None and value.rank > len(trailing) and value.shape[0] == 1:
        value = value.squeeze([0])
    if value is not None and value.rank > len(trailing):
        if accumulate or tuple(value.shape[1:]) != tuple(trailing):
            ctx.refuse("with one row of values per true position" +
                       (" accumulated" if accumulate else " broadcast"),
                       "put a number or a row broadcast to every selected row")
        rows = value.reshape([value.shape[0], math.prod(trailing)]) if trailing else value
        flat_mask = mask.reshape([mask.numel]) if mask.rank != 1 else mask
        placed = masked_scatter(ctx, x.reshape([mask.numel, math.prod(trailing)]),
                                flat_mask.unsqueeze(1).expand([mask.numel, math.prod(
                                    trailing)]), rows, shape=[mask.numel, math.prod(trailing)])
        return placed.reshape(x.shape)
    operands = [wide] + ([value] if value is not None else [])
    constants = {} if value is not None else {"a_scalar": _scalar(values)}
    if accumulate:
        constants["b_scalar"] = False if x.dtype == "bool" else 0
        picked = ctx.pointwise("where3", operands, constants=constants, out_dtype=x.dtype,
                               shape=x.shape)
        return ctx.pointwise("add", [x, picked], out_dtype=ctx.out_meta()[1], shape=x.shape)
    return ctx.pointwise("where3", operands + [x], constants=constants,
                         out_dtype=ctx.out_meta()[1], shape=x.shape)


def _scalar(values):
    from spyrec.frontend.aten_pointwise import _number
    return _number(values.value if hasattr(values, "value") else values)


@lowering("aten.masked_scatter.default")
def _masked_scatter(ctx, node, x, mask, source):
    return masked_scatter(ctx, x, mask, source)


def masked_scatter(ctx, x: TensorValue, mask: TensorValue, source: TensorValue,
                   shape=None) -> TensorValue:
    """x with its true positions (mask broadcast to x, row-major) taking source's elements
    in order; `shape`: of x when it is not the node's output shape."""
    dtype = ctx.out_meta()[1]
    shape = tuple(shape) if shape is not None else ctx.out_meta()[0]
    count = ctx.pointwise("identity", [mask], out_dtype="int64", shape=shape)
    flat = count.reshape([count.numel])
    rank = scan_add(ctx, flat, 0, "int64", "int64") if flat.numel > 1 else flat
    before = binary(ctx, "sub", rank, 1, out_dtype="int64")          # true positions: 0, 1, ...
    at = binary(ctx, "maximum", before, 0, out_dtype="int64")        # false ones before any true
    picked = gather(ctx, source.reshape([source.numel]), 0, at).reshape(shape)
    return ctx.pointwise("where3", [mask, picked, x], out_dtype=dtype, shape=shape)
