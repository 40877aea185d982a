"""Names and source lines users can trust (spyrec/frontend/names.py, sources.py).

A derived name never looks like an FX name (fc1's bias add must not be `linear_1`, FX's name of
fc2's linear); every buffer and op name is unique; a source line is the model's line, not
torch's, with the module path from `nn_module_stack`.
"""

import re

import pytest
import torch

from samples.models import SAMPLES
from spyrec.errors import UnsupportedProgram
from spyrec.frontend import load_program, lower_program
from spyrec.frontend.program import Node
from spyrec.frontend.sources import source_of
from tests.differential.test_programs import PROGRAMS as TEST_PROGRAMS
from tests.programs import Lambda, compile_pt2, export, load_json

HERE = "test_names.py"


def _lowered(tmp_path, module, inputs):
    program = load_program(export(tmp_path, module, inputs), frontend="fast")
    return program, lower_program(program)


def test_mlp_bias_adds_take_their_linears_names(tmp_path):
    program, graph = _lowered(tmp_path, *SAMPLES["mlp_fp16"]())
    ops = [(op.name, op.op, op.output.buffer) for op in graph.ops]
    assert ops == [("linear__1", "batchmatmul", "linear__1"), ("linear", "add", "linear"),
                   ("gelu", "gelufwd", "gelu"), ("linear_1__1", "batchmatmul", "linear_1__1"),
                   ("linear_1", "add", "linear_1")]
    assert graph.outputs == ["linear_1"]
    assert graph.buffers["linear"].source == "models.py:37 in forward [fc1]"
    assert graph.buffers["linear_1"].source == "models.py:37 in forward [fc2]"
    assert graph.buffers["gelu"].source == "models.py:37 in forward"


class _NamedLikeAHelper(torch.nn.Module):
    """An input whose name is the one the bias add's helper would take."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x, linear__1):
        return self.fc(x) + linear__1


def test_a_derived_name_never_takes_an_fx_name(tmp_path):
    _, graph = _lowered(tmp_path, _NamedLikeAHelper(), (torch.randn(4, 8), torch.randn(4, 8)))
    assert graph.inputs == ["x", "linear__1"]
    assert graph.buffers["linear__1"].role == "input"
    assert [op.name for op in graph.ops] == ["linear__2", "linear", "add"]
    assert graph.ops[1].inputs[0].buffer == "linear__2"


def _cases():
    cases = {f"sample_{n}": f for n, f in SAMPLES.items()}
    for name, (fn, inputs, *params) in TEST_PROGRAMS.items():
        cases[name] = (lambda fn=fn, inputs=inputs, params=params:
                       (Lambda(fn, **(params[0] if params else {})), inputs))
    return cases


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_name_is_unique_and_says_which_node_it_comes_from(tmp_path, name):
    """Buffers: an FX name, or `<fx name>__<k|role>`; ops: their output buffer's name, or
    `<buffer>.<k>` for a further write; no name twice; gathered index tensors renamed too."""
    program, graph = _lowered(tmp_path, *CASES[name]())
    fx = {n.name for n in program.nodes}
    for buf in graph.buffers:
        base, sep, suffix = buf.rpartition("__")
        assert buf in fx or (sep and re.fullmatch(r"\w+", suffix) and
                             (base in fx or base.rpartition("__")[0] in fx)), buf
        assert re.fullmatch(r"[A-Za-z_]\w*", buf), buf  # sympify reads IndirectAccess('buf')
    names = [op.name for op in graph.ops]
    assert len(names) == len(set(names)), names
    for op in graph.ops:
        assert op.name == op.output.buffer or re.fullmatch(
            rf"{re.escape(op.output.buffer)}\.\d+", op.name), op.name
        for a in (*op.inputs, *op.index_inputs, op.output):
            assert a.buffer in graph.buffers, (op.name, a.buffer)
        for leaf in op.gathered():
            assert leaf in graph.buffers, (op.name, leaf)


def _node(trace=None, stack=None):
    meta = {}
    if trace is not None:
        meta["stack_trace"] = trace
    if stack is not None:
        meta["nn_module_stack"] = stack
    return Node("n", "call_function", "aten.add.Tensor", meta=meta)


SITE = "/venv/lib/python3.11/site-packages"
LINEAR_TRACE = (f'  File "/home/me/model.py", line 37, in forward\n'
                f'    return self.fc2(self.fc1(x))\n'
                f'  File "{SITE}/torch/nn/modules/linear.py", line 134, in forward\n'
                f'    return F.linear(input, self.weight, self.bias)\n')


@pytest.mark.parametrize("trace, stack, expected", [
    (LINEAR_TRACE, {"L__self__": ("", "M"), "L__self__fc1": ("fc1", "Linear")},
     "model.py:37 in forward [fc1]"),
    (LINEAR_TRACE, {"L__self__": ("", "M")}, "model.py:37 in forward"),
    # a model library is the model: its innermost frame outside torch is the line
    (f'  File "/home/me/run.py", line 9, in forward\n'
     f'  File "{SITE}/transformers/models/granite/modeling_granite.py", line 120, in forward\n'
     f'  File "{SITE}/torch/nn/functional.py", line 2000, in silu\n',
     {"a": ("", "M"), "b": ("model.layers.0.mlp", "GraniteMLP")},
     "modeling_granite.py:120 in forward [model.layers.0.mlp]"),
    # a torch source checkout and generated code are skipped too
    ('  File "/src/app.py", line 3, in forward\n'
     '  File "/src/pytorch/torch/_refs/__init__.py", line 10, in add\n'
     '  File "<eval_with_key>.0", line 5, in forward\n', None, "app.py:3 in forward"),
    # only torch on the stack: its innermost frame is better than nothing
    (f'  File "{SITE}/torch/nn/functional.py", line 7, in gelu\n', None,
     "functional.py:7 in gelu"),
    (None, {"a": ("", "M"), "b": ("layers.0", "Block")}, "[layers.0]"),
    (None, None, None),
    ("not a stack trace", None, None),
])
def test_source_is_the_models_innermost_line_with_its_module(trace, stack, expected):
    assert source_of(_node(trace, stack)) == expected


class _Inner(torch.nn.Module):
    def forward(self, x):
        return torch.lerp(x, x * 2, 0.3)   # not lowered by the fast front end


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _Inner()

    def forward(self, x):
        return self.inner(x) + 1


def test_unsupported_op_names_the_users_line_and_module(tmp_path):
    pt2 = export(tmp_path, _Outer(), (torch.randn(4, 8),))
    with pytest.raises(UnsupportedProgram) as e:
        compile_pt2(pt2, tmp_path / "out", frontend="fast")
    line = next(i for i, text in enumerate(open(__file__), 1) if "torch.lerp(x, x * 2" in text)
    assert f"aten.lerp.Scalar (node lerp, {HERE}:{line} in forward [inner])" in str(e.value)


def test_manifest_and_opspecs_carry_the_source_and_module(tmp_path):
    module, inputs = SAMPLES["mlp_fp16"]()
    out = compile_pt2(export(tmp_path, module, inputs), tmp_path / "out")
    tensors = {t["name"]: t["source"] for t in load_json(out / "manifest.json")["tensors"]}
    assert tensors["linear__1"] == tensors["linear"] == "models.py:37 in forward [fc1]"
    assert tensors["p_fc1_weight"] == "fc1.weight"
    specs = load_json(out / "opspecs.json")["kernels"][0]["specs"]
    assert [(s["name"], s["source"]) for s in specs][-2:] == [
        ("linear_1__1", "models.py:37 in forward [fc2]"),
        ("linear_1", "models.py:37 in forward [fc2]")]
