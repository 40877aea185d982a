"""The tiling config (spyrec/plan/tiling/config.py): YAML shape, name propagation and
the plan `resolve` gives for real exported programs after stick_layout and matmul_padding,
and every error, message text included (DESIGN §6)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from samples.models import SAMPLES
from samples.tiling import TILING_SAMPLES
from spyrec.errors import ConfigError
from spyrec.frontend import load_program, lower_program
from spyrec.plan.tiling.config import (
    GroupPlan, Level, TilingPlan, resolve,
)
from spyrec.plan.tiling.dimnames import propagate
from spyrec.tiling_file import read_tiling_file
from spyrec.plan.tiling.spec import check_shape
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
    **TILING_SAMPLES,
    "mlp_fp16": SAMPLES["mlp_fp16"],
    "decoder_fp32": SAMPLES["decoder_fp32"],
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


def test_a_decoder_block_over_batch_and_through_head_reshapes(graph):
    """Attention's reshapes and transposes fold into floor/mod indices (a regression: those
    atoms once crashed the walk); the batch reaches every op, the sequence dim reaches
    attention twice (scores are [S, S]), so a loop over it is refused there."""
    g = graph("decoder_fp32")   # x [2, 127, 256]
    plan = plan_of(g, "{dims: {x: [B, S, _]}, groups: [{scope: 'layers.0*', "
                      "loops: [{B: 2}]}]}")
    assert plan.groups[0].vars == {op.name: ("c0",) for op in g.ops}
    named = propagate(g, {"x": ("B", "S", None)}, {"B": 2, "S": 127}, W)
    assert named.op_vars["linear_1"] == {"c0": "B", "c1": "S"}   # reads att through floor/mod
    assert named.op_vars["softmax__4"] == {"c0": "B", "c2": "S", "r0": "S"}
    msg = error_of(g, "{dims: {x: [B, S, _]}, groups: [{scope: 'layers.0*', "
                      "loops: [{S: 127}]}]}")
    assert msg.startswith("t.yaml: group 1: loops: node 'matmul' (")
    assert "carries dim 'S' on 2 of its variables (c2, c3)" in msg


# --- the configs shipped in configs/tiling/ --------------------------------------------------


def test_every_shipped_config_has_a_sample_program():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(TILING_SAMPLES)


@pytest.mark.parametrize("name", sorted(TILING_SAMPLES))
def test_shipped_config_resolves_against_its_program(graph, name):
    path = CONFIGS / f"{name}.yaml"
    text = path.read_text()
    assert text.startswith("# ") and f"samples/tiling.py {name}" in text
    assert f"--tiling configs/tiling/{name}.yaml" in text
    plan = resolve(graph(name), read_tiling_file(path), str(path))
    assert all(any(v is not None for v in vs) for g in plan.groups for vs in g.vars.values())
    expected = {"seed_add_mul": [("A", 2), ("B", 4)], "softmax_rows": [("R", 4)],
                "decoder_mlp_tokens": [("T", 4)], "matmul_k": [("K", 4)]}[name]
    assert [(lv.dim, lv.count) for lv in plan.groups[0].levels] == expected


def test_decoder_mlp_tokens_tiles_every_op_over_tokens(graph):
    g = graph("decoder_mlp_tokens")
    path = CONFIGS / "decoder_mlp_tokens.yaml"
    plan = resolve(g, read_tiling_file(path), str(path))
    assert plan.groups[0].ops == tuple(op.name for op in g.ops)
    assert plan.groups[0].vars == {op.name: ("c0",) for op in g.ops}
    scoped = plan_of(g, "{dims: {x: [T, _]}, groups: [{scope: 'mlp*', loops: [{T: 4}]}]}")
    assert scoped.groups[0].ops == ("linear", "silu", "linear_1", "mul", "linear_2")


# --- errors ----------------------------------------------------------------------------------


def test_two_names_meeting_on_one_variable(graph):
    msg = error_of(graph("seed_add_mul"), "{dims: {a: [A, B], b: [C, B]}, "
                                          "groups: [{ops: [add], loops: [{A: 2}]}]}")
    assert msg.startswith("t.yaml: dims: names 'A' and 'C' meet on one dim at node 'add' "
                          "(models.py:")
    assert msg.endswith("its variable c0 walks a dim 0 ('A') and b dim 0 ('C'); give both "
                        "the same name or leave one '_'")


def test_two_names_meeting_on_a_matmul_k(graph):
    msg = error_of(graph("matmul_k"), "{dims: {x: [_, K], proj.weight: [_, J]}, "
                                      "groups: [{ops: [linear], loops: [{K: 4}]}]}")
    assert "names 'K' and 'J' meet on one dim at node 'linear' (tiling.py:" in msg
    assert "its variable r0 walks x dim 1 ('K') and p_proj_weight dim 1 ('J')" in msg


def test_one_name_on_dims_of_different_sizes(graph):
    msg = error_of(graph("seed_add_mul"), "{dims: {a: [A, B], b: [B, A]}, "
                                          "groups: [{ops: [add], loops: [{A: 2}]}]}")
    assert msg == ("t.yaml: dims: 'B' names a dim 1 of size 4096 and b dim 0 of size 1024; "
                   "one name must mean one size")


def test_two_names_meeting_on_a_dim_written_twice():
    """A buffer written by two ops (a padding fill, then a copy) gets one name per dim."""
    from spyrec.indexing import parse_expr
    from spyrec.ir import Access, Buffer, Graph, Operation

    g = Graph()
    for name, role in (("x", "input"), ("y", "input"), ("z", "output")):
        g.add_buffer(Buffer(name, (8, 4), "float16", role))
    g.inputs = ["x", "y"]
    g.outputs = ["z"]
    index = parse_expr("4*c0 + c1")
    ranges = (("c0", 8), ("c1", 4))
    g.ops = [Operation("z", "identity", ranges, (Access("x", index),), Access("z", index),
                       node="first", source="m.py:1"),
             Operation("z.1", "identity", ranges, (Access("y", index),), Access("z", index),
                       node="second", source="m.py:2")]
    with pytest.raises(ConfigError) as e:
        propagate(g, {"x": ("A", None), "y": ("B", None)}, {"A": 8, "B": 8}, W)
    assert str(e.value) == ("t.yaml: dims: names 'B' and 'A' meet on one dim at node "
                            "'second' (op z.1, m.py:2): its variable c0 walks y dim 0 ('B') "
                            "and z dim 0 ('A'); give both the same name or leave one '_'")


@pytest.mark.parametrize("text, message", [
    ("{dims: {aa: [A, B]}, groups: [{ops: [add], loops: [{A: 2}]}]}",
     "t.yaml: dims: 'aa' is not a program input or parameter (did you mean 'a'?); inputs: "
     "a, b, c; parameters are named by FQN (fc1.weight)"),
    ("{dims: {a: [A, B, C]}, groups: [{ops: [add], loops: [{A: 2}]}]}",
     "t.yaml: dims: a has 2 dims [1024, 4096], but 3 names are given; give one name (or '_') "
     "per dim"),
    ("{dims: {a: [A, B]}, groups: [{ops: [ad], loops: [{A: 2}]}]}",
     "t.yaml: group 1: ops: 'ad' matches no node of the program (did you mean 'add'?); "
     "`spyrec inspect OUT` lists every op with its node name"),
    ("{dims: {a: [A, B]}, groups: [{ops: [add], loops: [{Q: 2}]}]}",
     "t.yaml: group 1: loops: dim 'Q' is not named in dims; named dims: A, B"),
    ("{dims: {a: [A, Bb]}, groups: [{ops: [add], loops: [{B: 2}]}]}",
     "t.yaml: group 1: loops: dim 'B' is not named in dims (did you mean 'Bb'?); named dims: "
     "A, Bb"),
    ("{dims: {a: [A, B]}, groups: [{ops: [add], loops: [{A: 2}, {B: 3}]}]}",
     "t.yaml: group 1: loops: {B: 3}: 3 does not divide B's size 4096; choose a divisor such "
     "as 2, 4, 8"),
    ("{dims: {c: [A, B]}, groups: [{ops: [add], loops: [{A: 2}]}]}",
     "t.yaml: group 1: loops: no op of the group carries dim 'A' (nodes: add); name A on a dim "
     "these ops iterate, or drop the level"),
    ("{dims: {a: [A, B]}, groups: [{ops: [add], loops: [{A: 2}]}, {ops: ['*'], "
     "loops: [{B: 2}]}]}",
     "t.yaml: node 'add' (models.py:27 in forward) is selected by group 1 and group 2; "
     "groups must be disjoint: narrow one group's ops or scope"),
])
def test_resolve_errors_on_the_seed(graph, text, message):
    assert error_of(graph("seed_add_mul"), text) == message


def test_a_tile_that_splits_sticks(graph):
    msg = error_of(graph("seed_add_mul"), SEED % "[{A: 2}, {B: 128}]")
    assert msg == ("t.yaml: group 1: loops: {B: 128} splits sticks of a at node 'add' "
                   "(models.py:27 in forward): a tile is 32 elements of its stick dim, and a "
                   "stick of fp16 holds 64; counts that keep whole sticks: 16, 32, 64")


def test_rows_are_free_but_a_transposed_read_makes_them_sticks(graph):
    g = graph("transpose")   # a [128, 256] is read transposed; its stick dim is A
    assert plan_of(g, "{dims: {a: [A, B]}, groups: [{ops: [add], loops: [{B: 256}]}]}")
    msg = error_of(g, "{dims: {a: [A, B]}, groups: [{ops: [add], loops: [{A: 4}]}]}")
    assert msg.startswith("t.yaml: group 1: loops: {A: 4} splits sticks of ")
    assert msg.endswith("a tile is 32 elements of its stick dim, and a stick of fp16 holds "
                        "64; counts that keep whole sticks: 2")


def test_an_unknown_scope(graph):
    msg = error_of(graph("decoder_mlp_tokens"),
                   "{dims: {x: [T, _]}, groups: [{scope: 'mpl*', loops: [{T: 2}]}]}")
    assert msg.startswith("t.yaml: group 1: scope 'mpl*' matches no op's module path "
                          "(did you mean ")
    assert "'mlp'" in msg and msg.endswith("`spyrec inspect OUT` lists every op with its "
                                           "module path")


def test_a_group_that_is_not_contiguous(graph):
    msg = error_of(graph("detour"), "{dims: {a: [A, _]}, groups: [{ops: [add, add_1], "
                                    "loops: [{A: 2}]}]}")
    assert msg.startswith("t.yaml: group 1: the group is not contiguous: node 'mul' (")
    assert msg.endswith("is outside it, depends on its node 'add' and feeds its node 'add_1'; "
                        "add 'mul' to the group or split the group there")
    assert plan_of(graph("detour"), "{dims: {a: [A, _]}, groups: [{ops: ['add*', mul], "
                                    "loops: [{A: 2}]}]}").groups[0].ops == ("add", "mul", "add_1")


@pytest.mark.parametrize("doc, message", [
    (None, "t.yaml: the tiling file is empty; a tiling file is "),
    ([1], "t.yaml: a tiling file is a mapping "),
    ({"dims": {"a": ["A"]}, "group": []},
     "t.yaml: unknown key 'group' (did you mean 'groups'?); a tiling file has dims and "
     "groups, and optionally attention"),
    ({"attention": {"query_tile": -1}}, "t.yaml: attention entry 1: query_tile must be a "
     "positive integer (or 0: the cost model's choice), got -1"),
    ({"attention": [{"ops": "sdpa"}]}, "t.yaml: attention entry 1: ops must be a non-empty "
     "list of node name globs, got 'sdpa'"),
    ({"attention": {"query": 64}}, "t.yaml: attention entry 1: unknown key 'query' (did you "
     "mean 'query_tile'?)"),
    ({"dims": {"a": ["A"]}}, "t.yaml: no 'groups'; a tiling file is "),
    ({"dims": {"a": ["A"]}, "groups": []}, "t.yaml: groups must be a non-empty list"),
    ({"dims": [], "groups": [{}]}, "t.yaml: dims must map input names or parameter FQNs"),
    ({"dims": {"a": "A"}, "groups": [{}]}, "t.yaml: dims: a must be a list with one name"),
    ({"dims": {"a": ["A", 3]}, "groups": [{}]}, "t.yaml: dims: a: 3 is not a dim name"),
    ({"dims": {"a": ["A", "A"]}, "groups": [{}]},
     "t.yaml: dims: a names two of its dims 'A'; one name marks one dim of a tensor"),
    ({"dims": {"a": ["A"]}, "groups": [{"ops": ["x"], "scope": "y", "loops": [{"A": 2}]}]},
     "t.yaml: group 1: give exactly one of ops (FX node name globs) or scope"),
    ({"dims": {"a": ["A"]}, "groups": [{"loops": [{"A": 2}]}]},
     "t.yaml: group 1: give exactly one of ops"),
    ({"dims": {"a": ["A"]}, "groups": [{"ops": ["x"], "loop": [{"A": 2}]}]},
     "t.yaml: group 1: unknown key 'loop' (did you mean 'loops'?)"),
    ({"dims": {"a": ["A"]}, "groups": [{"ops": "add", "loops": [{"A": 2}]}]},
     "t.yaml: group 1: ops must be a non-empty list of node name globs"),
    ({"dims": {"a": ["A"]}, "groups": [{"scope": 3, "loops": [{"A": 2}]}]},
     "t.yaml: group 1: scope must be a module path glob"),
    ({"dims": {"a": ["A"]}, "groups": [{"ops": ["x"]}]}, "t.yaml: group 1: no loops; "),
    ({"dims": {"a": ["A"]}, "groups": [{"ops": ["x"], "loops": [{"A": 2, "B": 2}]}]},
     "t.yaml: group 1: loops: each level is one {NAME: COUNT} (one dim per level)"),
    ({"dims": {"a": ["A"]}, "groups": [{"ops": ["x"], "loops": [{"A": 0}]}]},
     "t.yaml: group 1: loops: the count of A must be a positive integer, got 0"),
    ({"dims": {"a": ["A"]}, "groups": [{"ops": ["x"], "loops": [{"A": True}]}]},
     "t.yaml: group 1: loops: the count of A must be a positive integer, got True"),
    ({"dims": {"a": ["A"]}, "groups": [{"ops": ["x"], "loops": [{"A": 2}, {"A": 4}]}]},
     "t.yaml: group 1: loops: A appears at two levels; each dim may be tiled once per group"),
    ({"dims": {"a": ["A"]}, "groups": [{"ops": ["x"], "loops": [{"A": 2}]}, 5]},
     "t.yaml: group 2: a group is "),
])
def test_shape_errors(doc, message):
    with pytest.raises(ConfigError) as e:
        check_shape(doc, W)
    assert str(e.value).startswith(message)


def test_read_tiling_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("dims: {a: [A, _]}\ngroups:\n  - ops: ['*']\n    loops: [{A: 2}]\n")
    assert read_tiling_file(path) == {"dims": {"a": ["A", "_"]},
                                      "groups": [{"ops": ["*"], "loops": [{"A": 2}]}]}
    with pytest.raises(ConfigError, match=r"^--tiling .*nope.yaml: no such tiling file$"):
        read_tiling_file(tmp_path / "nope.yaml")
    path.write_text("dims: [\n")
    with pytest.raises(ConfigError, match=r"^--tiling .*t.yaml: not valid YAML: "):
        read_tiling_file(path)
    path.write_text("dims: !!python/object:os.system {}\ngroups: []\n")
    with pytest.raises(ConfigError, match=r"not valid YAML"):
        read_tiling_file(path)
    path.write_text("dims: {a: [A]}\ngroups: []\n")
    with pytest.raises(ConfigError, match=r"t.yaml: groups must be a non-empty list"):
        read_tiling_file(path)


# --- randomized: divisibility and whole sticks -------------------------------------------

def _transposed_add(rows: int, cols: int, dtype_a: str, dtype_b: str):
    """z[r, c] = a[r, c] + b[c, r], default layouts: a's stick dim is c, b's is r."""
    from spyrec.indexing import parse_expr
    from spyrec.ir import Access, Buffer, Graph, Operation
    from spyrec.layout import default_layout

    g = Graph()
    for name, size, dtype, role in (("a", (rows, cols), dtype_a, "input"),
                                    ("b", (cols, rows), dtype_b, "input"),
                                    ("z", (rows, cols), "float16", "output")):
        g.add_buffer(Buffer(name, size, dtype, role, layout=default_layout(size, dtype)))
    g.inputs, g.outputs = ["a", "b"], ["z"]
    row_major = parse_expr(f"{cols}*c0 + c1")
    g.ops = [Operation("z", "add", (("c0", rows), ("c1", cols)),
                       (Access("a", row_major), Access("b", parse_expr(f"c0 + {rows}*c1"))),
                       Access("z", row_major), node="add", source="m.py:1")]
    return g


def _expected_error(rows, cols, ka, kb, dtype_a, dtype_b) -> str | None:
    """What resolve must say first for loops [{A: ka}, {B: kb}], or None for a plan."""
    per_stick = {"float16": 64, "float32": 32}
    if rows % ka:
        return f"{{A: {ka}}}: {ka} does not divide A's size {rows}"
    if ka > 1 and (rows // ka) % per_stick[dtype_b]:
        return f"{{A: {ka}}} splits sticks of b"
    if cols % kb:
        return f"{{B: {kb}}}: {kb} does not divide B's size {cols}"
    for buf, dtype in (("a", dtype_a), ("z", "float16")):
        if kb > 1 and (cols // kb) % per_stick[dtype]:
            return f"{{B: {kb}}} splits sticks of {buf}"
    return None


@settings(max_examples=200, deadline=None)
@given(rows=st.sampled_from([16, 32, 48, 64, 96, 128, 192, 256, 384]),
       cols=st.sampled_from([16, 32, 64, 100, 128, 192, 256, 512]),
       ka=st.one_of(st.sampled_from([1, 2, 4, 8]), st.integers(1, 12)),
       kb=st.one_of(st.sampled_from([1, 2, 4, 8]), st.integers(1, 12)),
       dtype_a=st.sampled_from(["float16", "float32"]),
       dtype_b=st.sampled_from(["float16", "float32"]))
def test_random_counts_divide_and_keep_whole_sticks(rows, cols, ka, kb, dtype_a, dtype_b):
    g = _transposed_add(rows, cols, dtype_a, dtype_b)
    text = "{dims: {a: [A, B]}, groups: [{ops: [add], loops: [{A: %d}, {B: %d}]}]}" % (ka, kb)
    expected = _expected_error(rows, cols, ka, kb, dtype_a, dtype_b)
    if expected is None:
        plan = plan_of(g, text)
        assert plan.groups[0].vars == {"z": ("c0", "c1")}
        assert plan.dim_sizes == {"A": rows, "B": cols}
    else:
        assert f"t.yaml: group 1: loops: {expected}" in error_of(g, text)
