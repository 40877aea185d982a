"""Attention as counted loops with an online softmax (flash attention; issue 29).

`softmax(scores) @ v`, the scores computed from `q @ kᵀ` and elementwise ops (scale, masks),
is what the front end makes of `scaled_dot_product_attention` and what a model's own
`softmax(q @ k.T * scale + mask) @ v` lowers to. Materialized, the scores are
heads × S × L fp32: 4 GB at 8 heads and 32K tokens. This rewrite keeps them on chip:

    for each query tile (level 0, Tq rows):          m = -FLT_MAX, l = 0, acc = 0
        for each key tile (level 1, Tk keys):
            x  = the score chain on the tile          (q @ kᵀ, scale, mask: the program's ops)
            mn = max(m, rowmax(x));  α = exp(m − mn)
            p  = exp(x − mn);        l = l·α + rowsum(p)
            acc = acc·α + p @ v_tile;  m = mn
        out = acc / l                                (max(l, 1) for the safe softmax)

The running statistics and the fp32 accumulator are per-tile buffers (one query tile, fixed
LX address), refilled at the start of every query tile; q, k, v, the masks and the output stay
full buffers whose tiles move by a constant device-address step per trip — exactly the coarse
tiling contract (DESIGN §4–5), so the loops, LoopSpecs, codegen, simulator and cost model are
coarse tiling's own. The query tile is copied once per query tile into a per-tile buffer, so
the key loop reads q from LX instead of from HBM on every trip.

Numerics: every op computes in fp32 as the materialized form does; the result differs from it
only by the order of the row sums (and the rescaling by α, exact for α = 1). A row whose
every score is −inf (a fully masked query) keeps m at −FLT_MAX, so every p is exp(−inf) = 0:
the plain softmax gives 0/0 = NaN there, as eager's does, and the safe one (sdpa with a mask
that may mask whole rows) gives 0, as eager's sdpa.

The matcher (`find_sites`) accepts only the shape it can rewrite exactly and leaves anything
else materialized: every intermediate read only inside the pattern, one reduced var per
reduction, scores [..., S, L] with the max/sum kept as [..., S, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from spyrec.indexing import Indirect, Lin, Ranges, Var, indirect, substitute, var
from spyrec.indexing.coordinates import host_coordinates
from spyrec.indexing.simplify import simplify_lin
from spyrec.ir import Access, Buffer, Graph, Loop, Operation
from spyrec.ir.graph import TripSpan
from spyrec.errors import ConfigError
from spyrec.layout.device_layout import SPARSE, stick_layout
from spyrec.ir.verify import tiled_access_problem
from spyrec.plan.tiles import (
    device_advance, host_advance, host_box, retile_index, tile_buffer_layout,
)

FLT_MAX = float(np.finfo(np.float32).max)
# elementwise ops that may sit between q @ kᵀ and the softmax (scale, masks, casts)
CHAIN_OPS = ("mul", "add", "sub", "realdiv", "where3", "identity", "maximum", "minimum")


@dataclass(frozen=True)
class AttentionSite:
    """One matched `softmax(chain(q @ kᵀ)) @ v`: its ops by role (names), in program order
    in `ops`, and its sizes."""

    ops: tuple[str, ...]
    scores: str                 # q @ kᵀ (batchmatmul)
    chain: tuple[str, ...]      # elementwise ops from the scores to x, in order
    row_max: str                # max(x) over the keys
    max_guard: str | None       # maximum(row max, -FLT_MAX) of the safe softmax
    shifted: str                # x - max
    exp: str
    row_sum: str
    sum_guard: str | None       # maximum(row sum, 1) of the safe softmax
    probs: str                  # exp / sum
    out: str                    # probs @ v (batchmatmul)
    queries: int                # S
    keys: int                   # L
    heads: int                  # H (the scores' dim -3; 1 without one)
    head_dim: int               # E of q @ kᵀ
    value_dim: int              # Ev of probs @ v
    # copies gathering K or V (pages of a paged cache through a block table) read only by
    # q @ kᵀ or probs @ v: each key tile gathers its own pages inside the key loop
    gathers: tuple[str, ...] = ()
    source: str = ""            # the attention's source line, for messages
    # elementwise ops computing a [.., S, L] mask operand of the chain (a causal or window
    # mask compared from position vectors): recomputed per tile inside the key loop, so the
    # mask is never written whole
    masks: tuple[str, ...] = ()

    @property
    def safe(self) -> bool:
        return self.sum_guard is not None

    @property
    def named(self) -> str:
        """How messages name the attention: its op and source line."""
        return f"op {self.out}" + (f" ({self.source})" if self.source else "")


# --- matching -------------------------------------------------------------------------------


def find_sites(graph: Graph) -> list[AttentionSite]:
    """Every attention pattern of the untiled program that the rewrite can take."""
    writer = {op.output.buffer: op for op in graph.ops}
    readers: dict[str, list[Operation]] = {}
    for op in graph.ops:
        for a in op.reads():
            readers.setdefault(a.buffer, [])
            if op not in readers[a.buffer]:
                readers[a.buffer].append(op)
    kept = set(graph.outputs) | set(graph.mutated_buffers.values())
    sites = []
    for op in graph.ops:
        site = _match(graph, op, writer, readers, kept)
        if site is not None:
            sites.append(site)
    return sites


def _match(graph, out, writer, readers, kept) -> AttentionSite | None:
    """The site whose last op is `out` (probs @ v), or None."""
    def only(buf: str, *users: Operation) -> bool:
        """`buf` is an intermediate read by exactly `users`."""
        return buf not in kept and graph.buffers[buf].role == "intermediate" and \
            {id(o) for o in readers.get(buf, [])} == {id(u) for u in users}

    def made_by(buf: str, kind: str) -> Operation | None:
        op = writer.get(buf)
        return op if op is not None and op.op == kind and not op.loops and \
            not op.index_inputs else None

    def guarded(buf: str, scalar: float) -> tuple[Operation | None, Operation | None]:
        """(the guard maximum(x, scalar) writing `buf`, or None; the op under it)."""
        op = writer.get(buf)
        if op is not None and op.op == "maximum" and _scalar(op) == scalar:
            return op, writer.get(op.inputs[0].buffer)
        return None, op

    if out.op != "batchmatmul" or out.loops or len(out.reduced) != 1 or out.index_inputs:
        return None
    probs = made_by(out.inputs[0].buffer, "realdiv")
    if probs is None or len(probs.inputs) != 2 or not only(probs.output.buffer, out):
        return None
    exp = made_by(probs.inputs[0].buffer, "exp")
    sum_guard, total = guarded(probs.inputs[1].buffer, 1.0)
    if exp is None or total is None or total.op != "sum" or len(total.reduced) != 1 or \
            total.inputs[0].buffer != exp.output.buffer:
        return None
    shifted = made_by(exp.inputs[0].buffer, "sub")
    if shifted is None or len(shifted.inputs) != 2:
        return None
    x_buf = shifted.inputs[0].buffer
    max_guard, top = guarded(shifted.inputs[1].buffer, -FLT_MAX)
    if top is None or top.op != "max" or len(top.reduced) != 1 or \
            top.inputs[0].buffer != x_buf:
        return None
    uses_ok = (only(exp.output.buffer, total, probs) and only(shifted.output.buffer, exp)
               and only(x_buf, top, shifted)
               and only(total.output.buffer, sum_guard or probs)
               and (sum_guard is None or only(sum_guard.output.buffer, probs))
               and only(top.output.buffer, max_guard or shifted)
               and (max_guard is None or only(max_guard.output.buffer, shifted)))
    if not uses_ok:
        return None
    chain, scores = _chain_back(graph, writer.get(x_buf), writer, only)
    if scores is None:
        return None
    x = graph.buffers[x_buf]
    out_buf = graph.buffers[out.output.buffer]
    rows = x.host_size[:-1] + (1,)
    if len(x.host_size) < 2 or graph.buffers[top.output.buffer].host_size != rows or \
            graph.buffers[total.output.buffer].host_size != rows or \
            out_buf.host_size[:-1] != x.host_size[:-1]:
        return None
    members = [scores, *chain, top, *([max_guard] if max_guard else []), shifted, exp,
               total, *([sum_guard] if sum_guard else []), probs, out]
    if not all(_dim_vars(graph.buffers[op.output.buffer], op) is not None
               for op in members):
        return None
    masks = _mask_ops(graph, chain, writer, only, x.host_size[-2:])
    members += masks
    gathers = [g for g in (_gather_of(graph, scores, writer, only),
                           _gather_of(graph, out, writer, only)) if g is not None]
    members += gathers
    order = {id(op): i for i, op in enumerate(graph.ops)}
    return AttentionSite(
        tuple(m.name for m in sorted(members, key=lambda m: order[id(m)])), scores.name,
        tuple(c.name for c in chain), top.name, max_guard.name if max_guard else None,
        shifted.name, exp.name, total.name, sum_guard.name if sum_guard else None,
        probs.name, out.name, x.host_size[-2], x.host_size[-1],
        x.host_size[-3] if len(x.host_size) >= 3 else 1, dict(scores.ranges)[scores.reduced[0]], out_buf.host_size[-1],
        tuple(g.name for g in gathers), out.source or "", tuple(m.name for m in masks))


def _mask_ops(graph, chain: list[Operation], writer, only, rows_keys) -> list[Operation]:
    """The elementwise ops that compute the chain's [.., S, L] operands (and theirs), each
    read by one op of the site only; smaller operands (position vectors) stay outside."""
    found: list[Operation] = []
    todo = list(chain)
    while todo:
        user = todo.pop()
        for a in user.inputs:
            op = writer.get(a.buffer)
            buf = graph.buffers[a.buffer]
            if op is None or op in chain or op in found or op.reduced or op.index_inputs \
                    or op.loops or op.op == "batchmatmul" or buf.host_size[-2:] != rows_keys \
                    or not only(a.buffer, user) or _dim_vars(buf, op) is None:
                continue
            found.append(op)
            todo.append(op)
    return found


def _gather_of(graph, matmul: Operation, writer, only) -> Operation | None:
    """The gathering copy (an `identity` reading through index tensors) that writes the
    second operand of `matmul` and nothing else reads, or None."""
    op = writer.get(matmul.inputs[1].buffer)
    if op is None or op.op != "identity" or not op.index_inputs or op.loops or \
            not only(op.output.buffer, matmul) or \
            _dim_vars(graph.buffers[op.output.buffer], op) is None:
        return None
    return op


def _scalar(op: Operation) -> float | None:
    """The scalar of a one-input binary op (`scalar` constant), else None."""
    if len(op.inputs) != 1 or "scalar" not in op.constants:
        return None
    return float(op.constants["scalar"])


def _chain_back(graph, op, writer, only) -> tuple[list[Operation], Operation | None]:
    """From the op writing x back to q @ kᵀ: the elementwise ops in program order and the
    batchmatmul; (…, None) when the path holds anything else."""
    chain: list[Operation] = []
    x_shape = graph.buffers[op.output.buffer].host_size if op is not None else None
    while op is not None and not op.loops:
        if op.op == "batchmatmul":
            if len(op.reduced) != 1 or op.index_inputs or \
                    graph.buffers[op.output.buffer].host_size != x_shape:
                return chain, None
            return chain[::-1], op
        if op.op not in CHAIN_OPS or op.reduced or op.index_inputs:
            return chain, None
        carried = [a for a in op.inputs if a.buffer in writer and
                   graph.buffers[a.buffer].host_size == x_shape and
                   writer[a.buffer].op in CHAIN_OPS + ("batchmatmul",)]
        if len(carried) != 1 or not only(carried[0].buffer, op):
            return chain, None
        chain.append(op)
        op = writer[carried[0].buffer]
    return chain, None


def _dim_vars(buf: Buffer, op: Operation) -> tuple[str | None, ...] | None:
    """Per host dim of `buf` (written by `op`), the var the output index walks it with
    (None: a size-1 dim), or None when a dim is not one plain var."""
    out = []
    coords = host_coordinates(buf.host_size, buf.host_strides, op.output.index)
    for size, c in zip(buf.host_size, coords):
        c = simplify_lin(c, op.var_ranges)
        atom = c.as_atom()
        if size == 1 and c.is_const:
            out.append(None)
        elif isinstance(atom, Var):
            out.append(atom.name)
        else:
            return None
    return tuple(out)


# --- which key tiles a query tile needs -----------------------------------------------------


def key_spans(graph: Graph, site: AttentionSite, tiles: "FlashTiles"
              ) -> list[range] | None:
    """Per query tile, the key tiles holding any key its queries attend to, when the chain
    masks by `where3(keep, x, -inf)` with `keep` a comparison of a key-position vector with a
    query-position vector (is_causal's lowering) or a constant; None when that is not known
    at compile time (every key tile is then needed). A tile outside the range masks every
    score of it to -inf, so skipping it changes no max, sum or product: exact."""
    ops = {op.name: op for op in graph.ops if op.name in site.ops}
    writer = {ops[n].output.buffer: ops[n] for n in site.masks}
    nq, nk = tiles.counts(site)
    for n in site.chain:
        op = ops[n]
        keep = _masked_by(graph, op, writer, tiles, nq, nk)
        if keep is None:
            continue
        if keep is False:
            return None
        spans = []
        for row in keep:
            needed = np.flatnonzero(row)
            lo, hi = (int(needed[0]), int(needed[-1]) + 1) if needed.size else (0, 0)
            if needed.size and needed.size != hi - lo:
                return None                  # a gap: not one range
            spans.append(range(lo, hi))
        return spans
    return None


def _masked_by(graph, op: Operation, writer, tiles, nq: int, nk: int):
    """[nq, nk] keep-by-tile of a masking op of the chain; None for an op that masks
    nothing; False for a mask not known at compile time."""
    if op.op == "where3" and len(op.inputs) == 3 and \
            _constant_scalar(graph, op.inputs[2].buffer) == -math.inf:
        cond = op.inputs[0].buffer
        keep = _keep_by_tile(graph, writer.get(cond), cond, tiles, nq, nk, writer=writer)
        return False if keep is None else keep
    if op.op == "add" and len(op.inputs) == 2:
        constant = [a.buffer for a in op.inputs if a.buffer in graph.constants]
        if not constant:
            return False                        # a runtime additive mask
        values = np.asarray(graph.constants[constant[0]])
        if values.ndim < 2:
            return None                         # a scalar bias masks nothing
        keep = _constant_by_tile(values != -np.inf, tiles, nq, nk)
        return False if keep is None else keep
    return None


def _constant_scalar(graph: Graph, name: str) -> float | None:
    values = graph.constants.get(name)
    if values is None or np.asarray(values).size != 1:
        return None
    return float(np.asarray(values).reshape(()))


def _keep_by_tile(graph, op, cond: str, tiles, nq: int, nk: int,
                  values=None, writer=None, must: bool = False) -> np.ndarray | None:
    """[nq, nk]: whether tile (i, j) may keep a score (`_may_hold`'s interval evaluation of
    the mask), or None when the mask is not known at compile time. A tile shown to keep
    nothing is skipped; one that may keep something is run (masked, which is exact)."""
    if op is None:
        values = graph.constants.get(cond) if values is None else values
        return None if values is None else \
            _constant_by_tile(np.asarray(values), tiles, nq, nk, must)
    value = _Intervals(graph, writer or {}, tiles, nq, nk, must).of(cond)
    return value if value is None or value.dtype == bool else None


def _constant_by_tile(values: np.ndarray, tiles, nq: int, nk: int,
                      must: bool = False) -> np.ndarray | None:
    """Whether each tile pair of a constant mask keeps any score (`must`: every score)."""
    keep = values.astype(bool)
    if keep.ndim < 2:
        return None
    keep = keep.reshape(-1, *keep.shape[-2:])
    keep = keep.all(axis=0) if must else keep.any(axis=0)
    if keep.shape != (nq * tiles.queries, nk * tiles.keys):
        return None
    tiled = keep.reshape(nq, tiles.queries, nk, tiles.keys)
    return tiled.all(axis=(1, 3)) if must else tiled.any(axis=(1, 3))


class _Intervals:
    """Per (query tile, key tile), the interval of a mask expression's values: a position
    vector read along the query or key var (its least and greatest value in the tile), sums
    and differences of such, comparisons (bool: may it hold anywhere in the tile), and /
    or of those (`minimum` / `maximum` of bools). Values are [nq, nk] arrays: (lo, hi) for
    numbers, may-hold for bools (dtype bool)."""

    def __init__(self, graph, writer, tiles, nq: int, nk: int, must: bool = False):
        self.g, self.writer, self.tiles, self.nq, self.nk = graph, writer, tiles, nq, nk
        self.must = must       # bools say whether a comparison holds everywhere in the tile

    def of(self, name: str):
        op = self.writer.get(name)
        if op is None:
            return None
        qv, kv = _dim_vars(self.g.buffers[op.output.buffer], op)[-2:]
        args = [self.operand(a, qv, kv) for a in op.inputs]
        if any(x is None for x in args):
            return None
        if "scalar" in op.constants:
            c = float(op.constants["scalar"])
            scalar = (np.full((self.nq, self.nk), c),) * 2
            args = [scalar, *args] if op.constants.get("scalar_side") == "lhs" else \
                [*args, scalar]
        if len(args) != 2:
            return None
        a, b = args
        if op.op in _COMPARE and not _is_bool(a) and not _is_bool(b):
            return (_COMPARE_ALL if self.must else _COMPARE)[op.op](a, b)
        if op.op in ("minimum", "maximum") and _is_bool(a) and _is_bool(b):
            return a & b if op.op == "minimum" else a | b
        if op.op in ("add", "sub") and not _is_bool(a) and not _is_bool(b) and \
                "alpha" not in op.constants:
            if op.op == "add":
                return a[0] + b[0], a[1] + b[1]
            return a[0] - b[1], a[1] - b[0]
        return None

    def operand(self, access: Access, qv: str, kv: str):
        if access.buffer in self.writer:
            return self.of(access.buffer)
        values = self.g.constants.get(access.buffer)
        atoms = {x.name for x in access.index.free_atoms() if isinstance(x, Var)}
        if values is None or len(atoms) != 1 or access.index != var(next(iter(atoms))):
            return None
        vector = np.asarray(values).reshape(-1).astype(np.float64)
        if atoms == {qv}:
            lo, hi = _tile_bounds(vector, self.tiles.queries)
            return np.repeat(lo[:, None], self.nk, 1), np.repeat(hi[:, None], self.nk, 1)
        if atoms == {kv}:
            lo, hi = _tile_bounds(vector, self.tiles.keys)
            return np.repeat(lo[None, :], self.nq, 0), np.repeat(hi[None, :], self.nq, 0)
        return None


# does `a <op> b` hold for every pair of values in the two intervals
_COMPARE_ALL = {"lesserequal": lambda a, b: a[1] <= b[0], "lesserthan": lambda a, b: a[1] < b[0],
                "greaterequal": lambda a, b: a[0] >= b[1],
                "greaterthan": lambda a, b: a[0] > b[1]}


def _is_bool(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == bool


# may `a <op> b` hold for some pair of values in the two intervals
_COMPARE = {"lesserequal": lambda a, b: a[0] <= b[1], "lesserthan": lambda a, b: a[0] < b[1],
            "greaterequal": lambda a, b: a[1] >= b[0], "greaterthan": lambda a, b: a[1] > b[0]}


def _tile_bounds(vector: np.ndarray, tile: int) -> tuple[np.ndarray, np.ndarray]:
    """Per tile of `tile` entries, the least and greatest value."""
    tiled = vector.reshape(-1, tile)
    return tiled.min(axis=1), tiled.max(axis=1)


def span_of(spans: list[range], nk: int) -> "TripSpan | None":
    """The affine trip span (start a·i + b, stop c·i + d, clamped to [0, nk]) that gives
    exactly `spans` per query tile i, or None (rectangular) when every tile is needed or no
    affine line fits."""
    if all(sp == range(0, nk) for sp in spans):
        return None
    lines = []
    for ends in ([sp.start for sp in spans], [sp.stop for sp in spans]):
        line = _fit(ends, nk)
        if line is None:
            return None
        lines.append(line)
    span = TripSpan(*lines)
    if any(span.trips(i, nk) != sp and not (len(sp) == 0 and len(span.trips(i, nk)) == 0)
           for i, sp in enumerate(spans)):
        return None
    return span


def masking_ops(graph: Graph, site: AttentionSite) -> list[str]:
    """The chain's `where3(keep, x, -inf)` ops (the ops that apply a boolean mask)."""
    ops = {op.name: op for op in graph.ops if op.name in site.chain}
    return [n for n in site.chain if ops[n].op == "where3" and len(ops[n].inputs) == 3
            and _constant_scalar(graph, ops[n].inputs[2].buffer) == -math.inf]


def _split_bodies(graph, site: AttentionSite, tiles, span, nq: int, nk: int) -> list[tuple]:
    """The key loops of a masked attention: the tiles each query tile needs split into those
    its mask keeps whole (run without the mask ops) and the edges before and after them
    (run masked), each family a loop with its own affine span; one masked loop over the
    needed tiles when the families are not affine (or with paged K/V, whose gathers share
    the key loop with their readers)."""
    single = [("", span, False)]
    masking = masking_ops(graph, site)
    if len(masking) != 1 or site.gathers:
        return single
    op = next(o for o in graph.ops if o.name == masking[0])
    writer = {o.output.buffer: o for o in graph.ops if o.name in site.masks}
    cond = op.inputs[0].buffer
    some = _keep_by_tile(graph, writer.get(cond), cond, tiles, nq, nk, writer=writer)
    every = _keep_by_tile(graph, writer.get(cond), cond, tiles, nq, nk, writer=writer,
                          must=True)
    if some is None or every is None or not every.any():
        return single
    families: list[list[range]] = [[], [], []]
    for i in range(nq):
        needed = np.flatnonzero(some[i])
        lo, hi = (int(needed[0]), int(needed[-1]) + 1) if needed.size else (0, 0)
        whole = np.flatnonzero(every[i][lo:hi]) + lo
        f_lo, f_hi = (int(whole[0]), int(whole[-1]) + 1) if whole.size else (lo, lo)
        if whole.size and whole.size != f_hi - f_lo:
            return single
        for family, r in zip(families, (range(lo, f_lo), range(f_lo, f_hi), range(f_hi, hi))):
            family.append(r)
    bodies = []
    for suffix, family, elide in zip((".edge0", ".whole", ".edge1"), families,
                                     (False, True, False)):
        if all(len(r) == 0 for r in family):
            continue
        fitted = _fit_span(family, nk)
        if fitted is None:
            return single
        bodies.append((suffix, fitted, elide))
    return bodies


def _fit_span(ranges: list[range], nk: int) -> "TripSpan | None":
    """The affine trip span giving exactly `ranges` (an empty range: no trips), or None."""
    lines = []
    for ends in ([r.start for r in ranges], [r.stop for r in ranges]):
        line = _fit(ends, nk)
        if line is None:
            return None
        lines.append(line)
    span = TripSpan(*lines)
    for i, r in enumerate(ranges):
        got = span.trips(i, nk)
        if (list(got) if len(got) else []) != list(r):
            return None
    return span


def _fit(ends: list[int], nk: int) -> tuple[int, int] | None:
    """A line a·i + b that clamped to [0, nk] gives `ends`, from two points where the ends
    are strictly inside (or a constant)."""
    inside = [(i, e) for i, e in enumerate(ends) if 0 < e < nk]
    if len(inside) < 2:
        b = ends[0] if len(set(ends)) == 1 else None
        if b is not None:
            return 0, b
        if len(inside) == 1:           # one free point: a slope of 1 tile per tile
            i, e = inside[0]
            return 1, e - i
        return None
    (i0, e0), (i1, e1) = inside[0], inside[1]
    if (e1 - e0) % (i1 - i0):
        return None
    a = (e1 - e0) // (i1 - i0)
    return a, e0 - a * i0


# --- the rewrite ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FlashTiles:
    """Rows of a query tile, keys of a key tile, and heads of a head tile (0: every head, no
    head loop). A head loop outside the query loop lets a query tile hold more rows of fewer
    heads: the cores sharing a head then read each K/V tile once between them (the broadcast
    cohort), so K and V are re-read once per query tile of S / query rows, not of the LX."""

    queries: int
    keys: int
    heads: int = 0

    def counts(self, site: AttentionSite) -> tuple[int, int]:
        return site.queries // self.queries, site.keys // self.keys


def rewrite(graph: Graph, site: AttentionSite, tiles: FlashTiles, key: str,
            check: bool = True) -> dict:
    """Replace `site` by its flash form in `graph` (loop keys `<key>.h`, `<key>.0`, `<key>.1`
    for the head, query and key tiles); returns the report row. `check`: prove every full
    buffer's tiles move by constant whole-stick steps (ConfigError if not); pricing a
    candidate skips it and the rewrite that keeps one proves it."""
    return _Rewrite(graph, site, tiles, key).run(check)


class _Rewrite:
    """One site's rewrite. Depth 1 is the query-tile level (no loop when there is one query
    tile: a decode step), depth 2 the key loop inside it."""

    def __init__(self, graph: Graph, site: AttentionSite, tiles: FlashTiles, key: str):
        self.g, self.site, self.tiles, self.key = graph, site, tiles, key
        self.ops = {op.name: op for op in graph.ops if op.name in site.ops}
        self.nq, self.nk = tiles.counts(site)
        scores = graph.buffers[self.ops[site.scores].output.buffer].host_size
        self.H = scores[-3] if len(scores) >= 3 else 1
        self.heads = tiles.heads or self.H
        self.nh = self.H // self.heads
        if self.nh > 1 and site.gathers:
            raise ConfigError(f"attention of {site.named}: a head tile of {self.heads} "
                              f"needs K and V read in place, and they are gathered (paged); "
                              f"leave heads out")
        # the key tiles each query tile needs (causal: those up to the diagonal), when the
        # masks say so at compile time; None: all of them
        spans = key_spans(graph, site, tiles) if self.nq > 1 else None
        self.span = span_of(spans, self.nk) if spans is not None else None
        self.needed = self.span
        # the where3 ops of the chain that apply a mask, and the key loops to emit: (op name
        # suffix, span, whether its tiles keep every score so the masking is left out)
        self.masking = masking_ops(graph, site)
        self.bodies = _split_bodies(graph, site, tiles, self.span, self.nq, self.nk) \
            if spans is not None and self.masking else [("", self.span, False)]
        self.tile_of: dict[str, Buffer] = {}     # full buffer -> the per-tile buffer replacing it
        self.body_key = ""                       # the key loop being emitted (`bodies`)
        self.sparse: dict[str, str] = {}         # block table -> its one-entry-per-stick copy
        self.before: list[Operation] = []        # ops ahead of the loops (those copies)
        self.added: list[str] = []

    # --- loops, tiles and indices -------------------------------------------------------------

    def loops(self, qv: str | None, kv: str | None, depth: int,
              hv: str | None = None) -> tuple[Loop, ...]:
        """An op's loops: the head tiles (when more than one), the query tiles (when more
        than one), and at depth 2 the key tiles, whose trip span follows the query loop."""
        heads = (Loop(self.nh, (hv,) if hv else (), f"{self.key}.h"),) if self.nh > 1 else ()
        outer = (Loop(self.nq, (qv,) if qv else (), f"{self.key}.0"),) if self.nq > 1 else ()
        inner = (Loop(self.nk, (kv,) if kv else (), f"{self.key}.1{self.body_key}",
                      self.span),) if depth == 2 else ()
        return heads + outer + inner

    def head_var(self, op: Operation) -> str | None:
        """The var `op` walks the heads with (its output's dim -3), if the site has heads."""
        buf = self.g.buffers[op.output.buffer]
        if self.H == 1 or len(buf.host_size) < 3 or buf.host_size[-3] != self.H:
            return None
        return _dim_vars(buf, op)[-3]

    def shape(self, full: tuple[int, ...], last: int) -> tuple[int, ...]:
        """One tile of a [.., H, S, X] buffer: a head tile, a query tile, `last`."""
        lead = list(full[:-2])
        if len(lead) >= 1 and len(full) >= 3 and full[-3] == self.H:
            lead[-1] = self.heads
        return (*lead, self.tiles.queries, last)

    def tiled(self, op: Operation, qv: str | None, kv: str | None) -> Operation:
        """`op` over one (head, query, key) tile inside the loops, its accesses to the
        site's intermediates moved to their per-tile buffers."""
        hv = self.head_var(op)
        ranges = tuple((v, self.tiles.queries if v == qv else self.tiles.keys if v == kv
                        else self.heads if v == hv else n) for v, n in op.ranges)
        return self.retarget(replace(op, ranges=ranges, loops=self.loops(qv, kv, 2, hv)))

    def retarget(self, op: Operation) -> Operation:
        def move(a: Access) -> Access:
            tile = self.tile_of.get(a.buffer)
            if tile is None:
                return a
            full = self.g.buffers[a.buffer]
            return Access(tile.name, retile_index(full, (0,) * len(full.host_size),
                                                  tile.host_size, a.index, op.var_ranges))
        return replace(op, inputs=tuple(map(move, op.inputs)), output=move(op.output))

    def tile_buffer(self, base: str, like: Buffer, shape: tuple[int, ...],
                    dtype: str) -> Buffer:
        buf = Buffer(self.g.fresh_name(base), shape, dtype, "intermediate", source=like.source,
                     layout=tile_buffer_layout(like, shape, dtype), per_tile=True)
        self.added.append(buf.name)
        return self.g.add_buffer(buf)

    def op(self, name: str, kind: str, inputs, output: Access, ranges, depth: int,
           qv: str | None, constants: dict | None = None) -> Operation:
        out = self.ops[self.site.out]
        return Operation(name, kind, ranges, tuple(inputs), output, constants=constants or {},
                         source=out.source, node=out.node, scope=out.scope,
                         loops=self.loops(qv, None, depth, self.head_var(out)))

    # --- the whole rewrite --------------------------------------------------------------------

    def run(self, check: bool = True) -> dict:
        g, s, ops = self.g, self.site, self.ops
        out = ops[s.out]
        out_buf = g.buffers[out.output.buffer]
        *lead, qv, dv = _dim_vars(out_buf, out)
        sizes = dict(zip((*lead, qv, dv), out_buf.host_size))
        rows = (*lead, qv)
        hv = self.head_var(out)
        row_ranges = tuple((v, self.tiles.queries if v == qv else self.heads if v == hv
                            else sizes[v]) for v in rows if v is not None)
        acc_ranges = row_ranges + (((dv, sizes[dv]),) if dv else ())
        row_buf = g.buffers[ops[s.row_max].output.buffer]
        scores_buf = g.buffers[ops[s.scores].output.buffer]
        for n in (s.scores, *s.chain, s.shifted, s.exp):        # [.., Tq, Tk] tiles
            full = g.buffers[ops[n].output.buffer]
            self.tile_of[full.name] = self.tile_buffer(
                f"{full.name}__tile", full, self.shape(full.host_size, self.tiles.keys),
                full.host_dtype)
        for n in (s.row_max, s.row_sum):                         # [.., Tq, 1] tiles
            full = g.buffers[ops[n].output.buffer]
            self.tile_of[full.name] = self.tile_buffer(
                f"{full.name}__tile", full, self.shape(full.host_size, 1), "float32")
        f32 = "float32"
        state = self.shape(row_buf.host_size, 1)
        wide = self.shape(out_buf.host_size, out_buf.host_size[-1])
        base = out.name

        def row_tile(name: str) -> Buffer:
            return self.tile_buffer(f"{base}__flash_{name}", row_buf, state, f32)

        def wide_tile(name: str) -> Buffer:
            return self.tile_buffer(f"{base}__flash_{name}", out_buf, wide, f32)

        m, l, mn, dm, alpha, lt = (row_tile(n) for n in
                                   ("max", "sum", "newmax", "maxstep", "rescale", "sumscaled"))
        acc, pv, at = (wide_tile(n) for n in ("acc", "pv", "accscaled"))

        def at_rows(buf: Buffer) -> Access:
            return Access(buf.name, _tile_index(buf, (*rows, None)))

        def at_wide(buf: Buffer) -> Access:
            return Access(buf.name, _tile_index(buf, (*rows, dv)))

        def row_op(name, kind, inputs, output, depth=2, constants=None):
            return self.op(name, kind, inputs, output, row_ranges, depth, qv, constants)

        def wide_op(name, kind, inputs, output, depth=2, constants=None):
            return self.op(name, kind, inputs, output, acc_ranges, depth, qv, constants)

        seq = [row_op(f"{m.name}.fill", "fill", (), at_rows(m), 1, {"value": -FLT_MAX}),
               row_op(f"{l.name}.fill", "fill", (), at_rows(l), 1, {"value": 0.0}),
               wide_op(f"{acc.name}.fill", "fill", (), at_wide(acc), 1, {"value": 0.0})]
        scores = ops[s.scores]
        s_dims = _dim_vars(scores_buf, scores)
        sq, sk = s_dims[-2], s_dims[-1]
        copy, scores = self.query_copy(scores, s_dims, scores_buf)
        seq.append(copy)
        for name, reader, kv in ((n, c, k) for n in s.gathers
                                 for c, k in ((scores, sk), (out, out.reduced[0]))
                                 if c.inputs[1].buffer == ops[n].output.buffer):
            seq.append(self.gather_tile(ops[name], reader, kv))
        for n in s.masks:
            o = ops[n]
            full = g.buffers[o.output.buffer]
            self.tile_of[full.name] = self.tile_buffer(
                f"{full.name}__tile", full, self.shape(full.host_size, self.tiles.keys),
                full.host_dtype)
        def inner_ops(elide: bool) -> list[Operation]:
            """One key loop's ops; `elide`: its tiles keep every score, so the masks and
            the where3 applying them are left out (x is the unmasked scores)."""
            ops_ = []
            masking = set(self.masking) if elide else set()
            saved = dict(self.tile_of)
            for n in masking:
                w = ops[n]
                self.tile_of[w.output.buffer] = self.tile_of[w.inputs[1].buffer]
            if not elide:
                for n in sorted(s.masks, key=list(s.ops).index):
                    o = ops[n]
                    d = _dim_vars(g.buffers[o.output.buffer], o)
                    ops_.append(self.tiled(o, d[-2], d[-1]))
            ops_.append(self.tiled(scores, sq, sk))
            for n in s.chain:
                if n in masking:
                    continue
                o = ops[n]
                d = _dim_vars(g.buffers[o.output.buffer], o)
                ops_.append(self.tiled(o, d[-2], d[-1]))
            top = ops[s.row_max]
            ops_.append(self.tiled(top, _dim_vars(row_buf, top)[-2], top.reduced[0]))
            tm = self.tile_of[top.output.buffer]
            ops_ += [row_op(mn.name, "maximum", (at_rows(m), at_rows(tm)), at_rows(mn)),
                     row_op(dm.name, "sub", (at_rows(m), at_rows(mn)), at_rows(dm)),
                     row_op(alpha.name, "exp", (at_rows(dm),), at_rows(alpha))]
            # x - max reads the running max instead of this tile's (or the guarded) max
            shifted = ops[s.shifted]
            d = _dim_vars(g.buffers[shifted.output.buffer], shifted)
            self.tile_of[shifted.inputs[1].buffer] = mn
            ops_.append(self.tiled(shifted, d[-2], d[-1]))
            e = ops[s.exp]
            ops_.append(self.tiled(e, d[-2], d[-1]))
            total = ops[s.row_sum]
            ops_.append(self.tiled(total, _dim_vars(g.buffers[total.output.buffer],
                                                    total)[-2], total.reduced[0]))
            ts = self.tile_of[total.output.buffer]
            ops_ += [row_op(lt.name, "mul", (at_rows(l), at_rows(alpha)), at_rows(lt)),
                     row_op(f"{l.name}.update", "add", (at_rows(lt), at_rows(ts)), at_rows(l))]
            # probs @ v becomes exp @ v into an fp32 tile (the division waits for the end)
            self.tile_of[out_buf.name] = pv
            product = replace(out, name=pv.name, inputs=(Access(e.output.buffer,
                                                                out.inputs[0].index),
                                                         *out.inputs[1:]))
            ops_.append(self.tiled(product, qv, out.reduced[0]))
            ops_ += [wide_op(at.name, "mul", (at_wide(acc), at_rows(alpha)), at_wide(at)),
                     wide_op(f"{acc.name}.update", "add", (at_wide(at), at_wide(pv)),
                             at_wide(acc)),
                     row_op(f"{m.name}.update", "identity", (at_rows(mn),), at_rows(m))]
            self.tile_of = saved
            return ops_

        for suffix, span, elide in self.bodies:
            self.span, self.body_key = span, suffix
            seq += [replace(o, name=o.name + suffix) for o in inner_ops(elide)]
        divisor = l
        if s.safe:
            divisor = row_tile("sumsafe")
            seq.append(row_op(divisor.name, "maximum", (at_rows(l),), at_rows(divisor), 1,
                              {"scalar": 1.0, "scalar_side": "rhs"}))
        seq.append(wide_op(out.name, "realdiv", (at_wide(acc), at_rows(divisor)), out.output, 1))
        if check:
            self.check_moves(seq)
        self.splice(self.before + seq)
        return {"op": out.name, "node": out.node, "source": out.source,
                "queries": s.queries, "keys": s.keys, "query_tile": self.tiles.queries,
                "key_tile": self.tiles.keys, "head_tile": self.heads,
                "loops": [self.nq, self.nk], "head_loop": self.nh,
                "key_span": None if self.needed is None else
                {"start": list(self.needed.start), "stop": list(self.needed.stop)},
                "key_loops": [{"loop": f"{self.key}.1{suffix}", "masked": not elide,
                               "span": None if span is None else
                               {"start": list(span.start), "stop": list(span.stop)}}
                              for suffix, span, elide in self.bodies],
                "safe_softmax": s.safe, "per_tile": list(self.added)}

    def gather_tile(self, gather: Operation, reader: Operation, kv: str) -> Operation:
        """The pages one key tile of `reader` reads, gathered into a per-tile buffer inside
        the key loop (its index tensor's tile moves with the loop; the pool stays put): the
        tile's box of the gathered buffer must be whole along every dim but one, which
        advances by its own extent per trip, and the gather's var of that dim is tiled."""
        full = self.g.buffers[gather.output.buffer]
        ranges = tuple((v, self.tiles.queries if v == _dim_vars(
            self.g.buffers[reader.output.buffer], reader)[-2] else
            self.tiles.keys if v == kv else n) for v, n in reader.ranges)
        probe = replace(reader, ranges=ranges)
        index = reader.inputs[1].index
        box = host_box(full, probe, index)
        step = host_advance(full, probe, index, kv, self.tiles.keys)
        moving = [d for d, a in enumerate(step or ()) if a]
        dims = _dim_vars(full, gather)
        if step is None or len(moving) != 1 or any(
                (lo, hi) != (0, n) for d, ((lo, hi), n) in enumerate(zip(box, full.host_size))
                if d != moving[0]):
            raise ConfigError(f"attention of {self.site.named}: its key tiles of "
                              f"{self.tiles.keys} do not read whole pages of "
                              f"'{full.name}'; choose a key tile that is a multiple of the "
                              f"page size")
        d = moving[0]
        extent = box[d][1] - box[d][0]
        if box[d][0] != 0 or step[d] != extent or full.host_size[d] != extent * self.nk:
            raise ConfigError(f"attention of {self.site.named}: its key tiles of "
                              f"{self.tiles.keys} do not read whole pages of "
                              f"'{full.name}'; choose a key tile that is a multiple of the "
                              f"page size")
        tile = self.tile_buffer(f"{full.name}__tile", full,
                                tuple(extent if i == d else n
                                      for i, n in enumerate(full.host_size)),
                                full.host_dtype)
        self.tile_of[full.name] = tile
        gather = self.one_index_per_stick(gather, extent)
        gv = dims[d]
        tiled = replace(gather, ranges=tuple((v, extent if v == gv else n)
                                             for v, n in gather.ranges),
                        loops=self.loops(None, gv, 2))
        return self.retarget(tiled)

    def one_index_per_stick(self, gather: Operation, per_trip: int) -> Operation:
        """`gather` reading, in place of each block table whose key-tile slice (`per_trip`
        entries) is not whole sticks, a stick-sparse copy of it (one entry per 128-byte
        stick, made once before the loops): a loop's tiles move by whole sticks (DESIGN §5)."""
        inputs, renames = [], {}
        for a in gather.index_inputs:
            buf = self.g.buffers[a.buffer]
            if per_trip % buf.layout.elems_per_stick == 0:
                inputs.append(a)
                continue
            if a.buffer not in self.sparse:
                copy = Buffer(self.g.fresh_name(f"{a.buffer}__per_stick"), buf.host_size,
                              buf.host_dtype, "intermediate", source=buf.source,
                              layout=stick_layout(buf.host_size, buf.host_strides,
                                                  buf.host_dtype,
                                                  [*range(len(buf.host_size)), SPARSE]))
                self.g.add_buffer(copy)
                whole = _tile_index(buf, tuple(f"c{i}" for i in range(len(buf.host_size))))
                ranges = tuple((f"c{i}", n) for i, n in enumerate(buf.host_size) if n > 1)
                self.before.append(Operation(copy.name, "ReStickifyOpHBM", ranges,
                                             (Access(buf.name, whole),),
                                             Access(copy.name, whole), source=gather.source,
                                             node=gather.node, scope=gather.scope))
                self.sparse[a.buffer] = copy.name
            inputs.append(Access(self.sparse[a.buffer], a.index))
            renames[Indirect(a.buffer)] = indirect(self.sparse[a.buffer])
        if not renames:
            return gather
        return replace(gather, index_inputs=tuple(inputs),
                       inputs=tuple(Access(x.buffer, substitute(x.index, renames))
                                    for x in gather.inputs))

    def query_copy(self, scores: Operation, dims, scores_buf: Buffer
                   ) -> tuple[Operation, Operation]:
        """One query tile of q copied once per query tile into a per-tile buffer (so the key
        loop reads it from LX), and q @ kᵀ reading that copy."""
        *lead, qv, kv = dims
        (ev,) = scores.reduced
        sizes = dict(scores.ranges)
        q_tile = self.tile_buffer(f"{scores.inputs[0].buffer}__qtile", scores_buf,
                                  self.shape(scores_buf.host_size, sizes[ev]),
                                  self.g.buffers[scores.inputs[0].buffer].host_dtype)
        index = _tile_index(q_tile, (*lead, qv, ev))
        hv = self.head_var(scores)
        ranges = tuple((v, self.tiles.queries if v == qv else self.heads if v == hv else n)
                       for v, n in scores.ranges if v != kv)
        copy = Operation(f"{q_tile.name}.copy", "identity", ranges, (scores.inputs[0],),
                         Access(q_tile.name, index), source=scores.source, node=scores.node,
                         scope=scores.scope, loops=self.loops(qv, None, 1, hv))
        return copy, replace(scores, inputs=(Access(q_tile.name, index), *scores.inputs[1:]))

    def check_moves(self, seq: list[Operation]) -> None:
        """Every full buffer the loops read or write moves by one constant device-address
        step per trip and each trip's tile is exactly the untiled access there (DESIGN §5;
        coarse tiling's own proofs); else the tiles are refused (a head tile that splits a
        K/V group, a key tile that splits a stick)."""
        full_ranges = {}
        for op in seq:
            if not op.loops:
                continue
            mult = {v: loop.count for loop in op.loops for v in loop.tiled}
            full_ranges = Ranges({Var(v): (0, n * mult.get(v, 1) - 1) for v, n in op.ranges})
            for _, a in op.accesses():
                buf = self.g.buffers[a.buffer]
                if buf.per_tile or any(isinstance(leaf, Indirect)
                                       for leaf in a.index.free_atoms()):
                    continue
                for loop in op.loops:
                    if loop.tiled and device_advance(
                            buf, op, a.index, full_ranges, loop.tiled[0],
                            dict(op.ranges)[loop.tiled[0]], loop.count) is None:
                        self.refuse(op, buf, "moves by other than one constant step per trip")
                problem = tiled_access_problem(buf, op, a)
                if problem is not None:
                    self.refuse(op, buf, problem)

    def refuse(self, op: Operation, buf: Buffer, why: str) -> None:
        t = self.tiles
        raise ConfigError(f"attention of {self.site.named}: with tiles of {t.queries} "
                          f"queries x {t.keys} keys x {self.heads} heads, '{buf.name}' in op "
                          f"{op.name} {why}; choose tiles of whole sticks and whole groups of "
                          f"heads")

    def splice(self, seq: list[Operation]) -> None:
        """The site's ops leave `graph.ops`; `seq` takes the place of the last of them (every
        operand the site reads from outside is written before it). The full intermediates
        they wrote are dropped."""
        g, names = self.g, set(self.site.ops)
        at = max(i for i, op in enumerate(g.ops) if op.name in names)
        dropped = {op.output.buffer for op in g.ops if op.name in names} - \
            {self.ops[self.site.out].output.buffer}
        before = [op for op in g.ops[:at] if op.name not in names]
        g.ops = before + seq + g.ops[at + 1:]
        for name in dropped:
            del g.buffers[name]


def _tile_index(buf: Buffer, dims: tuple[str | None, ...]) -> Lin:
    """The contiguous host index of `buf` walked by one var per dim (None: a size-1 dim or a
    broadcast one)."""
    total = Lin()
    for v, stride, size in zip(dims, buf.host_strides, buf.host_size):
        if v is not None and size > 1:
            total = total + var(v).scale(stride)
    return total
