"""The tiling config (spyrec/passes/coarse_tiling/config.py): YAML shape, name propagation and
the plan `resolve` gives for real exported programs after stick_layout and matmul_padding,
and every error, message text included (DESIGN §6)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from samples.models import SAMPLES
from samples.tiling import TILING_SAMPLES
from spyrec.errors import ConfigError
from spyrec.frontend import load_program, lower_program
from spyrec.passes.coarse_tiling.config import (
    GroupPlan, Level, TilingPlan, read_tiling_file, resolve,
)
from spyrec.passes.coarse_tiling.dimnames import propagate
from spyrec.passes.coarse_tiling.spec import check_shape
from spyrec.passes.pipeline import build_pipeline, read_pipeline_file, run_passes
from spyrec.passes.registry import CompileContext
from tests.programs import export

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "tiling"
W = "t.yaml"


def h(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).half()


class Transpose(nn.Module):
    def forward(self, a, b):
        return a.t() + b


class Gram(nn.Module):
    def forward(self, x):
        return x @ x.t()


class SumCols(nn.Module):
    def forward(self, x):
        return (x * 2).sum(dim=1)


class Split(nn.Module):
    """A reshape that splits x's rows (R loses its name) and keeps its columns whole."""

    def forward(self, x):
        return (x.reshape(4, 16, 128) + 1).sum(-1)


class Bias(nn.Module):
    def forward(self, x, y):
        return x + y


class Detour(nn.Module):
    """t = a + b feeds mul, and both feed add_1: a group {add, add_1} leaves mul between."""

    def forward(self, a, b):
        t = a + b
        return t + t * 2


PROGRAMS = {
    **{name: make for name, make in TILING_SAMPLES.items()},
    "mlp_fp16": SAMPLES["mlp_fp16"],
    "transpose": lambda: (Transpose(), (h(128, 256), h(256, 128, seed=1))),
    "gram": lambda: (Gram(), (h(128, 256),)),
    "sum_cols": lambda: (SumCols(), (h(128, 256),)),
    "split": lambda: (Split(), (h(64, 128),)),
    "bias": lambda: (Bias(), (h(64, 128), h(1, 128, seed=1))),
    "detour": lambda: (Detour(), (h(64, 128), h(64, 128, seed=1))),
}
_GRAPHS: dict = {}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """name -> the program's graph after the passes before coarse_tiling (built once)."""

    def build(name):
        if name not in _GRAPHS:
            module, inputs = PROGRAMS[name]()
            pt2 = export(tmp_path_factory.mktemp(name), module, inputs, name)
            g = lower_program(load_program(pt2, "auto"))
            entries, where = read_pipeline_file(None)
            pipeline = build_pipeline(entries, where=where)
            names = [p.name for p in pipeline]
            run_passes(g, pipeline[:names.index("matmul_padding") + 1], CompileContext())
            _GRAPHS[name] = g
        return _GRAPHS[name]

    return build


def plan_of(g, text: str) -> TilingPlan:
    return resolve(g, yaml.safe_load(text), W)


def error_of(g, text: str) -> str:
    with pytest.raises(ConfigError) as e:
        plan_of(g, text)
    return str(e.value)


# --- expected plans ----------------------------------------------------------------------

SEED = "{dims: {a: [A, B], b: [A, B], c: [A, B]}, groups: [{ops: [add, mul], loops: %s}]}"


def test_seed_two_by_four(graph):
    assert plan_of(graph("seed_add_mul"), SEED % "[{A: 2}, {B: 4}]") == TilingPlan(
        W, (GroupPlan(0, ("add", "mul"), (Level("A", 2), Level("B", 4)),
                      {"add": ("c0", "c1"), "mul": ("c0", "c1")}, "t.yaml: group 1"),),
        {"A": 1024, "B": 4096})


def test_softmax_over_rows(graph):
    plan = plan_of(graph("softmax_rows"), "{dims: {x: [R, _]}, groups: [{ops: [softmax], "
                                          "loops: [{R: 4}]}]}")
    ops = ("softmax__1", "softmax__2", "softmax__3", "softmax__4", "softmax")
    assert plan.groups == (GroupPlan(0, ops, (Level("R", 4),), {o: ("c0",) for o in ops},
                                     "t.yaml: group 1"),)
    assert plan.dim_sizes == {"R": 256}


