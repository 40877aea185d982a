"""LoopSpec nesting of op specs (the seed's 2x4 loop nest around two ops)."""

from spyrec.codegen.opspec import spec_tree
from spyrec.indexing import var
from spyrec.ir import Access, Loop, Operation


def _op(name, loops=()):
    a = Access(name, var("c0"))
    return Operation(name, "add", (("c0", 8),), (a, a), a, loops=tuple(loops))


def test_flat_without_loops():
    ops = [_op("a"), _op("b")]
    tree = spec_tree(ops, [{"op": "add", "name": o.name} for o in ops])
    assert tree == [{"op": "add", "name": "a", "tiled_symbols": []},
                    {"op": "add", "name": "b", "tiled_symbols": []}]


def test_two_ops_in_a_two_level_nest_then_one_outside():
    outer, inner = Loop(2, ("c0",)), Loop(4, ("c1",))
    ops = [_op("add", [outer, inner]), _op("mul", [outer, inner]), _op("tail")]
    tree = spec_tree(ops, [{"name": o.name} for o in ops])
    assert tree == [
        {"loop": {"count": 2, "tiled_symbols": ["c0"], "body": [
            {"loop": {"count": 4, "tiled_symbols": ["c1"], "body": [
                {"name": "add", "tiled_symbols": ["c0", "c1"]},
                {"name": "mul", "tiled_symbols": ["c0", "c1"]}]}}]}},
        {"name": "tail", "tiled_symbols": []}]
