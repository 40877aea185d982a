"""work_division by cost: the pass's estimate (plan/split_estimate.py, counted on the IR) equals
the simulator's cost model (sim/cost.py, counted from the written sdsc files by its own code)
on what the compiler writes; randomized matmul + bias programs simulate to numpy with the
chosen splits; on the reference's published matmul cases (reference/B-codegen.md §5.4) our
choice is estimated at least as fast as the reference's, and faster where it split M only;
a tiled decoder MLP no longer re-reads its weights on every core."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyrec.ir.parser import parse
from spyrec.plan.split_candidates import candidates, greedy_split, stick_vars
from spyrec.plan.producers import Producers
from spyrec.plan.split_estimate import split_estimate
from spyrec.sim import simulate
from tests.codegen.test_tiled_codegen import compile_text
from tests.passes.textir import ir
from tests.sim.test_tiled_compiled import write


def _fp16(r: int, c: int) -> str:
    return f"float16[{r}, {c}] device [{-(-c // 64)}, {r}, 64] / [64, {c}, 1] fp16"


def matmul_text(m: int, k: int, n: int, bias: bool = False) -> str:
    """x[m, k] @ w[k, n] (+ b[n]) in fp16, default layouts."""
    out = "h" if bias else "y"
    text = f"""
    buffer x: input {_fp16(m, k)}
    buffer w: input {_fp16(k, n)}
    buffer {out}: {'intermediate' if bias else 'output'} {_fp16(m, n)}
    op {out}: {out}[{n}*c0 + c1] = batchmatmul(x[{k}*c0 + r0], w[{n}*r0 + c1]) \\
    over [c0<{m}, c1<{n}, r0<{k}] reduce [r0]
    """
    if bias:
        text += f"""
    buffer b: input float16[{n}] device [{-(-n // 64)}, 64] / [64, 1] fp16
    buffer y: output {_fp16(m, n)}
    op y: y[{n}*c0 + c1] = add(h[{n}*c0 + c1], b[c1]) over [c0<{m}, c1<{n}]
    """
    return text + f"""
    inputs [x, w{', b' if bias else ''}]
    outputs [y]
    """


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(m=st.sampled_from([2, 8, 24, 64, 96]), k=st.sampled_from([64, 100, 128, 320]),
       n=st.sampled_from([64, 100, 128, 192, 256]), seed=st.integers(0, 2**16))
def test_chosen_splits_simulate_to_numpy_and_cost_what_the_pass_estimated(tmp_path_factory, m, k,
                                                                         n, seed):
    tmp = tmp_path_factory.mktemp("mm")
    files, ctx = compile_text(matmul_text(m, k, n, bias=True), tmp)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float16)
    w = rng.standard_normal((k, n)).astype(np.float16)
    b = rng.standard_normal(n).astype(np.float16)
    result = simulate(write(files, tmp / "out"), {"x": x, "w": w, "b": b})
    h = (x.astype(np.float32) @ w.astype(np.float32)).astype(np.float16)
    want = (h.astype(np.float32) + b).astype(np.float16)
    np.testing.assert_allclose(result.outputs[0].astype(np.float32), want.astype(np.float32),
                               rtol=1e-2, atol=1e-2)
    rows = ctx.report["work_division"]["ops"]
    assert [r["op"] for r in rows] == [c["name"] for c in result.cost["ops"]]
    for row, cost in zip(rows, result.cost["ops"]):
        assert row["time_us"] == cost["time_us"], (row, cost)
        assert row["time_us"] <= row["greedy_time_us"]
        assert row["cores"] == cost["cores_used"]


@pytest.mark.parametrize("text", [matmul_text(64, 128, 256, bias=True), matmul_text(4, 64, 128)])
def test_the_choice_is_the_cheapest_candidate_and_the_greedy_one_on_ties(text):
    graph = parse(ir(text).replace("\\\n", ""))
    from spyrec.passes.registry import CompileContext
    from spyrec.passes.work_division import WorkDivision

    ctx = CompileContext()
    WorkDivision().run(graph, ctx)
    producers = Producers(graph, intermediates=True)     # as WorkDivision() prices them
    for op, row in zip(graph.ops, ctx.report["work_division"]["ops"]):
        sticks = stick_vars(graph, op)
        times = [split_estimate(graph, op, c, producers).time_us
                 for c in candidates(graph, op, sticks, 32)]
        assert row["time_us"] == min(times)
        greedy = greedy_split(graph, op, sticks, 32)
        if split_estimate(graph, op, greedy, producers).time_us == min(times):
            assert op.core_splits == greedy


# reference/B-codegen.md §5.4, shapes read as M x K x N; the reference's final choice (its
# cost-model split when adopted, else its default M32).
REFERENCE_CASES = [
    ((8, 1024, 1024), {"c0": 4, "c1": 8}),
    ((512, 512, 512), {"c0": 4, "c1": 8}),
    ((2048, 4096, 4096), {"c0": 4, "c1": 8}),
    ((128, 256, 64), {"c0": 32, "c1": 1}),
    ((64, 8192, 2048), {"c0": 32, "c1": 1}),
]


@pytest.mark.parametrize("shape,theirs", REFERENCE_CASES, ids=[str(s) for s, _ in REFERENCE_CASES])
def test_reference_matmul_cases_estimate_no_slower_than_the_reference_choice(shape, theirs):
    from spyrec.passes.registry import CompileContext
    from spyrec.passes.work_division import WorkDivision

    graph = parse(ir(matmul_text(*shape)).replace("\\\n", ""))
    (op,) = graph.ops
    ref = split_estimate(graph, op, {**theirs, "r0": 1})
    ctx = CompileContext()
    WorkDivision().run(graph, ctx)
    (row,) = ctx.report["work_division"]["ops"]
    assert row["time_us"] <= ref.time_us
    if theirs["c0"] == 32:       # M split 32 ways: every core reads all of w (4 cohorts of 8)
        assert row["time_us"] < ref.time_us / 1.5


def test_reference_case_numbers():
    """The 64x8192x2048 case by hand, with the broadcast cohort rule (a slice r cores read
    alike costs each max(8, r) / 8r of it). The reference keeps M32: each core reads 2 rows of
    x (2 x 128 K-sticks, its own), all of w (8192 x 32 sticks, read by all 32 cores: 1/8 each)
    and writes 2 x 32 sticks: 256 + 32,768 + 64 = 33,088 sticks x 32 cores x 128 B / 204.8
    GB/s = 661.76 us. N split 32 ways (1 stick each): x whole (8192 sticks, 32 readers: 1024),
    w 8192 x 1, out 64 x 1: 9,280 sticks -> 185.6 us. Ours splits N 8 ways (4 sticks each): x
    8192 / 8 + w 8192 x 4 + out 64 x 4 = 34,048 sticks x 8 cores -> 170.24 us, above its
    compute of 64 x 256 x 8192 MACs / 1.536 TMAC/s (64 rows: full efficiency) = 87.38 us.
    M 4 x N 8 costs the same on all 32 cores, so it wins (work_division's spread_within): x
    16 rows x 128 sticks read by the 8 N-cores alike (1/8: 256) + w 8192 x 4 read by the 4
    M-cores alike (1/4: 8,192) + out 16 x 4 = 8,512 sticks x 128 B at 204.8 / 32 GB/s =
    170.24 us. (Every core here moves at its share of the card, below its own 36 GB/s.)"""
    graph = parse(ir(matmul_text(64, 8192, 2048)).replace("\\\n", ""))
    (op,) = graph.ops
    assert split_estimate(graph, op, {"c0": 32, "c1": 1, "r0": 1}).time_us == 661.76
    assert split_estimate(graph, op, {"c0": 1, "c1": 32, "r0": 1}).time_us == 185.6
    from spyrec.passes.registry import CompileContext
    from spyrec.passes.work_division import WorkDivision

    ctx = CompileContext()
    WorkDivision().run(graph, ctx)
    (row,) = ctx.report["work_division"]["ops"]
    assert (row["split"], row["time_us"], row["greedy_time_us"]) == \
        ("[c0:4, c1:8, r0:1]", 170.24, 661.76)
    assert split_estimate(graph, op, {"c0": 1, "c1": 8, "r0": 1}).time_us == 170.24


def test_tiled_decoder_mlp_reads_each_weight_once_not_once_per_core_or_tile(tmp_path):
    """configs/tiling/decoder_mlp_tokens.yaml: 4 tiles of 64 tokens. Greedy split M (the 64
    tokens) 32 ways, so each of 32 cores reads every 256 KiB weight per tile (fetched 4 times:
    4 broadcast cohorts of 8). By cost, the down matmul splits M 8 x N 4: each core reads its
    column block of the weight, the same one on every trip, so stage_inputs copies it into LX
    once before the loop, and work_division, pricing that one read over the 4 trips, takes
    all 32 cores (charged per trip, the weight's read made every split memory-bound and it
    took 4 cores with M whole: 1.37 us per trip instead of 0.48); gate and up split M 4 x N 8
    (32 cores), the norm before them replicated 8 ways per tile so that each N-core finds its
    rows in its own LX, and their weights staged as 4 copies of 8 column blocks. Each x tile,
    which the norm reads three times, is copied into LX per trip. Traffic: 4,726,784 greedy
    -> 2,105,344 with N splits and staging -> 1,705,984 with the replicated norm (its output
    no longer crosses HBM); the gate/up/product tiles stay in LX where the consumer's split
    matches its writer's."""
    from pathlib import Path

    from samples.tiling import TILING_SAMPLES
    from tests.programs import compile_pt2, export, load_json

    module, inputs = TILING_SAMPLES["decoder_mlp_tokens"]()
    config = Path(__file__).resolve().parents[2] / "configs/tiling/decoder_mlp_tokens.yaml"
    # one-op SuperDSCs, as work_division prices them (fusion, after it, re-times the chains)
    out = compile_pt2(export(tmp_path, module, inputs, "mlp"), tiling=config,
                      sets=["fusion.enabled=false"])
    report = load_json(out / "report.json")
    totals = report["cost"]["totals"]
    assert totals["hbm_read_bytes"] + totals["hbm_write_bytes"] == 1_705_984
    staged = {r["buffer"]: (r["reads"], r["bytes_per_core"]) for r in report["stage_inputs"]}
    # the norm weight too, once, replicated on every core (its 32 token cores each read it);
    # each weight was fetched once per trip of the 4-trip token loop (report.json's schema
    # asks for at least 2 fetches: a staged input is one read more than once)
    assert staged == {"p_mlp_gate_weight__staged": (4, 32_768),
                      "p_mlp_up_weight__staged": (4, 32_768),
                      "p_mlp_down_weight__staged": (4, 65_536),
                      "x__tile": (3, 8192), "p_norm_weight__staged": (4, 512)}
    from spyrec.sim.files import validate
    validate(report, "report", "report.json")
    rows = {r["op"]: r for r in report["work_division"]["ops"]}
    assert {name: rows[name]["split"] for name in ("linear", "linear_1", "linear_2")} == {
        "linear": "[c0:4, c1:8, r0:1]", "linear_1": "[c0:4, c1:8, r0:1]",
        "linear_2": "[c0:8, c1:4, r0:1]"}
    costs = {c["name"]: c for c in report["cost"]["ops"]}
    assert costs["linear_2"]["cores_used"] == 32
    assert costs["linear_2"]["time_us"] == pytest.approx(0.482718, abs=1e-6)   # compute-bound
    assert totals["time_us"] == pytest.approx(33.996536, abs=1e-6)
    assert rows["rms_norm"]["split"] == "[c0:4, c1:1, rep:8]"
    for name, factor in (("linear", 2.5), ("linear_1", 2.5), ("linear_2", 2)):
        assert rows[name]["time_us"] <= rows[name]["greedy_time_us"] / factor
    placed = {b["buffer"] for b in report["scratchpad"]["buffers"] if b["placed"]}
    assert {"rms_norm", "linear", "silu", "linear_1", "linear_2"} <= placed
    assert {f"p_mlp_{w}_weight__staged" for w in ("gate", "up", "down")} <= placed
    # where the LX prediction held (every per-tile arg placed, no staged read), the estimate
    # is the cost
    hbm_tiles = {b["buffer"] for b in report["scratchpad"]["buffers"] if not b["placed"]}
    opspecs = load_json(out / "opspecs.json")
    specs = opspecs["kernels"][0]["specs"][-1]["loop"]["body"]
    assert len(specs) == 13 and len(costs) == 17   # 12 + the x tile copy in the loop, 4 before
    for spec in specs:
        names = {a["name"] for a in spec["args"]}
        if not names & hbm_tiles and not any(n.endswith(("__staged", "__tile")) for n in names):
            assert rows[spec["name"]]["time_us"] == costs[spec["name"]]["time_us"], spec["name"]


@pytest.mark.parametrize("name, hbm_bytes", [("mlp_fp16", (722_432, 722_432)),
                                             ("layernorm_fp16", (617_472, 617_472))])
def test_pricing_intermediates_as_lx_keeps_them_there(tmp_path, name, hbm_bytes):
    """work_division prices an intermediate as LX (scratchpad_planning places every one whose
    slice fits and whose readers keep the writer's slices), so it picks splits that keep the
    writer's slices, and every output still equal to eager. Priced as HBM, the splits of
    the mlp moved 853,504 bytes and the layernorm's 1,639,168 while a core could use the
    card's whole bandwidth; with each core at its own 36 GB/s, work division spreads both
    over more cores (spread_within) and lands on the same slices either way."""
    import torch

    from samples.models import SAMPLES
    from tests.programs import compile_pt2, export, load_json

    module, inputs = SAMPLES[name]()
    pt2 = export(tmp_path, module, inputs, name)
    moved = []
    for lx in (False, True):
        out = compile_pt2(pt2, tmp_path / f"lx_{lx}",
                          sets=[f"work_division.lx_intermediates={str(lx).lower()}"])
        totals = load_json(out / "report.json")["cost"]["totals"]
        moved.append(totals["hbm_read_bytes"] + totals["hbm_write_bytes"])
        names = load_json(out / "manifest.json")["inputs"]
        got = simulate(out, {n: t.numpy() for n, t in zip(names, inputs)}).outputs[0]
        with torch.no_grad():
            want = module(*inputs).float().numpy()
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)
    assert tuple(moved) == hbm_bytes


def test_a_producer_takes_the_split_its_reduction_can_read_from_lx(tmp_path):
    """RMSNorm: `x * x` feeds a mean over the stick dim, which cannot split its reduced var.
    Chosen alone, the product would split the stick dim too (32 cores) and go to HBM; chosen
    again knowing its reader (work_division's second look), it keeps the mean's rows-only
    split, so it stays in LX, and the program still equals eager."""
    import torch

    from tests.differential.harness import run_and_compare
    from tests.programs import Lambda, load_json

    x = torch.randn(8, 127, 256, generator=torch.Generator().manual_seed(0))
    out = run_and_compare(tmp_path, Lambda(
        lambda m, x: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)), (x,))
    report = load_json(out / "report.json")
    splits = {row["op"]: row["split"] for row in report["work_division"]["ops"]}
    assert splits["mul"] == "[c0:8, c1:1, c2:1]" and splits["mean"] == "[c0:8, c1:1, r0:1]"
    placed = {b["buffer"]: b["placed"] for b in report["scratchpad"]["buffers"]}
    assert placed["mul"] is True


def test_a_chain_changes_its_splits_together_when_that_keeps_it_in_lx(tmp_path):
    """A decoder block (batch 8 x 127 tokens: only the batch splits evenly over rows): chosen
    op by op, the attention splits batch x heads and the MLP batch x features, so the
    intermediates between differently split ops go through HBM. Chain moves (plan/chain_moves.py)
    change whole chains together: the MLP takes the batch split and stays in LX; the attention
    keeps batch x heads on 32 cores (4x its compute, worth reading qkv through HBM, a move
    the serial time allows too). Less traffic and a lower estimated time, and the program
    still equals eager. The numbers are the cost model's, pinned. (split_outputs is off: with
    the fused qkv split, per-op choices already agree on this block.)"""
    from samples.models import decoder
    from tests.differential.harness import run_and_compare
    from tests.programs import load_json

    module, inputs = decoder(1)
    totals = {}
    for moves in (False, True):
        (tmp_path / f"moves_{moves}").mkdir()
        out = run_and_compare(tmp_path / f"moves_{moves}", module, inputs,
                              sets=[f"work_division.chain_moves={str(moves).lower()}",
                                    "split_outputs.enabled=false",
                                    # priced as planned: one-op SuperDSCs
                                    "fusion.enabled=false"])
        report = load_json(out / "report.json")
        t = report["cost"]["totals"]
        totals[moves] = (t["hbm_read_bytes"] + t["hbm_write_bytes"], round(t["time_us"], 3))
        splits = {row["op"]: row["split"] for row in report["work_division"]["ops"]}
    assert totals == {False: (24_991_744, 148.063), True: (13_027_328, 121.376)}
    assert splits["softmax__3"] == "[c0:8, c1:4, c2:1, c3:1]"      # attention: batch x heads
    assert splits["mul"] == "[c0:8, c1:1, c2:1]"                    # MLP: batch only
    placed = {b["buffer"]: b["placed"] for b in report["scratchpad"]["buffers"]}
    assert placed["mul"] and placed["silu"]


class TiledEmbedding(torch.nn.Module):
    """An embedding gather inside a token loop (configs below): its table is read at rows
    the index tensor picks, which stage_inputs never stages."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(512, 256, dtype=torch.float16)

    def forward(self, idx):
        return self.emb(idx) * 2.0


def _after_work_division(tmp_path, name: str):
    """(graph after work_division, its Producers) of one program: the depth-2 decoder, the
    tiled decoder MLP (configs/tiling) or the tiled embedding (4 token tiles)."""
    from pathlib import Path

    from samples.models import decoder
    from samples.tiling import TILING_SAMPLES
    from tests.programs import compile_pt2, export

    tmp_path.mkdir(parents=True, exist_ok=True)
    tiling = None
    if name == "decoder2":
        module, inputs = decoder(2)
    elif name == "mlp_tiled":
        module, inputs = TILING_SAMPLES["decoder_mlp_tokens"]()
        tiling = Path(__file__).resolve().parents[2] / "configs/tiling/decoder_mlp_tokens.yaml"
    else:
        torch.manual_seed(0)
        module, inputs = TiledEmbedding(), (torch.randint(0, 512, (256,)),)
        tiling = tmp_path / "tokens.yaml"
        tiling.write_text("dims: {idx: [T]}\ngroups:\n  - ops: ['*']\n    loops: [{T: 4}]\n")
    dumps = tmp_path / "ir"
    compile_pt2(export(tmp_path, module, inputs, name), tmp_path / "out", tiling=tiling,
                print_ir_after_all=dumps)
    (path,) = dumps.glob("*_work_division.ir")
    graph = parse(path.read_text().split("\n", 1)[1])
    return graph, Producers(graph, intermediates=True)


@pytest.mark.parametrize("name", ["decoder2", "embedding_tiled"])
def test_one_estimate_key_means_one_estimate(tmp_path, name):
    """work_division and chain moves memoize estimates on split_estimate.estimate_key, without
    names, so the layers of a stack share them. After work_division, for every op and every
    candidate split: ops with one key and split have one estimate (a dependency the key
    missed would split a group; the tiled embedding has keyed ops in a loop, the tiled MLP
    none: its looped ops all touch per-tile buffers). Layer 2 of the decoder finds layer 1's
    keys where their splits agree (its MLP; its attention runs on other splits than layer
    1's)."""
    from spyrec.plan.split_estimate import estimate_key

    graph, producers = _after_work_division(tmp_path, name)
    groups: dict[tuple, set] = {}
    names: dict[tuple, set[str]] = {}
    for op in graph.ops:
        key = estimate_key(graph, op, producers)
        if key is None:
            continue
        names.setdefault(key, set()).add(op.name)
        for split in candidates(graph, op, stick_vars(graph, op), 32):
            for penalties in (True, False):
                cost = split_estimate(graph, op, split, producers, penalties=penalties)
                groups.setdefault((key, tuple(sorted(split.items())), penalties),
                                  set()).add(cost)
    assert groups and all(len(costs) == 1 for costs in groups.values())
    if name == "decoder2":
        shared = [ops for ops in names.values() if len(ops) > 1]
        # both MLPs (gate and up alike) and the norms before them
        assert {"linear_2", "linear_3", "linear_7", "linear_8"} in shared
        assert {"linear_4", "linear_9"} in shared and {"silu", "silu_1"} in shared
        assert len(shared) == 10


def test_a_looped_read_is_priced_once_only_where_stage_inputs_stages_it(tmp_path):
    """The split estimate charges a looped op's read of an input once over the trips only where
    stage_inputs may stage it: the tiled MLP's down weight (read in place every trip), not
    the embedding table a gather reads at rows the index picks."""
    from spyrec.plan.hbm_bytes import access_sticks, core0_slice
    from spyrec.plan.split_estimate import _staged_trips

    def trips(graph, producers, op_name, buffer):
        op = next(o for o in graph.ops if o.name == op_name)
        access = next(a for a in op.reads() if a.buffer == buffer)
        sticks = access_sticks(graph, op, access, core0_slice(op, op.core_splits))
        return _staged_trips(op, access, sticks, producers)

    mlp = _after_work_division(tmp_path / "mlp", "mlp_tiled")
    assert trips(*mlp, "linear_2", "p_mlp_down_weight") == 4
    assert "x" not in mlp[1].stageable          # its tiles move with the loop
    emb = _after_work_division(tmp_path / "emb", "embedding_tiled")
    assert "p_emb_weight" in emb[1].stageable   # read in place: no loop var in its index,
    assert trips(*emb, "mul", "p_emb_weight") == 1      # but gathered
