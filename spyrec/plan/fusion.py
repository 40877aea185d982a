"""Which consecutive ops become one fused SuperDSC (issue 58): the grouping the fusion pass
applies, as a function of the graph alone.

A fused SuperDSC lists several `computeOp_` entries, each on its unit (reference/I §1a: PT
for a matmul, SFP for vector and transcendental work), fed through the core's FIFOs and LX.
So a group is a producer chain that stays on each core: op b joins the group ending in op a
when

- b runs in the same loop nest as the group (the same `loop_identity`: one `sdsc_execute`
  per trip runs the whole group) on as many cores;
- b reads a buffer some member writes, and every buffer it reads from a member is held in
  LX (scratchpad_planning placed it: each core finds its own slice there, and the value
  never travels through HBM);
- neither is an op the fused form does not carry: an index check, a gather or scatter
  (indirect accesses), an op sized by a symbolic length or replicated over core groups.

Ops that are not joined stay one-op SuperDSCs. The grouping changes no value: the members
run in program order, each as its one-op file would (the simulator proves it bit for bit,
tests/passes/test_fusion.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spyrec.ir import Graph, Operation
from spyrec.ir.graph import loop_identity, nest_trips


@dataclass(frozen=True)
class FusionGroup:
    """One fused SuperDSC: its member ops (program order) and the intermediates its members
    pass each other in LX (written and read inside the group)."""

    ops: tuple[Operation, ...]
    kept: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.ops[0].name


def unit_of(op: Operation) -> str:
    """The unit a member runs on (`exUnit`): the PT array for a matmul, else the SFP."""
    return "pt" if op.op == "batchmatmul" else "sfp"


def _fusible(op: Operation) -> bool:
    return (op.core_splits is not None and not op.index_inputs and not op.is_scatter
            and not op.lengths and op.replicas == 1 and op.op != "wrapindex")


def _cores(op: Operation) -> int:
    return math.prod(op.core_splits.values())


def fusion_groups(graph: Graph) -> list[FusionGroup]:
    """Every group of two or more ops (see the module docstring), in program order."""
    groups: list[FusionGroup] = []
    run: list[Operation] = []
    written: set[str] = set()
    kept: list[str] = []

    def close() -> None:
        if len(run) > 1:
            groups.append(FusionGroup(tuple(run), tuple(kept)))

    for op in graph.ops:
        joined = run and _joins(graph, run[-1], op, written)
        if joined:
            kept.extend(b for b in dict.fromkeys(a.buffer for a in op.reads())
                        if b in written and b not in kept)
            run.append(op)
        else:
            close()
            run, kept, written = ([op], [], set()) if _fusible(op) else ([], [], set())
        if run:
            written.add(op.output.buffer)
    close()
    return groups


def _joins(graph: Graph, last: Operation, op: Operation, written: set[str]) -> bool:
    """Whether `op` continues the group whose last member is `last` (members' outputs:
    `written`)."""
    if not _fusible(op) or loop_identity(op.loops) != loop_identity(last.loops) or \
            _cores(op) != _cores(last):
        return False
    from_group = [a.buffer for a in op.reads() if a.buffer in written]
    return bool(from_group) and all(graph.buffers[b].lx_address is not None
                                    for b in from_group)


def kept_bytes(graph: Graph, group: FusionGroup) -> int:
    """The HBM bytes the group's intermediates would move as one-op SuperDSCs through HBM:
    each written once and read once per read access, per trip of the group's loops."""
    trips = nest_trips(group.ops[0].loops)
    total = 0
    for name in group.kept:
        nbytes = graph.buffers[name].layout.device_bytes
        reads = sum(1 for op in group.ops for a in op.reads() if a.buffer == name)
        total += nbytes * (1 + reads) * trips
    return total
