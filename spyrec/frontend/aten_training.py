"""Ops of the stored (pre-dispatch / training) op set that torch would otherwise decompose.

`torch.export.save` stores the graph before decomposition. The fast front end lowers what it
finds there directly, so these ops need lowerings of their own rather than torch's
`run_decompositions`: inference no-ops (dropout in eval, same-dtype `to`), shape-only views
(flatten, unflatten), one-line composites (square) and attention
(`scaled_dot_product_attention`, with masks, causal masking and grouped-query heads). Each
says what it is in eager terms.
"""

from __future__ import annotations

import math

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.aten_copies import concatenate, gather
from spyrec.frontend.aten_pointwise import binary
from spyrec.frontend.aten_reductions import FP32, matmul, reduce, shifted_exp_sum
from spyrec.frontend.context import Scalar
from spyrec.frontend.indexed import IndexUse, check_index, constant_values, emit_gather
from spyrec.frontend.registry import lowering
from spyrec.frontend.sources import source_for_message
from spyrec.indexing import Indirect, as_lin


@lowering("aten.dropout.default", "aten.feature_dropout.default", "aten.alpha_dropout.default",
          "aten.feature_alpha_dropout.default")
def _dropout(ctx, node, x, p=0.5, train=False):
    """Identity at inference (`train=False`, or p = 0); training-mode dropout is random."""
    if train and p:
        raise UnsupportedProgram(f"{node.target} with train=True and p={p} (node {node.name}, "
                                 f"{source_for_message(node)}): export the "
                                 f"model in eval mode (model.eval()) so dropout is the identity")
    return x


@lowering("aten.flatten.using_ints")
def _flatten(ctx, node, x, start_dim=0, end_dim=-1):
    return x.reshape(ctx.out_meta()[0])


@lowering("aten.unflatten.int")
def _unflatten(ctx, node, x, dim, sizes):
    return x.reshape(ctx.out_meta()[0])


@lowering("aten.square.default")
def _square(ctx, node, x):
    return binary(ctx, "mul", x, x)


@lowering("aten.to.dtype_layout", "aten.to.device", "aten.to.other", "aten.type_as.default",
          "aten.to.prim_dtype")
def _to(ctx, node, x, *args, **kwargs):
    """A cast when the dtype changes (one rounding, as eager), else the tensor itself: spyrec
    has one device, so device and layout arguments change nothing."""
    shape, dtype = ctx.out_meta()
    if dtype == x.dtype:
        return x
    return ctx.pointwise("identity", [x], out_dtype=dtype, shape=shape)


