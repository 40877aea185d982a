"""memory_planning, IR text in and out: inputs, constants and outputs first (bump, never
shared), then one arena where intermediates that are never live together share bytes; loops
widen a buffer's life to the whole outermost loop. Randomized: the arena never overlaps two
live buffers and is never below the peak of live bytes; end to end the simulator refuses a
plan that ignores liveness and every sample stays equal to eager within the 1.1x bound."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spyrec.errors import UnsupportedProgram
from spyrec.ir.parser import parse
from spyrec.passes import memory_planning as mp
from spyrec.passes.memory_planning import MemoryPlanning
from spyrec.passes.registry import CompileContext
from tests.passes.textir import ir, run_pass

F16 = "float16[64, 64] device [1, 64, 64] / [64, 64, 1] fp16"    # 64 sticks: 8192 bytes
SPACE = "over [c0<64, c1<64]"
ACC = "[64*c0 + c1]"

BEFORE = f"""
    buffer w: constant {F16}
    buffer t: intermediate {F16}
    buffer x: input {F16}
    buffer spare: intermediate float16[3] device [1, 64] / [64, 1] fp16
    buffer y: output float32[64, 64] device [2, 64, 32] / [32, 64, 1] fp32
    op t: t{ACC} = add(x{ACC}, w{ACC}) {SPACE}
    op y: y{ACC} = identity(t{ACC}) {SPACE}
    inputs [x]
    outputs [y]
"""


def test_fixed_buffers_first_then_the_intermediate_arena():
    ctx = CompileContext()
    # x 0, w 8192, y (fp32: 16384 bytes) 16384; arena at 32768: t, and the untouched `spare`
    # (it holds nothing, so it conflicts with nothing and sits at the arena's start too)
    assert run_pass(MemoryPlanning(), BEFORE, ctx, facts=("layouts",)) == ir(f"""
    buffer w: constant {F16} @hbm 8192
    buffer t: intermediate {F16} @hbm 32768
    buffer x: input {F16} @hbm 0
    buffer spare: intermediate float16[3] device [1, 64] / [64, 1] fp16 @hbm 32768
    buffer y: output float32[64, 64] device [2, 64, 32] / [32, 64, 1] fp32 @hbm 16384
    op t: t{ACC} = add(x{ACC}, w{ACC}) {SPACE}
    op y: y{ACC} = identity(t{ACC}) {SPACE}
    inputs [x]
    outputs [y]
    """)
    assert ctx.report["hbm_bytes"] == 32768 + 8192
    assert ctx.report["memory_planning"] == {
        "total_bytes": 40960, "fixed_bytes": 32768, "arena_bytes": 8192,
        "peak_live_bytes": 8192, "bound_bytes": 32768 + 9011, "without_reuse_bytes": 41088,
        "reuse": True}


CHAIN = f"""
    buffer x: input {F16}
    buffer a: intermediate {F16}
    buffer b: intermediate {F16}
    buffer c: intermediate {F16}
    buffer d: intermediate {F16}
    buffer y: output {F16}
    op a: a{ACC} = neg(x{ACC}) {SPACE}{{loops}}
    op b: b{ACC} = neg(a{ACC}) {SPACE}{{loops}}
    op c: c{ACC} = neg(b{ACC}) {SPACE}{{loops}}
    op d: d{ACC} = neg(c{ACC}) {SPACE}
    op y: y{ACC} = add(d{ACC}, x{ACC}) {SPACE}
    inputs [x]
    outputs [y]
