"""Symbolic lengths in the planning passes (issue 30): a graph that carries a symbol is tiled
so that every op walking the symbolic dim runs in a loop bound by it, attention becomes flash
loops bound by it, and what cannot follow a length is refused, naming the op.

The graphs here are static exports at the maximum with the symbol attached by hand (the front
end's part is tested in tests/frontend/test_dynamic_shapes.py; whole compiles and runs of
dynamic exports in tests/sim/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from spyrec.errors import UnsupportedProgram
from spyrec.ir import LoopBound, SymLength
from tests.programs import Lambda, export

S = SymLength("s", 64, 128, 256, "input x dim 1")


def _planned(pt2: Path, dims: dict[int, dict[int, str]], outputs: dict[int, dict[int, str]],
             mode: str = "tiled"):
    """The graph of `pt2` with symbol `S` on input/output dims (by position), through the
    default pipeline with `symbolic_lengths.mode` = `mode`; (graph, report)."""
    from spyrec.compiler import CompileOptions, plan
    from spyrec.frontend import load_program, lower_program
    from spyrec.passes.pipeline import run_passes

    graph = lower_program(load_program(pt2, "auto"))
    if dims:
        graph.symbols = {"s": S}
        graph.symbolic_dims = {graph.inputs[i]: d for i, d in dims.items()} | \
            {graph.outputs[i]: d for i, d in outputs.items()}
    checked = plan(pt2, pt2.with_suffix(""),
                   CompileOptions(sets=[f"symbolic_lengths.mode={mode}"]))
    ctx = checked.context()
    run_passes(graph, checked.pipeline, ctx, [], [])
    return graph, ctx.report


def _mlp(x):
    w = torch.randn(256, 128) / 16
    return Lambda(lambda m, x: F.layer_norm(torch.relu(x @ m.w.T), (256,)), w=w), (x,)


def test_every_op_walking_the_length_runs_in_a_loop_bound_by_it(tmp_path):
    module, inputs = _mlp(torch.randn(1, 256, 128))
    graph, report = _planned(export(tmp_path, module, inputs), {0: {1: "s"}}, {0: {1: "s"}})
    for op in graph.ops:
        if all(a.buffer in graph.constants for a in op.inputs):
            assert not op.loops           # the weight staged into LX once, before the loop
            continue
        walked = [lp for lp in op.loops if lp.bound is not None]
        assert walked and walked[0].bound == LoopBound("s", 64) and walked[0].count == 4, op
    (group,) = report["symbolic_tiling"]["groups"]
    assert report["symbolic_tiling"]["mode"] == "tiled"
    assert group["loops"] == [{"dim": "s", "count": 4}]


def test_the_last_row_of_an_attention_over_the_length_is_refused(tmp_path):
    """Flash writes its output rows from per-tile accumulators, which carry no symbol; the
    rows still have the queries' length, so reading the last one (a classifier's token) is
    refused as any read of the last token is. It had compiled, and read at a shorter length
    a row the run never wrote."""
    def last(m, x):
        q = x.view(1, -1, 2, 32).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return a.transpose(1, 2).reshape(1, -1, 64)[:, -1]

    pt2 = export(tmp_path, Lambda(last), (torch.randn(1, 256, 64),))
    with pytest.raises(UnsupportedProgram, match=r"node 'select' .* reads "
                                                 r"scaled_dot_product_attention dim 2, whose "
                                                 r"length is the symbolic s, at places that do "
                                                 r"not stop"):
        _planned(pt2, {0: {1: "s"}}, {})


def test_a_read_of_the_last_token_is_refused_naming_the_op(tmp_path):
    module = Lambda(lambda m, x: torch.relu(x[:, -1]))
    pt2 = export(tmp_path, module, (torch.randn(1, 256, 64),))
    with pytest.raises(UnsupportedProgram, match=r"node .relu. .* reads args_0 dim 1, whose "
                                                 r"length is the symbolic s, at places that do "
                                                 r"not stop"):
        _planned(pt2, {0: {1: "s"}}, {})


def test_a_mean_over_the_length_is_refused_by_the_two_instances(tmp_path):
    """`mean` over tokens scales by 1/length: the instances at 256 and 192 tokens differ in
    that attribute, so no one program serves both."""
    from spyrec.frontend import load_program, lower_program
    from spyrec.plan.tiling.symbolic import check_instances

    graphs = []
    for n in (256, 192):
        pt2 = export(tmp_path, Lambda(lambda m, x: x - x.mean(dim=1, keepdim=True)),
                     (torch.randn(1, n, 64),), name=f"m{n}")
        graph = lower_program(load_program(pt2, "auto"))
        graph.symbols = {"s": S}
        graph.symbolic_dims = {graph.inputs[0]: {1: "s"}, graph.outputs[0]: {1: "s"}}
        graphs.append(graph)
    with pytest.raises(UnsupportedProgram, match=r"node 'mean' .*its scaling_factor depends on "
                                                 r"a symbolic length \(0.00390625 at s=256, "
                                                 r"0.005208333333333333 at s=192\)"):
        check_instances(*graphs)
    plain = []
    for n in (256, 192):
        pt2 = export(tmp_path, Lambda(lambda m, x: torch.relu(x) * 2),
                     (torch.randn(1, n, 64),), name=f"r{n}")
        graph = lower_program(load_program(pt2, "auto"))
        graph.symbols = {"s": S}
        graph.symbolic_dims = {graph.inputs[0]: {1: "s"}, graph.outputs[0]: {1: "s"}}
        plain.append(graph)
    check_instances(*plain)


def test_causal_attention_over_the_length_becomes_flash_loops_bound_by_it(tmp_path):
    """q, k, v [1, 2, s, 64], 128..256 by 64: the query loop and every key loop run the
    length over their tile; key tiles divide the granularity 64, the query tile may be two
    granules (the shortest length), its last trip then past the length (`past_end`: 192
    tokens run 2 trips of 128); the causal span stays."""
    q, k, v = (torch.randn(1, 2, 256, 64).half() for _ in range(3))
    module = Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    graph, report = _planned(export(tmp_path, module, (q, k, v)),
                             {i: {2: "s"} for i in range(3)}, {0: {2: "s"}})
    (row,) = report["attention"]
    assert row["query_tile"] == 128 and row["key_tile"] == 64
    loops = {lp.key: lp for op in graph.ops for lp in op.loops}
    assert loops["fa0.0"].bound == LoopBound("s", 128, past_end=True)
    assert [loops["fa0.0"].bound.count(n) for n in (128, 192, 256)] == [1, 2, 2]
    keyed = [lp for key, lp in loops.items() if key.startswith("fa0.1")]
    assert keyed and all(lp.bound == LoopBound("s", 64) and lp.span is not None for lp in keyed)


def test_sized_every_op_walking_the_length_runs_it_whole(tmp_path):
    """`sized`: no loop; every op walking the token dim runs the length itself, its split of
    that var a divisor of the granularity (64); the report counts them."""
    module, inputs = _mlp(torch.randn(1, 256, 128))
    graph, report = _planned(export(tmp_path, module, inputs), {0: {1: "s"}}, {0: {1: "s"}},
                             "sized")
    assert not any(op.loops for op in graph.ops)
    walking = [op for op in graph.ops if not all(a.buffer in graph.constants
                                                 for a in op.inputs)]
    assert walking and all(len(op.lengths) == 1 and op.lengths[0][1] == "s" for op in walking)
    for op in walking:
        (v, _), = op.lengths
        assert dict(op.ranges)[v] == 256 and 64 % op.core_splits[v] == 0, op
    (group,) = report["symbolic_tiling"]["groups"]
    assert group["loops"] == [] and group["sized"]["symbol"] == "s"
    assert report["symbols"][0]["sized_ops"] == len(walking)


def test_sized_causal_attention_is_one_query_tile_and_a_key_loop_bound_by_it(tmp_path):
    """`sized`: the query tile is every query (no query loop; the flash ops run the length's
    queries), the key tiles divide the granularity and the key loop runs the length over its
    tile (one query tile reaches every key tile: no span; the causal mask runs on each)."""
    q, k, v = (torch.randn(1, 2, 256, 64).half() for _ in range(3))
    module = Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    graph, report = _planned(export(tmp_path, module, (q, k, v)),
                             {i: {2: "s"} for i in range(3)}, {0: {2: "s"}}, "sized")
    (row,) = report["attention"]
    assert row["query_tile"] == 256 and 64 % row["key_tile"] == 0
    loops = {lp.key: lp for op in graph.ops for lp in op.loops}
    assert "fa0.0" not in loops
    keyed = [lp for key, lp in loops.items() if key.startswith("fa0.1")]
    assert keyed and all(lp.bound == LoopBound("s", row["key_tile"]) and lp.span is None
                         for lp in keyed)
    looped = [op for op in graph.ops if op.loops]
    assert looped and all(op.lengths and op.lengths[0][1] == "s" for op in looped
                          if op.op != "fill")


def _decode_step():
    """One query over a static cache of 1,024 slots, masked as transformers masks a static
    cache: slots at positions up to the input `cache_position` are kept."""
    def step(m, q, k, v, cache_position):
        keep = torch.arange(1024) <= cache_position
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep.reshape(1, 1, 1, 1024))

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, n, 64, generator=g).half() for n in (1, 1024, 1024))
    return Lambda(step), (q, k, v, torch.tensor([300]))


def test_a_decode_steps_key_loop_runs_up_to_its_cache_position(tmp_path):
    """The mask keeps the slots up to a value read at run time: a symbol read from the
    position input (args_3[0] + 1: 0..1024 keys), and the key loop runs that over its tile."""
    from spyrec.ir import ValueSource

    module, inputs = _decode_step()
    graph, report = _planned(export(tmp_path, module, inputs), {}, {})
    (row,) = report["attention"]
    (name,) = graph.symbols
    assert graph.symbols[name] == SymLength(name, 1, 0, 1024,
                                            value_of=ValueSource("args_3", 0, 1))
    keyed = [lp for op in graph.ops for lp in op.loops if lp.key.startswith("fa0.1")]
    assert keyed and {lp.bound for lp in keyed} == {LoopBound(name, row["key_tile"])}
    assert LoopBound(name, 128).count(301) == 3 and LoopBound(name, 128).count(0) == 0


def test_sized_attention_whose_positions_no_symbol_names_equals_eager(tmp_path):
    """The causal mask tile is computed from position constants that carry no symbol here
    (attached by hand, as no export would): its op, and the staging copy of the positions it
    reads, are sized by their sized readers (`_size_writers`, `staging._copy_lengths`), so
    at every length each core holds the rows its readers take (else the simulator's LX
    check stops the run at 128 and 192 of 256)."""
    import numpy as np

    from spyrec.codegen import build_outputs, write_atomically
    from spyrec.sim.runner import simulate

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 256, 64, generator=g) for _ in range(3))
    module = Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    pt2 = export(tmp_path, module, (q, k, v))
    graph, report = _planned(pt2, {i: {2: "s"} for i in range(3)}, {0: {2: "s"}}, "sized")
    built = build_outputs(graph, pt2, [], {"pipeline": "", "tiling": None, "layouts": None},
                          report)
    write_atomically(tmp_path / "out", built.files, pt2)
    for n in (128, 192, 256):
        result = simulate(tmp_path / "out", {name: t[:, :, :n].numpy()
                                             for name, t in zip(graph.inputs, (q, k, v))})
        with torch.no_grad():
            want = module(*(t[:, :, :n] for t in (q, k, v))).numpy()
        np.testing.assert_allclose(result.outputs[0], want, rtol=1e-5, atol=1e-5)
