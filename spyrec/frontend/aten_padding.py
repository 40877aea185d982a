"""Lowerings that move elements by a static rule: constant padding, roll, nearest upsampling
and the triangular masks (tril/triu).

State-space models pad the sequence to a whole number of chunks (`F.pad` with pads that are
often all zero), MobileNetV2 and EfficientNet pad before a convolution as TensorFlow does,
Swin rolls its windows and pads them, DETR resizes its pixel mask by nearest neighbour.

What can be a view is a view (index arithmetic, no device op): a pad whose widths are all zero
or negative is a crop, nearest upsampling by an integer rule reads `floor(i * in / out)`. A
roll is copies of blocks (its `mod` is no coordinate a SuperDSC can hold). A positive pad writes the value into the border regions (one
`fill` per border slab, disjoint) and copies the input into the middle, so no element is
written twice.
"""

from __future__ import annotations

import itertools

import numpy as np

from spyrec.frontend.aten_copies import advanced_index
from spyrec.frontend.context import LoweringContext, iteration_vars, names_of
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue
from spyrec.indexing import floordiv, var
from spyrec.ir import Access


@lowering("aten.constant_pad_nd.default")
def _constant_pad_nd(ctx, node, x, pad, value=0):
    return constant_pad(ctx, x, list(pad), value)


@lowering("aten.pad.default")
def _pad(ctx, node, x, pad, mode="constant", value=None):
    if mode != "constant":
        ctx.refuse(f"in mode {mode!r}", "only constant padding is lowered; pad with a "
                   "constant (F.pad(x, pad, value=...)) or open an issue")
    return constant_pad(ctx, x, list(pad), 0 if value is None else value)


