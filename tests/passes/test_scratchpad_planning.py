"""scratchpad_planning, IR text in and out: which per-tile buffers go to LX, where, and why not.

Sizes by hand: a per-tile fp16 [512, 1024] tile (device [16, 512, 64]) is 1 MiB; split by rows
over 32 cores each core holds 16 rows x 16 sticks = 32768 bytes.
"""

from pathlib import Path

import pytest

from spyrec.errors import ConfigError
from spyrec.ir.parser import parse
from spyrec.ir.verify import verify
from spyrec.passes.memory_planning import MemoryPlanning
from spyrec.passes.registry import CompileContext
from spyrec.passes.scratchpad_planning import ScratchpadPlanning
from spyrec.plan.lx_placement import _in_place_of
from tests.passes.textir import ir, run_pass

FACTS = ("layouts", "core_splits")
FULL = "float16[1024, 4096] device [64, 1024, 64] / [64, 4096, 1] fp16"
TILE = "float16[512, 1024] device [16, 512, 64] / [64, 1024, 1] fp16 per_tile"
LOOPS = "loops [2(c0)@g0.0, 4(c1)@g0.1]"
SPACE = "over [c0<512, c1<1024]"


def seed(reader_cores: str = "[c0:32, c1:1]") -> str:
    return f"""
    buffer a: input {FULL}
    buffer b: input {FULL}
    buffer y: intermediate {TILE}
    buffer z: output {FULL}
    op y: y[1024*c0 + c1] = add(a[4096*c0 + c1], b[4096*c0 + c1]) {SPACE} cores [c0:32, c1:1] {LOOPS}
    op z: z[4096*c0 + c1] = mul(y[1024*c0 + c1], a[4096*c0 + c1]) {SPACE} cores {reader_cores} {LOOPS}
    inputs [a, b]
    outputs [z]
    """


def rows(ctx: CompileContext) -> dict:
    return {r["buffer"]: r for r in ctx.report["scratchpad"]["buffers"]}


def test_a_tile_that_fits_goes_to_lx_at_zero():
    ctx = CompileContext()
    out = run_pass(ScratchpadPlanning(), seed(), ctx, facts=FACTS)
    assert f"buffer y: intermediate {TILE} @lx 0\n" in out
    assert rows(ctx)["y"] == {"buffer": "y", "placed": True, "bytes_per_core": 32768,
                              "lx_address": 0, "reason": None}
    assert ctx.report["scratchpad"]["peak_bytes_per_core"] == 32768


def test_memory_planning_gives_lx_buffers_no_hbm_address():
    graph = parse(ir(seed()))
    ctx = CompileContext()
    ScratchpadPlanning().run(graph, ctx)
    MemoryPlanning().run(graph, ctx)
    assert graph.buffers["y"].hbm_address is None
    # a, b, z: three 8 MiB tensors, nothing for y
    assert ctx.report["hbm_bytes"] == 3 * 8 * 2**20
    assert verify(graph, FACTS + ("hbm_addresses",)) == []


def test_a_slice_larger_than_the_budget_stays_in_hbm():
    ctx = CompileContext()
    out = run_pass(ScratchpadPlanning(budget_bytes=32640), seed(), ctx, facts=FACTS)
    assert f"buffer y: intermediate {TILE}\n" in out
    assert rows(ctx)["y"]["reason"] == ("its per-core slice of 32768 bytes exceeds the LX "
                                        "budget of 32640 bytes")


def test_a_reader_split_differently_keeps_it_in_hbm():
    ctx = CompileContext()
    out = run_pass(ScratchpadPlanning(), seed("[c0:16, c1:2]"), ctx, facts=FACTS)
    assert "@lx" not in out
    assert rows(ctx)["y"]["reason"] == (
        "op 'z' divides it across cores as [c0:16, c1:2], its writer 'y' as [c0:32, c1:1]: "
        "cores would read slices other cores hold")


def test_a_reader_split_over_a_var_that_does_not_index_it_keeps_it_in_hbm():
    text = f"""
    buffer a: input {FULL}
    buffer y: intermediate {TILE}
    buffer s: output float16[1024, 4096, 2] device [4096, 1, 1024, 64] / [2, -1, 8192, 1] fp16
    op y: y[1024*c0 + c1] = identity(a[4096*c0 + c1]) {SPACE} cores [c0:16, c1:1] {LOOPS}
    op s: s[8192*c0 + 2*c1 + c2] = identity(y[1024*c0 + c1]) over [c0<512, c1<1024, c2<2] \
cores [c0:16, c1:1, c2:2] {LOOPS}
    inputs [a]
    outputs [s]
    """
    ctx = CompileContext()
    graph = parse(ir(text).replace("\\\n", ""))
    ScratchpadPlanning().run(graph, ctx)
    assert graph.buffers["y"].lx_address is None
    assert rows(ctx)["y"]["reason"] == ("op 's' splits c2 across cores, which does not index "
                                        "it: its cores would read slices other cores hold "
                                        "(unless its writer 'y' is replicated so)")


