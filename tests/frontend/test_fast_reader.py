"""The torch-free reader gives exactly the Program the torch front end gives for the same file.

The reference is `from_torch.program_of(torch.export.load(...))` with no decompositions: the
stored graph, which is what the fast reader reads.
"""

import subprocess
import sys

import numpy as np
import pytest
import torch

from samples.models import SAMPLES
from spyrec.frontend.from_torch import program_of
from spyrec.frontend.program import Ref, TensorMeta
from spyrec.frontend.pt2json import read_program
from spyrec.pt2archive import load_exported
from tests.programs import Lambda, export


class MultiOutput(torch.nn.Module):
    """Multi-output ops (split, max.dim), keyword arguments, a buffer, a lifted constant,
    tied weights and bf16 state."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8).to(torch.bfloat16), requires_grad=False)
        self.register_buffer("scale", torch.tensor([2.0, 3.0]))
        self.register_buffer("embed_scale", torch.tensor(11.3))  # 0-d, as Gemma stores it
        self.lin = torch.nn.Linear(8, 8)
        self.lin2 = torch.nn.Linear(8, 8)
        self.lin2.weight = self.lin.weight

    def forward(self, x):
        a, b = torch.split(x, [3, 5], dim=1)
        m = torch.max(x, dim=1, keepdim=True)
        y = self.lin2(self.lin(x)) * m.values + (x.to(torch.bfloat16) @ self.w).float()
        z = torch.softmax(y, dim=-1) + torch.tensor(1.5) * a.sum() - b.mean()
        return z.clamp(min=-1.0, max=float("inf")) * self.scale.sum() * self.embed_scale, \
            m.indices


PROGRAMS = {
    **{name: factory for name, factory in SAMPLES.items()},
    "multi_output": lambda: (MultiOutput().eval(), (torch.randn(4, 8),)),
    "inplace_buffer": lambda: (_Counter(), (torch.randn(3, 5),)),
}


class _Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(5))

    def forward(self, x):
        self.count.add_(x.sum(0))
        return x * 2


@pytest.fixture(scope="module", params=sorted(PROGRAMS))
def pt2(request, tmp_path_factory):
    module, inputs = PROGRAMS[request.param]()
    return export(tmp_path_factory.mktemp(request.param), module, inputs)


def test_fast_reader_equals_the_torch_front_end(pt2):
    assert_same_program(read_program(pt2), program_of(load_exported(pt2)))


def assert_same_program(fast, ref):
    """The two front ends' Programs of one file: the same nodes, values, signature, state and
    symbols."""
    assert [n.name for n in fast.nodes] == [n.name for n in ref.nodes]
    for f, r in zip(fast.nodes, ref.nodes):
        assert (f.op, f.target, f.args, f.kwargs) == (r.op, r.target, r.args, r.kwargs), f.name
        assert f.meta.get("val") == r.meta.get("val"), f.name
        assert f.meta.get("stack_trace") == r.meta.get("stack_trace"), f.name
        assert f.meta.get("nn_module_stack") == r.meta.get("nn_module_stack"), f.name
    assert fast.inputs == ref.inputs and fast.outputs == ref.outputs
    assert fast.state_dtypes == ref.state_dtypes and fast.aliases == ref.aliases
    assert fast.symbols == ref.symbols and fast.symbolic_dims == ref.symbolic_dims
    assert [s.where for s in fast.symbols.values()] == [s.where for s in ref.symbols.values()]
    assert sorted(fast.state) == sorted(ref.state)
    for fqn in ref.state:
        assert fast.state[fqn].dtype == ref.state[fqn].dtype, fqn
        assert fast.state[fqn].shape == ref.state[fqn].shape, fqn  # 0-d stays 0-d
        np.testing.assert_array_equal(fast.state[fqn], ref.state[fqn], err_msg=fqn)


def test_the_reader_spells_values_as_documented(tmp_path):
    pt2 = export(tmp_path, *PROGRAMS["multi_output"]())
    program = read_program(pt2)
    split = next(n for n in program.nodes if n.target == "aten.split_with_sizes.default")
    assert split.args == (Ref("x"), [3, 5], 1)
    assert split.meta["val"] == [TensorMeta((4, 3), "float32", (8, 1)),
                                 TensorMeta((4, 5), "float32", (8, 1))]
    assert [v.storage_offset for v in split.meta["val"]] == [0, 3]
    items = [n for n in program.nodes if n.args[:1] == (Ref(split.name),)]
    assert [(n.target, n.args[1]) for n in items] == [("_operator.getitem", 0),
                                                      ("_operator.getitem", 1)]
    cast = next(n for n in program.nodes if n.target == "aten.to.dtype")
    assert cast.args[1] == "bfloat16"
    assert program.state_dtypes["w"] == "bfloat16" and program.state["w"].dtype == np.uint16
    assert program.aliases == {"lin2.weight": "lin.weight"}
    kinds = {s.kind for s in program.inputs}
    assert kinds == {"parameter", "buffer", "constant", "user_input"}


def test_reading_does_not_import_torch(tmp_path):
    pt2 = export(tmp_path, Lambda(lambda m, x: x + 1), (torch.randn(2, 3),))
    code = ("import sys; from spyrec.frontend.pt2json import read_program; "
            f"p = read_program({str(pt2)!r}); assert 'torch' not in sys.modules, 'torch'; "
            "print(len(p.nodes))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == 3


def test_scalar_rounding_matches_torch_without_torch():
    """Lowerings round Python floats to fp16/bf16 as eager does (through float32), computed
    with numpy so the fast front end never needs torch."""
    import math
    import random

    from spyrec.frontend.aten_pointwise import round_scalar

    rng = random.Random(0)
    values = [rng.uniform(-10, 10) for _ in range(3000)]
    values += [rng.choice([-1, 1]) * 2.0 ** rng.uniform(-150, 130) for _ in range(3000)]
    values += [0.0, -0.0, 1e-45, 65519.0, 65520.0, 3.3961e38, math.inf, -math.inf, 1 / 3]
    for dtype in ("float16", "bfloat16"):
        for v in values:
            want = torch.tensor(v, dtype=getattr(torch, dtype)).item()
            got = round_scalar(v, dtype)
            assert got == want and math.copysign(1, got) == math.copysign(1, want), (dtype, v)
