"""split_padding — pad a matmul's N to a count the cores divide, when the estimate says so.

A SuperDSC core split must divide the split dim (reference/F-superdsc.md §2.9), in whole sticks
when the dim is a stick dim. Granite's vocabulary of 49,155 is 769 sticks, a prime: its
lm_head can split N over one core only and must split K instead, paying the ring; a
12,800-wide MLP (200 sticks) runs on 25 cores or splits K to reach 32. A constant weight's
layout is free (DESIGN §3), so its N can be padded at compile time with zero rows: the matmul
then computes N' = N rounded up to a multiple of d sticks (d in 2, 4, ..., the cores) into a
padded intermediate, and an `identity` copy moves the N real columns into the output. The
padding columns are computed (x · 0) and never read as data: the copy reads only the real
ones, and no reduction crosses N.

Reads: batchmatmul ops outside loops whose second operand (the one carrying N) is a constant
(`graph.constants`), layouts (after stick_layout and matmul_padding).
Writes: per padded matmul a constant `<w>__npad` (the weight's values, zero-padded when the
weights are written: `ir/values.py`), an intermediate `<out>__npad`, the matmul's N range and
accesses, and the copy op after it; the `split_padding` report (per matmul: N, N', the
estimates that chose it).
Choice: for each padding (none included; at most MAX_GROWTH more units of N, and none when N's
units already divide over every core or the unpadded matmul is on every core) the cheapest split of the matmul by the split
estimate (`plan/split_estimate.py`, as work_division prices it, K-splits included) plus, when
padded, the cheapest split of the copy; the cheapest wins, no padding on a tie. Guarantees:
values unchanged (the real columns are the same dot products); an op whose accesses are not
plain strided (no floor/mod, no gather) is left alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar, NamedTuple

from spyrec.device import CORES
from spyrec.indexing import Lin, Var
from spyrec.ir import Access, Buffer, Graph, Operation
from spyrec.ir.values import PaddedConstant
from spyrec.costmodel import CostParams
from spyrec.passes.registry import CompileContext, Pass, register_pass
from spyrec.plan.layouts import layout_with_stick
from spyrec.plan.core_splits import check_split_options, near_best, pick_split
from spyrec.plan.split_candidates import candidates, split_text, stick_vars
from spyrec.plan.split_estimate import split_estimate


# the most padding tried, as a fraction of N's units: a memory-bound matmul reads its padded
# weight whole, so more than 1/8 more bytes cannot be won back by spreading further (the
# split's estimate still decides within it)
MAX_GROWTH = 0.125


@register_pass("split_padding")
@dataclass(frozen=True)
class SplitPadding(Pass):
    enabled: bool = True
    cores: int = CORES
    # work_division's rule for near ties (SplitOptions.spread_within)
    spread_within: float = 0.02


    report_keys: ClassVar[dict] = {"split_padding": None}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        """The matmuls whose N was padded so that more cores split it."""
        padding = report.get("split_padding")
        if not padding or not padding["count"]:
            return []
        lines = ["", f"matmul N padding: {padding['count']} matmuls"]
        return lines + [f"  {row['op']}: N {row['n']} -> {row['n_padded']} ({row['weight']} "
                        f"-> {row['padded']}): {row['time_us']:.3f} us split {row['split']}, "
                        f"against {row['unpadded_time_us']:.3f} us split "
                        f"{row['unpadded_split']} unpadded" for row in padding["list"]]

    def check_options(self) -> None:
        """Called when the pipeline is built, before the model is loaded."""
        check_split_options("split_padding", self.cores, self.spread_within)

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        self.check_options()
        rows: list[dict] = []
        if self.enabled:
            new_ops: list[Operation] = []
            memo: dict = {}         # the layers of a stack share their matmuls' estimates
            for op in graph.ops:
                new_ops.extend(self._pad(graph, op, rows, memo, ctx.planning.params))
            graph.ops = new_ops
            _drop_unread(graph, {row["weight"] for row in rows})
        ctx.report["split_padding"] = {"count": len(rows), "list": rows}

    def _pad(self, graph: Graph, op: Operation, rows: list, memo: dict,
             params: CostParams) -> list[Operation]:
        site = _padding_site(graph, op)
        if site is None:
            return [op]
        n_var, unit = site
        n_real = dict(op.ranges)[n_var]
        count = -(-n_real // unit)           # units (sticks) of N, a partial last one whole
        if count % self.cores == 0:
            return [op]                 # N alone divides over every core count
        key = _estimate_key(graph, op)

        def estimate(n: int) -> _Priced:
            if (key, n) not in memo:
                memo[key, n] = _estimate(graph, op, n_var, n, self.cores, self.spread_within,
                                         params)
            return memo[key, n]
        options = {n_real: estimate(n_real)}
        if options[n_real].cores == self.cores:
            return [op]                 # already on every core
        for d in _divisors_up_to(self.cores):
            padded_units = -(-count // d) * d
            padded = padded_units * unit
            if padded_units > count * (1 + MAX_GROWTH):
                continue                # more padding than a split can win back
            if padded not in options:
                options[padded] = estimate(padded)
        # work_division's rule (plan/core_splits.py near_best); the smallest N on a tie
        best = near_best([(options[n], n) for n in sorted(options)], self.spread_within)[0][1]
        if best == n_real:
            return [op]
        weight = op.inputs[1].buffer
        padded = _rewrite(graph, op, n_var, best, (graph.fresh_name(f"{weight}__npad"),
                                                   graph.fresh_name(f"{op.output.buffer}__npad")))
        graph.add_buffer(padded.weight)
        graph.add_buffer(padded.out)
        graph.constants[padded.weight.name] = PaddedConstant(graph.constants[weight], padded.pad)
        chosen, plain = options[best], options[n_real]
        rows.append({"op": op.name, "source": op.source, "weight": weight,
                     "n": n_real, "n_padded": best, "padded": padded.weight.name,
                     "constant": True, "time_us": chosen.time_us, "split": chosen.splits,
                     "unpadded_time_us": plain.time_us, "unpadded_split": plain.splits})
        return padded.ops


class _Priced(NamedTuple):
    """One N's estimate: what `near_best` compares (time, cores of the matmul) and the
    splits it was priced with."""

    time_us: float
    cores: int
    splits: str


def _drop_unread(graph: Graph, names: set[str]) -> None:
    """Drop the constants among `names` that no op reads any more (a weight only the padded
    matmul read: weights.bin would otherwise hold it beside its padded copy)."""
    read = {a.buffer for op in graph.ops for _, a in op.accesses()}
    for name in names - read:
        del graph.buffers[name]
        graph.constants.pop(name, None)


def _padding_site(graph: Graph, op: Operation) -> tuple[str, int] | None:
    """(N var, the elements one split unit of N holds) of a matmul split_padding may pad:
    outside loops, its second operand a constant with a value, N a var of that operand the
    first does not read, every access plain strided; None otherwise."""
    if op.op != "batchmatmul" or op.loops or op.index_inputs or len(op.inputs) != 2:
        return None
    x, y = op.inputs
    if y.buffer not in graph.constants or graph.buffers[y.buffer].role != "constant":
        return None
    if any(_dims_of(graph.buffers[a.buffer], a.index) is None for _, a in op.accesses()):
        return None
    free = [v for v, _ in op.ranges if v not in op.reduced
            and v in _vars(y) - _vars(x) and v in _vars(op.output)]
    if len(free) != 1:
        return None
    n_var = free[0]
    sticks = stick_vars(graph, op)
    return n_var, sticks.get(n_var, 1)


def _estimate_key(graph: Graph, op: Operation) -> tuple:
    """What `_estimate` of a padding site depends on besides N, without buffer names: the
    op's kind, ranges and accesses, and each accessed buffer's sizes, strides, dtype, layout
    and role (the padded buffers and the copy are made from these alone)."""
    return (op.op, op.ranges, op.reduced, str(op.constants),
            tuple((a.index, b.host_size, b.host_strides, b.host_dtype, b.layout, b.role,
                   b.per_tile)
                  for a, b in ((a, graph.buffers[a.buffer]) for _, a in op.accesses())))


def _estimate(graph: Graph, op: Operation, n_var: str, n: int, cores: int,
              spread_within: float, params: CostParams) -> _Priced:
    """The time, the matmul's cores and the splits of the cheapest splits of `op` with N = `n` (plus
    its copy when padded), each op's by work_division's rule; the padded buffers are in
    `graph` only while they are priced."""
    if n == dict(op.ranges)[n_var]:
        ops, added = [op], []
    else:
        padded = _rewrite(graph, op, n_var, n, ("split_padding?w", "split_padding?out"))
        ops, added = padded.ops, [padded.weight, padded.out]
    for buf in added:
        graph.buffers[buf.name] = buf
    try:
        total, splits, used = 0.0, [], []
        for t in ops:
            priced = [(split_estimate(graph, t, c, p=params), c)
                      for c in candidates(graph, t, stick_vars(graph, t), cores,
                                          k_split=t.op == "batchmatmul")]
            if not priced:        # no split keeps each core within the span limit
                return _Priced(math.inf, 0, "-")
            cost, split = pick_split(priced, spread_within)
            total += cost.time_us
            splits.append(split_text(split))
            used.append(cost.cores)
        return _Priced(round(total, 6), used[0], " + ".join(splits))
    finally:
        for buf in added:
            del graph.buffers[buf.name]


@dataclass(frozen=True)
class _Padded:
    ops: list[Operation]        # the matmul into the padded buffer, the copy out of it
    weight: Buffer              # the padded weight (a constant)
    out: Buffer                 # the padded output (an intermediate)
    pad: tuple[int, ...]        # zeros after the weight's end, per host dim


def _rewrite(graph: Graph, op: Operation, n_var: str, n: int, names: tuple[str, str]
             ) -> _Padded:
    """The matmul computing N = `n` into a padded buffer from the padded weight, and the copy
    of its real columns into the output (`graph` is not changed)."""
    x, y = op.inputs
    weight, out = graph.buffers[y.buffer], graph.buffers[op.output.buffer]
    w_dims, o_dims = _dims_of(weight, y.index), _dims_of(out, op.output.index)
    new_w = _padded_buffer(weight, names[0], w_dims[n_var], n, "constant")
    new_out = _padded_buffer(out, names[1], o_dims[n_var], n, "intermediate")
    matmul = replace(op, ranges=tuple((v, n if v == n_var else k) for v, k in op.ranges),
                     inputs=(x, Access(new_w.name, _index(new_w, w_dims))),
                     output=Access(new_out.name, _index(new_out, o_dims)))
    copy = Operation(f"{op.name}__unpad", "identity",
                     tuple((v, k) for v, k in op.ranges if v in o_dims),
                     (Access(new_out.name, _index(new_out, o_dims)),), op.output,
                     source=op.source, node=op.node, scope=op.scope,
                     lengths=tuple((v, s) for v, s in op.lengths if v in o_dims))
    pad = tuple(n - k if d == w_dims[n_var] else 0 for d, k in enumerate(weight.host_size))
    return _Padded([matmul, copy], new_w, new_out, pad)


def _padded_buffer(buf: Buffer, name: str, dim: int, n: int, role: str) -> Buffer:
    """`buf` with host dim `dim` grown to `n`, laid out with the stick on the same host dim."""
    size = tuple(n if d == dim else k for d, k in enumerate(buf.host_size))
    new = Buffer(name, size, buf.host_dtype, role, source=buf.source)
    new.layout = layout_with_stick(new, _stick_dim(buf))
    return new


def _stick_dim(buf: Buffer) -> int | None:
    """The host dim in `buf`'s lanes (None: stick-sparse)."""
    lane = buf.layout.stride_map[-1]
    if lane == -1:
        return None
    dims = [d for d, (k, s) in enumerate(zip(buf.host_size, buf.host_strides))
            if s == lane and k > 1]
    return dims[0] if dims else len(buf.host_size) - 1


def _dims_of(buf: Buffer, index: Lin) -> dict[str, int] | None:
    """Var -> the host dim it steps in a plain strided `index` (each var's coefficient one of
    the buffer's strides of a dim longer than 1, no constant, no floor/mod or gather), or
    None."""
    if index.const:
        return None
    dims = {}
    for atom, coeff in index.terms:
        if not isinstance(atom, Var):
            return None
        hits = [d for d, (k, s) in enumerate(zip(buf.host_size, buf.host_strides))
                if s == coeff and k > 1]
        if len(hits) != 1:
            return None
        dims[atom.name] = hits[0]
    return dims


def _index(buf: Buffer, dims: dict[str, int]) -> Lin:
    return Lin({Var(v): buf.host_strides[d] for v, d in dims.items()})


def _vars(access: Access) -> set[str]:
    return {a.name for a in access.index.free_atoms() if isinstance(a, Var)}


def _divisors_up_to(cores: int) -> list[int]:
    """2, 4, ... up to `cores` (the powers of two, and `cores` itself)."""
    out, d = [], 2
    while d <= cores:
        out.append(d)
        d *= 2
    return out + ([cores] if cores not in out else [])