@lowering("aten.scaled_dot_product_attention.default")
def _sdpa(ctx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    """softmax(q @ kᵀ · scale + mask) @ v, as torch's math reference: scores, mask and softmax
    in fp32, one rounding of the result. A boolean mask keeps where True; `is_causal` keeps
    key j <= query i (top-left aligned; given a mask too, eager applies both); grouped-query
    attention repeats each key/value head for its group of query heads (a view, never a
    copy)."""
    if dropout_p:
        raise UnsupportedProgram(f"{node.name}: scaled_dot_product_attention with dropout_p="
                                 f"{dropout_p} ({source_for_message(node)}); "
                                 f"export in eval mode with dropout_p=0")
    dtype = ctx.out_meta()[1]
    if enable_gqa or (k.rank >= 3 and q.rank >= 3 and k.shape[-3] != q.shape[-3]):
        k, v = _repeat_heads(ctx, node, k, q.shape[-3]), _repeat_heads(ctx, node, v, q.shape[-3])
    scores = matmul(ctx, q, k.transpose(-2, -1), FP32)
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = ctx.pointwise("mul", [scores], out_dtype=FP32,
                           constants={"scalar": factor, "scalar_side": "rhs"})
    length, keys = q.shape[-2], k.shape[-2]
    if is_causal:
        scores = _apply_mask(ctx, scores, _causal_keep(ctx, length, keys))
    if attn_mask is not None:
        scores = _apply_mask(ctx, scores, attn_mask)
    # causal alone masks no whole row; with a user mask too, the two together may
    if attn_mask is not None and (is_causal or _may_mask_whole_rows(ctx, attn_mask)):
        probs = _safe_softmax(ctx, scores)
    else:
        _, e, z = shifted_exp_sum(ctx, scores, scores.rank - 1)
        probs = ctx.pointwise("realdiv", [e, z], out_dtype=FP32)
    return matmul(ctx, probs, v, dtype)


def _apply_mask(ctx, scores, mask):
    """Scores where a boolean mask keeps, else -inf; an additive mask is added."""
    if mask.dtype != "bool":
        return binary(ctx, "add", scores, mask, out_dtype=FP32)
    minus_inf = _constant(ctx, "minus_inf", np.full((1,), -np.inf, dtype=np.float32))
    return ctx.pointwise("where3", [mask, scores, minus_inf], out_dtype=FP32, shape=scores.shape)


def _safe_softmax(ctx, scores):
    """Softmax over the last dim that gives 0, as eager's sdpa does, on a row whose every
    score is -inf (a fully masked query: a left-padded sequence's pad rows). Plain softmax
    gives 0/0 = NaN there, and the NaN reaches every token through the next layer.

    Two small ops on the [rows, 1] statistics do it without a condition: the shift is
    max(row max, -FLT_MAX), so a fully masked row shifts by a finite number and every exp is
    0; the sum is max(sum, 1), which changes no other row (its largest score contributes
    exp(0) = 1) and makes the masked row 0/1 = 0. +inf or NaN scores still give NaN, as eager.
    """
    last = scores.rank - 1
    m = reduce(ctx, "max", scores, [last], True, FP32)
    m = binary(ctx, "maximum", m, Scalar(-float(np.finfo(np.float32).max)), out_dtype=FP32)
    e = ctx.pointwise("exp", [binary(ctx, "sub", scores, m, out_dtype=FP32)], out_dtype=FP32)
    z = reduce(ctx, "sum", e, [last], True, FP32)
    z = binary(ctx, "maximum", z, Scalar(1.0), out_dtype=FP32)
    return ctx.pointwise("realdiv", [e, z], out_dtype=FP32)


def _causal_keep(ctx, length: int, keys: int):
    """`is_causal`'s mask without a (length, keys) table: keep[i, j] = j <= i (top-left
    aligned, as eager, also when length != keys), one compare on the device of two position
    vectors viewed as [length, 1] and [1, keys]. The constants are length + keys fp32
    numbers (exact up to 2**24 positions); a table would be length * keys, 4 GB at 32K
    tokens, and streaming it would cost attention as many bytes as the scores. Key 0 is kept
    by every row, so no row is fully masked and the plain softmax stays exact."""
    rows = _constant(ctx, "query_positions", np.arange(length)).unsqueeze(1)
    cols = _constant(ctx, "key_positions", np.arange(keys)).unsqueeze(0)
    return ctx.pointwise("lesserequal", [cols, rows], out_dtype="bool", shape=(length, keys))


def _may_mask_whole_rows(ctx, mask) -> bool:
    """Whether `mask` can leave a query row with no key: always for a runtime mask; for a
    compile-time mask (folded from shapes: a causal or sliding-window table), only if one of
    its rows masks every key, so the common folded masks keep the plain softmax."""
    values = constant_values(ctx, mask)
    if values is None:
        return True
    keep = values if values.dtype == bool else values != -np.inf
    return keep.size > 0 and not keep.any(axis=-1).all()


def _repeat_heads(ctx, node, x, heads: int):
    """(..., Hk, S, E) -> (..., heads, S, E), head h reading head h // (heads // Hk)."""
    groups, rem = divmod(heads, x.shape[-3])
    if rem:
        raise UnsupportedProgram(f"{node.name}: {heads} query heads are not a multiple of "
                                 f"{x.shape[-3]} key/value heads")
    lead, (hk, s, e) = list(x.shape[:-3]), x.shape[-3:]
    grouped = x.unsqueeze(x.rank - 2).expand(lead + [hk, groups, s, e])
    return grouped.reshape(lead + [heads, s, e])


def _constant(ctx, base: str, values: np.ndarray):
    """A compile-time fp32 constant buffer (its values travel in weights.bin, where -inf is
    fine; the JSON files only name it)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    return ctx.new_constant(values, FP32, role=base)


@lowering("aten.unbind.int", "aten.unbind_copy.int")
def _unbind(ctx, node, x, dim=0):
    """One view per position along `dim` (a select each; `getitem` picks them)."""
    return tuple(x.select(dim, i) for i in range(x.shape[dim % x.rank]))


@lowering("aten.index_select.default")
def _index_select(ctx, node, x, dim, index):
    """x.index_select(dim, i) is x[..., i, ...] with a 1-D index: the gather lowering."""
    if x.rank == 0:  # the only valid index is 0: the tensor itself
        return x
    return gather(ctx, x, dim % x.rank, index.reshape([index.numel]) if index.rank == 0 else index)


@lowering("aten.stack.default")
def _stack(ctx, node, values, dim=0):
    """cat of the inputs, each with a new size-1 dim at `dim` (a view)."""
    rank = values[0].rank + 1
    return concatenate(ctx, [v.unsqueeze(dim % rank) for v in values], dim % rank)


@lowering("aten.gather.default")
def _torch_gather(ctx, node, x, dim, index, sparse_grad=False):
    """torch.gather: out[..., i, ...] = x[..., index[..., i, ...], ...] along `dim`, every other
    coordinate the output's own (index has x's rank)."""
    if index.numel == 0:  # eager gives an empty result of index's shape, whatever x's rank
        return ctx.new_value(index.shape, ctx.out_meta()[1])
    if x.rank == 0:  # the only valid index is 0: the result has index's shape ([] or [1])
        flat = torch_gather(ctx, x.reshape([1]), 0, index.reshape([1]))
        return flat.reshape(index.shape)
    return torch_gather(ctx, x, dim % x.rank, index)


def torch_gather(ctx, x, dim: int, index, wrap: bool = False):
    """Negative indices are errors in eager's gather, but wrap in take_along_dim."""
    check_index(ctx, index)
    n = x.shape[dim]

    def coordinates(cvars):
        coords = list(cvars)
        coords[dim] = as_lin(Indirect(index.buffer))
        return coords, [IndexUse(index, index.at(cvars), n, -n if wrap else 0)]
    return emit_gather(ctx, x, index.shape, coordinates)