def test_disabled_places_nothing():
    ctx = CompileContext()
    out = run_pass(ScratchpadPlanning(enabled=False), seed(), ctx, facts=FACTS)
    assert "@lx" not in out
    assert rows(ctx)["y"]["reason"] == "scratchpad_planning is disabled (enabled: false)"


def test_a_budget_past_the_usable_lx_is_refused():
    with pytest.raises(ConfigError, match="between 0 and 1625344"):
        ScratchpadPlanning(budget_bytes=1677721).check_options()


CHAIN = f"""
    buffer a: input {FULL}
    buffer t1: intermediate {TILE}
    buffer t2: intermediate {TILE}
    buffer t3: intermediate {TILE}
    buffer z: output {FULL}
    op t1: t1[1024*c0 + c1] = neg(a[4096*c0 + c1]) {SPACE} cores [c0:32, c1:1] {LOOPS}
    op t2: t2[1024*c0 + c1] = neg(t1[1024*c0 + c1]) {SPACE} cores [c0:32, c1:1] {LOOPS}
    op t3: t3[1024*c0 + c1] = neg(t2[1024*c0 + c1]) {SPACE} cores [c0:32, c1:1] {LOOPS}
    op z: z[4096*c0 + c1] = neg(t3[1024*c0 + c1]) {SPACE} cores [c0:32, c1:1] {LOOPS}
    inputs [a]
    outputs [z]
"""


def test_space_is_reused_after_a_last_use():
    # t1 and t2 meet in op t2, t2 and t3 in op t3; t1 is dead by then, so t3 takes its bytes
    ctx = CompileContext()
    run_pass(ScratchpadPlanning(), CHAIN, ctx, facts=FACTS)
    assert {n: r["lx_address"] for n, r in rows(ctx).items()} == \
        {"t1": 0, "t2": 32768, "t3": 0}
    assert ctx.report["scratchpad"]["peak_bytes_per_core"] == 65536


def test_a_buffer_read_across_an_inner_loop_stays_live_through_it():
    # t1 is written once per outer iteration and read in every inner one, so t3 (inner,
    # after t1's last read in program order) must not take t1's bytes
    text = CHAIN.replace(f"op t2: t2[1024*c0 + c1] = neg(t1[1024*c0 + c1]) {SPACE} cores "
                         f"[c0:32, c1:1] {LOOPS}",
                         f"op t2: t2[1024*c0 + c1] = neg(t1[1024*c0 + c1]) {SPACE} cores "
                         f"[c0:32, c1:1] loops [2(c0)@g0.0, 4(c1)@g0.1, 2(c1)@g0.2]")
    text = text.replace(f"op t3: t3[1024*c0 + c1] = neg(t2[1024*c0 + c1]) {SPACE} cores "
                        f"[c0:32, c1:1] {LOOPS}",
                        f"op t3: t3[1024*c0 + c1] = neg(t2[1024*c0 + c1]) {SPACE} cores "
                        f"[c0:32, c1:1] loops [2(c0)@g0.0, 4(c1)@g0.1, 2(c1)@g0.2]")
    ctx = CompileContext()
    graph = parse(ir(text))
    ScratchpadPlanning().run(graph, ctx)
    placed = {n: r["lx_address"] for n, r in rows(ctx).items()}
    assert placed["t1"] != placed["t3"] and placed["t2"] != placed["t3"]
    assert placed == {"t1": 0, "t2": 32768, "t3": 65536}


def test_lx_full_keeps_the_rest_in_hbm():
    ctx = CompileContext()
    run_pass(ScratchpadPlanning(budget_bytes=65536 - 128), CHAIN, ctx, facts=FACTS)
    r = rows(ctx)
    assert (r["t1"]["placed"], r["t2"]["placed"], r["t3"]["placed"]) == (True, False, True)
    assert r["t2"]["reason"] == ("LX is full while it is live: it needs 32768 bytes per core "
                                 "at offset 32768, past the budget of 65408")


def test_verify_names_a_wrong_lx_plan():
    graph = parse(ir(seed("[c0:16, c1:2]")))
    graph.buffers["y"].lx_address = 0
    graph.buffers["a"].lx_address = 64
    problems = verify(graph, FACTS)
    assert "buffer 'a': LX offset 64 is not a non-negative multiple of 128" in problems
    assert "buffer 'a': lives in LX but is a program input (only intermediates live in LX)" \
        in problems
    assert "LX buffer 'a': op 'y' uses it inside a loop but it is not per-tile (its accesses " \
        "would advance with the loop)" in problems
    assert "LX buffer 'y': op 'z' divides it across cores unlike its writer 'y'" in problems
    graph = parse(ir(seed()))
    graph.buffers["y"].lx_address = 1625344 - 128
    assert verify(graph, FACTS) == [
        "LX buffer 'y': ends at byte 1657984 of each core's LX, past the 1625344 usable"]


