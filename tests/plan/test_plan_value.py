"""Work division's plan is a value (`plan/split_plan.py`): choosing it leaves the graph as it
came (the IR text round trip before and after), and `apply_plan` is the one write, giving
exactly what `divide_work` gives. No planning module keys a cache by object identity."""

import ast
from pathlib import Path

import pytest
import torch

from samples.models import SAMPLES
from spyrec.compiler import CompileOptions, plan
from spyrec.frontend import load_program, lower_program
from spyrec.ir.parser import parse
from spyrec.ir.printer import format_graph
from spyrec.passes.work_division import WorkDivision
from spyrec.plan.core_splits import divide_work, plan_work
from spyrec.plan.split_plan import Plan, Split, apply_plan, plan_of
from tests.passes.textir import ir

PLAN = Path(__file__).resolve().parents[2] / "spyrec" / "plan"


def _before_work_division(tmp_path, name: str, module=None, inputs=None):
    """The sample's graph (or `module`'s on `inputs`) as the default pipeline hands it to
    work_division, and the pass."""
    if module is None:
        module, inputs = SAMPLES[name]()
    pt2 = tmp_path / f"{name}.pt2"
    torch.export.save(torch.export.export(module, inputs), str(pt2))
    p = plan(pt2, tmp_path / "out", CompileOptions(verbose=-1))
    graph = lower_program(load_program(pt2, "auto"))
    ctx = p.context()
    for step in p.pipeline:
        if isinstance(step, WorkDivision):
            return graph, step
        step.run(graph, ctx)
    raise AssertionError("no work_division in the default pipeline")


@pytest.mark.parametrize("name", ["decoder_fp32", "mlp_fp16"])
def test_choosing_a_plan_leaves_the_graph_as_it_came_and_apply_writes_it(tmp_path, name):
    graph, options = _before_work_division(tmp_path, name)
    text = format_graph(graph)
    assert parse(text, graph.constants) == graph          # the text round trip holds
    chosen, report = plan_work(graph, options)
    assert format_graph(graph) == text and parse(text, graph.constants) == graph
    assert set(chosen) == {op.name for op in graph.ops}
    # the one write gives what divide_work gives a copy of the input
    other = parse(text, graph.constants)
    assert divide_work(other, options) == report
    apply_plan(graph, chosen)
    assert format_graph(graph) == format_graph(other) != text
    assert plan_of(graph) == chosen
    if name == "decoder_fp32":     # chain moves replicate the norm the qkv matmuls read
        assert max(split.replicas for split in chosen.values()) == 8
        assert any(op.replicas > 1 for op in graph.ops)


def test_an_updated_plan_leaves_the_old_one_as_it_was():
    a = Split.of({"c0": 4, "c1": 8}, (("c0", 64), ("c1", 256)))
    b = Split.of({"c1": 32, "c0": 1}, (("c0", 64), ("c1", 256)))
    one = Plan({"x": a})
    steps = [one]
    for i in range(100):
        steps.append(steps[-1].with_split(f"op{i}", b))
    two = steps[-1].updated({"x": b, "op3": a})
    assert dict(one) == {"x": a} and len(steps[-1]) == 101 and steps[-1]["x"] == a
    assert two["x"] == b and two["op3"] == a and steps[-1]["op3"] == b and len(two) == 101
    assert "op100" not in two and two.get("op100") is None and list(two)[:2] == ["x", "op0"]
    assert b.splits == {"c1": 32, "c0": 1} and list(b.splits) == ["c1", "c0"]
    assert b.key == (("c0", 1), ("c1", 32)) and b.cores == 32 and b.replicas == 1
    copied = a.replicated(_op(), 2, fastest=True)
    assert copied.core_ranges == (("rep", 2), ("c0", 64), ("c1", 256))
    assert copied.splits == {"rep": 2, "c0": 4, "c1": 8} and copied.replicas == 2
    assert copied.replicated(_op(), 1) == a


def _op():
    text = ir("""
    buffer a: input float16[64, 256] device [4, 64, 64] / [64, 256, 1] fp16
    buffer z: output float16[64, 256] device [4, 64, 64] / [64, 256, 1] fp16
    op z: z[256*c0 + c1] = neg(a[256*c0 + c1]) over [c0<64, c1<256]
    inputs [a]
    outputs [z]
    """)
    return parse(text).ops[0]


def test_no_planning_module_keys_anything_by_object_identity():
    calls = {p.name: sum(1 for node in ast.walk(ast.parse(p.read_text()))
                         if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                         and node.func.id == "id")
             for p in sorted(PLAN.glob("*.py"))}
    assert len(calls) > 15 and sum(calls.values()) == 0, calls
