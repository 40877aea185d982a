"""Which key tiles each query tile of a flash loop needs, from its mask, at compile time.

A causal or sliding-window mask built from position vectors (or a constant mask) is
evaluated per (query tile, key tile) pair as intervals: whether the mask may keep a score
there (else the tile is skipped: exact, since every score of it is -inf) and whether it
keeps every score (then the tile runs without the mask ops). The needed tiles of each
family become a key loop whose trip span is affine in the query tile index (`TripSpan`).
"""

from __future__ import annotations

import math

import numpy as np

from spyrec.indexing import Var, var
from spyrec.ir import Access, Graph, Operation
from spyrec.ir.graph import TripSpan
from spyrec.ir.symbols import ValueSource
from spyrec.passes.flash_attention.sites import AttentionSite, FlashTiles
from spyrec.plan.tiling.dimnames import dim_vars

def key_spans(graph: Graph, site: AttentionSite, tiles: FlashTiles
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
        qv, kv = dim_vars(self.g.buffers[op.output.buffer], op)[-2:]
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
        if values is not None and np.asarray(values).size == 1:   # a scalar: every tile
            value = np.asarray(values).reshape(())
            if value.dtype == bool:
                return np.full((self.nq, self.nk), bool(value))
            return (np.full((self.nq, self.nk), float(value)),) * 2
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
                "greaterthan": lambda a, b: a[0] > b[1],
                "equal": lambda a, b: (a[0] == a[1]) & (b[0] == b[1]) & (a[0] == b[0]),
                "notequal": lambda a, b: (a[1] < b[0]) | (b[1] < a[0])}