def test_mlp_tokens_propagate_through_matmuls_to_the_output(graph):
    g = graph("mlp_fp16")
    plan = plan_of(g, "{dims: {x: [T, _]}, groups: [{ops: ['*'], loops: [{T: 2}]}]}")
    ops = ("linear__1", "linear", "gelu", "linear_1__1", "linear_1")
    assert plan.groups[0].ops == ops
    assert plan.groups[0].vars == {o: ("c0",) for o in ops}   # M of both matmuls
    named = propagate(g, {"x": ("T", None)}, {"T": 64}, W)
    assert named.buffers["linear_1"] == ("T", None)            # the program's output
    assert named.buffers["p_fc1_weight"] == (None, None)       # forward only
    assert named.op_vars["linear_1__1"] == {"c0": "T"}


def test_matmul_over_k_named_on_input_and_weight(graph):
    plan = plan_of(graph("matmul_k"), "{dims: {x: [_, K], proj.weight: [_, K]}, "
                                      "groups: [{ops: [linear], loops: [{K: 4}]}]}")
    assert plan.groups == (GroupPlan(0, ("linear",), (Level("K", 4),), {"linear": ("r0",)},
                                     "t.yaml: group 1"),)
    assert plan.dim_sizes == {"K": 512}


@pytest.mark.parametrize("dims", ["{x: [_, K]}", "{proj.weight: [_, K]}"])
def test_matmul_k_from_either_operand(graph, dims):
    plan = plan_of(graph("matmul_k"), f"{{dims: {dims}, groups: [{{ops: [linear], "
                                      f"loops: [{{K: 2}}]}}]}}")
    assert plan.groups[0].vars == {"linear": ("r0",)}


def test_matmul_n_from_the_right_operand(graph):
    plan = plan_of(graph("matmul_k"), "{dims: {proj.weight: [N, _]}, "
                                      "groups: [{ops: [linear], loops: [{N: 2}]}]}")
    assert plan.groups[0].vars == {"linear": ("c1",)}


def test_transpose_moves_names(graph):
    g = graph("transpose")   # add[c0, c1] = a[c1, c0] + b[c0, c1]
    plan = plan_of(g, "{dims: {a: [A, B]}, groups: [{ops: [add], loops: [{B: 4}, {A: 2}]}]}")
    assert plan.groups[0].vars == {"add": ("c0", "c1")}
    assert propagate(g, {"a": ("A", "B")}, {"A": 128, "B": 256}, W).buffers["add"] == \
        ("B", "A")


def test_reduction_keeps_the_reduced_dim_name(graph):
    g = graph("sum_cols")
    plan = plan_of(g, "{dims: {x: [R, C]}, groups: [{ops: ['*'], loops: [{C: 2}, {R: 2}]}]}")
    assert plan.groups[0].vars == {"mul": ("c1", "c0"), "sum_1": ("r0", "c0")}
    assert propagate(g, {"x": ("R", "C")}, {"R": 128, "C": 256}, W).buffers["sum_1"] == ("R",)


def test_a_reshape_keeps_only_the_dims_it_keeps_whole(graph):
    g = graph("split")   # x [64, 128] viewed as [4, 16, 128]
    named = propagate(g, {"x": ("R", "C")}, {"R": 64, "C": 128}, W)
    assert named.buffers["add"] == (None, None, "C")
    assert named.op_vars == {"add": {"c2": "C"}, "sum_1": {"r0": "C"}}
    assert "no op of the group carries dim 'R'" in error_of(
        g, "{dims: {x: [R, C]}, groups: [{ops: ['*'], loops: [{R: 2}]}]}")


def test_a_broadcast_size_one_dim_has_no_name(graph):
    g = graph("bias")   # x [64, 128] + y [1, 128]
    named = propagate(g, {"y": ("One", "C")}, {"One": 1, "C": 128}, W)
    assert named.buffers["add"] == (None, "C")
    assert named.op_vars["add"] == {"c1": "C"}


def test_a_gram_matrix_carries_its_token_dim_twice(graph):
    g = graph("gram")   # a restickify copy of x (node matmul), then x @ x.T
    plan = plan_of(g, "{dims: {x: [T, D]}, groups: [{ops: [matmul], loops: [{D: 2}]}]}")
    assert plan.groups[0].vars == {"x__restick": ("c1",), "matmul": ("r0",)}
    msg = error_of(g, "{dims: {x: [T, D]}, groups: [{ops: [matmul], loops: [{T: 2}]}]}")
    assert msg.startswith("t.yaml: group 1: loops: node 'matmul' (")
    assert "carries dim 'T' on 2 of its variables (c0, c1); a loop tiles one of them" in msg
