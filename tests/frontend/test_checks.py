"""Nodes that only feed runtime assertions are dropped at read time; a torch.sym_ite that the
program reads is resolved when its condition is a literal and refused otherwise
(spyrec/frontend/checks.py)."""

import pytest

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.checks import drop_check_only, static_condition


def _node(name, target, inputs, outputs):
    return {"name": name, "target": target, "inputs": [{"arg": a} for a in inputs],
            "outputs": outputs}


SIZE = _node("n", "torch.ops.aten.sym_size.int", [{"as_tensor": {"name": "idx"}}, {"as_int": 0}],
             [{"as_sym_int": {"as_name": "n"}}])
GE = _node("ge", "_operator.ge", [{"as_sym_int": {"as_name": "n"}}, {"as_int": 4}],
           [{"as_sym_bool": {"as_name": "ge"}}])
ASSERT = _node("check", "torch.ops.aten._assert_scalar.default",
               [{"as_sym_bool": {"as_name": "ge"}}, {"as_string": "u0 >= 4"}], [])
ADD = _node("add", "torch.ops.aten.add.Tensor", [{"as_tensor": {"name": "x"}}] * 2,
            [{"as_tensor": {"name": "add"}}])
COPY = _node("copy_", "torch.ops.aten.copy_.default", [{"as_tensor": {"name": "x"}}] * 2,
             [{"as_tensor": {"name": "copy_"}}])


def test_only_what_asserts_read_is_dropped_ref_issue61():
    out = [{"as_tensor": {"name": "add"}}]
    kept = drop_check_only([SIZE, GE, ASSERT, ADD, COPY], out)
    assert [n["name"] for n in kept] == ["add", "copy_"]  # an unread write stays


def test_a_value_the_program_reads_is_kept():
    out = [{"as_tensor": {"name": "add"}}]
    user = _node("add", "torch.ops.aten.add.Tensor",
                 [{"as_tensor": {"name": "x"}}, {"as_sym_int": {"as_name": "n"}}],
                 [{"as_tensor": {"name": "add"}}])
    kept = drop_check_only([SIZE, GE, ASSERT, user], out)
    assert [n["name"] for n in kept] == ["n", "add"]


def test_sym_ite_static_or_refused():
    literal = _node("s", "torch.sym_ite", [{"as_bool": True}, {"as_int": 1}, {"as_int": 0}],
                    [{"as_sym_int": {"as_name": "s"}}])
    static_condition(literal, "s", "model.py:1")
    runtime = _node("s", "torch.sym_ite", [{"as_sym_bool": {"as_name": "item"}},
                                           {"as_int": 1}, {"as_int": 0}],
                    [{"as_sym_int": {"as_name": "s"}}])
    with pytest.raises(UnsupportedProgram, match="sym_ite chooses a size by a condition on "
                                                 "runtime data"):
        static_condition(runtime, "s", "model.py:1")
