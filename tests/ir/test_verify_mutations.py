"""The verifier's check of in-place updates (`ir/verify_mutations.py`): a buffer updated in
place is written only by row writes or element-wise updates of its own constant."""

import numpy as np

from spyrec.indexing import Indirect, as_lin, var
from spyrec.ir import Graph
from spyrec.ir.graph import Access, Buffer, Operation
from spyrec.ir.verify_mutations import check_in_place


def _graph(writer: Operation, source: str = "cache") -> Graph:
    g = Graph()
    g.add_buffer(Buffer("b_cache", (4, 8), "float32", "constant", source=source))
    g.add_buffer(Buffer("x", (1, 8), "float32", "input"))
    g.add_buffer(Buffer("pos", (1,), "int64", "input"))
    g.inputs = ["x", "pos"]
    g.constants["b_cache"] = np.zeros((4, 8), np.float32)
    g.ops = [writer]
    g.mutated_buffers = {"cache": "b_cache"}
    return g


c0, c1 = var("c0"), var("c1")
ROW = Operation("w", "identity", (("c1", 8),), (Access("x", c1),),
                Access("b_cache", as_lin(Indirect("pos")).scale(8) + c1),
                index_inputs=(Access("pos", as_lin(0)),), index_bounds=((0, 4),))
SHIFT = Operation("w", "identity", (("c0", 3), ("c1", 8)),
                  (Access("b_cache", c0.scale(8) + c1 + as_lin(8)),),
                  Access("b_cache", c0.scale(8) + c1))
UPDATE = Operation("w", "add", (("c0", 4), ("c1", 8)), (Access("b_cache", c0.scale(8) + c1),),
                   Access("b_cache", c0.scale(8) + c1), constants={"scalar": 1})


def test_a_row_write_and_an_element_wise_update_pass():
    assert list(check_in_place(_graph(ROW), ())) == []
    assert list(check_in_place(_graph(UPDATE), ())) == []


def test_a_write_from_other_elements_of_the_buffer_is_named():
    assert list(check_in_place(_graph(SHIFT), ())) == [
        "op 'w' writes the in-place buffer cache ('b_cache') from other elements of it: not "
        "a row write or an element-wise update"]


def test_another_buffers_constant_is_named():
    assert list(check_in_place(_graph(ROW, source="other"), ())) == [
        "mutated buffer cache is updated in place in 'b_cache', the constant of 'other', not "
        "its own"]
