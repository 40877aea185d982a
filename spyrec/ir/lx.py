"""Which part of a buffer each core touches: the facts an LX (scratchpad) placement rests on.

A buffer in LX lives in every core's scratchpad at one offset, each core holding only its own
slice (issue 8 contract §1). That is sound only when every op that writes or reads the buffer
gives each core the same slice, so this module computes, per op and core, the box of device
coordinates an access touches. Core numbering is SuperDSC's (reference/F-superdsc.md §2.9, what
`codegen/superdsc.py` emits and the simulator reads): the op's core ranges
(`Operation.core_ranges`: iteration vars, and a replicated op's copies) in order, the first split
var fastest, each var's slices in order (a var a view cuts into several SuperDSC labels too:
the emitter walks its labels least significant first). scratchpad_planning decides with these
boxes; `ir/verify.py` re-checks them and codegen writes each LX tensor's per-core bytes from
them.

Replicas: an op may declare copies (`Operation.replicas`, printed `replicas N` in the text
IR): its core ranges then hold one more dim, `rep` (REPLICA_VAR), that no access uses and that
its core split splits over all its values, so the op runs alike on that many groups of cores,
each group computing the whole op into its own cores' LX; codegen writes that dim into the
op's iteration space. A declared field, not an iteration var: the verifier checks it and the
pass contracts say who writes it. A reader that splits a var its input does
not use (a matmul split over batch x N reading rows every N-core needs) keeps that input in LX
only if the input's writer is replicated so (`keeps_slices`); the same is true up the chain.
Writes are idempotent (every replica writes the same values), so the op's meaning is unchanged;
an output in HBM is never replicated (scratchpad_planning drops the replicas of an op whose
output stays in HBM).
"""

from __future__ import annotations

import math
from functools import lru_cache

from spyrec.indexing import Indirect, Ranges, Var, evaluate, value_range
from spyrec.indexing.sticks import access_coordinates
from spyrec.ir.graph import REPLICA_VAR, Access, Buffer, Graph, Operation, with_copies

Box = tuple[tuple[int, int], ...]   # inclusive (lo, hi) per device dim, lanes excluded


def core_slices(op: Operation) -> list[dict[str, tuple[int, int]]]:
    """Each core's half-open range per iteration var, in SuperDSC core order."""
    return split_slices(op.core_ranges, op.core_splits or {})