def constant_pad(ctx: LoweringContext, x: TensorValue, pad: list[int], value) -> TensorValue:
    """torch's constant_pad_nd: `pad` holds (before, after) pairs from the last dim backwards;
    a negative width crops. Zero or negative widths only: a view of `x`."""
    if len(pad) % 2 or len(pad) // 2 > x.rank:
        ctx.refuse(f"with {len(pad)} pad widths for a {x.rank}-d tensor",
                   "give two widths per padded dim")
    before, after = [0] * x.rank, [0] * x.rank
    for i in range(len(pad) // 2):
        before[x.rank - 1 - i], after[x.rank - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    inner = x
    for d in range(x.rank):  # negative widths crop first
        lo, hi = max(0, -before[d]), x.shape[d] - max(0, -after[d])
        if lo or hi != x.shape[d]:
            inner = inner.slice(d, lo, max(lo, hi))
    grow = [max(0, b) for b in before], [max(0, a) for a in after]
    if not any(grow[0]) and not any(grow[1]):
        return inner
    shape = tuple(n + b + a for n, b, a in zip(inner.shape, *grow))
    out = ctx.new_value(shape, x.dtype)
    _fill_borders(ctx, out, inner.shape, grow[0], value)
    if inner.numel:
        cvars = iteration_vars(inner.shape)
        ctx.emit("identity", out, list(zip(names_of(cvars), inner.shape)),
                 [Access(inner.buffer, inner.at(cvars))],
                 out.at([v + b for v, b in zip(cvars, grow[0])]))
    return out


def _fill_borders(ctx, out: TensorValue, inner: tuple[int, ...], before: list[int],
                  value) -> None:
    """`value` into every element of `out` outside the box `inner` placed at `before`: for
    each dim d, the slabs before and after the box in d, inside the box in the dims before d
    and whole in the dims after it (so the slabs are disjoint)."""
    from spyrec.frontend.aten_pointwise import _number

    for d in range(out.rank):
        for start, length in ((0, before[d]), (before[d] + inner[d],
                                               out.shape[d] - before[d] - inner[d])):
            if length <= 0:
                continue
            shape = [inner[k] if k < d else out.shape[k] for k in range(out.rank)]
            shape[d] = length
            if 0 in shape:
                continue
            cvars = iteration_vars(shape)
            at = [v + (before[k] if k < d else start if k == d else 0)
                  for k, v in enumerate(cvars)]
            ctx.emit("fill", out, list(zip(names_of(cvars), shape)), [], out.at(at),
                     constants={"value": _number(value)})


@lowering("aten.roll.default")
def _roll(ctx, node, x, shifts, dims=()):
    """out[i] = x[(i - shift) mod n] along each dim; no dims: over the flattened tensor."""
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        flat = x.reshape([x.numel])
        return rolled(ctx, flat, [shifts[0]], [0]).reshape(x.shape)
    if len(shifts) != len(dims):
        ctx.refuse(f"with {len(shifts)} shifts for {len(dims)} dims", "give one shift per dim")
    return rolled(ctx, x, shifts, dims)


def rolled(ctx: LoweringContext, x: TensorValue, shifts: list[int], dims: list[int]):
    """x rolled, as one copy per block: a dim rolled by s splits into [0, s) <- [n - s, n)
    and [s, n) <- [0, n - s), and the blocks are the products of those splits (Swin's two
    rolled dims: four copies). Not a view: `(i - s) mod n` is no digit of an iteration
    variable, which a SuperDSC coordinate must be."""
    splits = [[(0, 0, n)] for n in x.shape]     # (out start, in start, length) per dim
    for s, d in zip(shifts, dims):
        d %= x.rank
        n = x.shape[d]
        s = int(s) % n if n else 0
        if s:
            splits[d] = [(0, n - s, s), (s, 0, n - s)]
    if all(len(p) == 1 for p in splits):
        return x
    out = ctx.new_value(x.shape, x.dtype)
    for block in itertools.product(*splits):
        part = x
        for d, (_, start, length) in enumerate(block):
            if length != x.shape[d]:
                part = part.slice(d, start, start + length)
        cvars = iteration_vars(part.shape)
        ctx.emit("identity", out, list(zip(names_of(cvars), part.shape)),
                 [Access(part.buffer, part.at(cvars))],
                 out.at([v + b[0] for v, b in zip(cvars, block)]))
    return out


@lowering("aten.upsample_nearest2d.vec", "aten.upsample_nearest2d.default",
          "aten.upsample_nearest1d.vec", "aten.upsample_nearest1d.default")
def _upsample_nearest(ctx, node, x, output_size=None, *scales):
    """torch's nearest rule per spatial dim: src = min(floor(dst * scale), in - 1) in float32,
    scale = 1/scale_factor when one is given, else in/out. A view when that table is
    floor(dst * in / out) exactly (every integer ratio and most others), else a selection by
    the constant table (`advanced_index`: copies of its runs, or one gather)."""
    spatial = 1 if "1d" in str(node.target) else 2
    out_shape = ctx.out_meta()[0]
    factors = _scale_factors(node, scales, spatial)
    coords = [var(f"v{i}") for i in range(x.rank)]
    irregular: list[tuple[int, np.ndarray]] = []
    for k in range(spatial):
        d = x.rank - spatial + k
        n_in, n_out = x.shape[d], out_shape[d]
        table = nearest_table(n_in, n_out, factors[k])
        if not np.array_equal(table, (np.arange(n_out) * n_in) // n_out):
            irregular.append((d, table))
            continue
        coords[d] = floordiv(var(f"v{d}").scale(n_in), n_out) if n_in != n_out else coords[d]
    shape = [out_shape[d] if d not in dict(irregular) else x.shape[d] for d in range(x.rank)]
    x = x.remap(shape, coords)
    for d, table in irregular:  # a table float32 rounding made irregular: a static selection
        index = ctx.new_constant(table.astype(np.int64), "int64", f"rows{d}")
        x = advanced_index(ctx, x, [None] * d + [index])
    return x


def _scale_factors(node, scales, spatial: int) -> list[float | None]:
    if str(node.target).endswith(".vec"):
        given = scales[0] if scales else None
        return list(given) if given else [None] * spatial
    return [s for s in (list(scales) + [None] * spatial)[:spatial]]


def nearest_table(n_in: int, n_out: int, scale_factor: float | None) -> np.ndarray:
    """The source index of every output index, as eager's CPU kernel computes it."""
    dst = np.arange(n_out)
    if n_out == n_in:
        return dst
    if n_out == 2 * n_in:
        return dst >> 1
    scale = np.float32(1.0 / scale_factor) if scale_factor else np.float32(n_in) / np.float32(
        n_out)
    src = np.floor(dst.astype(np.float32) * scale).astype(np.int64)
    return np.minimum(src, n_in - 1)


@lowering("aten.tril.default", "aten.triu.default")
def _triangle(ctx, node, x, diagonal=0):
    """x where the element is on the kept side of the diagonal, else 0 (a bool mask constant
    over the last two dims, broadcast over the rest)."""
    rows, cols = x.shape[-2:]
    keep = np.tri(rows, cols, int(diagonal), dtype=bool)
    if str(node.target) == "aten.triu.default":
        keep = ~np.tri(rows, cols, int(diagonal) - 1, dtype=bool)
    mask = ctx.new_constant(keep, "bool", "mask")
    zero = False if x.dtype == "bool" else 0
    return ctx.pointwise("where3", [mask, x], constants={"b_scalar": zero}, shape=x.shape)