# --- beyond loop bodies (issue 10 §1) -------------------------------------------------------

FLAT = CHAIN.replace(TILE, FULL.replace("float16[1024, 4096]", "float16[1024, 4096]")) \
    .replace(f" {LOOPS}", "").replace("1024*c0 + c1]", "4096*c0 + c1]") \
    .replace(SPACE, "over [c0<1024, c1<4096]")


def test_untiled_intermediates_go_to_lx_updated_in_place():
    # fp16 [1024, 4096] is 8 MiB; rows over 32 cores: 32 rows x 64 sticks = 262144 B a core;
    # each neg reads its input for the last time at the same coordinates: one slot for all
    ctx = CompileContext()
    out = run_pass(ScratchpadPlanning(), FLAT, ctx, facts=FACTS)
    assert f"buffer t1: intermediate {FULL} @lx 0\n" in out
    assert {n: (r["lx_address"], r["bytes_per_core"], r.get("in_place_of"))
            for n, r in rows(ctx).items()} == \
        {"t1": (0, 262144, None), "t2": (0, 262144, "t1"), "t3": (0, 262144, "t2")}
    # inputs and outputs get no row: they live in HBM whatever their size
    assert "a" not in rows(ctx) and "z" not in rows(ctx)
    assert ctx.report["scratchpad"]["peak_bytes_per_core"] == 262144


def test_no_in_place_update_of_an_input_read_later_or_elsewhere():
    # t1 is read again by t3, so t2 cannot overwrite it: t2 takes the next free slot; t3 adds
    # t2 and t1, both dying there, and takes the slot of the first (t2)
    text = FLAT.replace("op t3: t3[4096*c0 + c1] = neg(t2[4096*c0 + c1])",
                        "op t3: t3[4096*c0 + c1] = add(t2[4096*c0 + c1], t1[4096*c0 + c1])")
    ctx = CompileContext()
    run_pass(ScratchpadPlanning(), text, ctx, facts=FACTS)
    assert {n: (r["lx_address"], r.get("in_place_of")) for n, r in rows(ctx).items()} == \
        {"t1": (0, None), "t2": (262144, None), "t3": (262144, "t2")}


def test_no_in_place_update_where_an_element_is_read_from_elsewhere():
    # t2's row r comes from t1's row 63 - r, which a streaming in-place update would already
    # have overwritten. (Codegen has no SuperDSC form for a backward dim, so the pass keeps
    # t1 in HBM anyway; the in-place rule is asked directly.)
    sq = "float16[64, 64] device [1, 64, 64] / [64, 64, 1] fp16"
    text = f"""
    buffer a: input {sq}
    buffer t1: intermediate {sq}
    buffer t2: intermediate {sq}
    buffer z: output {sq}
    op t1: t1[64*c0 + c1] = neg(a[64*c0 + c1]) over [c0<64, c1<64] cores [c0:1, c1:1]
    op t2: t2[64*c0 + c1] = neg(t1[ROW + c1]) over [c0<64, c1<64] cores [c0:1, c1:1]
    op z: z[64*c0 + c1] = neg(t2[64*c0 + c1]) over [c0<64, c1<64] cores [c0:1, c1:1]
    inputs [a]
    outputs [z]
    """
    live, sizes = {"t1": (0, 1), "t2": (1, 2)}, {"t1": 8192, "t2": 8192}
    for row, host in (("64*c0", "t1"), ("4032 - 64*c0", None)):
        graph = parse(ir(text.replace("ROW", row)))
        assert _in_place_of(graph, "t2", live, sizes, {"t1": 0}) == host


def test_intermediates_false_and_enabled_false_keep_untiled_buffers_out_of_the_plan():
    for option in (ScratchpadPlanning(intermediates=False), ScratchpadPlanning(enabled=False)):
        ctx = CompileContext()
        out = run_pass(option, FLAT, ctx, facts=FACTS)
        assert "@lx" not in out and rows(ctx) == {}


def test_a_whole_buffer_used_inside_a_loop_stays_in_hbm():
    # t1 is written before the loop and read inside it: its window moves every iteration
    text = f"""
    buffer a: input {FULL}
    buffer t1: intermediate {FULL}
    buffer z: output {FULL}
    op t1: t1[4096*c0 + c1] = neg(a[4096*c0 + c1]) over [c0<1024, c1<4096] cores [c0:32, c1:1]
    op z: z[4096*c0 + c1] = neg(t1[4096*c0 + c1]) {SPACE} cores [c0:32, c1:1] {LOOPS}
    inputs [a]
    outputs [z]
    """
    ctx = CompileContext()
    run_pass(ScratchpadPlanning(), text, ctx, facts=FACTS)
    assert rows(ctx)["t1"]["reason"] == (
        "op 'z' uses it inside loop g0.0, where its window moves every iteration (only "
        "per-tile buffers of a loop, and buffers loops use in place, live in LX)")


