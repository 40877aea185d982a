"""Attention as counted loops with an online softmax (flash attention; issue 29).

`softmax(scores) @ v`, the scores computed from `q @ kᵀ` and elementwise ops (scale, masks),
is what the front end makes of `scaled_dot_product_attention` and what a model's own
`softmax(q @ k.T * scale + mask) @ v` lowers to. Materialized, the scores are
heads × S × L fp32: 4 GB at 8 heads and 32K tokens. This rewrite keeps them on chip:

    for each head tile (Th heads; no loop when all):
      for each query tile i (Tq rows):               m = -FLT_MAX, l = 0, acc = 0
        for each key tile j it needs (Tk keys):
            x  = the score chain on the tile          (q @ kᵀ, scale, mask: the program's ops)
            mn = max(m, rowmax(x));  α = exp(m − mn)
            p  = exp(x − mn);        l = l·α + rowsum(p)
            acc = acc·α + p @ v_tile;  m = mn
        out = acc / l                                (max(l, 1) for the safe softmax)

"It needs": a mask known at compile time (causal, a sliding window, a constant) tells per
tile pair whether any score survives; the key loop's trip span skips the tiles that keep
none, and the tiles that keep every score run in a loop of their own without the mask ops
(flash_masks.py). A paged K/V cache is gathered one key tile of pages at a time.

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

The pattern is flash_site.py's; which key tiles each query tile runs (spans, unmasked tile
families) flash_masks.py's.
"""


from __future__ import annotations

from dataclasses import dataclass, replace

from spyrec.errors import ConfigError
from spyrec.indexing import Indirect, Lin, indirect, substitute, var
from spyrec.ir import Access, Buffer, Graph, Loop, Operation
from spyrec.layout.device_layout import SPARSE, stick_layout
from spyrec.passes.flash_attention.masks import key_spans, masking_ops, span_of, split_bodies
from spyrec.passes.flash_attention.sites import (
    FLT_MAX, AttentionSite, FlashTiles,
)
from spyrec.plan.tiling.dimnames import dim_vars
from spyrec.plan.tiles import (
    host_advance, host_box, moving_tile_problem, retile_index, tile_buffer_layout,
)


def rewrite(graph: Graph, site: AttentionSite, tiles: FlashTiles, key: str,
            check: bool = True) -> dict:
    """Replace `site` by its flash form in `graph` (loop keys `<key>.h`, `<key>.0`, `<key>.1`
    for the head, query and key tiles); returns the report row. `check`: prove every full
    buffer's tiles move by constant whole-stick steps (ConfigError if not); pricing a
    candidate skips it and the rewrite that keeps one proves it. A refused rewrite leaves
    the graph as it was (the buffers it had added are dropped)."""
    before = set(graph.buffers)
    try:
        return _Rewrite(graph, site, tiles, key).run(check)
    except ConfigError:
        for name in set(graph.buffers) - before:
            del graph.buffers[name]
        raise


@dataclass
class _Frame:
    """What one rewrite's ops are made of: the output op and buffer, the row max's buffer,
    the output's row vars (lead dims and the query var `qv`) and head-dim var `dv`, the
    ranges of a row op and of a wide (row by head dim) op, the running state's tile buffers
    (`_Rewrite._frame`), and the copied scores op and its vars (`_Rewrite._prologue`)."""

    out: Operation
    out_buf: Buffer
    row_buf: Buffer
    rows: tuple
    qv: str
    dv: str | None
    row_ranges: tuple
    acc_ranges: tuple
    m: Buffer = None
    l: Buffer = None
    mn: Buffer = None
    alpha: Buffer = None
    acc: Buffer = None
    pv: Buffer = None
    scores: Operation = None
    s_dims: tuple = ()

    def at_rows(self, buf: Buffer) -> Access:
        return Access(buf.name, _tile_index(buf, (*self.rows, None)))

    def at_wide(self, buf: Buffer) -> Access:
        return Access(buf.name, _tile_index(buf, (*self.rows, self.dv)))

    def row_op(self, rw: _Rewrite, name, kind, inputs, output, depth=2, constants=None):
        return rw.op(name, kind, inputs, output, self.row_ranges, depth, self.qv, constants)

    def wide_op(self, rw: _Rewrite, name, kind, inputs, output, depth=2, constants=None):
        return rw.op(name, kind, inputs, output, self.acc_ranges, depth, self.qv, constants)


