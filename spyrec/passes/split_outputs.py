"""split_outputs — an op whose output is only ever read in separate column blocks becomes one
op per block, each writing its own buffer.

A fused projection (GPT-2's `c_attn`, the sample decoder's `qkv`) writes q, k and v side by
side in one [.., 3d] tensor; the attention then reads each third through a view. Kept fused,
that buffer can never sit in the scratchpad: a core that computed all three thirds of its rows
is read by the attention as three different slices, so scratchpad_planning (rightly) sends it
through HBM and every layer pays 2 x its bytes. Split into one matmul per block, each block is
a buffer of its own that its readers read whole, so work division and LX planning treat it as
any other intermediate. The weight is still read once in total (each block reads its rows).

Reads: ops, accesses, buffers (runs before layouts exist). Writes: new ops and buffers in place
of the split ones; a `split_outputs` report row per split buffer.

A buffer B is split along its last dim when:
- B is an intermediate written by exactly one op W, outside any loop, without index inputs,
  and W writes it densely: its output index is stride_d x var_d over every dim, each var
  spanning its dim, and the last dim's var is not reduced;
- every read of B (no op reads it as an index tensor) has affine host coordinates, and its
  last-dim values fall inside one block of a partition of [0, last dim) into >= 2 blocks
  (blocks whole 128-byte sticks wide, so each piece keeps whole sticks), each block read.
Then W becomes one op per block (its last-dim var shifted by the block's start in every
input) and each read is re-addressed into its block's buffer. Nothing else changes, so the
program computes exactly what it did.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass, replace

from spyrec.indexing import (
    Lin, Var, as_lin, const, floordiv, mod, simplify, substitute, value_range,
)
from spyrec.ir import Graph, Operation
from spyrec.ir.graph import Access, Buffer
from spyrec.layout import contiguous_strides, device_dtype_for
from spyrec.passes.registry import CompileContext, Pass, register_pass


@register_pass("split_outputs")
@dataclass(frozen=True)
class SplitOutputs(Pass):
    enabled: bool = True

    report_keys: ClassVar[dict] = {"split_outputs": None}

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        rows = []
        readers: dict[str, list[Operation]] = {}        # buffer -> the ops reading it
        for op in graph.ops:
            for name in dict.fromkeys(a.buffer for a in op.reads()):
                readers.setdefault(name, []).append(op)
        # consumers first: splitting a bias add into blocks makes the matmul before it read
        # in blocks too, so the matmul splits next (GPT-2's addmm is matmul + add)
        for op in reversed(list(graph.ops) if self.enabled else []):
            name = op.output.buffer
            users = [op, *(o for o in readers.get(name, ()) if o is not op)]
            blocks = _blocks(graph, name, users)
            if not blocks:
                continue
            pieces = _split(graph, name, blocks, users)
            rows.append({"buffer": name, "blocks": [list(b) for b in blocks]})
            for source in dict.fromkeys(a.buffer for a in op.reads()):
                readers[source] = [o for o in readers[source] if o is not op] + pieces
        ctx.report["split_outputs"] = rows[::-1]


def _coords(buf: Buffer, access: Access, op: Operation) -> list[Lin] | None:
    """Host coordinates of `access` per dim, or None when one is not affine in the vars."""
    out = []
    for stride, size in zip(contiguous_strides(buf.host_size), buf.host_size):
        c = simplify(mod(floordiv(access.index, stride), size), op.var_ranges)
        if any(not isinstance(a, Var) for a, _ in c.terms):
            return None
        out.append(c)
    return out


def _dense_writer(graph: Graph, name: str, users: list[Operation]) -> Operation | None:
    """The one op writing `name` densely (module docstring), else None."""
    writers = [op for op in users if op.output.buffer == name]
    if len(writers) != 1:
        return None
    op, buf = writers[0], graph.buffers[name]
    if op.loops or op.index_inputs or len(buf.host_size) < 1:
        return None
    ranges = dict(op.ranges)
    want = {}
    for stride, size in zip(contiguous_strides(buf.host_size), buf.host_size):
        if size > 1:
            want[stride] = size
    terms = dict(op.output.index.terms)
    if op.output.index.const or len(terms) != len(want):
        return None
    for atom, coeff in terms.items():
        if not isinstance(atom, Var) or want.get(coeff) != ranges.get(atom.name):
            return None
    last = _last_var(op)
    return op if last is not None and last not in op.reduced else None


def _last_var(op: Operation) -> str | None:
    """The var W's output index walks the last dim with (coefficient 1)."""
    return next((a.name for a, c in op.output.index.terms if c == 1 and isinstance(a, Var)),
                None)