"""


def addresses(text: str, **options) -> dict[str, int]:
    graph = parse(ir(text))
    ctx = CompileContext()
    MemoryPlanning(**options).run(graph, ctx)
    return {n: b.hbm_address for n, b in graph.buffers.items()}


def test_a_chain_of_intermediates_ping_pongs_between_two_slots():
    # a [0,1], b [1,2], c [2,3], d [3,4]: a and c share, b and d share
    got = addresses(CHAIN.format(loops=""))
    assert got == {"x": 0, "y": 8192, "a": 16384, "b": 24576, "c": 16384, "d": 24576}


def test_without_reuse_every_intermediate_has_its_own_bytes():
    got = addresses(CHAIN.format(loops=""), reuse=False)
    assert got == {"x": 0, "y": 8192, "a": 16384, "b": 24576, "c": 32768, "d": 40960}


def test_a_loop_keeps_every_buffer_it_uses_live_for_the_whole_loop():
    # a, b, c run in one loop: each iteration rewrites a and c, so a's bytes cannot hold c
    # (the unrolled trace interleaves them); d runs after the loop and reuses a's bytes
    got = addresses(CHAIN.format(loops=" loops [2(c0)@g0.0]").replace("c0<64", "c0<32", 3))
    assert got["a"] != got["c"] and len({got["a"], got["b"], got["c"]}) == 3
    assert got["d"] == got["a"]


def test_mutated_buffers_never_share():
    # without the rule u (ops 1-2) would take new_cache's bytes (op 0): the cache's new value
    # is read back after the program, so new_cache must stay whole to the end
    text = f"""
    buffer x: input {F16}
    buffer cache: constant {F16}
    buffer new_cache: intermediate {F16}
    buffer u: intermediate {F16}
    buffer y: output {F16}
    op new_cache: new_cache{ACC} = add(x{ACC}, cache{ACC}) {SPACE}
    op u: u{ACC} = neg(x{ACC}) {SPACE}
    op y: y{ACC} = neg(u{ACC}) {SPACE}
    inputs [x]
    outputs [y]
    mutated [cache -> new_cache]
    """
    got = addresses(text)
    assert got == {"x": 0, "cache": 8192, "new_cache": 16384, "y": 24576, "u": 32768}
    assert addresses(text.replace("    mutated [cache -> new_cache]\n", ""))["u"] == \
        addresses(text.replace("    mutated [cache -> new_cache]\n", ""))["new_cache"]


def test_base_address_is_aligned_up():
    out = run_pass(MemoryPlanning(base_address=100), BEFORE, facts=("layouts",))
    assert f"buffer x: input {F16} @hbm 128\n" in out
    assert f"buffer w: constant {F16} @hbm 8320\n" in out   # 128 + 8192


def test_a_program_larger_than_the_device_is_unsupported():
    huge = ir("""
    buffer x: input float32[65536, 65536] device [2048, 65536, 32] / [32, 65536, 1] fp32
    inputs [x]
    outputs []
    """)
    # 100 GiB base + 16 GiB of x > 112 GiB; the message names the largest tensors
    with pytest.raises(UnsupportedProgram, match=r"the program needs 124554051584 bytes "
                       r"\(116.0 GiB\) of device memory but the device has 120259084288 bytes "
                       r"\(112.0 GiB\); largest tensors: 'x' \[65536, 65536\] float32 "
                       r"\(17179869184 bytes \(16.0 GiB\)\)"):
        run_pass(MemoryPlanning(base_address=100 * 2**30), huge, facts=("layouts",))


def test_buffers_addressed_before_are_not_overlapped():
    out = run_pass(MemoryPlanning(), """
    buffer x: input float16[64] device [1, 64] / [64, 1] fp16 @hbm 0
    buffer y: output float16[64] device [1, 64] / [64, 1] fp16
    op y: y[c0] = neg(x[c0]) over [c0<64]
    inputs [x]
    outputs [y]
    """, facts=("layouts",))
    assert "buffer y: output float16[64] device [1, 64] / [64, 1] fp16 @hbm 128\n" in out


spans = st.tuples(st.integers(0, 30), st.integers(0, 10)).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64).map(lambda k: 128 * k), spans), max_size=40))
def test_random_intervals_never_overlap_and_the_arena_is_at_least_the_peak(items):
    sizes = {f"b{i}": size for i, (size, _) in enumerate(items)}
    live = {f"b{i}": span for i, (_, span) in enumerate(items)}
    offsets = mp.plan_arena(sizes, live)
    assert set(offsets) == set(sizes)
    for i, p in enumerate(sizes):
        assert offsets[p] % 128 == 0
        for q in list(sizes)[i + 1:]:
            if live[p][0] <= live[q][1] and live[q][0] <= live[p][1]:
                assert (offsets[p] + sizes[p] <= offsets[q]
                        or offsets[q] + sizes[q] <= offsets[p]), (p, q, offsets)
    arena = max((offsets[n] + sizes[n] for n in sizes), default=0)
    peak = mp.peak_live_bytes(sizes, live)
    brute = max((sum(sizes[n] for n in sizes if live[n][0] <= t <= live[n][1])
                 for t in range(41)), default=0)
    assert peak == brute <= arena


# --- end to end: the simulator proves the plan ------------------------------------------------

def _compile(tmp, name: str, **opts):
    import torch  # noqa: F401  (heavy: only the end-to-end tests need it)

    from samples.models import SAMPLES
    from samples.tiling import TILING_SAMPLES
    from tests.programs import compile_pt2, export

    module, inputs = {**SAMPLES, **TILING_SAMPLES}[name]()
    pt2 = export(tmp, module.eval(), inputs)
    return compile_pt2(pt2, tmp / "out", **opts), inputs


def _simulate(out, inputs):
    from spyrec.sim.runner import simulate
    from tests.differential.harness import host_array
    from tests.programs import load_json

    names = load_json(out / "manifest.json")["inputs"]
    return simulate(out, {n: host_array(t) for n, t in zip(names, inputs)})


@pytest.mark.parametrize("name", ["mlp_fp32", "attention_fp32", "layernorm_fp16",
                                  "decoder_fp32"])
def test_samples_reuse_within_the_bound(tmp_path, name):
    from tests.programs import load_json

    # intermediates in HBM (no LX placement), so there is something to reuse
    out, _ = _compile(tmp_path, name, sets=["scratchpad_planning.intermediates=false"])
    plan = load_json(out / "report.json")["memory_planning"]
    assert plan["total_bytes"] == load_json(out / "manifest.json")["hbm_bytes"]
    assert plan["peak_live_bytes"] <= plan["arena_bytes"]
    assert plan["total_bytes"] <= plan["bound_bytes"] < plan["without_reuse_bytes"]
    assert "device memory:" in (out / "report.txt").read_text()


def test_a_plan_that_ignores_liveness_is_refused_by_the_simulator(tmp_path, monkeypatch):
    """Fault injection: every intermediate at the arena's start. The IR verifier catches it
    after the pass; with verification off, the simulator refuses the files."""
    from spyrec.errors import InternalError, SimulatorFault

    monkeypatch.setattr(mp, "plan_arena", lambda sizes, live: dict.fromkeys(sizes, 0))
    hbm_only = ["scratchpad_planning.intermediates=false"]   # intermediates in HBM
    with pytest.raises(InternalError, match=r"live at the same time and share device bytes"):
        _compile(tmp_path, "mlp_fp32", sets=hbm_only)
    (tmp_path / "unverified").mkdir()
    out, inputs = _compile(tmp_path / "unverified", "mlp_fp32", verify_each=False,
                           sets=hbm_only)
    with pytest.raises(SimulatorFault, match=r"overlap in HBM while both are live"):
        _simulate(out, inputs)


def test_a_plan_that_ignores_loops_is_refused_by_verifier_and_simulator(tmp_path, monkeypatch):
    """Fault injection: lifetimes by op order alone, not widened over the loop. The decoder
    MLP's per-tile buffers stay in HBM (LX off), so its loop body's buffers would share bytes
    between two ops of one iteration, which the next iteration still needs apart."""
    from pathlib import Path

    from spyrec.errors import SimulatorFault

    tiling = Path(__file__).resolve().parents[2] / "configs" / "tiling" / \
        "decoder_mlp_tokens.yaml"
    opts = {"tiling": tiling, "sets": ["scratchpad_planning.enabled=false"]}
    out, inputs = _compile(tmp_path, "decoder_mlp_tokens", **opts)
    _simulate(out, inputs)   # the real plan runs

    def by_op_order(graph):
        live = {}
        for i, op in enumerate(graph.ops):
            for _, access in op.accesses():
                lo, hi = live.get(access.buffer, (i, i))
                live[access.buffer] = (min(lo, i), max(hi, i))
        return live
    monkeypatch.setattr(mp, "live_intervals", by_op_order)
    from spyrec.errors import InternalError

    (tmp_path / "verified").mkdir()   # the compiler's verifier widens lives over loops too
    with pytest.raises(InternalError, match=r"are live at the same time and share device"):
        _compile(tmp_path / "verified", "decoder_mlp_tokens", **opts)
    (tmp_path / "bad").mkdir()
    bad, _ = _compile(tmp_path / "bad", "decoder_mlp_tokens", verify_each=False, **opts)
    with pytest.raises(SimulatorFault, match=r"overlap in HBM while both are live"):
        _simulate(bad, inputs)


def _first_fit_by_scan(order, sizes, live):
    """`_first_fit` as it was: every placed buffer scanned for each new one."""
    placed, offsets = [], {}
    for name in order:
        span = live.get(name)
        busy = sorted((o, e) for o, e, s in placed
                      if span is not None and s[0] <= span[1] and span[0] <= s[1])
        offset = 0
        for o, e in busy:
            if offset + sizes[name] <= o:
                break
            offset = max(offset, e)
        offsets[name] = offset
        if span is not None:
            placed.append((offset, offset + sizes[name], span))
    return offsets


long_spans = st.tuples(st.integers(0, 400), st.integers(0, 200)).map(
    lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64).map(lambda k: 128 * k),
                          st.one_of(st.none(), spans, long_spans)), max_size=60))
def test_first_fit_through_span_buckets_places_as_scanning_every_buffer(items):
    """Buckets of op indices (`SPAN_BLOCK`) find the same live neighbours as a scan: spans
    within one block, across several, and buffers no op touches."""
    sizes = {f"b{i}": size for i, (size, _) in enumerate(items)}
    live = {f"b{i}": span for i, (_, span) in enumerate(items) if span is not None}
    order = sorted(sizes, key=lambda n: (-sizes[n], n))
    assert mp._first_fit(order, sizes, live) == _first_fit_by_scan(order, sizes, live)
