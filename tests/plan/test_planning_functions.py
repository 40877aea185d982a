"""The planning layer's functions answer without changing the graph they are asked about:
`place_lx` computes a placement that only `apply_lx` writes, and `replica_candidates` yields
(ranges, split) pairs for a replicated op while the op keeps its own ranges."""

from spyrec.ir.parser import parse
from spyrec.ir.printer import format_graph
from spyrec.plan.lx_placement import apply_lx, place_lx
from spyrec.plan.split_candidates import replica_candidates
from tests.passes.test_scratchpad_planning import seed
from tests.passes.textir import ir

PROGRAM = seed()     # a per-tile intermediate y that fits LX (32 KiB per core)


def test_place_lx_writes_nothing_and_apply_lx_writes_its_answer():
    graph = parse(ir(PROGRAM))
    before = format_graph(graph)
    placement = place_lx(graph, budget=1 << 20)
    assert format_graph(graph) == before
    assert placement.addresses == {"y": 0} and placement.peak == 32768
    assert placement.rows["y"]["placed"] is True
    apply_lx(graph, placement)
    assert graph.buffers["y"].lx_address == 0
    # too small a budget: the same buffer, refused with the reason
    refused = place_lx(parse(ir(PROGRAM)), budget=1024)
    assert refused.addresses == {} and "exceeds the LX budget" in refused.rows["y"]["reason"]


def test_replica_candidates_leave_the_op_as_it_is():
    graph = parse(ir(PROGRAM))
    op = graph.ops[0]
    ranges, splits = op.ranges, op.core_splits
    got = list(replica_candidates(graph, op, 2, 32))
    assert (op.ranges, op.core_splits) == (ranges, splits)
    # slowest, then fastest: the replica var split over both copies in every candidate
    assert {r for r, _ in got} == {(("c0", 512), ("c1", 1024), ("rep", 2)),
                                   (("rep", 2), ("c0", 512), ("c1", 1024))}
    assert all(split["rep"] == 2 for _, split in got)
    assert [s for r, s in got if r == ranges] == []
    assert list(replica_candidates(graph, op, 1, 32))[0][0] == ranges