def test_a_whole_buffer_a_loop_reads_in_place_lives_in_lx():
    # w [4096] (a bias) is written before the loop over z's rows and read by every trip at
    # the same place (its index has no tiled var): one fixed LX slice serves every trip. Each
    # of the 32 column slices is 2 sticks = 256 bytes.
    text = f"""
    buffer a: input {FULL}
    buffer b: input float16[4096] device [64, 64] / [64, 1] fp16
    buffer w: intermediate float16[4096] device [64, 64] / [64, 1] fp16
    buffer z: output {FULL}
    op w: w[c0] = neg(b[c0]) over [c0<4096] cores [c0:32]
    op z: z[4096*c0 + c1] = add(a[4096*c0 + c1], w[c1]) over [c0<512, c1<4096] \
        cores [c0:1, c1:32] loops [2(c0)@g0.0]
    inputs [a, b]
    outputs [z]
    """
    ctx = CompileContext()
    run_pass(ScratchpadPlanning(), text, ctx, facts=FACTS)
    assert rows(ctx)["w"]["placed"] and rows(ctx)["w"]["bytes_per_core"] == 2 * 128


def test_a_mismatch_is_priced_and_the_consumer_could_take_the_producers_split():
    # y: 1 MiB tile, written once and read once in HBM = 2 MiB; z split [c0:32] would give
    # each core the rows y's writer gave it, on as many cores, moving the same a bytes
    ctx = CompileContext()
    run_pass(ScratchpadPlanning(), seed("[c0:16, c1:2]"), ctx, facts=FACTS)
    assert rows(ctx)["y"]["mismatch"] == {
        "producer": "y", "producer_cores": "[c0:32, c1:1]", "consumer": "z",
        "consumer_cores": "[c0:16, c1:2]", "hbm_bytes": 2097152,
        "consumer_can_take_producer_split": True}


def test_a_mismatch_the_consumer_cannot_fix_by_taking_the_producers_split():
    # the producer uses 16 cores, the consumer 32 (c2 split 2): taking [c0:16] halves them
    text = f"""
    buffer a: input {FULL}
    buffer y: intermediate {FULL}
    buffer s: output float16[1024, 4096, 2] device [4096, 1, 1024, 64] / [2, -1, 8192, 1] fp16
    op y: y[4096*c0 + c1] = identity(a[4096*c0 + c1]) over [c0<1024, c1<4096] cores \
[c0:16, c1:1]
    op s: s[8192*c0 + 2*c1 + c2] = identity(y[4096*c0 + c1]) over [c0<1024, c1<4096, c2<2] \
cores [c0:16, c1:1, c2:2]
    inputs [a]
    outputs [s]
    """
    ctx = CompileContext()
    graph = parse(ir(text).replace("\\\n", ""))
    ScratchpadPlanning().run(graph, ctx)
    row = rows(ctx)["y"]
    assert row["reason"] == ("op 's' splits c2 across cores, which does not index it: its "
                             "cores would read slices other cores hold (unless its writer "
                             "'y' is replicated so)")
    assert row["mismatch"]["hbm_bytes"] == 2 * 8 * 2**20
    assert row["mismatch"]["consumer_can_take_producer_split"] is False


def test_the_accumulator_of_a_k_tiled_matmul_lives_in_lx(tmp_path):
    """configs/tiling/matmul_k.yaml: x [64, 512] @ w.T in 4 K tiles. Each trip adds its partial
    into `linear__acc` at the same place (the accumulator's index has no tiled var), so it
    takes one fixed LX slice: the fill before the loop, 4 in-place adds and the copy out move
    no HBM bytes, and the program moves exactly its compulsory 360,448 bytes (x, w, the
    output), down from 1,015,808 with the accumulator in HBM."""
    from samples.tiling import TILING_SAMPLES
    from tests.differential.harness import run_and_compare
    from tests.programs import load_json

    module, inputs = TILING_SAMPLES["matmul_k"]()
    config = Path(__file__).resolve().parents[2] / "configs/tiling/matmul_k.yaml"
    out = run_and_compare(tmp_path, module, inputs, tiling=config)
    report = load_json(out / "report.json")
    placed = {b["buffer"]: b["placed"] for b in report["scratchpad"]["buffers"]}
    assert placed["linear__acc"] and placed["linear__part"]
    totals = report["cost"]["totals"]
    assert totals["hbm_read_bytes"] + totals["hbm_write_bytes"] == 360_448
