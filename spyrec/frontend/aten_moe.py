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
from spyrec.frontend.aten_reductions import matmul, reduce
from spyrec.frontend.context import LoweringContext, iteration_vars, names_of
from spyrec.frontend.registry import lowering
from spyrec.frontend.sources import source_for_message
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
    where = source_for_message(node)
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


# --- the routing around transformers' default (grouped_mm) experts ---------------------------


@lowering("aten.sort.default", "aten.sort.stable")
def _sort(ctx, node, x, *args, stable=None, dim=-1, descending=False):
    """(values, indices) in the stable order (equal values by index, NaN greatest), the rank
    and scatters of topk with k = n. sort.stable is exact; sort.default's tie order on CPU is
    introsort's, which no static program reproduces; the stable one is a valid result (what
    transformers' grouped experts need: they undo the permutation afterwards)."""
    if str(node.target) == "aten.sort.default" and args:
        dim, descending = (list(args) + [descending])[:2]
    if x.rank == 0:
        return x, ctx.new_constant(np.zeros((), dtype=np.int64), "int64", "index")
    return _topk(ctx, node, x, x.shape[dim % x.rank], dim, descending, True)


@lowering("aten.empty_like.default", "aten.empty.memory_format", "aten.new_empty.default")
def _empty_like(ctx, node, *args, **kwargs):
    """Uninitialized memory in eager: zeros here, so that no stale value is ever read."""
    shape, dtype = ctx.out_meta()
    out = ctx.new_value(shape, dtype)
    cvars = iteration_vars(shape)
    ctx.emit("fill", out, list(zip(names_of(cvars), shape)), [], out.at(cvars),
             constants={"value": 0})
    return out


@lowering("aten.histc.default")
def _histc(ctx, node, x, bins=100, min=0, max=0):
    """torch.histc with given edges: bin = trunc((x - min) * bins / (max - min)) in x's dtype
    (eager's linear-interpolation CPU kernel, each step rounded to x's dtype), x == max in
    the last bin, values outside [min, max] and NaN dropped; a count is a compare with every
    bin and a sum. min == max takes the edges from the data at run time: refused."""
    lo, hi = float(min), float(max)
    if lo >= hi:
        raise UnsupportedProgram(
            f"{node.name}: torch.histc with min={min}, max={max} takes its range from the data "
            f"({source_for_message(node)}); pass min < max")
    flat = x.reshape([x.numel])
    dtype = x.dtype
    d = ctx.pointwise("sub", [flat], out_dtype=dtype, constants=_rhs(lo), shape=flat.shape)
    s = ctx.pointwise("mul", [d], out_dtype=dtype, constants=_rhs(float(bins)), shape=flat.shape)
    q = ctx.pointwise("realdiv", [s], out_dtype=dtype, constants=_rhs(hi - lo), shape=flat.shape)
    pos = ctx.pointwise("identity", [q], out_dtype="int64", shape=flat.shape)
    pos = ctx.pointwise("minimum", [pos], out_dtype="int64", shape=flat.shape,
                        constants=_rhs(int(bins) - 1))
    ge = ctx.pointwise("greaterequal", [flat], out_dtype="bool", constants=_rhs(lo),
                       shape=flat.shape)
    inside = ctx.pointwise("lesserequal", [flat], out_dtype="bool", constants=_rhs(hi),
                           shape=flat.shape)
    inside = ctx.pointwise("where3", [ge, inside], out_dtype="bool", shape=flat.shape,
                           constants={"b_scalar": False})
    bin_ids = ctx.new_constant(np.arange(int(bins), dtype=np.int64), "int64", "bins")
    grid = (int(bins), x.numel)   # counted along the stick dim
    hit = ctx.pointwise("equal", [pos.unsqueeze(0), bin_ids.unsqueeze(1)], out_dtype="bool",
                        shape=grid)
    hit = ctx.pointwise("where3", [inside.unsqueeze(0), hit], out_dtype="bool", shape=grid,
                        constants={"b_scalar": False})
    return reduce(ctx, "sum", hit, [1], False, ctx.out_meta()[1])


def _rhs(value) -> dict:
    return {"scalar": value, "scalar_side": "rhs"}


@lowering("transformers.grouped_mm_fallback.default")
def grouped_mm_dense(ctx, node, x, weight, offs):
    """transformers' grouped matmul (integrations/moe.py `_grouped_mm_fallback`): row r of
    `x` [S, K] times weight[e] [K, N] for the group e whose rows offs[e-1]..offs[e]-1 hold r
    (offs: cumulative counts, non-decreasing), zeros past offs[-1]. The group sizes are run-time
    data, so every expert runs on every row (one batched matmul [E, S, N]) and each row takes
    its expert's result by a gather: group(r) = #{e < E-1 : offs[e] <= r}, kept when
    r < offs[E-1]."""
    dtype = ctx.out_meta()[1]
    experts, rows = weight.shape[0], x.shape[0]
    every = matmul(ctx, x.unsqueeze(0), weight, dtype)             # [E, S, N]
    r = ctx.new_constant(np.arange(rows, dtype=np.int64), "int64", "rows")
    ends = offs.slice(0, 0, experts - 1)
    passed = ctx.pointwise("lesserequal", [ends.unsqueeze(0), r.unsqueeze(1)], out_dtype="bool",
                           shape=(rows, experts - 1))
    group = reduce(ctx, "sum", passed, [1], False, "int64") if experts > 1 else \
        ctx.pointwise("fill", [], out_dtype="int64", shape=(rows,), constants={"value": 0})
    picked = ctx.new_value((rows, every.shape[-1]), dtype)
    cvars = iteration_vars(picked.shape)
    ctx.emit("identity", picked, list(zip(names_of(cvars), picked.shape)),
             [Access(every.buffer, every.at([as_lin(Indirect(group.buffer))] + cvars))],
             picked.at(cvars), index_inputs=[Access(group.buffer, group.at(cvars[:1]))],
             index_bounds=[(0, experts)])
    covered = ctx.pointwise("lesserthan", [r, offs.select(0, experts - 1)], out_dtype="bool",
                            shape=(rows,))
    return ctx.pointwise("where3", [covered.unsqueeze(1), picked], out_dtype=dtype,
                         shape=picked.shape, constants={"b_scalar": 0.0})


@lowering("aten._grouped_mm.default")
def _grouped_mm(ctx, node, mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """torch's grouped matmul (what transformers calls for bf16 experts instead of the
    fallback): the 2-D x 3-D form with group offsets is `grouped_mm_dense`."""
    if mat_a.rank != 2 or mat_b.rank != 3 or offs is None or bias is not None:
        ctx.refuse(f"of a {mat_a.rank}-D by {mat_b.rank}-D form"
                   f"{' with a bias' if bias is not None else ''}",
                   "only a 2-D input by 3-D expert weights with offsets is lowered")
    return grouped_mm_dense(ctx, node, mat_a, mat_b, offs)
