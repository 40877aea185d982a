"""Loops whose trips depend on the enclosing loop's index (issue 29: causal and sliding-window
K/V loops), from a tiled IR graph written by hand through the real planners, codegen and
simulator.

The program sums the rows of x [256, 512] fp16: an outer loop over 4 row tiles of 64 (i) and
an inner loop over 4 column tiles of 128 (j) accumulating into fp32 (coarse_tiling's form of a
tiled reduction: fill, partial sum, add, final write). With `span(0*i+0, 1*i+1)` row tile i
sums only the column tiles j <= i (causal); with `span(1*i-1, 1*i+0)` only j = i - 1, which is
no tile at all for i = 0 (a sliding window whose first range is empty). x holds small integers,
so every sum is exact and the references below are exact too: a result that ignored the span
(all 4 column tiles for every row) differs from them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from spyrec.codegen.writer import build_outputs, printed, write_atomically
from spyrec.driver import estimate_cost
from spyrec.ir import Loop, TripSpan
from spyrec.ir.graph import nest_trips
from spyrec.ir.parser import IRSyntaxError, parse
from spyrec.ir.printer import format_graph
from spyrec.ir.verify import verify
from spyrec.plan.tiling.transform import unroll
from spyrec.passes.memory_planning import MemoryPlanning
from spyrec.passes.registry import CompileContext
from spyrec.passes.scratchpad_planning import ScratchpadPlanning
from spyrec.passes.work_division import WorkDivision
from spyrec.sim import simulate
from spyrec.sim.bundle import execute, parse_bundle
from spyrec.sim.files import validate
from tests.passes.textir import ir

CAUSAL = "span(0*i+0, 1*i+1)"
WINDOW = "span(1*i-1, 1*i+0)"
RECTANGULAR = ""

ROW_SUM = """
buffer x: input float16[256, 512] device [4, 512, 64] / [32768, 1, 512] fp16
buffer s: output float16[256] device [4, 64] / [64, 1] fp16
buffer s__acc: intermediate float32[256] device [8, 32] / [32, 1] fp32
buffer s__part: intermediate float32[64] device [2, 32] / [32, 1] fp32 per_tile
op s__acc: s__acc[c0] = fill() over [c0<64] attrs {{"value": 0.0}} loops [4(c0)@g0.0]
op s__part: s__part[c0] = sum(x[512*c0 + r0]) over [c0<64, r0<128] reduce [r0] \
loops [4(c0)@g0.0, 4(r0)@g0.1 {span}]
op s__acc.1: s__acc[c0] = add(s__acc[c0], s__part[c0]) over [c0<64] \
loops [4(c0)@g0.0, 4()@g0.1 {span}]
op s: s[c0] = identity(s__acc[c0]) over [c0<64] loops [4(c0)@g0.0]
inputs [x]
outputs [s]
"""


def row_sum(span: str) -> str:
    return ir(ROW_SUM.format(span=span)).replace("\\\n", "").replace(" ]", "]")


def column_tiles(span: str, i: int) -> range:
    """The column tiles row tile i sums, written out independently of `TripSpan`."""
    return {CAUSAL: range(0, i + 1), WINDOW: range(max(i - 1, 0), i),
            RECTANGULAR: range(4)}[span]


def reference(x: np.ndarray, span: str) -> np.ndarray:
    sums = np.zeros(256, dtype=np.float32)
    for r in range(256):
        for j in column_tiles(span, r // 64):
            sums[r] += x[r, 128 * j:128 * (j + 1)].astype(np.float32).sum()
    return sums.astype(np.float16)


def compile_graph(text: str, tmp: Path, unrolled: bool = False):
    """The graph through the planners (LX for intermediates on) and codegen: the written
    directory and what build_outputs returned."""
    graph = parse(text)
    assert verify(graph) == []
    if unrolled:
        unroll(graph)
    ctx = CompileContext()
    for p in (WorkDivision(cores=32), ScratchpadPlanning(), MemoryPlanning()):
        p.run(graph, ctx)
    assert verify(graph, ("layouts", "core_splits", "hbm_addresses")) == []
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "prog.pt2").write_bytes(b"not read")
    built = build_outputs(graph, tmp / "prog.pt2", [], {"pipeline": None, "tiling": None,
                                                        "layouts": None}, ctx.report)
    out = tmp / "out"
    write_atomically(out, built.files, tmp / "prog.pt2")
    return out, built


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return np.random.default_rng(29).integers(-3, 4, (256, 512)).astype(np.float16)


@pytest.mark.parametrize("span", [CAUSAL, WINDOW], ids=["causal", "window"])
def test_simulation_runs_exactly_the_trips_in_range(span, x, tmp_path):
    out, _ = compile_graph(row_sum(span), tmp_path)
    got = simulate(out, {"x": x}).outputs[0]
    want = reference(x, span)
    assert not np.array_equal(want, reference(x, RECTANGULAR))   # the span matters here
    assert np.array_equal(got, want)
    if span == WINDOW:
        assert not got[:64].any()       # row tile 0: an empty range, the fill's zeros


@pytest.mark.parametrize("span", [CAUSAL, WINDOW], ids=["causal", "window"])
def test_unrolled_form_gives_the_same_bits(span, x, tmp_path):
    looped, _ = compile_graph(row_sum(span), tmp_path / "looped")
    flat, _ = compile_graph(row_sum(span), tmp_path / "flat", unrolled=True)
    bundle = (flat / "bundle.mlir").read_text()
    assert "scf.for" not in bundle
    # fill and final write per row tile, partial sum and add per trip run
    trips = {CAUSAL: 1 + 2 + 3 + 4, WINDOW: 0 + 1 + 1 + 1}[span]
    assert bundle.count("sdsc_execute") == 2 * 4 + 2 * trips
    a = simulate(looped, {"x": x}).outputs[0]
    b = simulate(flat, {"x": x}).outputs[0]
    assert a.tobytes() == b.tobytes()


def test_bundle_computes_the_bounds_and_parses_with_xdsl(tmp_path):
    out, _ = compile_graph(row_sum(WINDOW), tmp_path)
    bundle = (out / "bundle.mlir").read_text()
    assert """\
      %lo_raw_1 = affine.min affine_map<(d0)[s0] -> (d0 - 1, s0)>(%i_0)[%loop_bound_1]
      %lo_1 = arith.maxsi %lo_raw_1, %c0 : index
      %hi_raw_1 = affine.min affine_map<(d0)[s0] -> (d0, s0)>(%i_0)[%loop_bound_1]
      %hi_1 = arith.maxsi %hi_raw_1, %c0 : index
      scf.for %i_1 = %lo_1 to %hi_1 step %c1 {
""" in bundle
    assert "    scf.for %i_0 = %c0 to %loop_bound_0 step %c1 {\n" in bundle
    trace = execute(parse_bundle(bundle))
    inner = [dict(e.loop) for e in trace if len(e.loop) == 2]
    assert [(t["i_0"], t["i_1"]) for t in inner] == [(1, 0), (1, 0), (2, 1), (2, 1),
                                                     (3, 2), (3, 2)]


def test_opspecs_state_the_range(tmp_path):
    _, built = compile_graph(row_sum(CAUSAL), tmp_path)
    specs = json.loads(printed(built.files["opspecs.json"]))
    validate(specs, "opspecs", "opspecs.json")
    (outer,) = specs["kernels"][0]["specs"]
    assert "start" not in outer["loop"]
    fill, inner, final = outer["loop"]["body"]
    assert {k: v for k, v in inner["loop"].items() if k != "body"} == {
        "count": 4, "tiled_symbols": ["r0"], "start": [0, 0], "stop": [1, 1]}


def test_cost_counts_the_trips_run(x, tmp_path):
    costs = {}
    for name, span in (("causal", CAUSAL), ("window", WINDOW), ("rect", RECTANGULAR)):
        out, built = compile_graph(row_sum(span), tmp_path / name)
        estimate, _, _ = estimate_cost(built, out)
        simulated = simulate(out, {"x": x}).cost
        assert estimate["totals"] == simulated["totals"]
        costs[name] = estimate["totals"]
    # per trip run: the partial sum reads one 64 x 128 fp16 tile of x (16,384 B) and writes
    # its 64 fp32 sums to LX (256 B), the add reads them and the accumulator (256 B from HBM)
    # and writes it back; per row tile: the fill writes the accumulator, the final write
    # reads it and writes 64 fp16 (128 B)
    for name, trips in (("rect", 16), ("causal", 10), ("window", 3)):
        got = costs[name]
        assert got["executions"] == 2 * 4 + 2 * trips
        assert got["hbm_read_bytes"] == trips * (16384 + 256) + 4 * 256
        assert got["hbm_write_bytes"] == trips * 256 + 4 * (256 + 128)
        assert got["lx_read_bytes"] == got["lx_write_bytes"] == trips * 256
    assert [costs[n]["hbm_read_bytes"] for n in ("rect", "causal", "window")] == [
        267264, 167424, 50944]


def test_nest_trips_sums_the_ranges():
    outer = Loop(4, ("c0",), "g0.0")
    assert nest_trips((outer, Loop(4, ("r0",), "g0.1", TripSpan((0, 0), (1, 1))))) == 10
    assert nest_trips((outer, Loop(4, ("r0",), "g0.1", TripSpan((1, -1), (1, 0))))) == 3
    assert nest_trips((outer, Loop(4, ("r0",), "g0.1"))) == 16
    # clamped at both ends: i = 0..3 -> [0, 2), [0, 4), [1, 4), [3, 4)
    assert nest_trips((outer, Loop(4, ("r0",), "g0.1", TripSpan((2, -3), (2, 2))))) == 10


def test_text_form_round_trips():
    text = row_sum(WINDOW)
    graph = parse(text)
    assert graph.ops[1].loops[1].span == TripSpan((1, -1), (1, 0))
    assert graph.ops[0].loops[0].span is None
    assert "loops [4(c0)@g0.0, 4(r0)@g0.1 span(1*i-1, 1*i+0)]" in format_graph(graph)
    assert format_graph(graph) == text


def test_verifier_rejects_a_span_on_level_0_and_a_malformed_one():
    graph = parse(row_sum(CAUSAL).replace("loops [4(c0)@g0.0]",
                                          "loops [4(c0)@g0.0 span(0*i+0, 1*i+1)]"))
    problems = verify(graph)
    assert problems[0] == (
        "op 's__acc': loop 0 (g0.0) has a trip span, but only a loop inside another may: its "
        "trips are a function of the enclosing loop's index")
    graph = parse(row_sum(CAUSAL))
    part = graph.ops[1]
    bad = Loop(4, ("r0",), "g0.1", TripSpan((0, 0), (1.5, 1)))
    graph.ops[1] = replace(part, loops=(part.loops[0], bad))
    assert any("loop 1 (g0.1) has a malformed trip span ((0, 0), (1.5, 1)): each end is a "
               "pair of integers (a, b) meaning a*i + b" in p for p in verify(graph))


def test_verifier_rejects_ops_of_one_loop_with_different_spans():
    text = row_sum(CAUSAL)
    at = text.index("loops [4(c0)@g0.0, 4()@g0.1 span(0*i+0, 1*i+1)]")
    graph = parse(text[:at] + text[at:].replace("span(0*i+0, 1*i+1)", "span(0*i+0, 1*i+2)", 1))
    assert any(p.startswith("loop g0.1: op 's__acc.1' gives it 4 iterations and span")
               for p in verify(graph))


def test_parser_names_a_malformed_span():
    with pytest.raises(IRSyntaxError, match=r"expected '\*i'"):
        parse(row_sum(CAUSAL).replace("span(0*i+0,", "span(0+0,", 1))