def _blocks(graph: Graph, name: str, users: list[Operation]
            ) -> list[tuple[int, int]] | None:
    buf = graph.buffers[name]
    if buf.role != "intermediate" or name in graph.inputs or name in graph.outputs or \
            name in graph.mutated_buffers or name in graph.mutated_buffers.values():
        return None
    if sum(a.buffer == name for op in users for a in op.inputs) < 2:
        return None                     # one read cannot take two blocks (the cheap test)
    writer = _dense_writer(graph, name, users)
    if writer is None:
        return None
    width = buf.host_size[-1]
    stick = device_dtype_for(buf.host_dtype).elems_per_stick
    spans = set()
    for op in users:
        if op is writer:
            continue
        if any(a.buffer == name for a in op.index_inputs) or op.output.buffer == name:
            return None
        for a in op.inputs:
            if a.buffer != name:
                continue
            coords = _coords(buf, a, op)
            if coords is None:
                return None
            spans.add(value_range(coords[-1], op.var_ranges))
    blocks = sorted(spans)
    if len(blocks) < 2 or blocks[0][0] != 0 or blocks[-1][1] != width - 1:
        return None
    for (lo, hi), (nlo, _) in zip(blocks, blocks[1:]):
        if nlo != hi + 1:
            return None                   # overlapping or unread columns: keep it whole
    if any(lo % stick or (hi + 1) % stick for lo, hi in blocks):
        return None
    return [(lo, hi + 1) for lo, hi in blocks]


def _split(graph: Graph, name: str, blocks: list[tuple[int, int]],
           users: list[Operation]) -> list[Operation]:
    """Replace the writer of `name` by one op per block; re-address the readers. Returns the
    new ops."""
    buf = graph.buffers[name]
    writer = _dense_writer(graph, name, users)
    v = _last_var(writer)
    parts, pieces = {}, []
    for lo, hi in blocks:
        size = buf.host_size[:-1] + (hi - lo,)
        part = graph.add_buffer(replace(buf, name=graph.fresh_name(f"{name}__cols{lo}_{hi}"),
                                        host_size=size))
        parts[lo, hi] = part.name
        shift = {Var(v): as_lin(Var(v)) + lo}
        pieces.append(replace(
            writer, name=part.name,
            ranges=tuple((u, hi - lo if u == v else n) for u, n in writer.ranges),
            inputs=tuple(Access(a.buffer, substitute(a.index, shift)) for a in writer.inputs),
            output=Access(part.name, _index(_coords(buf, writer.output, writer), size)),
            core_splits=None))
    at = next(i for i, o in enumerate(graph.ops) if o is writer)   # by identity, not ==
    graph.ops[at:at + 1] = pieces
    for op in users:
        if op is not writer:
            op.inputs = tuple(_readdress(buf, op, a, parts) for a in op.inputs)
    del graph.buffers[name]
    return pieces


def _readdress(buf: Buffer, op: Operation, access: Access,
               parts: dict[tuple[int, int], str]) -> Access:
    """`access` of the split buffer, into the block buffer holding its columns."""
    if access.buffer != buf.name:
        return access
    coords = _coords(buf, access, op)
    first = value_range(coords[-1], op.var_ranges)[0]
    (lo, hi), part = next((b, p) for b, p in parts.items() if b[0] <= first < b[1])
    coords[-1] = coords[-1] - lo
    return Access(part, _index(coords, buf.host_size[:-1] + (hi - lo,)))


def _index(coords: list[Lin], size: tuple[int, ...]) -> Lin:
    """The flat host index of per-dim coordinates in a contiguous tensor of `size`."""
    return sum((c * s for c, s in zip(coords, contiguous_strides(size))), const(0))
