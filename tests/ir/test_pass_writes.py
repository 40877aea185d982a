"""ir/writes.py and the registry's `writes`: every IR field a pass changes is declared in its
contract, and the verifying instrument fails a pass that changes one it does not declare."""

import dataclasses

import pytest
import torch

from spyrec.errors import InternalError
from spyrec.ir.graph import Buffer
from spyrec.ir.parser import parse
from spyrec.ir.writes import WRITABLE, snapshot, written_fields
from spyrec.passes import registry
from spyrec.passes.pipeline import check_writes
from tests.ir.test_verify import GOOD
from tests.programs import Lambda, compile_pt2, export


def test_an_untouched_graph_wrote_nothing():
    g = parse(GOOD)
    assert written_fields(snapshot(g), g) == {}


def test_fields_edited_in_place_or_by_a_replaced_op_are_named_with_where():
    g = parse(GOOD)
    before = snapshot(g)
    g.ops[0].core_splits["c0"] = 16                       # edited in place: the dict
    g.ops[1] = dataclasses.replace(g.ops[1], ranges=(("c0", 128), ("r0", 32)))
    g.buffers["t"].lx_address = 0
    assert written_fields(before, g) == {"Operation.core_splits": "op 't'",
                                         "Operation.ranges": "op 'y'",
                                         "Buffer.lx_address": "buffer 't'"}


def test_new_ops_reordered_ops_new_buffers_and_signature_are_structural_writes():
    g = parse(GOOD)
    before = snapshot(g)
    g.ops.append(dataclasses.replace(g.ops[0], name="t2"))
    g.add_buffer(Buffer("z", (4,), "float16", "intermediate"))
    g.outputs.append("t")
    assert written_fields(before, g) == {"ops": "op 't2'", "buffers": "buffer 'z'",
                                         "signature": "the graph's inputs, outputs or "
                                                      "mutated buffers"}
    g = parse(GOOD)
    before = snapshot(g)
    g.ops.reverse()
    assert written_fields(before, g) == {"ops": "the op order"}


def test_an_undeclared_write_is_an_internal_error_naming_pass_field_and_place():
    g = parse(GOOD)
    before = snapshot(g)
    g.buffers["y"].hbm_address = 0
    check_writes("memory_planning", ("Buffer.hbm_address",), before, g)   # declared: fine
    with pytest.raises(InternalError, match=r"pass scratchpad_planning wrote "
                       r"Buffer\.hbm_address \(buffer 'y'\), which its registry contract does "
                       r"not declare \(writes: Buffer\.lx_address\)"):
        check_writes("scratchpad_planning", ("Buffer.lx_address",), before, g)


def test_every_contract_names_only_writable_fields_and_every_pass_declares_some():
    for name, loader in registry.PASSES.items():
        assert loader.contract.writes, name
        assert set(loader.contract.writes) <= set(WRITABLE), name
        assert len(set(loader.contract.writes)) == len(loader.contract.writes), name


def test_list_passes_shows_what_each_pass_writes():
    text = registry.describe_passes()
    assert ("    writes: Buffer.hbm_address, ops, buffers, signature, Operation.inputs, "
            "Operation.output, Operation.index_inputs\n") in text   # memory_planning (in place)
    assert ("    writes: Operation.core_splits, Operation.replicas, "
            "Operation.replicas_fastest\n") in text


def test_a_pass_whose_contract_leaves_out_a_field_it_writes_fails_the_compile(tmp_path,
                                                                           monkeypatch):
    """The real pipeline under --verify-each: work_division without `Operation.core_splits` in
    its contract is caught after it runs (the check is not only a unit)."""
    loader = registry.PASSES["work_division"]
    narrowed = dataclasses.replace(loader.contract, writes=("Operation.ranges",))
    monkeypatch.setitem(registry.PASSES, "work_division",
                        dataclasses.replace(loader, contract=narrowed))
    pt2 = export(tmp_path, Lambda(lambda m, x: (x * 2).exp()), (torch.randn(64, 128),))
    with pytest.raises(InternalError, match="pass work_division wrote Operation.core_splits"):
        compile_pt2(pt2)
