"""Lowerings of view aten ops: pure index arithmetic on a `TensorValue`, never a copy.

reshape, permute, slice, expand, diagonal, unfold, as_strided (over a whole contiguous tensor)
and friends compose the value's index expression (`views.py`); repeat and repeat_interleave
with one count are views too (Mod and floor-div in the index). The `*_copy` variants
functionalization produces lower as their views: a value is never mutated after it is made.
Per-element repeat counts are a static selection (`aten_copies.advanced_index`).
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.aten_copies import advanced_index
from spyrec.frontend.indexed import constant_values
from spyrec.frontend.registry import LOWERINGS, lowering
from spyrec.frontend.sources import source_for_message
from spyrec.frontend.views import TensorValue
from spyrec.indexing import Lin, const, floordiv, mod, var


@lowering("aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default")
def _alias(ctx, node, x, *args, **kwargs):
    return x


@lowering("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(ctx, node, x, shape):
    return x.reshape(shape)


@lowering("aten.permute.default")
def _permute(ctx, node, x, dims):
    return x.permute(dims)


@lowering("aten.transpose.int")
def _transpose(ctx, node, x, a, b):
    return x.transpose(a, b)


@lowering("aten.t.default")
def _t(ctx, node, x):
    return x.transpose(0, 1) if x.rank == 2 else x


@lowering("aten.expand.default", "aten.broadcast_to.default")
def _expand(ctx, node, x, shape, implicit=False):
    return x.expand(shape)


@lowering("aten.unsqueeze.default")
def _unsqueeze(ctx, node, x, dim):
    return x.unsqueeze(dim)


@lowering("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def _squeeze(ctx, node, x, dims=None):
    if isinstance(dims, int):
        dims = [dims]
    return x.squeeze(dims)


@lowering("aten.slice.Tensor")
def _slice(ctx, node, x, dim=0, start=None, end=None, step=1):
    return x.slice(dim, start, end, step)


@lowering("aten.select.int")
def _select(ctx, node, x, dim, index):
    return x.select(dim, index)


@lowering("aten.split.Tensor", "aten.split_with_sizes.default")
def _split(ctx, node, x, sizes, dim=0):
    dim = dim % x.rank
    if isinstance(sizes, int):
        sizes = [sizes] * (-(-x.shape[dim] // sizes))
    parts, start = [], 0
    for n in sizes:
        parts.append(x.slice(dim, start, min(start + n, x.shape[dim])))
        start += n
    return parts


@lowering("aten.chunk.default")
def _chunk(ctx, node, x, chunks, dim=0):
    """torch.chunk: pieces of ceil(n / chunks) along `dim` (fewer when that divides n),
    each a slice view."""
    dim = dim % x.rank
    return _split(ctx, node, x, max(-(-x.shape[dim] // chunks), 1), dim)


@lowering("aten.numpy_T.default")
def _numpy_t(ctx, node, x):
    """x.T: every dim reversed (Falcon's fused QKV)."""
    return x.permute(list(range(x.rank))[::-1])


@lowering("aten.repeat.default")
def _repeat(ctx, node, x, repeats):
    """x tiled `repeats` times per dim (extra leading repeats add dims): a view whose index
    in each tiled dim is Mod(v, n). A constant input is folded before it gets here."""
    lead = len(repeats) - x.rank
    old = []
    for i, n in enumerate(x.shape):
        old.append(const(0) if n <= 1 else mod(var(f"v{lead + i}"), n))  # 0: no element
    shape = list(repeats[:lead]) + [n * r for n, r in zip(x.shape, repeats[lead:])]
    return x.with_index(shape, x.at(old))


@lowering("aten.repeat_interleave.self_int", "aten.repeat_interleave.self_Tensor")
def _repeat_interleave(ctx, node, x, repeats, dim=None, output_size=None):
    """Each element `repeats` times along `dim` (the flattened x when dim is None). The same
    count everywhere is a view with floor(v / repeats); per-element counts (a constant tensor)
    are a static selection with a constant index list; runtime counts are refused (the
    result's shape would depend on data)."""
    if dim is None:
        x, dim = x.reshape([x.numel]), 0
    dim = dim % max(x.rank, 1)
    counts = _repeat_counts(ctx, node, repeats, x.shape[dim])
    if counts.size == 0 or not counts.any():   # nothing to repeat, or every count 0
        return x.slice(dim, 0, 0)
    if len(set(counts.tolist())) == 1:
        r = int(counts[0])
        old = [var(f"v{i}") for i in range(x.rank)]
        old[dim] = floordiv(var(f"v{dim}"), r) if r > 1 else var(f"v{dim}")
        shape = list(x.shape)
        shape[dim] *= r
        return x.with_index(shape, x.at(old))
    picks = np.repeat(np.arange(x.shape[dim], dtype=np.int64), counts)
    index = ctx.new_constant(picks, "int64", "repeat_index")
    return advanced_index(ctx, x, [None] * dim + [index])


def _repeat_counts(ctx, node, repeats, n: int) -> np.ndarray:
    """The repeat count of each of the n elements, known at compile time, or a refusal."""
    if isinstance(repeats, TensorValue):
        values = constant_values(ctx, repeats)
        if values is None:
            raise UnsupportedProgram(
                f"{node.name}: repeat_interleave with repeat counts computed at run time "
                f"({source_for_message(node)}); the result's shape would depend on data: pass "
                f"an int or a constant tensor")
        values = values.reshape(-1).astype(np.int64)
    else:
        values = np.asarray([int(repeats)], dtype=np.int64)
    if values.size == 1:
        values = np.repeat(values, max(n, 1))[:n] if n else values[:0]
    if (values < 0).any():
        raise UnsupportedProgram(f"{node.name}: repeat_interleave with a negative count "
                                 f"({source_for_message(node)})")
    return values


@lowering("aten.narrow.default")
def _narrow(ctx, node, x, dim, start, length):
    start = start % x.shape[dim % x.rank] if start < 0 else start
    return x.slice(dim, start, start + length)


@lowering("aten.diagonal.default")
def _diagonal(ctx, node, x, offset=0, dim1=0, dim2=1):
    """The diagonal of dims (dim1, dim2) as the last dim: both dims read the same new var."""
    dim1, dim2 = dim1 % x.rank, dim2 % x.rank
    n1, n2 = x.shape[dim1], x.shape[dim2]
    skip1, skip2 = max(-offset, 0), max(offset, 0)
    length = max(min(n1 - skip1, n2 - skip2), 0)
    rest = [i for i in range(x.rank) if i not in (dim1, dim2)]
    old = [const(0)] * x.rank
    for new_pos, i in enumerate(rest):
        old[i] = var(f"v{new_pos}")
    d = var(f"v{len(rest)}")
    old[dim1], old[dim2] = d + skip1, d + skip2
    return x.with_index([x.shape[i] for i in rest] + [length], x.at(old))


@lowering("aten.unfold.default")
def _unfold(ctx, node, x, dim, size, step):
    """Windows of `size` every `step` along `dim`, the window position as a new last dim (a
    0-d tensor is one window of its one element: shape [1])."""
    if x.rank == 0:
        return x.reshape([1])
    dim = dim % x.rank
    count = (x.shape[dim] - size) // step + 1
    old = [var(f"v{i}") for i in range(x.rank)]
    old[dim] = var(f"v{dim}").scale(step) + var(f"v{x.rank}")
    shape = list(x.shape)
    shape[dim] = count
    return x.with_index(shape + [size], x.at(old))


@lowering("aten.as_strided.default")
def _as_strided(ctx, node, x, size, stride, storage_offset=None):
    """Index arithmetic over the storage, only when that storage is certainly the same in
    spyrec and in eager: `x` is a whole buffer read row-major and eager's `x` is contiguous."""
    val = ctx.meta_of(node.args[0])
    same_storage = (val is not None and val.is_contiguous() and val.storage_offset == 0
                    and x.numel == ctx.graph.buffers[x.buffer].numel
                    and x == x.with_index(x.shape, _row_major(x.shape)))
    offset = int(storage_offset or 0)
    last = offset + sum((n - 1) * st for n, st in zip(size, stride) if n > 0)
    if not same_storage or any(st < 0 for st in stride) or last >= max(x.numel, 1):
        raise UnsupportedProgram(
            f"{node.name}: as_strided over a view or outside its tensor; only as_strided of a "
            f"whole contiguous tensor is supported (use view/permute/slice/unfold)")
    index = sum((var(f"v{i}").scale(st) for i, (n, st) in enumerate(zip(size, stride))
                 if n > 1), const(offset))
    return x.with_index(size, index)


def _row_major(shape) -> Lin:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return sum((var(f"v{i}").scale(st) for i, (n, st) in enumerate(zip(shape, strides))
                if n > 1), Lin())


# The *_copy variants torch.export and functionalization produce: the same index expressions as
# their views. A value is never mutated after it is made, so a view can stand for the copy; a
# consumer that needs a fresh buffer (a program output) materializes it as any view.
VIEW_COPIES = {
    "aten.view_copy.default": "aten.view.default",
    "aten._reshape_copy.default": "aten.reshape.default",
    "aten.permute_copy.default": "aten.permute.default",
    "aten.transpose_copy.int": "aten.transpose.int",
    "aten.t_copy.default": "aten.t.default",
    "aten.expand_copy.default": "aten.expand.default",
    "aten.squeeze_copy.default": "aten.squeeze.default",
    "aten.squeeze_copy.dim": "aten.squeeze.dim",
    "aten.squeeze_copy.dims": "aten.squeeze.dims",
    "aten.unsqueeze_copy.default": "aten.unsqueeze.default",
    "aten.slice_copy.Tensor": "aten.slice.Tensor",
    "aten.select_copy.int": "aten.select.int",
    "aten.narrow_copy.default": "aten.narrow.default",
    "aten.split_copy.Tensor": "aten.split.Tensor",
    "aten.split_with_sizes_copy.default": "aten.split_with_sizes.default",
    "aten.alias_copy.default": "aten.alias.default",
    "aten.detach_copy.default": "aten.detach.default",
    "aten.diagonal_copy.default": "aten.diagonal.default",
    "aten.unfold_copy.default": "aten.unfold.default",
    "aten.as_strided_copy.default": "aten.as_strided.default",
}

for _copy_name, _view_name in VIEW_COPIES.items():
    lowering(_copy_name)(LOWERINGS[_view_name])


@lowering("_operator.getitem")
def _getitem(ctx, node, seq, i):
    return seq[i]