@lowering("aten.take_along_dim.default")
def _take_along_dim(ctx, node, x, indices, dim=None):
    """torch.take_along_dim: torch.gather after broadcasting every dim but `dim` (no dim: of
    the flattened tensors). Eager (2.13) wraps a negative index with a dim, not without."""
    if dim is None:
        # a flat index into a multi-dim tensor is not one device coordinate: gather from a
        # 1-D copy (an indirect coordinate indexes one dim of the tensor it reads)
        flat = x.reshape([x.numel])
        if x.rank > 1:
            flat = ctx.pointwise("identity", [flat], out_dtype=x.dtype, shape=flat.shape)
        return torch_gather(ctx, flat, 0, indices.reshape([indices.numel]))  # no wrap here
    dim %= x.rank
    shape = ctx.out_meta()[0]
    x = x.expand([x.shape[d] if d == dim else n for d, n in enumerate(shape)])
    return torch_gather(ctx, x, dim, indices.expand(shape), wrap=True)


_BOOL_BINARY = {"and": "minimum", "or": "maximum", "xor": "notequal"}


def _bool_binary(op: str):
    def lower(ctx, node, a, b):
        """On bool tensors `and`/`or`/`xor` are min/max/!= of 0 and 1 (exact); the logical
        ops take any dtype as its truth value (x != 0) first. Bitwise ops on integers are
        refused (the device has no bit operations)."""
        if str(node.target).startswith("aten.logical_"):
            a, b = _truth(ctx, a), _truth(ctx, b)
        if not _all_bool(a, b):
            raise UnsupportedProgram(f"{node.name}: {node.target} on non-bool tensors "
                                     f"({source_for_message(node)}) is not "
                                     f"supported; only boolean masks")
        return binary(ctx, _BOOL_BINARY[op], a, b, out_dtype="bool")
    return lower


for _op in _BOOL_BINARY:
    for _name in (f"aten.bitwise_{_op}.Tensor", f"aten.__{_op}__.Tensor",
                  f"aten.logical_{_op}.default"):
        lowering(_name)(_bool_binary(_op))


def _truth(ctx, x):
    """A bool tensor as it is; any other tensor's truth value x != 0 (NaN is true, as eager)."""
    if _all_bool(x):
        return x
    return binary(ctx, "notequal", x, 0, out_dtype="bool")


@lowering("aten.logical_not.default", "aten.bitwise_not.default")
def _not(ctx, node, x):
    if str(node.target).startswith("aten.logical_") and not _all_bool(x):
        return binary(ctx, "equal", x, 0, out_dtype="bool")
    if not _all_bool(x):
        raise UnsupportedProgram(f"{node.name}: {node.target} on a non-bool tensor is not "
                                 f"supported; only boolean masks")
    return binary(ctx, "equal", x, False, out_dtype="bool")


def _all_bool(*values) -> bool:
    return all(getattr(v, "dtype", "bool") == "bool" for v in values)