class _Rewrite:
    """One site's rewrite. Depth 1 is inside the head and query loops (each only when it has
    more than one trip: a decode step has no query loop), depth 2 inside a key loop too."""

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
        self.bodies = split_bodies(graph, site, tiles, spans, self.span, self.nq, self.nk) \
            if spans is not None and self.masking else [("", self.span, False)]
        # q @ kᵀ's scale (the chain's first op, a multiply by a constant) applied to the query
        # tile as it is copied, once per query tile, not to every score of every key tile
        self.scale = _folded_scale(graph, site, self.ops)
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
        return dim_vars(buf, op)[-3]

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
        """Rewrite the site: the running state filled, then each key loop's body (one per
        masked or unmasked span of key tiles), then the output divided by the running sum;
        the site's report row."""
        f = self._frame()
        self._tile_scores(f)
        self._state_tiles(f)
        seq = self._prologue(f)
        for suffix, span, elide in self.bodies:
            self.span, self.body_key = span, suffix
            seq += [replace(o, name=o.name + suffix) for o in self._key_loop(f, elide)]
        seq += self._epilogue(f)
        if check:
            self.check_moves(seq)
        self.splice(self.before + seq)
        return self._row()

    def _frame(self) -> _Frame:
        """The output's vars and ranges (`_Frame`)."""
        out = self.ops[self.site.out]
        out_buf = self.g.buffers[out.output.buffer]
        *lead, qv, dv = dim_vars(out_buf, out)
        sizes = dict(zip((*lead, qv, dv), out_buf.host_size))
        rows = (*lead, qv)
        hv = self.head_var(out)
        row_ranges = tuple((v, self.tiles.queries if v == qv else self.heads if v == hv
                            else sizes[v]) for v in rows if v is not None)
        return _Frame(out, out_buf, self.g.buffers[self.ops[self.site.row_max].output.buffer],
                      rows, qv, dv, row_ranges,
                      row_ranges + (((dv, sizes[dv]),) if dv else ()))

    def _state_tiles(self, f: _Frame) -> None:
        """The online softmax's running state: the max `m`, the sum `l`, the new max and
        the rescale factor (one value per query row), and the fp32 accumulator and this
        tile's probs @ v (a row of head dim each)."""
        state = self.shape(f.row_buf.host_size, 1)
        wide = self.shape(f.out_buf.host_size, f.out_buf.host_size[-1])
        f.m, f.l, f.mn, f.alpha = (self._row_tile(f, n, state)
                                   for n in ("max", "sum", "newmax", "rescale"))
        f.acc, f.pv = (self.tile_buffer(f"{f.out.name}__flash_{n}", f.out_buf, wide,
                                        "float32") for n in ("acc", "pv"))

    def _row_tile(self, f: _Frame, name: str, state: tuple[int, ...] | None = None) -> Buffer:
        state = state or self.shape(f.row_buf.host_size, 1)
        return self.tile_buffer(f"{f.out.name}__flash_{name}", f.row_buf, state, "float32")

    def _tile_scores(self, f: _Frame) -> None:
        """The [.., Tq, Tk] score tiles: every elementwise step from q @ kᵀ to exp(x - max)
        writes over its input in place (one tile of LX, not five), a new tile only where
        the dtype changes (a model's fp16 scores before its fp32 softmax); and the
        [.., Tq, 1] tiles of the row max and sum."""
        g, s, ops = self.g, self.site, self.ops
        last = None
        for n in (s.scores, *s.chain, s.shifted, s.exp):
            full = g.buffers[ops[n].output.buffer]
            if last is None or last.host_dtype != full.host_dtype:
                last = self.tile_buffer(f"{full.name}__tile", full,
                                        self.shape(full.host_size, self.tiles.keys),
                                        full.host_dtype)
            self.tile_of[full.name] = last
        for n in (s.row_max, s.row_sum):
            full = g.buffers[ops[n].output.buffer]
            self.tile_of[full.name] = self.tile_buffer(
                f"{full.name}__tile", full, self.shape(full.host_size, 1), "float32")

    def _prologue(self, f: _Frame) -> list[Operation]:
        """Before the key loops: the running state filled, the query tile copied, each
        gathered K/V page's tile, and the masks' tile buffers."""
        g, s, ops = self.g, self.site, self.ops
        seq = [f.row_op(self, f"{f.m.name}.fill", "fill", (), f.at_rows(f.m), 1,
                        {"value": -FLT_MAX}),
               f.row_op(self, f"{f.l.name}.fill", "fill", (), f.at_rows(f.l), 1,
                        {"value": 0.0}),
               f.wide_op(self, f"{f.acc.name}.fill", "fill", (), f.at_wide(f.acc), 1,
                         {"value": 0.0})]
        scores_buf = g.buffers[ops[s.scores].output.buffer]
        f.s_dims = dim_vars(scores_buf, ops[s.scores])
        copy, f.scores = self.query_copy(ops[s.scores], f.s_dims, scores_buf)
        seq.append(copy)
        for name, reader, kv in ((n, c, k) for n in s.gathers
                                 for c, k in ((f.scores, f.s_dims[-1]),
                                              (f.out, f.out.reduced[0]))
                                 if c.inputs[1].buffer == ops[n].output.buffer):
            seq.append(self.gather_tile(ops[name], reader, kv))
        for n in s.masks:
            full = g.buffers[ops[n].output.buffer]
            self.tile_of[full.name] = self.tile_buffer(
                f"{full.name}__tile", full, self.shape(full.host_size, self.tiles.keys),
                full.host_dtype)
        return seq

    def _key_loop(self, f: _Frame, elide: bool) -> list[Operation]:
        """One key loop's ops; `elide`: its tiles keep every score, so the masks and the
        where3 applying them are left out (x is the unmasked scores)."""
        masking = set(self.masking) if elide else set()
        saved = dict(self.tile_of)
        for n in masking:
            w = self.ops[n]
            self.tile_of[w.output.buffer] = self.tile_of[w.inputs[1].buffer]
        seq = self._scores_ops(f, masking, elide) + self._running_max(f)
        seq += self._probs_ops(f) + self._accumulate(f)
        self.tile_of = saved
        return seq

    def _tiled_last_two(self, op: Operation) -> Operation:
        """`op` at one score tile: tiled over its last two dims (query rows, keys)."""
        d = dim_vars(self.g.buffers[op.output.buffer], op)
        return self.tiled(op, d[-2], d[-1])

    def _scores_ops(self, f: _Frame, masking: set[str], elide: bool) -> list[Operation]:
        """The masks (unless elided), q @ kᵀ and the elementwise chain on the scores."""
        s, ops = self.site, self.ops
        seq = [] if elide else [self._tiled_last_two(ops[n])
                                for n in sorted(s.masks, key=list(s.ops).index)]
        seq.append(self.tiled(f.scores, f.s_dims[-2], f.s_dims[-1]))
        seq += [self._tiled_last_two(ops[n]) for n in s.chain
                if n not in masking and (self.scale is None or n != s.chain[0])]
        return seq

    def _running_max(self, f: _Frame) -> list[Operation]:
        """This tile's row max, the new running max, and exp(old - new), the rescale."""
        top = self.ops[self.site.row_max]
        tm = self.tile_of[top.output.buffer]
        return [self.tiled(top, dim_vars(f.row_buf, top)[-2], top.reduced[0]),
                f.row_op(self, f.mn.name, "maximum", (f.at_rows(f.m), f.at_rows(tm)),
                         f.at_rows(f.mn)),
                f.row_op(self, f"{f.alpha.name}.step", "sub", (f.at_rows(f.m),
                                                               f.at_rows(f.mn)),
                         f.at_rows(f.alpha)),
                f.row_op(self, f.alpha.name, "exp", (f.at_rows(f.alpha),),
                         f.at_rows(f.alpha))]

    def _probs_ops(self, f: _Frame) -> list[Operation]:
        """x - max against the running max (not this tile's, or the guarded one), its exp,
        the tile's row sum, and the running sum rescaled and added to."""
        s, ops = self.site, self.ops
        shifted = ops[s.shifted]
        self.tile_of[shifted.inputs[1].buffer] = f.mn
        total = ops[s.row_sum]
        d = dim_vars(self.g.buffers[shifted.output.buffer], shifted)   # exp's too
        seq = [self.tiled(shifted, d[-2], d[-1]), self.tiled(ops[s.exp], d[-2], d[-1]),
               self.tiled(total, dim_vars(self.g.buffers[total.output.buffer], total)[-2],
                          total.reduced[0])]
        ts = self.tile_of[total.output.buffer]
        return seq + [f.row_op(self, f"{f.l.name}.rescale", "mul",
                               (f.at_rows(f.l), f.at_rows(f.alpha)), f.at_rows(f.l)),
                      f.row_op(self, f"{f.l.name}.update", "add",
                               (f.at_rows(f.l), f.at_rows(ts)), f.at_rows(f.l))]

    def _accumulate(self, f: _Frame) -> list[Operation]:
        """probs @ v becomes exp @ v into an fp32 tile (the division waits for the end),
        added to the rescaled accumulator; the running max moves on."""
        out, e = f.out, self.ops[self.site.exp]
        self.tile_of[f.out_buf.name] = f.pv
        product = replace(out, name=f.pv.name, inputs=(Access(e.output.buffer,
                                                              out.inputs[0].index),
                                                       *out.inputs[1:]))
        return [self.tiled(product, f.qv, out.reduced[0]),
                f.wide_op(self, f"{f.acc.name}.rescale", "mul",
                          (f.at_wide(f.acc), f.at_rows(f.alpha)), f.at_wide(f.acc)),
                f.wide_op(self, f"{f.acc.name}.update", "add",
                          (f.at_wide(f.acc), f.at_wide(f.pv)), f.at_wide(f.acc)),
                f.row_op(self, f"{f.m.name}.update", "identity", (f.at_rows(f.mn),),
                         f.at_rows(f.m))]

    def _epilogue(self, f: _Frame) -> list[Operation]:
        """The output: the accumulator divided by the running sum (at least 1 for a safe
        softmax, whose fully masked rows give 0)."""
        seq, divisor = [], f.l
        if self.site.safe:
            divisor = self._row_tile(f, "sumsafe")
            seq.append(f.row_op(self, divisor.name, "maximum", (f.at_rows(f.l),),
                                f.at_rows(divisor), 1, {"scalar": 1.0, "scalar_side": "rhs"}))
        seq.append(f.wide_op(self, f.out.name, "realdiv", (f.at_wide(f.acc),
                                                           f.at_rows(divisor)),
                             f.out.output, 1))
        return seq

    def _row(self) -> dict:
        """The site's report row (report.json `attention`)."""
        s, out = self.site, self.ops[self.site.out]
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
        ranges = tuple((v, self.tiles.queries if v == dim_vars(
            self.g.buffers[reader.output.buffer], reader)[-2] else
            self.tiles.keys if v == kv else n) for v, n in reader.ranges)
        probe = replace(reader, ranges=ranges)
        index = reader.inputs[1].index
        box = host_box(full, probe, index)
        step = host_advance(full, probe, index, kv, self.tiles.keys)
        moving = [d for d, a in enumerate(step or ()) if a]
        d = moving[0] if len(moving) == 1 else None
        extent = box[d][1] - box[d][0] if d is not None else 0
        whole_pages = d is not None and box[d][0] == 0 and step[d] == extent and \
            full.host_size[d] == extent * self.nk and all(
                (lo, hi) == (0, n) for i, ((lo, hi), n) in enumerate(zip(box, full.host_size))
                if i != d)
        if not whole_pages:
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
        gv = dim_vars(full, gather)[d]
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
        loop reads it from LX), scaled by the folded scale on the way, and q @ kᵀ reading
        that copy."""
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
        kind, constants = ("identity", {}) if self.scale is None else \
            ("mul", {"scalar": self.scale, "scalar_side": "rhs"})
        copy = Operation(f"{q_tile.name}.copy", kind, ranges, (scores.inputs[0],),
                         Access(q_tile.name, index), constants=constants, source=scores.source,
                         node=scores.node, scope=scores.scope,
                         loops=self.loops(qv, None, 1, hv))
        return copy, replace(scores, inputs=(Access(q_tile.name, index), *scores.inputs[1:]))

    def check_moves(self, seq: list[Operation]) -> None:
        """Every full buffer the loops read or write moves by one constant device-address
        step per trip and each trip's tile is exactly the untiled access there (coarse
        tiling's own proof, `plan/tiles.moving_tile_problem`); else the tiles are refused (a
        head tile that splits a K/V group, a key tile that splits a stick)."""
        for op in seq:
            for _, a in op.accesses() if op.loops else ():
                buf = self.g.buffers[a.buffer]
                found = moving_tile_problem(buf, op, a)
                if found is not None:
                    self.refuse(op, buf, found[1])

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


def _folded_scale(graph: Graph, site: AttentionSite, ops: dict[str, Operation]) -> float | None:
    """The constant the scores are multiplied by first, when it can move onto the query:
    the chain's first op multiplies q @ kᵀ's output, in place in its tile (same dtype), by one
    scalar; (c·q)·kᵀ = c·(q·kᵀ), each product rounded once to q's dtype on the way into LX
    (what eager's math attention does with sqrt(scale) on q and k). None otherwise."""
    if not site.chain:
        return None
    first, scores = ops[site.chain[0]], ops[site.scores]
    scalar = first.constants.get("scalar")
    if first.op != "mul" or len(first.inputs) != 1 or not isinstance(scalar, float) or \
            first.inputs[0].buffer != scores.output.buffer or \
            graph.buffers[first.output.buffer].host_dtype != \
            graph.buffers[scores.output.buffer].host_dtype:
        return None
    return scalar
