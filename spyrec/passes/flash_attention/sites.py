"""The attention pattern the flash rewrite takes (flash.py), found in the untiled IR.

`softmax(chain(q @ kᵀ)) @ v`: what the front end makes of `scaled_dot_product_attention`
and what a model's own `softmax(q @ k.T * scale + mask) @ v` lowers to. The matcher accepts
only the shape the rewrite can take exactly and leaves anything else materialized: every
intermediate read only inside the pattern, one reduced var per reduction, scores
[..., S, L] with the max and sum kept as [..., S, 1]. With it come the ops computing a
[.., S, L] mask operand of the chain (recomputed per tile) and the copies gathering K or V
pages through a block table (gathered per key tile).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from spyrec.ir import Access, Graph, Operation
from spyrec.plan.tiling.dimnames import dim_vars

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
    # a symbolic number of queries or keys (issue 30): tiles must divide every admissible
    # length, i.e. this granularity (0: a static length, tiles divide `queries`/`keys`)
    query_granule: int = 0
    key_granule: int = 0
    query_shortest: int = 0     # the shortest admissible number of queries (symbolic)
    # a symbolic number of queries that ops may run whole (`symbolic_lengths.mode: sized`):
    # a tile of every query is then allowed, its ops sized by the length (no query loop)
    query_whole: bool = False

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
            users = readers.setdefault(a.buffer, [])
            if not users or users[-1] is not op:    # an op reading a buffer twice: once
                users.append(op)
    kept = set(graph.outputs) | set(graph.mutated_buffers.values())
    sites = []
    position = {id(op): i for i, op in enumerate(graph.ops)}
    for op in graph.ops:
        site = _match(graph, op, writer, readers, kept, position)
        if site is not None:
            sites.append(site)
    return sites


def unshare_masks(graph: Graph, sites: list[AttentionSite]) -> int:
    """Give each attention its own copy of a mask computed for several (transformers builds
    one causal mask for every layer): a mask an attention reads alone moves into its key
    loop and is computed per tile from position vectors, never written whole (a shared one
    would be an [S, L] table in HBM, or, for a symbolic length, a block no loop can tile).
    `sites`: `find_sites(graph)`, to be found again when ops were added. Returns the ops
    added; the graph is unchanged when no mask is shared."""
    writer = {op.output.buffer: op for op in graph.ops}
    chain_ops = {n for site in sites for n in site.chain}
    readers: dict[str, list[Operation]] = {}
    for op in graph.ops:
        for a in op.reads():
            readers.setdefault(a.buffer, []).append(op)
    added: list[tuple[Operation, Operation]] = []        # (original, copy)
    position = {id(o): i for i, o in enumerate(graph.ops)}    # ops are replaced in place
    for i, op in enumerate(list(graph.ops)):
        if op.name not in chain_ops:
            continue
        shape = graph.buffers[op.output.buffer].host_size[-2:]
        for a in op.inputs:
            closure = _mask_closure(graph, writer, a.buffer, shape, position)
            users = {id(u) for u in readers.get(a.buffer, [])}
            if not closure or len(users) < 2 or readers[a.buffer][0] is op:
                continue
            renamed = {m.output.buffer: f"{m.output.buffer}__{op.name}" for m in closure}
            for m in closure:
                graph.add_buffer(replace(graph.buffers[m.output.buffer],
                                         name=renamed[m.output.buffer]))
                added.append((m, _renamed(m, renamed, f"{m.name}__{op.name}")))
            graph.ops[i] = op = _renamed(op, renamed, op.name)
    if added:
        graph.ops[:] = _with_copies(graph.ops, added)
    return len(added)


def _with_copies(ops: list[Operation], added: list[tuple[Operation, Operation]]
                 ) -> list[Operation]:
    """`ops` with each copy right after its original, the copies of one original latest
    first (each was inserted just after it, in turn); one pass, not an insert per copy."""
    after: dict[int, list[Operation]] = {}
    for original, copy in added:
        after.setdefault(id(original), []).insert(0, copy)
    out: list[Operation] = []
    for op in ops:
        out.append(op)
        out += after.get(id(op), ())
    return out


def _mask_closure(graph, writer, buf: str, shape, position: dict[int, int]) -> list[Operation]:
    """The elementwise ops computing mask operand `buf` of shape [.., S, L] (and the [.., S,
    L] operands they read), in program order (`position`: each op's index, by `id`); [] when
    `buf` is not such a mask."""
    found: list[Operation] = []
    todo = [buf]
    while todo:
        op = writer.get(todo.pop())
        if op is None or any(op is f for f in found) or op.reduced or op.index_inputs or \
                op.loops or op.op == "batchmatmul" or \
                graph.buffers[op.output.buffer].host_size[-2:] != shape or \
                graph.buffers[op.output.buffer].role != "intermediate" or \
                dim_vars(graph.buffers[op.output.buffer], op) is None:
            continue                   # not a mask op: its result is read as it is
        found.append(op)
        todo += [a.buffer for a in op.inputs
                 if graph.buffers[a.buffer].host_size[-2:] == shape]
    return sorted(found, key=lambda o: position[id(o)])


def _renamed(op: Operation, buffers: dict[str, str], name: str) -> Operation:
    """`op` reading and writing the renamed buffers, called `name`."""
    def moved(a: Access) -> Access:
        return Access(buffers.get(a.buffer, a.buffer), a.index)
    return replace(op, name=name, inputs=tuple(moved(a) for a in op.inputs),
                   output=moved(op.output))


def _match(graph, out, writer, readers, kept, position: dict[int, int]
           ) -> AttentionSite | None:
    """The site whose last op is `out` (probs @ v), or None (`position`: each op's index in
    the program, by `id`)."""
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
    if not all(dim_vars(graph.buffers[op.output.buffer], op) is not None
               for op in members):
        return None
    masks = _mask_ops(graph, chain, writer, only, x.host_size[-2:])
    members += masks
    gathers = [g for g in (_gather_of(graph, scores, writer, only),
                           _gather_of(graph, out, writer, only)) if g is not None]
    members += gathers
    return AttentionSite(
        tuple(m.name for m in sorted(members, key=lambda m: position[id(m)])), scores.name,
        tuple(c.name for c in chain), top.name, max_guard.name if max_guard else None,
        shifted.name, exp.name, total.name, sum_guard.name if sum_guard else None,
        probs.name, out.name, x.host_size[-2], x.host_size[-1],
        x.host_size[-3] if len(x.host_size) >= 3 else 1,
        dict(scores.ranges)[scores.reduced[0]], out_buf.host_size[-1],
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
                    or not only(a.buffer, user) or dim_vars(buf, op) is None:
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
            dim_vars(graph.buffers[op.output.buffer], op) is None:
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


__all__ = ["AttentionSite", "FlashTiles", "find_sites", "FLT_MAX"]
