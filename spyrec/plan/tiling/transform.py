"""Rewrite the graph for a resolved tiling plan: counted loops, per-tile buffers, accumulators.

Input: a `TilingPlan` (config.py) — per group, its ops and, per op and loop level, the
iteration var that carries the level's dim. Output: the IR of the tiling contract
(DESIGN §4–5): ops inside loops have one tile's ranges and `loops`; intermediates used only
inside one loop body become `per_tile` buffers of the tile's shape; everything else stays a
full buffer whose accesses advance by a constant device-address step per iteration.

The order of `graph.ops` is the program; loops are maximal runs of consecutive ops sharing a
loop level. So every rewrite here keeps program order and only *inserts* ops, and a loop
that cannot stay in one piece simply becomes two loops (two nests) — still correct:

- **depth**: an op carries a prefix of the group's levels (the outer `d` ones) and runs inside
  those `d` loops. An op carrying no level runs outside the nest (moved before it when
  nothing in the group feeds it). An op that carries an inner level but not an outer one
  would be repeated by the outer loop: refused with that reason.
- **reductions over a tiled dim** (sum, mean, max, min, matmul K; reference/G §3.1 monoid
  accumulators): the reduction writes a per-tile partial; `combine` folds it into an fp32
  accumulator filled with the identity before the loop; after the loop one copy writes the
  result (a mean's `scaling_factor` is 1/the whole reduced size, so its partials add up). A consumer that needs the full
  reduction inside the same loop lands after that op, in a second nest (DESIGN §6: "two
  nests, never tile-local and wrong").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from spyrec.errors import ConfigError
from spyrec.indexing import Indirect, Var
from spyrec.ir import Access, Buffer, Graph, Loop, Operation
from spyrec.plan.tiles import (
    host_advance, host_box, moving_tile_problem, retile_index, shift_index, tile_buffer_layout,
)

# reduction op -> (combine op, identity of the accumulator). max/min start from the most
# extreme finite fp32 (the JSON files carry no infinities); a tile whose values are all -inf
# then combines to -3.4e38 instead of -inf (noted in DESIGN-level docs of the pass).
ACCUMULATE = {"sum": ("add", 0.0), "mean": ("add", 0.0), "batchmatmul": ("add", 0.0),
              "max": ("maximum", -3.4028234663852886e38),
              "min": ("minimum", 3.4028234663852886e38)}
FLOAT_DTYPES = ("float16", "bfloat16", "float32")


@dataclass
class Placed:
    """One op of a group's rewritten sequence and how many of the group's levels enclose it."""

    op: Operation
    depth: int


@dataclass
class GroupReport:
    index: int
    loops: list[dict]
    ops: int
    per_tile: list[str] = field(default_factory=list)
    accumulators: list[dict] = field(default_factory=list)
    hoisted: list[str] = field(default_factory=list)
    nests: int = 0

    def to_json(self) -> dict:
        return {"group": self.index, "loops": self.loops, "ops": self.ops,
                "nests": self.nests, "per_tile": self.per_tile,
                "accumulators": self.accumulators, "hoisted": self.hoisted}


def tile_graph(graph: Graph, plan) -> list[dict]:
    """Apply every group of `plan` to `graph`; returns one report row per group."""
    return [_GroupTiler(graph, group).run().to_json() for group in plan.groups]


class _GroupTiler:
    def __init__(self, graph: Graph, group) -> None:
        self.g, self.group = graph, group
        self.counts = [level.count for level in group.levels]
        self.report = GroupReport(group.index, [{"dim": lv.dim, "count": lv.count}
                                                for lv in group.levels], len(group.ops))

    def fail(self, msg: str) -> None:
        raise ConfigError(f"{self.group.where}: {msg}")

    def describe(self, op: Operation) -> str:
        node = f" (node {op.node}" + (f", {op.source})" if op.source else ")") \
            if op.node else (f" ({op.source})" if op.source else "")
        return f"op {op.name}{node}"

    # --- the pipeline of one group ------------------------------------------------------------

    def run(self) -> GroupReport:
        by_name = {op.name: op for op in self.g.ops}
        members = [by_name[n] for n in self.group.ops]
        seq: list[Placed] = []
        for op in members:
            seq += self._tile_op(op)
        seq = self._hoist(seq)
        self._splice(members, [p.op for p in seq])
        self.report.nests = _count_nests(seq)
        self._per_tile_buffers(seq)
        self._check_advances(seq)
        return self.report

    def _levels_of(self, op: Operation) -> list[str | None]:
        return list(self.group.vars[op.name])

    def _tile_op(self, op: Operation) -> list[Placed]:
        """The op with one tile's ranges and its loops; a reduction over a tiled var becomes
        partial + combine (the fill and the final write are placed by `_accumulate`)."""
        carried = self._levels_of(op)
        depth = 0
        while depth < len(carried) and carried[depth] is not None:
            depth += 1
        inner = [lv for lv in range(depth, len(carried)) if carried[lv] is not None]
        if inner:
            lv = inner[0]
            self.fail(f"{self.describe(op)} carries dim {self.group.levels[lv].dim} of loop "
                      f"level {lv + 1} but not dim {self.group.levels[depth].dim} of level "
                      f"{depth + 1}, so the outer loop would repeat it "
                      f"{self.counts[depth]} times; put {self.group.levels[lv].dim} outside "
                      f"{self.group.levels[depth].dim} in `loops`, or leave the op out of "
                      f"the group")
        for _, a in op.accesses():
            leaves = a.index.free_atoms()
            moved = {leaf.name for leaf in leaves if isinstance(leaf, Var)} & \
                set(carried[:depth])
            if any(isinstance(leaf, Indirect) for leaf in leaves) and moved:
                # inside loops the index tensor is tiled, the value tensor is not (issue 9
                # §5): the gathered tensor's start address cannot move with the loop
                self.fail(f"{self.describe(op)} reads '{a.buffer}' at gathered positions and "
                          f"also along the tiled var(s) {', '.join(sorted(moved))}; tile the "
                          f"index tensor's dims only, or leave the op out of the group")
        sizes = dict(op.ranges)
        ranges = []
        for v, n in op.ranges:
            level = carried.index(v) if v in carried[:depth] else None
            if level is not None:
                count = self.counts[level]
                if n % count:
                    self.fail(f"loop over {self.group.levels[level].dim} counts {count}, "
                              f"which does not divide {v} = {n} of {self.describe(op)}")
                n //= count
            ranges.append((v, n))
        loops = tuple(Loop(self.counts[lv], (carried[lv],), f"g{self.group.index}.{lv}")
                      for lv in range(depth))
        tiled = replace(op, ranges=tuple(ranges), loops=loops)
        reduced_levels = [lv for lv in range(depth) if carried[lv] in op.reduced]
        if not reduced_levels:
            return [Placed(tiled, depth)]
        if len(reduced_levels) > 1:
            self.fail(f"{self.describe(op)} reduces over two tiled dims; tile at most one "
                      f"of its reduced dims")
        return self._accumulate(op, tiled, depth, reduced_levels[0], sizes)

    def _accumulate(self, op: Operation, tiled: Operation, depth: int, level: int,
                    sizes: dict[str, int]) -> list[Placed]:
        if op.op not in ACCUMULATE:
            self.fail(f"{self.describe(op)} is a {op.op} over the tiled dim "
                      f"{self.group.levels[level].dim}; only sum, mean, max, min and matmul K "
                      f"can be split into tiles (an {op.op} has no partial result to combine)")
        g = self.g
        out = g.buffers[op.output.buffer]
        dtype = "float32" if out.host_dtype in FLOAT_DTYPES else out.host_dtype
        acc = g.add_buffer(Buffer(g.fresh_name(f"{out.name}__acc"), out.host_size, dtype,
                                  "intermediate", source=out.source,
                                  layout=tile_buffer_layout(out, out.host_size, dtype)))
        part = g.add_buffer(Buffer(g.fresh_name(f"{out.name}__part"), out.host_size, dtype,
                                   "intermediate", source=out.source, layout=acc.layout))
        combine_op, identity = ACCUMULATE[op.op]
        index = op.output.index
        partial = replace(tiled, name=part.name, output=Access(part.name, index))
        combine = replace(tiled, name=f"{acc.name}.1", op=combine_op, reduced=(),
                          ranges=tuple((v, n) for v, n in tiled.ranges if v not in op.reduced),
                          inputs=(Access(acc.name, index), Access(part.name, index)),
                          output=Access(acc.name, index), constants={}, index_inputs=(),
                          index_bounds=(),
                          # the combine runs every iteration of the reduced level at the
                          # same place: that level divides none of its vars
                          loops=tuple(replace(loop, tiled=()) if loop.tiled[0] in op.reduced
                                      else loop for loop in tiled.loops))
        # fill and final write: the output vars, tiled only by the levels outside `level`
        outer = tiled.loops[:level]
        outer_vars = {loop.tiled[0] for loop in outer}
        out_ranges = tuple((v, n if v in outer_vars else sizes[v]) for v, n in tiled.ranges
                           if v not in op.reduced)
        fill = replace(tiled, name=acc.name, op="fill", reduced=(), ranges=out_ranges,
                       inputs=(), output=Access(acc.name, index), constants={"value": identity},
                       index_inputs=(), index_bounds=(), loops=outer)
        # a mean scales by 1/(the whole reduced size) (its `scaling_factor`), so each tile's
        # partial is already its share of the mean: the partials add up to it
        final = replace(fill, name=op.name, op="identity",
                        inputs=(Access(acc.name, index),), output=op.output, constants={})
        self.report.accumulators.append({"op": op.name, "reduction": op.op,
                                         "accumulator": acc.name, "partial": part.name,
                                         "level": level})
        return [Placed(fill, -1 - level), Placed(partial, depth), Placed(combine, depth),
                Placed(final, -1 - level)]

    # --- sequence ---------------------------------------------------------------------------

    def _hoist(self, seq: list[Placed]) -> list[Placed]:
        """Place fills and final writes (depth marked -1-level) around the runs of deeper ops
        they belong to, then move ops that carry no level and need nothing from the group in
        front of the nest."""
        seq = self._place_accumulators(seq)
        front, rest = [], []
        for p in seq:
            if p.depth == 0 and not _depends_on(p.op, [q.op for q in rest]):
                front.append(p)
                self.report.hoisted.append(p.op.name)
            else:
                rest.append(p)
        return front + rest

    def _place_accumulators(self, seq: list[Placed]) -> list[Placed]:
        while True:   # first unplaced [fill, partial, combine, final] from _accumulate
            i = next((i for i, p in enumerate(seq) if p.depth < 0 and p.op.op == "fill"),
                     None)
            if i is None:
                return seq
            fill, partial, combine, final = seq[i:i + 4]
            level = -1 - fill.depth
            fill.depth = final.depth = level
            body = seq[:i] + seq[i + 1:i + 3] + seq[i + 4:]
            at = i
            while at > 0 and body[at - 1].depth > level:
                at -= 1
            body.insert(at, fill)
            end = body.index(combine) + 1
            while end < len(body) and body[end].depth > level and \
                    final.op.output.buffer not in {a.buffer for a in body[end].op.reads()}:
                end += 1
            body.insert(end, final)
            seq = body

    def _splice(self, members: list[Operation], new_ops: list[Operation]) -> None:
        """Replace the group's ops by `new_ops`, made contiguous: ops between the group's
        first and last op that do not depend on the group move before it, the rest after
        (config.py has refused groups that an outside op both feeds and depends on)."""
        ops = self.g.ops
        ids = {id(op) for op in members}
        where = [i for i, op in enumerate(ops) if id(op) in ids]
        first, last = where[0], where[-1]
        before, after, group_writes = [], [], set()
        for op in ops[first:last + 1]:
            if id(op) in ids:
                group_writes.add(op.output.buffer)
                continue
            reads = {a.buffer for a in op.reads()} | {op.output.buffer}
            if reads & group_writes:
                after.append(op)
                group_writes.add(op.output.buffer)
            else:
                before.append(op)
        self.g.ops = ops[:first] + before + new_ops + after + ops[last + 1:]

    # --- buffers ----------------------------------------------------------------------------

    def _per_tile_buffers(self, seq: list[Placed]) -> None:
        """Intermediates written and read only inside one loop body, through the same tile
        box moving the same way, become one-tile buffers (DESIGN §4 `per_tile_fixed`)."""
        instance = _instances(seq)
        users: dict[str, list[Placed]] = {}
        for p in seq:
            for _, a in p.op.accesses():
                users.setdefault(a.buffer, [])
                if not users[a.buffer] or users[a.buffer][-1] is not p:
                    users[a.buffer].append(p)
        outside = {a.buffer for op in self.g.ops if not any(op is p.op for p in seq)
                   for _, a in op.accesses()}
        protected = set(self.g.outputs) | set(self.g.mutated_buffers.values())
        for name, placed in users.items():
            buf = self.g.buffers[name]
            if (buf.role != "intermediate" or name in protected or name in outside
                    or buf.per_tile or not any(p.op.output.buffer == name for p in placed)):
                continue
            paths = {instance[id(p)] for p in placed}
            if len(paths) != 1 or not next(iter(paths)):
                continue
            accesses = [(p.op, a) for p in placed for role, a in p.op.accesses()
                        if a.buffer == name and role != "index"]
            if any(isinstance(leaf, Indirect) for _, a in accesses
                   for leaf in a.index.free_atoms()) or \
                    any(a.buffer == name for p in placed for a in p.op.index_inputs):
                continue
            box = self._common_box(buf, accesses)
            if box is None:
                continue
            self._make_per_tile(buf, box, accesses)

    def _common_box(self, buf: Buffer, accesses) -> tuple | None:
        boxes = {host_box(buf, op, a.index) for op, a in accesses}
        if len(boxes) != 1:
            return None
        box = boxes.pop()
        depth = len(accesses[0][0].loops)
        for level in range(depth):
            moves = set()
            for op, a in accesses:
                loop = op.loops[level]
                moves.add(host_advance(buf, op, a.index, loop.tiled[0],
                                       dict(op.ranges)[loop.tiled[0]])
                          if loop.tiled else (0,) * len(buf.host_size))
            if len(moves) != 1 or None in moves:
                return None
        return box

    def _make_per_tile(self, buf: Buffer, box, accesses) -> None:
        full = replace(buf)
        lo = tuple(b[0] for b in box)
        shape = tuple(b[1] - b[0] for b in box)
        buf.host_size = shape
        buf.layout = tile_buffer_layout(full, shape, full.host_dtype)
        buf.per_tile = True
        self.report.per_tile.append(buf.name)

        def retile(op: Operation, a: Access) -> Access:
            if a.buffer != buf.name:
                return a
            return Access(a.buffer, retile_index(full, lo, shape, a.index, op.var_ranges))

        for i, op in enumerate(self.g.ops):
            if not any(a.buffer == buf.name for _, a in op.accesses()):
                continue
            self.g.ops[i] = replace(op, inputs=tuple(retile(op, a) for a in op.inputs),
                                    output=retile(op, op.output))

    def _check_advances(self, seq: list[Placed]) -> None:
        """Every full-buffer access inside a loop moves by one constant device-address step
        per iteration, and each trip's tile is exactly the untiled access there (DESIGN §5,
        `plan/tiles.moving_tile_problem`); else the tiling is refused, naming op, tensor and
        dim. A constant step between the first tiles does not rule out a view's floor/mod
        wrapping inside a later one (a wrapped reshape's `Mod(c1 + 71, 300)` read past the
        tensor's end on the last of 3 tiles). --tiling auto skips such a candidate."""
        live = {op.name: op for op in self.g.ops}
        for p in seq:
            op = live[p.op.name]
            for _, a in op.accesses() if op.loops else ():
                buf = self.g.buffers[a.buffer]
                found = moving_tile_problem(buf, op, a)
                if found is None:
                    continue
                level, problem = found
                if level is not None:
                    loop = op.loops[level]
                    step = dict(op.ranges)[loop.tiled[0]]
                    self.fail(f"tiling {self.group.levels[level].dim} into {loop.count} "
                              f"tiles of {step} makes the tiles of '{buf.name}' in "
                              f"{self.describe(op)} something other than a constant "
                              f"shift in its device layout {list(buf.layout.device_size)} "
                              f"(a tile that splits a stick or wraps a dim); choose a "
                              f"count whose tiles are whole sticks and whole rows")
                dims = ", ".join(dict.fromkeys(self.group.levels[lv].dim for lv, loop in
                                               enumerate(op.loops) if loop.tiled))
                self.fail(f"tiling {dims} makes the tiles of '{buf.name}' in "
                          f"{self.describe(op)} differ from the untiled access: its index "
                          f"{a.index} wraps inside a tile ({problem.split(' (')[0]}); choose a "
                          f"count whose tile boundaries fall on the wrap points, or leave the "
                          f"op out of the group")


def _depends_on(op: Operation, before: list[Operation]) -> bool:
    written = {o.output.buffer for o in before}
    touched = written | {a.buffer for o in before for a in o.reads()}
    return bool({a.buffer for a in op.reads()} & written) or op.output.buffer in touched


def _instances(seq: list[Placed]) -> dict[int, tuple[int, ...]]:
    """Each op's loop instance path: per enclosing level, which run of that level it is in
    (a new run starts whenever an op at a shallower depth comes between)."""
    counters: list[int] = []
    prev_depth = 0
    out = {}
    for p in seq:
        d = len(p.op.loops)
        for level in range(d):
            if level >= len(counters):
                counters.append(0)
            elif level >= prev_depth:
                counters[level] += 1
        out[id(p)] = tuple(counters[:d])
        prev_depth = d
    return out


def _count_nests(seq: list[Placed]) -> int:
    nests, inside = 0, False
    for p in seq:
        if p.op.loops and not inside:
            nests += 1
        inside = bool(p.op.loops)
    return nests


# --- the unrolled form ---------------------------------------------------------------------


def unroll(graph: Graph) -> int:
    """Replace every loop nest by the iterations it runs (a trip span's range only), in
    order: one op per iteration, indices of full buffers shifted to the iteration's tile,
    per-tile buffers reused (the reference's unroller; DESIGN §5 "must simulate to the same
    result"). Returns the ops added."""
    out: list[Operation] = []
    i, ops = 0, graph.ops
    while i < len(ops):
        if not ops[i].loops:
            out.append(ops[i])
            i += 1
            continue
        j = _run_end(ops, i, 0)
        out += _unroll_run(graph, ops[i:j], 0, ())
        i = j
    added = len(out) - len(graph.ops)
    graph.ops = out
    return added


def _run_end(ops: list[Operation], i: int, depth: int) -> int:
    key = ops[i].loops[depth].identity
    j = i
    while j < len(ops) and len(ops[j].loops) > depth and ops[j].loops[depth].identity == key:
        j += 1
    return j


def _unroll_run(graph: Graph, run: list[Operation], depth: int,
                iters: tuple[int, ...]) -> list[Operation]:
    """The ops of `run` (sharing their loop at `depth`) for each trip that loop runs inside
    the enclosing iterations `iters` (a trip span runs only its range)."""
    out: list[Operation] = []
    for it in run[0].loops[depth].trips(iters[-1] if iters else 0):
        here = iters + (it,)
        k = 0
        while k < len(run):
            op = run[k]
            if len(op.loops) == depth + 1:
                out.append(_instantiate(graph, op, here))
                k += 1
            else:
                end = _run_end(run, k, depth + 1)
                out += _unroll_run(graph, run[k:end], depth + 1, here)
                k = end
    return out


def _instantiate(graph: Graph, op: Operation, iters: tuple[int, ...]) -> Operation:
    sizes = dict(op.ranges)
    shifts: dict[str, int] = {}
    for loop, it in zip(op.loops, iters):
        for v in loop.tiled:
            shifts[v] = shifts.get(v, 0) + it * sizes[v]

    def moved(a: Access) -> Access:
        if graph.buffers[a.buffer].per_tile:
            return a
        return Access(a.buffer, shift_index(a.index, shifts))

    suffix = "_".join(str(i) for i in iters)
    return replace(op, name=f"{op.name}.it{suffix}", inputs=tuple(map(moved, op.inputs)),
                   index_inputs=tuple(map(moved, op.index_inputs)), output=moved(op.output),
                   loops=())


__all__ = ["ACCUMULATE", "tile_graph", "unroll"]