def _is_bool(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == bool


# may `a <op> b` hold for some pair of values in the two intervals
_COMPARE = {"lesserequal": lambda a, b: a[0] <= b[1], "lesserthan": lambda a, b: a[0] < b[1],
            "greaterequal": lambda a, b: a[1] >= b[0], "greaterthan": lambda a, b: a[1] > b[0],
            "equal": lambda a, b: (a[0] <= b[1]) & (b[0] <= a[1]),
            "notequal": lambda a, b: ~((a[0] == a[1]) & (b[0] == b[1]) & (a[0] == b[0]))}


def _tile_bounds(vector: np.ndarray, tile: int) -> tuple[np.ndarray, np.ndarray]:
    """Per tile of `tile` entries, the least and greatest value."""
    tiled = vector.reshape(-1, tile)
    return tiled.min(axis=1), tiled.max(axis=1)


def span_of(spans: list[range], nk: int) -> TripSpan | None:
    """The affine trip span that gives exactly `spans` per query tile, or None (rectangular)
    when every tile is needed or no affine line fits."""
    if all(sp == range(0, nk) for sp in spans):
        return None
    return _fit_span(spans, nk)


def masking_ops(graph: Graph, site: AttentionSite) -> list[str]:
    """The chain's `where3(keep, x, -inf)` ops (the ops that apply a boolean mask)."""
    ops = {op.name: op for op in graph.ops if op.name in site.chain}
    return [n for n in site.chain if ops[n].op == "where3" and len(ops[n].inputs) == 3
            and _constant_scalar(graph, ops[n].inputs[2].buffer) == -math.inf]


def split_bodies(graph, site: AttentionSite, tiles, needed: list[range], span, nq: int,
                 nk: int) -> list[tuple]:
    """The key loops of a masked attention: the tiles each query tile needs (`needed`, from
    `key_spans`; `span` runs them all) split into those its mask keeps whole (run without
    the mask ops) and the edges before and after them (run masked), each family a loop with
    its own affine span; one masked loop over the needed tiles when the families are not
    affine (or with paged K/V, whose gathers share the key loop with their readers)."""
    single = [("", span, False)]
    masking = masking_ops(graph, site)
    if len(masking) != 1 or site.gathers:
        return single
    op = next(o for o in graph.ops if o.name == masking[0])
    writer = {o.output.buffer: o for o in graph.ops if o.name in site.masks}
    cond = op.inputs[0].buffer
    every = _keep_by_tile(graph, writer.get(cond), cond, tiles, nq, nk, writer=writer,
                          must=True)
    if every is None or not every.any():
        return single
    families: list[list[range]] = [[], [], []]
    for i in range(nq):
        lo, hi = needed[i].start, needed[i].stop
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


def _fit_span(ranges: list[range], nk: int) -> TripSpan | None:
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
    """A line a·i + b that clamped to [0, nk] gives `ends`: through two points where the ends
    are strictly inside, a constant, or else (two query tiles, say, whose second runs to the
    last key tile) the gentlest slope through the one inside point (or the first end) that
    the clamps reproduce."""
    inside = [(i, e) for i, e in enumerate(ends) if 0 < e < nk]
    if len(inside) >= 2:
        (i0, e0), (i1, e1) = inside[0], inside[1]
        if (e1 - e0) % (i1 - i0):
            return None
        a = (e1 - e0) // (i1 - i0)
        return a, e0 - a * i0
    if len(set(ends)) == 1:
        return 0, ends[0]
    i, e = inside[0] if inside else (0, ends[0])
    for a in sorted(range(-nk, nk + 1), key=abs):
        if a and all(min(max(a * (j - i) + e, 0), nk) == end for j, end in enumerate(ends)):
            return a, e - a * i
    return None


def runtime_key_limit(graph: Graph, site: AttentionSite) -> ValueSource | None:
    """For a decode step over a static cache — one query row whose mask keeps the keys at
    positions up to a value the program reads at run time (`key_positions <= cache_position`
    as transformers builds it) — where that value comes from: an input element plus a
    constant, with the offset counting the kept keys (value + 1). The key loop then runs only
    over the tiles holding kept keys (issue 30 §6): exact, every later score is -inf. None
    for any other mask."""
    masking = masking_ops(graph, site)
    if site.queries != 1 or len(masking) != 1:
        return None
    where = next(op for op in graph.ops if op.name == masking[0])
    keep = next((o for o in graph.ops if o.output.buffer == where.inputs[0].buffer), None)
    if keep is None or keep.op != "lesserequal" or len(keep.inputs) != 2 or keep.constants:
        return None
    positions, limit = keep.inputs
    walks = [v for v, n in keep.ranges if n > 1]
    if len(walks) != 1 or dict(keep.ranges)[walks[0]] != site.keys or \
            positions.index != var(walks[0]) or not _is_arange(graph, positions.buffer,
                                                               site.keys):
        return None
    if not limit.index.is_const:
        return None
    found = _input_element(graph, limit.buffer, limit.index.const)
    return None if found is None else ValueSource(found[0], found[1], found[2] + 1)


def _is_arange(graph: Graph, name: str, n: int) -> bool:
    values = graph.constants.get(name)
    return values is not None and np.asarray(values).size == n and \
        bool(np.array_equal(np.asarray(values).reshape(-1), np.arange(n)))


def _input_element(graph: Graph, name: str, index: int,
                   depth: int = 0) -> tuple[str, int, int] | None:
    """(input, flat index, constant added) when element `index` of `name` is an input's
    element plus a constant (copies, adds of constants on the way), else None."""
    if name in graph.inputs:
        return name, index, 0
    writer = [o for o in graph.ops if o.output.buffer == name]
    if depth > 16 or len(writer) != 1 or writer[0].output.index.free_atoms() or \
            writer[0].ranges and any(n != 1 for _, n in writer[0].ranges):
        return None
    op = writer[0]
    if op.op == "identity" and len(op.inputs) == 1 and op.inputs[0].index.is_const:
        return _input_element(graph, op.inputs[0].buffer, op.inputs[0].index.const,
                              depth + 1)
    if op.op != "add":
        return None
    if len(op.inputs) == 1 and op.constants.get("scalar_side") in ("lhs", "rhs") and \
            float(op.constants["scalar"]).is_integer() and op.inputs[0].index.is_const:
        found = _input_element(graph, op.inputs[0].buffer, op.inputs[0].index.const,
                               depth + 1)
        return None if found is None else (*found[:2], found[2] + int(op.constants["scalar"]))
    if len(op.inputs) != 2 or op.constants or not all(a.index.is_const for a in op.inputs):
        return None
    constant = [a for a in op.inputs if a.buffer in graph.constants]
    other = [a for a in op.inputs if a.buffer not in graph.constants]
    if len(constant) != 1 or len(other) != 1:
        return None
    value = np.asarray(graph.constants[constant[0].buffer]).reshape(-1)[constant[0].index.const]
    if not float(value).is_integer():
        return None
    found = _input_element(graph, other[0].buffer, other[0].index.const, depth + 1)
    return None if found is None else (*found[:2], found[2] + int(value))
