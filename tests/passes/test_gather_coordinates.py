"""gather_coordinates, IR text in and out: an embedding lookup `emb[ids] + y` as the lowering
writes it (a gather `identity` whose index may be negative, then its one reader). The pass
puts a `wrapindex` op before the gather (it wraps -64..-1 once and faults on anything else),
points the gather at its int32 result, and fuses the gather into the add; a constant index is
wrapped at compile time instead. That the rewritten program computes eager's values is the
differential tests' job (tests/differential/test_gather_forms.py)."""

import numpy as np
import pytest

from spyrec.errors import UnsupportedProgram
from spyrec.ir.parser import parse
from spyrec.passes.gather_coordinates import GatherCoordinates
from spyrec.passes.registry import CompileContext
from tests.passes.textir import ir, run_pass

ROW = "[64*c0 + c1]"
ROWS = "over [c0<8, c1<64]"
EMB_ROW = "emb[c1 + 64*IndirectAccess('{}')]"    # row `ids[c0]` of the table, lane c1
LOOKUP = f"""
    buffer emb: constant float16[64, 64]
    buffer ids: input int64[8]
    buffer y: input float16[8, 64]
    buffer rows: intermediate float16[8, 64]
    buffer out: output float16[8, 64]
    op rows: rows{ROW} = identity({EMB_ROW.format("ids")}) {ROWS} gather [ids[c0]] bounds [-64..63]
    op out: out{ROW} = add(rows{ROW}, y{ROW}) {ROWS}
    inputs [ids, y]
    outputs [out]
"""
WRAPPED = "gather [ids__wrap64[c0]] bounds [0..63]"
WRAP = ('op ids__wrap64: ids__wrap64[c0] = wrapindex(ids[c0]) over [c0<8] attrs {"size": 64, '
        '"low": -64, "index_tensor": "ids", "index_shape": [8], "used_by": "rows"}')


def test_a_lookup_is_checked_then_fused_into_its_one_reader():
    ctx = CompileContext()
    assert run_pass(GatherCoordinates(), LOOKUP, ctx) == ir(f"""
    buffer emb: constant float16[64, 64]
    buffer ids: input int64[8]
    buffer y: input float16[8, 64]
    buffer out: output float16[8, 64]
    buffer ids__wrap64: intermediate int32[8]
    {WRAP}
    op out: out{ROW} = add({EMB_ROW.format("ids__wrap64")}, y{ROW}) {ROWS} {WRAPPED}
    inputs [ids, y]
    outputs [out]
    """)
    assert ctx.report["gather_coordinates"] == {
        "gathers": 1, "scatters": 0, "fused": 1, "unfused": 0, "index_checks": 1,
        "fuse": True, "list": [{"gather": "rows", "into": "out", "op": "add"}]}


ADD = "add(rows[64*c0 + c1], y[64*c0 + c1])"
SQUARE = "mul(rows[64*c0 + c1], rows[64*c0 + c1])"


@pytest.mark.parametrize("fuse, reader, why", [
    (False, ADD, "fuse: false"),
    (True, SQUARE, "read twice by its reader: fusing would gather twice"),
])
def test_a_gather_that_cannot_fuse_is_only_checked(fuse, reader, why):
    ctx = CompileContext()
    after = run_pass(GatherCoordinates(fuse=fuse), LOOKUP.replace(ADD, reader), ctx)
    assert [line for line in after.splitlines() if line.startswith("op ")] == [
        WRAP,
        f"op rows: rows{ROW} = identity({EMB_ROW.format('ids__wrap64')}) {ROWS} {WRAPPED}",
        f"op out: out[64*c0 + c1] = {reader} {ROWS}"], why
    report = ctx.report["gather_coordinates"]
    assert (report["fused"], report["unfused"], report["index_checks"]) == (0, 1, 1)


CONSTANT_IDS = LOOKUP.replace("buffer ids: input int64[8]", "buffer ids: constant int64[8]") \
    .replace("inputs [ids, y]", "inputs [y]")


def test_a_constant_index_is_wrapped_at_compile_time():
    ids = np.array([1, -2, 3, 0, 5, -64, 7, 63])
    graph = parse(ir(CONSTANT_IDS), {"ids": ids})
    GatherCoordinates().run(graph, CompileContext())
    assert [op.name for op in graph.ops] == ["out"]      # no wrapindex op: checked here
    assert graph.buffers["ids__wrapped"].role == "constant"
    assert graph.constants["ids__wrapped"].tolist() == [1, 62, 3, 0, 5, 0, 7, 63]
    assert graph.constants["ids__wrapped"].dtype == np.int32
    assert graph.ops[0].index_inputs[0].buffer == "ids__wrapped"


def test_a_constant_index_out_of_range_is_refused_naming_the_value():
    ids = np.array([1, 2, 3, 0, 5, 64, 7, 8])
    graph = parse(ir(CONSTANT_IDS), {"ids": ids})
    with pytest.raises(UnsupportedProgram) as err:
        GatherCoordinates().run(graph, CompileContext())
    assert str(err.value) == ("rows: the constant index tensor ids (constant) holds 64 at "
                              "position [5], outside -64..63 for a dim of size 64 (unknown "
                              "source line)")