def split_slices(var_ranges: tuple[tuple[str, int], ...], splits: dict[str, int]
                 ) -> list[dict[str, tuple[int, int]]]:
    """Each core's half-open range per var of `var_ranges` split by `splits`, in SuperDSC
    core order (the first split var fastest)."""
    n_cores = math.prod(splits.get(v, 1) for v, _ in var_ranges)
    out = []
    for c in range(n_cores):
        q, ranges = 1, {}
        for v, n in var_ranges:
            k = splits.get(v, 1)
            s = (c // q) % k
            q *= k
            ranges[v] = (s * (n // k), (s + 1) * (n // k))
        out.append(ranges)
    return out


def core_boxes(buf: Buffer, op: Operation, access: Access) -> list[Box] | None:
    """Per core, the bounding box of device coordinates (all dims but the lanes) `access`
    touches; None for a gathered access (data-dependent: no fixed slice). Memoized on what
    the boxes depend on: scratchpad_planning, the verifier and codegen ask for the same
    accesses many times, at 32 cores x every device dim each."""
    return split_boxes(buf, op.core_ranges, tuple(sorted((op.core_splits or {}).items())),
                       access)


def split_boxes(buf: Buffer, core_ranges: tuple[tuple[str, int], ...],
                splits: tuple[tuple[str, int], ...], access: Access) -> list[Box] | None:
    """`core_boxes` of an op at `core_ranges` split as `splits` (sorted (dim, slices)
    pairs): a planner asks of a plan it has not written into the op."""
    boxes = _core_boxes(tuple(buf.host_size), tuple(buf.host_strides), buf.layout,
                        core_ranges, splits, access.index)
    return list(boxes) if boxes is not None else None


@lru_cache(maxsize=1 << 12)
def _core_boxes(host_size, host_strides, layout, var_ranges, splits, index
                ) -> tuple[Box, ...] | None:
    whole = Ranges({Var(v): (0, n - 1) for v, n in var_ranges})
    coords = access_coordinates(host_size, host_strides, layout, whole, index)
    if any(isinstance(leaf, Indirect) for c in coords for leaf in c.free_atoms()):
        return None
    # a coordinate's range depends only on its own vars' slices: cores that differ elsewhere
    # share it (a [rows x cols] split has 32 cores but 8 distinct row slices)
    uses = [sorted(a.name for a in c.free_atoms() if isinstance(a, Var)) for c in coords[:-1]]
    known: dict[tuple, tuple[int, int]] = {}
    boxes = []
    for ranges in split_slices(var_ranges, dict(splits)):
        box = []
        for k, (c, names) in enumerate(zip(coords, uses)):
            key = (k, *(ranges[v] for v in names))
            if key not in known:
                r = Ranges({Var(v): (ranges[v][0], ranges[v][1] - 1) for v in names})
                known[key] = value_range(c, r)
            box.append(known[key])
        boxes.append(tuple(box))
    return tuple(boxes)


def replica_ranges(op: Operation, count: int, fastest: bool = False
                   ) -> tuple[tuple[str, int], ...]:
    """`op`'s core ranges (`Operation.core_ranges`) were it run on `count` core groups (1:
    once), its copies the fastest dim of the core order or the slowest; `op` unchanged."""
    return with_copies(op.ranges, count, fastest)


def replica_fields(core_ranges: tuple[tuple[str, int], ...]) -> dict:
    """The `Operation` fields core ranges stand for: `ranges` (without the copies dim),
    `replicas` and `replicas_fastest` (for `dataclasses.replace` or `set_core_ranges`)."""
    copies = next((n for v, n in core_ranges if v == REPLICA_VAR), 1)
    return {"ranges": tuple((v, n) for v, n in core_ranges if v != REPLICA_VAR),
            "replicas": copies,
            "replicas_fastest": copies > 1 and core_ranges[0][0] == REPLICA_VAR}


def set_core_ranges(op: Operation, core_ranges: tuple[tuple[str, int], ...]) -> None:
    """Give `op` new core ranges in place (its copies added or dropped: a chosen plan
    applied, `plan/split_plan.py apply_plan`, or scratchpad_planning dropping copies),
    dropping the `var_ranges` cached from old iteration ranges."""
    fields = replica_fields(core_ranges)
    op.replicas, op.replicas_fastest = fields["replicas"], fields["replicas_fastest"]
    if fields["ranges"] != op.ranges:
        op.ranges = fields["ranges"]
        op.__dict__.pop("var_ranges", None)


def set_replicas(op: Operation, count: int, fastest: bool = False) -> None:
    """Make `op` run on `count` core groups (1: once), in place: its core ranges become
    `replica_ranges` and its split splits the copies over all of them. Core order decides
    which cores hold which copy: a reader's core must find the copy it reads, so the caller
    places the copies where the reader's own unmatched split var sits."""
    core, splits = replica_split(op.ranges, op.core_splits or {}, count, fastest)
    set_core_ranges(op, core)
    if op.core_splits is not None:
        op.core_splits = splits


def replica_split(ranges: tuple[tuple[str, int], ...], splits: dict[str, int], count: int,
                  fastest: bool = False) -> tuple[tuple[tuple[str, int], ...], dict[str, int]]:
    """(core ranges, split) of an op of iteration `ranges` split as `splits` once run on
    `count` core groups (`set_replicas`, which writes them; a planner trying a plan as a
    value asks): the copies dim split over all its values, the other dims as they were."""
    core = with_copies(ranges, count, fastest)
    out = {v: k for v, k in splits.items() if v != REPLICA_VAR}
    if count > 1:
        out[REPLICA_VAR] = count
        out = {v: out.get(v, 1) for v, _ in core}
    return core, out


def data_writer(writers: list[Operation]) -> Operation:
    """Of a buffer's writers (program order), the one that writes its data: the first
    outside loops that is not a zero `fill` of padding (matmul_padding's fill beside its
    copy), else the first (a K-tiled accumulator's fill before its loop). The split estimate prices
    readers against its slices; work_division aligns the other writers to it."""
    return next((op for op in writers if op.op != "fill" and not op.loops), writers[0])


def keeps_slices(reader: list[Box] | None, writer: list[Box] | None) -> bool:
    """Does each core of the reader read exactly the slice the writer's op gave that core
    (so it finds it in its own LX)? The reader may use fewer cores than the writer (a
    replicated writer's first copy serves an unreplicated reader)."""
    return reader is not None and writer is not None and len(reader) <= len(writer) and \
        reader == writer[:len(reader)]


def box_bytes(buf: Buffer, box: Box) -> int:
    """Bytes of one core's slice: whole sticks over the box."""
    return math.prod(hi - lo + 1 for lo, hi in box) * buf.layout.dtype.itemsize * \
        buf.layout.elems_per_stick


def writer_of(graph: Graph, name: str) -> Operation | None:
    """The first op that writes `name` (a per-tile buffer has exactly one)."""
    return next((op for op in graph.ops if op.output.buffer == name), None)


def slice_boxes(graph: Graph, buf: Buffer,
                writers: list[Operation] | None = None) -> list[Box] | None:
    """Each core's slice of `buf` in LX: the box its writers give that core, their union
    when several write parts of it (matmul_padding's zero fill of the padding rows beside
    the copy of the data); None if no op writes it or one writes through a gather.
    `writers`: every op that writes `buf`, in program order, when the caller has them (a
    caller asking for every buffer would otherwise scan the whole program per buffer)."""
    if writers is None:
        writers = [op for op in graph.ops if op.output.buffer == buf.name]
    per_writer = [core_boxes(buf, op, op.output) for op in writers]
    if not per_writer or any(b is None for b in per_writer):
        return None
    if len(per_writer) == 1:    # one writer: its boxes (the union below would copy them)
        return per_writer[0]
    out = []
    for c in range(max(len(b) for b in per_writer)):
        boxes = [b[c] for b in per_writer if c < len(b)]
        out.append(tuple((min(lo for lo, _ in dim), max(hi for _, hi in dim))
                         for dim in zip(*boxes)))
    return out


def fits_slices(buf: Buffer, op_boxes: list[Box] | None, slices: list[Box] | None) -> bool:
    """Does an op whose cores touch `op_boxes` stay inside each core's own slice, at a place
    every core's layout agrees on? Each core's box lies in that core's slice (fewer cores
    than the slices: the first ones), and along a dim where it is smaller than the slice,
    the slice spans the whole dim and the op's box is the same on every core (its offset
    is then one LX start address, and the per-core layout is the slice's)."""
    if op_boxes is None or slices is None or len(op_boxes) > len(slices):
        return False
    sizes, strides = buf.layout.device_size, buf.layout.device_strides_elems
    e = buf.layout.elems_per_stick
    for c, box in enumerate(op_boxes):
        for j, ((lo, hi), (s_lo, s_hi)) in enumerate(zip(box, slices[c])):
            if (lo, hi) == (s_lo, s_hi):
                continue
            # a part along dim j: inside the slice, which spans the dim, the same on every
            # core, in a layout where every dim steps by whole sticks (no stick two parts
            # could share)
            if not (s_lo <= lo and hi <= s_hi) or (s_lo, s_hi) != (0, sizes[j] - 1) or \
                    op_boxes[0][j] != (lo, hi) or any(st % e for st in strides[:-1]):
                return False
    return True


def tile_problem(buf: Buffer, op: Operation, access: Access,
                 slices: list[Box] | None) -> str | None:
    """Why `op`'s tile of `access` cannot address an LX buffer whose cores hold `slices`
    (core order), even where its boxes are those slices; None when it can. A SuperDSC op
    lays out each core's LX part from its *own* iteration space (codegen's `_lx_offset`,
    the simulator's per-core layout), so two ways to differ from the writer's:

    - the access starts inside a stick (its lane coordinate runs over a var and is not 0 at
      some core's first point: `x[..., 40:]`, a roll's shifted half): the tile holds
      ceil(N/E) sticks per row but its lanes straddle one more (fp16 [3, 5, 100] from lane
      40: 60 lanes over 2 sticks, numbered as 1), so a core meets the stick another core's
      slice put there;
    - along a device dim, the op's per-core extent is its own part P plus what its whole
      iteration leaves of the dim (size - N): a reader of the last rows of a roll over rows
      (2 of 6 rows on 2 cores, or one constant row) lays out 5 or 6 rows per core where the
      row-split writer put 1, and its window runs past the LX tensor. It must equal each
      core's slice.
    Gathers have no fixed tile (slices None there): no problem here."""
    splits = tuple(sorted((op.core_splits or {}).items()))
    return _tile_problem(tuple(buf.host_size), tuple(buf.host_strides), buf.layout,
                         op.core_ranges, splits, access.index,
                         None if slices is None else tuple(slices))


@lru_cache(maxsize=1 << 14)
def _tile_problem(host_size, host_strides, layout, var_ranges, splits, index,
                  slices: tuple | None) -> str | None:
    """`tile_problem` on hashable facts (memoized: scratchpad_planning runs once per
    stage_inputs trial and asks again for every access of every LX candidate)."""
    if _lane_shifted(host_size, host_strides, layout, var_ranges, splits, index):
        return "it starts inside a stick"
    boxes = _core_boxes(host_size, host_strides, layout, var_ranges, splits, index)
    if not boxes or not slices or len(boxes) > len(slices):
        return None
    sizes = layout.device_size
    whole = [(min(lo for lo, _ in dim), max(hi for _, hi in dim)) for dim in zip(*boxes)]
    for box, mine in zip(boxes, slices):
        for j, ((lo, hi), (w_lo, w_hi), (s_lo, s_hi)) in enumerate(zip(box, whole, mine)):
            extent = hi - lo + 1 + sizes[j] - (w_hi - w_lo + 1)
            if extent != s_hi - s_lo + 1:
                return (f"its tile lays out {extent} of device dim {j} per core, the "
                        f"slices {s_hi - s_lo + 1}")
    return None


@lru_cache(maxsize=1 << 12)
def _lane_shifted(host_size, host_strides, layout, var_ranges, splits, index) -> bool:
    """Does some core's part of the access start inside a stick (`tile_problem`)?"""
    whole = Ranges({Var(v): (0, n - 1) for v, n in var_ranges})
    lane = access_coordinates(host_size, host_strides, layout, whole, index)[-1]
    if not lane.free_atoms() or any(isinstance(leaf, Indirect) for leaf in lane.free_atoms()):
        return False
    return any(evaluate(lane, {Var(v): lo for v, (lo, _) in ranges.items()}) != 0
               for ranges in split_slices(var_ranges, dict(splits)))


def keeps_lx_slices(buf: Buffer, op: Operation, op_boxes: list[Box] | None, writes: bool,
                    slices: list[Box] | None,
                    writers: list[tuple[Operation, list[Box] | None]],
                    access: Access) -> bool:
    """The rule for an LX buffer (scratchpad_planning's condition (b), re-checked by the
    verifier). A writer writes each core's whole slice, or a part of it (`fits_slices`: at
    one offset on every core) when all writers but one are zero `fill`s of padding
    (matmul_padding: the copy of the data and the fill of the padding rows). A reader takes
    exactly the slices (the first cores' when it uses fewer: a replicated writer's first
    copy); where writers write parts, exactly what one of them wrote (the same tile layout:
    the simulator's LX tags number sticks by the op's tile). And the op's own tile of
    `access` must be laid out as the slices are (`tile_problem`)."""
    if tile_problem(buf, op, access, slices):
        return False
    if writes:
        return keeps_slices(op_boxes, slices) or fits_slices(buf, op_boxes, slices) and \
            sum(1 for w, _ in writers if w.op != "fill") <= 1
    if all(boxes == slices for _, boxes in writers):
        return keeps_slices(op_boxes, slices)
    return fits_slices(buf, op_boxes, slices) and any(keeps_slices(op_boxes, boxes)
                                                      for _, boxes in writers)


def lx_bytes_per_core(graph: Graph, buf: Buffer,
                      writers: list[Operation] | None = None) -> int:
    """Each core's share of an LX buffer: core 0's slice (`slice_boxes`; `writers` as
    there, from a caller asking for every buffer)."""
    boxes = slice_boxes(graph, buf, writers)
    return box_bytes(buf, boxes[0]) if boxes else buf.layout.device_bytes


def moves_with_loops(op: Operation, buffer: str) -> bool:
    """Does `op` access `buffer` at a place that moves from one loop trip to the next (an
    index using a var its loops tile, or an index tensor)? A whole buffer every looped op
    reads or updates in place (a weight each token tile multiplies by; the accumulator a
    K-tiled matmul adds each tile's partial into) is at the same place on every trip, so it
    may live in LX at one fixed offset like a buffer outside loops."""
    if not op.loops:
        return False
    tiled = {v for loop in op.loops for v in loop.tiled}
    return any(a.buffer == buffer and (a in op.index_inputs or tiled & {
        leaf.name for leaf in a.index.free_atoms() if isinstance(leaf, Var)})
        for a in op.reads() + (op.output,))
