"""Grad-mode regions (`@torch.no_grad()` submodules) are inlined the same way by both readers."""

import pytest
import torch

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.from_torch import program_of
from spyrec.frontend.pt2json import read_program
from spyrec.pt2archive import load_exported
from tests.differential.harness import run_and_compare
from tests.programs import compile_pt2, export


class Scaler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("inv", torch.linspace(0.5, 2.0, 16))

    @torch.no_grad()
    def forward(self, x):
        y = x * self.inv
        return torch.tanh(y), y.exp() * 0.5, x  # the third result passes an operand through


class WithNoGrad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scaler = Scaler()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        a, b, c = self.scaler(self.lin(x))
        mul = a * b  # an outer name the region also uses inside
        return mul + c


def _exported(tmp_path):
    module = WithNoGrad().eval()
    inputs = (torch.randn(4, 16),)
    return export(tmp_path, module, inputs), module, inputs


def test_stored_graph_has_the_higher_order_op(tmp_path):
    pt2, _, _ = _exported(tmp_path)
    import json
    import zipfile
    with zipfile.ZipFile(pt2) as zf:
        member = next(n for n in zf.namelist() if n.endswith("models/model.json"))
        text = zf.read(member).decode()
    assert "higher_order.wrap_with_set_grad_enabled" in text and json.loads(text)


def test_both_readers_inline_identically(tmp_path):
    pt2, _, _ = _exported(tmp_path)
    fast, ref = read_program(pt2), program_of(load_exported(pt2))
    assert not any("higher_order" in n.target for n in fast.nodes)
    assert [(n.name, n.op, n.target, n.args, n.kwargs, n.meta.get("val")) for n in fast.nodes] \
        == [(n.name, n.op, n.target, n.args, n.kwargs, n.meta.get("val")) for n in ref.nodes]
    names = [n.name for n in fast.nodes]
    assert len(names) == len(set(names))


def test_inlined_program_equals_eager_on_the_fast_front_end(tmp_path):
    out = run_and_compare(tmp_path, WithNoGrad(), (torch.randn(4, 16),), frontend="fast")
    assert (out / "manifest.json").is_file()


def test_enabled_autocast_region_is_refused(tmp_path):
    from spyrec.frontend.inline import inline_higher_order_ops
    from spyrec.frontend.program import Node, Program, Ref, Subgraph

    body = Subgraph("sub", [Node("a", "placeholder", "a"),
                            Node("out", "output", "output", ((Ref("a"),),))])
    hop = Node("region", "call_function", "higher_order.wrap_with_autocast",
               ("cpu", "bfloat16", True, False, body, Ref("x")))
    program = Program([Node("x", "placeholder", "x"), hop], [], [], {}, {})
    with pytest.raises(UnsupportedProgram, match="enabled autocast region"):
        inline_higher_order_ops(program)


class ManyUnsupported(torch.nn.Module):
    def forward(self, x):
        return torch.cumprod(x, 0) + torch.cumprod(x, 1) + torch.cumprod(x * 2, 0)


def test_unsupported_ops_are_grouped_with_a_count(tmp_path):
    pt2 = export(tmp_path, ManyUnsupported(), (torch.randn(4, 8),))
    with pytest.raises(UnsupportedProgram) as err:
        compile_pt2(pt2, tmp_path / "out", frontend="fast")
    lines = str(err.value).splitlines()
    line = ManyUnsupported.forward.__code__.co_firstlineno + 1
    assert lines[1] == f"  aten.cumprod.default x3 (node cumprod, test_inline.py:{line} in forward)"
    assert len(lines) == 3


class Positions(torch.nn.Module):
    """Marian's and Pegasus's sinusoidal positions: a `no_grad` region returning one tensor,
    named like an op inside it (`embedding_1`), whose result the outer graph reads through
    `getitem` (the stored node says `is_hop_single_tensor_return: false`)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(32, 16))

    @torch.no_grad()
    def forward(self, n: int):
        return torch.nn.functional.embedding(torch.arange(n), self.weight)


class MarianShape(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(64, 16)
        self.positions = Positions()

    def forward(self, ids):
        return self.tokens(ids) * 4.0 + self.positions(ids.shape[1])


def test_one_result_region_read_through_getitem_ref_issue61(tmp_path):
    """A valid export was called "damaged ... reads 'getitem_5', which no earlier node
    defines": the fast reader named the region by its result and dropped the getitem."""
    ids = torch.randint(0, 64, (1, 12))
    pt2 = export(tmp_path, MarianShape().eval(), (ids,))
    fast, ref = read_program(pt2), program_of(load_exported(pt2))
    assert [(n.name, n.target, n.args) for n in fast.nodes] \
        == [(n.name, n.target, n.args) for n in ref.nodes]
    (tmp_path / "run").mkdir()
    out = run_and_compare(tmp_path / "run", MarianShape().eval(), (ids,), frontend="fast")
    assert (out / "manifest.json").is_file()
