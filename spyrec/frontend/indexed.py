"""Indexed reads and writes (gathers and scatters) as single device ops with indirect accesses.

Lowering only records that an access is indirect: a coordinate of the accessed tensor is
`Indirect('<index buffer>')`, the index tensor is read through `index_inputs`, and
`index_bounds` holds the size of the dim each index tensor indexes. The `gather_coordinates`
pass owns the rest (negative wrap and range checks, argument order, fusion).

- A gather is one `identity` op: `out[c] = x[..., Indirect(i), ...]` with `i` read at `c`.
- A scatter is a copy of the destination into a fresh buffer (SSA: every buffer keeps the value
  it was made with, so the untouched part is preserved by that copy), then one op whose output
  index holds `Indirect`: `out[..., Indirect(i), ...] = src[c]`, with op_info constant
  `scatter` = `assign` (later iteration points win, as eager's CPU kernels) or `add` (every
  contribution summed, duplicates included).

Advanced indexing follows PyTorch: index tensors broadcast against each other; when they sit
on adjacent dims their broadcast dims replace those dims in place, otherwise they go first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from spyrec.bf16 import bf16_bits_to_float32
from spyrec.errors import UnsupportedProgram
from spyrec.frontend.context import LoweringContext, iteration_vars, names_of
from spyrec.frontend.sources import source_for_message
from spyrec.frontend.views import TensorValue, broadcast_index, broadcast_shapes
from spyrec.indexing import Indirect, Lin, as_lin, const, var
from spyrec.indexing.expr import evaluate
from spyrec.ir import Access

INTEGER_DTYPES = ("int32", "int64", "int8", "uint8", "int16")
# A constant index list that is no arithmetic progression becomes one copy per run of it; past
# this many runs one gather (reading the constant index tensor at run time) is cheaper.
MAX_STATIC_RUNS = 8


@dataclass(frozen=True)
class IndexUse:
    """Index tensor `tensor` read at `at` (op vars); its values index a dim of size `size`
    and are valid in `low`..size-1 (low = -size: negatives wrap once, as advanced indexing;
    low = 0: a negative value is an error, as index_select, gather and scatter)."""

    tensor: TensorValue
    at: Lin
    size: int
    low: int

    @property
    def bound(self) -> tuple[int, int]:
        return (self.low, self.size)


def check_index(ctx: LoweringContext, t: TensorValue) -> None:
    where = source_for_message(ctx.node)
    if t.dtype == "bool":
        raise UnsupportedProgram(f"{ctx.node.name}: indexing with the boolean mask {t.buffer} "
                                 f"({where}) gives a data-dependent shape; use torch.where")
    if t.dtype not in INTEGER_DTYPES:
        raise UnsupportedProgram(f"{ctx.node.name}: index tensor {t.buffer} has dtype "
                                 f"{t.dtype} ({where}); indices must be integers (int32/int64)")


def advanced_shape(x_shape: Sequence[int], indices: Sequence) -> tuple[int, ...]:
    """The shape of `x[indices]` (None = a whole dim, else an index TensorValue)."""
    indices = list(indices) + [None] * (len(x_shape) - len(indices))
    positions = [d for d, t in enumerate(indices) if t is not None]
    b = broadcast_shapes(*(indices[d].shape for d in positions))
    kept = [n for d, n in enumerate(x_shape) if indices[d] is None]
    if positions == list(range(positions[0], positions[-1] + 1)):
        before = sum(1 for d in range(positions[0]) if indices[d] is None)
        return tuple(kept[:before]) + b + tuple(kept[before:])
    return b + tuple(kept)


def _index_layout(x_shape: Sequence[int], indices: Sequence) -> tuple[list, tuple, int]:
    """`indices` padded to x's rank, the broadcast index shape, and where its dims sit in the
    result (in place of adjacent index dims, else first)."""
    indices = list(indices) + [None] * (len(x_shape) - len(indices))
    positions = [d for d, t in enumerate(indices) if t is not None]
    b = broadcast_shapes(*(indices[d].shape for d in positions))
    if positions == list(range(positions[0], positions[-1] + 1)):
        start = sum(1 for d in range(positions[0]) if indices[d] is None)
    else:
        start = 0
    return indices, b, start


def advanced_coordinates(x_shape: Sequence[int], indices: Sequence, cvars: Sequence[Lin],
                         wrap: bool = True) -> tuple[list[Lin], list[IndexUse]]:
    """Per dim of x, the coordinate read at result point `cvars` of `x[indices]`, and the
    index tensors' reads (each broadcast to the index shape). `wrap`: negative indices wrap
    (advanced indexing, index_put) rather than being errors (index_select, index_copy)."""
    indices, b, start = _index_layout(x_shape, indices)
    bvars = list(cvars[start:start + len(b)])
    kept_vars = list(cvars[:start]) + list(cvars[start + len(b):])
    coords: list[Lin] = []
    uses: list[IndexUse] = []
    for d, t in enumerate(indices):
        if t is None:
            coords.append(kept_vars.pop(0))
            continue
        coords.append(as_lin(Indirect(t.buffer)))
        n = int(x_shape[d])
        uses.append(IndexUse(t, broadcast_index(t, bvars), n, -n if wrap else 0))
    return coords, uses


def distinct_indices(ctx: LoweringContext, x_shape: Sequence[int],
                     indices: Sequence) -> list:
    """`indices` checked, with one buffer per distinct (view, bound): `Indirect(i)` names a
    buffer, so an index tensor used twice through different views or on dims of different
    sizes (`x[i, i.T]`) is read the second time through a copy."""
    seen: dict[str, tuple] = {}
    out = []
    for d, t in enumerate(indices):
        if t is not None:
            check_index(ctx, t)
            key = (t, int(x_shape[d]))
            if seen.setdefault(t.buffer, key) != key:
                t = ctx.pointwise("identity", [t], out_dtype=t.dtype, shape=t.shape)
                seen[t.buffer] = (t, int(x_shape[d]))
        out.append(t)
    return out


def _unique(uses: list[IndexUse]) -> list[IndexUse]:
    return list(dict.fromkeys(uses))


def emit_gather(ctx: LoweringContext, x: TensorValue, shape: Sequence[int],
                coords_of) -> TensorValue:
    """One identity op: out[c] = x[coords_of(c)], `coords_of(cvars) -> (coords, uses)`."""
    dtype = ctx.out_meta()[1]
    out = ctx.new_value(shape, dtype)
    cvars = iteration_vars(shape)
    coords, uses = coords_of(cvars)
    uses = _unique(uses)
    if _splits_an_index(ctx, x, coords, uses):
        x = ctx.pointwise("identity", [x], out_dtype=x.dtype, shape=x.shape)
    ctx.emit("identity", out, list(zip(names_of(cvars), shape)),
             [Access(x.buffer, x.at(coords))], out.at(cvars),
             index_inputs=[Access(u.tensor.buffer, u.at) for u in uses],
             index_bounds=[u.bound for u in uses])
    return out


def _splits_an_index(ctx, x: TensorValue, coords, uses) -> bool:
    """Whether an index tensor's value, read through view `x`, spans several dims of the
    buffer (`w.reshape(-1)[perm]` of a [16, 2] buffer reads element (perm // 2, perm % 2)),
    which no device coordinate can address; the gather then reads a copy shaped as the view."""
    from spyrec.indexing.expr import FloorDiv, Mod

    buf = ctx.graph.buffers[x.buffer]
    strides = buf.host_strides
    flat = as_lin(x.at(coords))
    if any(isinstance(a, (FloorDiv, Mod)) and any(isinstance(leaf, Indirect)
                                                  for leaf in a.num.free_atoms())
           for a in flat.atoms()):
        return True
    for u in uses:
        step = flat.coeff(Indirect(u.tensor.buffer))
        dims = [d for d, st in enumerate(strides) if st == step and buf.host_size[d] > 1]
        if step and not any(u.size <= buf.host_size[d] for d in dims):
            return True
    return False


def emit_scatter(ctx: LoweringContext, dst: TensorValue, shape: Sequence[int], coords_of,
                 src, mode: str) -> TensorValue:
    """A copy of `dst`, then out[coords_of(c)] (=|+=) src[c] over `shape` (src a TensorValue
    broadcast to `shape`, or a Python number)."""
    assert mode in ("assign", "add"), mode
    dtype = ctx.out_meta()[1]
    out = ctx.pointwise("identity", [dst], out_dtype=dtype, shape=dst.shape)
    if any(n == 0 for n in shape):
        return out
    cvars = iteration_vars(shape)
    coords, uses = coords_of(cvars)
    uses = _unique(uses)
    constants: dict = {"scatter": mode}
    if isinstance(src, TensorValue):
        op, inputs = "identity", [Access(src.buffer, broadcast_index(src, cvars))]
    else:
        op, inputs = "fill", []
        constants["value"] = src
    ctx.emit(op, out, list(zip(names_of(cvars), shape)), inputs, out.at(coords),
             constants=constants,
             index_inputs=[Access(u.tensor.buffer, u.at) for u in uses],
             index_bounds=[u.bound for u in uses])
    return out


# --- indices known at compile time ------------------------------------------------------------


def constant_values(ctx: LoweringContext, value: TensorValue) -> np.ndarray | None:
    """The elements of `value` when it is a view of a compile-time constant, else None."""
    stored = ctx.graph.constants.get(value.buffer)
    if stored is None:
        return None
    grid = np.indices(value.shape, dtype=np.int64) if value.rank else []
    flat = evaluate(value.index, {f"v{i}": g for i, g in enumerate(grid)})
    return np.asarray(stored).reshape(-1)[np.broadcast_to(flat, value.shape)]


def constant_numbers(ctx: LoweringContext, value: TensorValue) -> np.ndarray | None:
    """`constant_values` as numbers: a bf16 constant is stored as its uint16 bits, which read
    as integers make every folded number wrong (a batch norm's statistics, a conv's weights)."""
    values = constant_values(ctx, value)
    if values is not None and value.dtype == "bfloat16" and values.dtype == np.uint16:
        return bf16_bits_to_float32(values)
    return values


def static_selection(ctx: LoweringContext, x: TensorValue, indices: Sequence,
                     wrap: bool) -> TensorValue | None:
    """x[indices] without a gather when every index tensor is a compile-time constant (a
    Python list in the model: Falcon's `fused_qkv[..., [-2], :]`): a view when each index is
    an affine function of the result's index dims with non-negative steps, else one copy per
    run of such a function along a 1-D index (at most MAX_STATIC_RUNS). None otherwise (the
    caller gathers, reading the constant index tensor at run time)."""
    indices, b, start = _index_layout(x.shape, indices)
    values = {}
    for d, t in enumerate(indices):
        if t is not None:
            v = constant_values(ctx, t)
            if v is None:
                return None
            v, size = v.astype(np.int64), int(x.shape[d])
            if ((v < (-size if wrap else 0)) | (v >= size)).any():
                return None    # gather_coordinates refuses it, naming the value and position
            values[d] = np.broadcast_to(np.where(v < 0, v + size, v), b)
    rank = len(x.shape) - len(values) + len(b)
    shape = advanced_shape(x.shape, indices)
    steps = {d: _affine_steps(v) for d, v in values.items()}
    if all(s is not None for s in steps.values()):
        cvars = [var(f"v{i}") for i in range(rank)]
        return x.remap(shape, _static_coordinates(indices, start, b, cvars, steps))
    if len(b) == 1:
        return _static_runs(ctx, x, indices, start, shape, values)
    return None


def _affine_steps(values: np.ndarray) -> tuple[int, tuple[int, ...]] | None:
    """(origin, non-negative step per dim) when values[j] = origin + Σ step_k j_k, else None."""
    if values.size == 0:
        return 0, (0,) * values.ndim
    origin = int(values.flat[0])
    steps = tuple(int(values[(0,) * k + (1,) + (0,) * (values.ndim - k - 1)]) - origin
                  if n > 1 else 0 for k, n in enumerate(values.shape))
    grid = np.indices(values.shape) if values.ndim else np.zeros((0,))
    fitted = origin + sum((s * g for s, g in zip(steps, grid)), np.zeros(values.shape, np.int64))
    if any(s < 0 for s in steps) or not np.array_equal(fitted, values):
        return None
    return origin, steps


def _static_coordinates(indices, start: int, b, cvars: Sequence[Lin], steps) -> list[Lin]:
    bvars = list(cvars[start:start + len(b)])
    kept_vars = list(cvars[:start]) + list(cvars[start + len(b):])
    coords = []
    for d, t in enumerate(indices):
        if t is None:
            coords.append(kept_vars.pop(0))
            continue
        origin, step = steps[d]
        coords.append(sum((v.scale(s) for v, s in zip(bvars, step) if s), const(origin)))
    return coords


def _static_runs(ctx, x: TensorValue, indices, start: int, shape, values) -> TensorValue | None:
    """One identity copy per maximal run of the 1-D index along which every index is an
    arithmetic progression with a non-negative step."""
    runs, j, n = [], 0, shape[start]
    while j < n:
        end = j + 1
        while end < n and all(_affine_steps(v[j:end + 1]) is not None for v in values.values()):
            end += 1
        runs.append((j, end))
        j = end
    if len(runs) > MAX_STATIC_RUNS:
        return None
    out = ctx.new_value(shape, ctx.out_meta()[1])
    for lo, hi in runs:
        piece = list(shape)
        piece[start] = hi - lo
        steps = {d: _affine_steps(v[lo:hi]) for d, v in values.items()}
        cvars = iteration_vars(piece)
        coords = _static_coordinates(indices, start, (hi - lo,), cvars, steps)
        out_idx = list(cvars)
        out_idx[start] = cvars[start] + lo
        ctx.emit("identity", out, list(zip(names_of(cvars), piece)),
                 [Access(x.buffer, x.at(coords))], out.at(out_idx))
    return out
