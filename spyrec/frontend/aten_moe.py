"""Lowerings of top-k selection and mixture-of-experts routing.

topk is a rank computation, not k rounds of argmax: every element's position in the sorted
order is the number of elements that go before it (one compare of the row against itself, a
sum), and one scatter per output puts each element at its position. That is the same handful
of device ops for any k, exact for NaN (eager's CPU kernel ranks NaN above every number for
`largest`, below for smallest) and for -inf (a masked argmax round cannot tell a real -inf
from its mask), and it keeps the order of equal values by index: the first index first.

Ties: eager's CPU topk runs libstdc++'s std::nth_element / std::partial_sort, whose order of
equal values is an artifact of their partitioning (four equal values, k=2, give indices [2, 3]).
No static program reproduces that; spyrec's order (first index first) is the one eager gives
for rows of at most 3 elements and whenever the values are distinct.

`sorted=False`: eager's order is then nth_element's arrangement when k >= 3 and 64k > n, not a
sorted one; that is refused (the same values and indices come with sorted=True). In every other
case eager's unsorted result is the sorted one, and so is spyrec's.
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.aten_reductions import reduce
from spyrec.frontend.lower import LoweringContext, iteration_vars, lowering, names_of, source_of
from spyrec.frontend.views import TensorValue
from spyrec.indexing import Indirect, as_lin
from spyrec.ir import Access

FLOATS = ("float32", "float16", "bfloat16", "float64")


@lowering("aten.topk.default")
def _topk(ctx, node, x, k, dim=-1, largest=True, sorted=True):
    """(values, indices) of the k largest (smallest) along `dim`, in sorted order."""
    if x.rank == 0:
        x = x.reshape([1])
    dim = dim % x.rank
    n = x.shape[dim]
    _check_order(ctx, node, n, k, sorted)
    order = [d for d in range(x.rank) if d != dim] + [dim]
    back = list(np.argsort(order))
    rows = x.permute(order)
    pos = stable_positions(ctx, rows, largest)
    values = _place(ctx, rows, pos, rows.dtype).slice(-1, 0, k).permute(back)
    iota = ctx.new_constant(np.arange(n, dtype=np.int64), "int64", "iota")
    indices = _place(ctx, iota.expand(rows.shape), pos, "int64").slice(-1, 0, k).permute(back)
    shapes = [tuple(int(s) for s in v.shape) for v in node.meta["val"]]
    return tuple(v.reshape(s) if v.shape != s else v for v, s in zip((values, indices), shapes))


def _check_order(ctx, node, n: int, k: int, sorted_: bool) -> None:
    """Refuse what spyrec cannot give as eager does: k beyond the dim, and unsorted results
    that eager leaves in std::nth_element's order (k >= 3 on its nth_element path, 64k > n)."""
    where = source_of(node) or "unknown source line"
    if not 0 <= k <= n:
        raise UnsupportedProgram(f"{node.name}: topk with k={k} of a dim of size {n} ({where})")
    if not sorted_ and 3 <= k and 64 * k > n and n >= 4:
        raise UnsupportedProgram(
            f"{node.name}: topk(sorted=False) with k={k} of {n} ({where}): eager's CPU order is "
            f"std::nth_element's arrangement, which spyrec does not reproduce; use sorted=True "
            f"(the same values and indices, sorted)")


def stable_positions(ctx: LoweringContext, rows: TensorValue, largest: bool) -> TensorValue:
    """pos[..., i] = how many elements of the row go before element i (int64): j goes before
    i when it compares strictly first, or equal and j < i. `before[..., i, j]` is built from
    IEEE compares (false with NaN), then NaN is placed by where3: first for `largest`, last
    otherwise, NaNs among themselves by index, as eager's comparator does."""
    n = rows.shape[-1]
    xi, xj = rows.unsqueeze(-1), rows.unsqueeze(-2)
    shape = rows.shape + (n,)
    strict_op, loose_op = ("greaterthan", "greaterequal") if largest else \
        ("lesserthan", "lesserequal")
    earlier = ctx.new_constant(np.tri(n, n, -1, dtype=bool), "bool", "earlier")  # j < i
    strict = ctx.pointwise(strict_op, [xj, xi], out_dtype="bool", shape=shape)
    loose = ctx.pointwise(loose_op, [xj, xi], out_dtype="bool", shape=shape)
    before = ctx.pointwise("where3", [earlier, loose, strict], out_dtype="bool", shape=shape)
    if rows.dtype in FLOATS:
        nan = ctx.pointwise("notequal", [rows, rows], out_dtype="bool", shape=rows.shape)
        # largest: a NaN j goes before a number i; smallest: a NaN i goes after a number j
        first, second = (nan.unsqueeze(-2), nan.unsqueeze(-1)) if largest else \
            (nan.unsqueeze(-1), nan.unsqueeze(-2))
        t = ctx.pointwise("where3", [second, earlier], out_dtype="bool", shape=shape,
                          constants={"b_scalar": True})
        before = ctx.pointwise("where3", [first, t, before], out_dtype="bool", shape=shape)
    return reduce(ctx, "sum", before, [rows.rank], False, "int64")


def _place(ctx, src: TensorValue, pos: TensorValue, dtype: str) -> TensorValue:
    """out[..., pos[..., i]] = src[..., i]: one scatter; pos is a permutation of each row, so
    every element is written once and no copy of a destination is needed."""
    out = ctx.new_value(src.shape, dtype)
    cvars = iteration_vars(src.shape)
    coords = list(cvars[:-1]) + [as_lin(Indirect(pos.buffer))]
    ctx.emit("identity", out, list(zip(names_of(cvars), src.shape)),
             [Access(src.buffer, src.at(cvars))], out.at(coords),
             constants={"scatter": "assign"},
             index_inputs=[Access(pos.buffer, pos.at(cvars))],
             index_bounds=[(0, src.shape[-1])])
    return out
