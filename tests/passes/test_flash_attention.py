"""Flash attention (issue 29 §1): attention as a query-tile loop around a key-tile loop with an
online softmax (passes/flash_attention/rewrite.py), equal to eager, with the scores never
materialized whole: at these sizes the rewrite is forced (`attention=always`) with small tiles,
so the same code path the long-context programs take runs in seconds."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.differential.harness import run_and_compare
from tests.programs import Lambda, load_json


def _flash(tq: int, tk: int) -> dict:
    return {"sets": ["flash_attention.mode=always", f"flash_attention.query_tile={tq}",
                     f"flash_attention.key_tile={tk}"]}


def _qkv(b, h, hk, s, l, e, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, s, e, generator=g).to(dtype)
    k = torch.randn(b, hk, l, e, generator=g).to(dtype)
    v = torch.randn(b, hk, l, e, generator=g).to(dtype)
    return q, k, v


def _sdpa_pt2(tmp_path, q, k, v):
    """An exported plain sdpa of q, k, v."""
    from tests.programs import export

    return export(tmp_path, Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v)),
                  (q, k, v))


def _before_tiling(pt2, tmp_path, capsys):
    """The graph of `pt2` as coarse tiling receives it (from `--print-ir-before`)."""
    from spyrec.ir.parser import parse
    from tests.programs import compile_pt2

    capsys.readouterr()
    compile_pt2(pt2, tmp_path / "out", print_ir_before="coarse_tiling",
                sets=["flash_attention.mode=never"])
    text = capsys.readouterr().err
    return parse(text[text.index("buffer "):text.index("\noutputs")].rstrip() + "\n" +
                 text[text.index("outputs"):].splitlines()[0])


def _rows(out) -> list[dict]:
    return load_json(out / "report.json")["attention"]


def _no_full_scores(out, queries: int, keys: int) -> None:
    """No intermediate of the program holds a [.., S, L] block of scores whole."""
    for t in load_json(out / "manifest.json")["tensors"]:
        shape = t["host_shape"]
        if t["role"] != "intermediate":
            continue
        assert not (len(shape) >= 2 and shape[-2:] == [queries, keys]), t["name"]


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_equals_eager_and_keeps_scores_in_tiles(tmp_path, causal):
    q, k, v = _qkv(1, 2, 2, 256, 256, 64)
    out = run_and_compare(tmp_path, Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=causal)), (q, k, v), **_flash(64, 64))
    (row,) = _rows(out)
    assert row["loops"] == [4, 4] and row["query_tile"] == 64 and row["key_tile"] == 64
    assert not row["safe_softmax"]
    _no_full_scores(out, 256, 256)
    # causal: query tile i runs key tiles 0..i only (10 of 16 tile pairs): tiles 0..i-1 keep
    # every score and run without the mask (a loop of 14 ops per key tile: the scale rides on
    # the query copy), the diagonal tile runs masked (16: the compare and the where3 too). Per
    # query tile 5 ops (3 fills, the scaled q copy, the division), and once stage_inputs'
    # copy of the -inf scalar
    assert row["key_span"] == ({"start": [0, 0], "stop": [1, 1]} if causal else None)
    executions = load_json(out / "report.json")["cost"]["totals"]["executions"]
    assert executions == (4 * 5 + 14 * 6 + 16 * 4 + 1 if causal else 4 * 5 + 14 * 16)
    if causal:
        from spyrec.inspect_dir import inspect_directory

        loops = [line.strip() for line in inspect_directory(out).splitlines()
                 if line.strip().startswith("loop ")]
        assert loops == ["loop 4x over [c2]", "loop 4x over [c3], trips [0*i+0, 1*i+0)",
                         "loop 4x over [c1], trips [1*i+0, 1*i+1)"]
        assert row["key_loops"] == [
            {"loop": "fa0.1.whole", "masked": False, "span": {"start": [0, 0], "stop": [1, 0]}},
            {"loop": "fa0.1.edge1", "masked": True, "span": {"start": [1, 0], "stop": [1, 1]}}]


def test_two_query_tiles_skip_the_key_tiles_above_the_diagonal(tmp_path):
    """Two query tiles of 128 over key tiles of 64: the first needs key tiles 0-1, the
    second all 4. Only one span end lies strictly inside (0, 4), so the line is found by
    its slope through that point and the clamp (2 key tiles per query tile); every key
    tile ran for both query tiles before."""
    q, k, v = _qkv(1, 2, 2, 256, 256, 64)
    out = run_and_compare(tmp_path, Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True)), (q, k, v), **_flash(128, 64))
    (row,) = _rows(out)
    assert row["key_span"] == {"start": [0, 0], "stop": [2, 2]}
    assert [lp["span"] for lp in row["key_loops"]] == [
        {"start": [0, 0], "stop": [2, 0]}, {"start": [2, 0], "stop": [2, 2]}]


def test_a_head_loop_outside_the_query_loop(tmp_path):
    """head_tile 2 of 8 heads: a loop of 4 head groups around the query and key loops."""
    q, k, v = _qkv(1, 8, 8, 128, 128, 32)
    out = run_and_compare(tmp_path, Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True)), (q, k, v),
        sets=["flash_attention.mode=always", "flash_attention.query_tile=64",
              "flash_attention.key_tile=64", "flash_attention.head_tile=2"])
    (row,) = _rows(out)
    assert (row["head_tile"], row["head_loop"], row["loops"]) == (2, 4, [2, 2])


def test_gqa_fp32_and_a_boolean_mask_with_fully_masked_rows(tmp_path):
    """8 query heads over 2 K/V heads; rows 0..7 of the mask keep no key: eager's sdpa gives 0
    there (the safe softmax), and so must the flash form (m stays -FLT_MAX, l = 0)."""
    q, k, v = _qkv(1, 8, 2, 128, 192, 32, torch.float32)
    mask = torch.rand(1, 1, 128, 192, generator=torch.Generator().manual_seed(3)) > 0.3
    mask[..., :8, :] = False
    fn = Lambda(lambda m, q, k, v, mask: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=True))
    out = run_and_compare(tmp_path, fn, (q, k, v, mask), **_flash(32, 64))
    (row,) = _rows(out)
    assert row["safe_softmax"] and row["loops"] == [4, 3]


def test_additive_mask_and_scale(tmp_path):
    q, k, v = _qkv(2, 2, 2, 64, 128, 64)
    bias = torch.randn(2, 1, 64, 128).to(torch.float16)
    fn = Lambda(lambda m, q, k, v, bias: F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias, scale=0.3))
    out = run_and_compare(tmp_path, fn, (q, k, v, bias), **_flash(32, 64))
    assert _rows(out)[0]["loops"] == [2, 2]


def test_decode_step_has_one_query_and_loops_over_the_cache(tmp_path):
    """One new token over 512 cache slots, a boolean mask of the filled ones: no query loop,
    one key loop of 8 tiles."""
    q, k, v = _qkv(1, 4, 4, 1, 512, 64)
    filled = torch.arange(512).reshape(1, 1, 1, 512) < 300
    fn = Lambda(lambda m, q, k, v, mask: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask))
    out = run_and_compare(tmp_path, fn, (q, k, v, filled), **_flash(1, 64))
    (row,) = _rows(out)
    assert row["loops"] == [1, 8]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_decomposed_pattern_is_rewritten_too(tmp_path, dtype):
    """softmax(q @ kᵀ · scale + mask) @ v written out by a model (the mask a runtime input:
    every key tile runs)."""
    q, k, v = _qkv(1, 2, 2, 128, 128, 32, dtype)
    mask = torch.triu(torch.full((128, 128), -math.inf), 1).to(dtype)

    def attend(m, q, k, v, mask):
        scores = q @ k.transpose(-1, -2) * (1 / math.sqrt(32)) + mask
        return torch.softmax(scores, dim=-1) @ v
    tile = 32 if dtype == torch.float32 else 64     # whole sticks of k
    out = run_and_compare(tmp_path, Lambda(attend), (q, k, v, mask), **_flash(tile, tile))
    assert _rows(out)[0]["loops"] == [128 // tile] * 2


def test_auto_takes_flash_where_the_scores_exceed_lx_with_tiles_that_fit(tmp_path):
    """2 heads x 1,024 tokens: 8 MiB of fp32 scores, more than a core's LX. The pass prices
    tile sizes with the cost model and keeps every per-tile buffer in LX; the estimate it
    chose by is the simulator's cost of the program (less the one bundle launch)."""
    q, k, v = _qkv(1, 2, 2, 1024, 1024, 64)
    # one-op SuperDSCs: the tile search prices the body op by op (re-pricing the chosen tiles
    # under the fused model is issue 58 item 4's)
    out = run_and_compare(tmp_path, Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True)), (q, k, v), sets=["fusion.enabled=false"])
    (row,) = _rows(out)
    assert 1024 % row["query_tile"] == 0 and row["key_tile"] in (64, 128, 256, 512)
    report = load_json(out / "report.json")
    placed = {b["buffer"]: b["placed"] for b in report["scratchpad"]["buffers"]}
    assert all(placed[name] for name in row["per_tile"])
    cost = report["cost"]["totals"]["time_us"] - report["cost"]["totals"]["overhead_us"]
    assert row["estimated_us"] == pytest.approx(cost, rel=0.05)
    _no_full_scores(out, 1024, 1024)


def test_given_tiles_that_do_not_divide_are_refused(tmp_path):
    from spyrec.errors import ConfigError
    from tests.programs import compile_pt2

    pt2 = _sdpa_pt2(tmp_path, *_qkv(1, 2, 2, 256, 256, 64))
    with pytest.raises(ConfigError, match=r"attention query_tile=96 does not divide the 256 "
                                          r"queries of op scaled_dot_product_attention "
                                          r"\(programs.py:\d+ in forward\); "
                                          r"choose a divisor of 256"):
        compile_pt2(pt2, tmp_path / "out", **_flash(96, 64))


class PagedDecode(torch.nn.Module):
    """One new token over a paged K/V cache, as vLLM-style paged attention exports it: the
    pages of the sequence gathered from a pool by a block table, then sdpa."""

    def __init__(self, kv_heads: int, page: int, pages: int) -> None:
        super().__init__()
        self.kv_heads, self.page, self.pages = kv_heads, page, pages

    def forward(self, q, k_pool, v_pool, table):
        def seq(pool):
            return pool.index_select(0, table).permute(1, 0, 2, 3).reshape(
                1, self.kv_heads, self.pages * self.page, pool.shape[-1])
        return F.scaled_dot_product_attention(q, seq(k_pool), seq(v_pool), enable_gqa=True)


def test_paged_decode_gathers_each_key_tiles_pages_inside_the_loop(tmp_path):
    """16 pages of 64 tokens picked from a pool of 64 by a block table; 4 query heads over 2
    K/V heads. Each key tile of 128 gathers its 2 pages into LX: the gathered cache is never
    written to HBM whole (the materialized form writes it, 2 x 256 KB)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 1, 64, generator=g).half()
    k_pool, v_pool = (torch.randn(64, 2, 64, 64, generator=g).half() for _ in range(2))
    table = torch.randperm(64, generator=g)[:16]
    out = run_and_compare(tmp_path, PagedDecode(2, 64, 16), (q, k_pool, v_pool, table),
                          **_flash(1, 128))
    (row,) = _rows(out)
    assert row["loops"] == [1, 8]
    report = load_json(out / "report.json")
    assert report["cost"]["totals"]["hbm_write_bytes"] == 1 * 4 * 64 * 2 + 2048   # out + table
    tiles = [n for n in row["per_tile"] if n.startswith("index_select")]
    assert len(tiles) == 2
    shapes = {t["name"]: t["host_shape"] for t in load_json(out / "manifest.json")["tensors"]}
    assert all(shapes[n] == [2, 2, 64, 64] for n in tiles)


def test_tiles_from_the_tiling_file_and_the_file_auto_writes(tmp_path):
    """`attention:` entries in a tiling file set the tiles of the attentions they name; the
    file `--tiling auto` writes records the tiles it chose, and compiling with that file
    gives the same bundle."""
    from spyrec.errors import ConfigError
    from tests.programs import compile_pt2, export

    q, k, v = _qkv(1, 2, 2, 1024, 1024, 64)
    pt2 = export(tmp_path, Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True)), (q, k, v))
    config = tmp_path / "t.yaml"
    config.write_text("attention:\n  - ops: [scaled_dot_product_*]\n    query_tile: 256\n"
                      "    key_tile: 128\n")
    (row,) = _rows(compile_pt2(pt2, tmp_path / "given", tiling=config))
    assert (row["query_tile"], row["key_tile"], row["loops"]) == (256, 128, [4, 8])
    config.write_text("attention:\n  - ops: [other]\n    query_tile: 256\n")
    with pytest.raises(ConfigError, match=r"t.yaml: attention entry 1: ops \['other'\] "
                                          r"match no attention of the program \(its "
                                          r"attentions' nodes: scaled_dot_product_attention\)"):
        compile_pt2(pt2, tmp_path / "unmatched", tiling=config)
    config.write_text("attention:\n  - query_tile: 256\n")
    (row,) = _rows(compile_pt2(pt2, tmp_path / "rows_only", tiling=config))
    assert row["query_tile"] == 256 and row["key_tile"] in (128, 256, 512)   # keys chosen
    auto = compile_pt2(pt2, tmp_path / "auto", tiling="auto")
    written = (auto / "tiling.yaml").read_text()
    (chosen,) = _rows(auto)
    assert (f"  - ops: [scaled_dot_product_attention]\n    query_tile: {chosen['query_tile']}\n"
            f"    key_tile: {chosen['key_tile']}\n") in written
    again = compile_pt2(pt2, tmp_path / "again", tiling=auto / "tiling.yaml")
    assert (again / "bundle.mlir").read_text() == (auto / "bundle.mlir").read_text()


class SlidingWindow(torch.nn.Module):
    """A causal window of `window` keys built from positions, as Mistral-style models build
    it: (k <= q) & (q - k < window)."""

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = window

    def forward(self, q, k, v):
        pos = torch.arange(q.shape[-2])
        keep = (pos[None, :] <= pos[:, None]) & (pos[:, None] - pos[None, :] < self.window)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[None, None])


def test_a_sliding_window_runs_only_the_key_tiles_inside_it(tmp_path):
    """1,024 tokens, a window of 256, tiles of 128: query tile i needs key tiles i-2..i
    (the first of them partly), so the key loop's span is [i - 2, i + 1): 21 of 64 tile
    pairs. The mask is computed per tile from the positions, and the result is eager's."""
    q, k, v = _qkv(1, 2, 2, 1024, 1024, 64)
    out = run_and_compare(tmp_path, SlidingWindow(256), (q, k, v), **_flash(128, 128))
    (row,) = _rows(out)
    assert row["key_span"] == {"start": [1, -2], "stop": [1, 1]}
    ops = load_json(out / "report.json")["cost"]["ops"]
    assert sum(o["executions"] for o in ops
               if o["name"].startswith("scaled_dot_product_attention__1.")) == 1 + 2 + 3 * 6
    # the first and last tile of each window are masked, the one between keeps every score
    assert [(k["loop"], k["masked"]) for k in row["key_loops"]] == [
        ("fa0.1.edge0", True), ("fa0.1.whole", False), ("fa0.1.edge1", True)]
    _no_full_scores(out, 1024, 1024)


def test_given_tiles_over_lx_or_the_loop_limit_are_refused(tmp_path):
    """Tiles a user gives are held to the hardware: their per-tile buffers must fit one
    core's LX (the need is named), and no loop may count more than 65,535 trips."""
    from spyrec.errors import ConfigError
    from spyrec.passes.flash_attention.search import given_tiles
    from spyrec.passes.flash_attention.sites import AttentionSite
    from tests.programs import compile_pt2

    pt2 = _sdpa_pt2(tmp_path, *_qkv(1, 16, 16, 1024, 1024, 64))
    with pytest.raises(ConfigError, match=r"attention tiles of 1024 queries x 1024 keys x 16 "
                                          r"heads of op scaled_dot_product_attention "
                                          r"\(programs.py:\d+ in forward\) need "
                                          r"[\d,]+ bytes of LX per core for their per-tile "
                                          r"buffers, over the 1,625,344 a core has"):
        compile_pt2(pt2, tmp_path / "out", **_flash(1024, 1024))
    assert not (tmp_path / "out").exists()
    site = AttentionSite(("o",), "s", (), "m", None, "d", "e", "z", None, "p", "o",
                         queries=131072, keys=131072, heads=1, head_dim=64, value_dim=64)
    with pytest.raises(ConfigError, match=r"attention tiles 1x128 of op o make a loop of "
                                          r"131072 trips, over the hardware's 65535"):
        given_tiles(site, 1, 128)


def test_gqa_decode_priced_over_every_head_tile(tmp_path):
    """A decode step of 32 query heads over 8 K/V heads, every tile size priced (attention
    always): head tiles whose candidates all miss LX are passed over, not a crash."""
    q, k, v = _qkv(1, 32, 8, 1, 2048, 128)
    filled = torch.arange(2048).reshape(1, 1, 1, 2048) < 1500
    fn = Lambda(lambda m, q, k, v, mask: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=True))
    out = run_and_compare(tmp_path, fn, (q, k, v, filled),
                          sets=["flash_attention.mode=always"])
    (row,) = _rows(out)
    assert row["loops"][0] == 1 and row["safe_softmax"]


def test_a_refused_rewrite_leaves_the_graph_as_it_was(tmp_path, capsys):
    """Key tiles of 32 split k's fp16 sticks: the rewrite's proof refuses them, and the
    buffers it had added are gone again (the tile choice then takes the next candidate)."""
    from spyrec.errors import ConfigError
    from spyrec.passes.flash_attention.rewrite import rewrite
    from spyrec.passes.flash_attention.sites import FlashTiles, find_sites

    graph = _before_tiling(_sdpa_pt2(tmp_path, *_qkv(1, 2, 2, 256, 256, 64)), tmp_path, capsys)
    before_buffers, before_ops = dict(graph.buffers), list(graph.ops)
    (site,) = find_sites(graph)
    with pytest.raises(ConfigError, match="moves by other than one constant step"):
        rewrite(graph, site, FlashTiles(64, 32), "fa0")
    assert graph.buffers == before_buffers and graph.ops == before_ops


def test_the_compute_floor_bounds_every_candidates_planned_time(tmp_path, capsys):
    """The tile search skips planning a candidate whose compute floor (its ops' compute
    spread evenly over 32 cores at full PT efficiency) is over a price already found; that
    is sound only if the floor is never above the planned estimate, for every tile shape.
    It is also close (the flash body is compute-bound), which is why it prunes."""
    from spyrec.passes.flash_attention.search import _planned
    from spyrec.plan.trials import Planning
    from spyrec.passes.flash_attention.sites import FlashTiles, find_sites
    from spyrec.plan.whole_plan import planned_time_us
    from spyrec.plan.split_estimate import compute_floor_us
    from tests.programs import export

    q, k, v = _qkv(1, 4, 4, 1024, 1024, 64)
    pt2 = export(tmp_path, Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True)), (q, k, v))
    (site,) = find_sites(graph := _before_tiling(pt2, tmp_path, capsys))
    ratios = []
    for tiles in [FlashTiles(1024, 128, 4), FlashTiles(256, 256, 2), FlashTiles(128, 512, 1),
                  FlashTiles(64, 64, 4)]:
        planned = _planned(graph, site, tiles, Planning(), check=False)
        floor, time = compute_floor_us(planned, 32), planned_time_us(planned)
        assert 0 < floor <= time, tiles
        ratios.append(floor / time)
    assert max(ratios) > 0.5


class PackedCausal(torch.nn.Module):
    """transformers' mask form: a scalar `True`, and-ed with equal segment ids of query and
    key (packed sequences of `each` tokens), and-ed with causal positions."""

    def __init__(self, tokens: int, each: int):
        super().__init__()
        self.register_buffer("segment", torch.arange(tokens) // each)

    def forward(self, q, k, v):
        pos = torch.arange(q.shape[-2])
        keep = torch.ones((), dtype=torch.bool) & (self.segment[:, None] == self.segment[None, :])
        keep = keep & (pos[None, :] <= pos[:, None])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def test_a_mask_of_equal_segments_skips_the_other_sequences_key_tiles(tmp_path):
    """Comparisons for equality and scalar operands evaluate per tile too (transformers'
    masks have both; such a mask was 'not known at compile time', so every key tile ran
    for every query tile). At 1,024 tokens the mask is not folded into a table (it grows
    too much), so it is evaluated from its ops: query tile i of 256 needs key tiles 2i and
    2i+1 of 128 only, its own sequence's keys, causal inside it: 8 of 32 tile pairs."""
    q, k, v = _qkv(1, 2, 2, 1024, 1024, 64)
    out = run_and_compare(tmp_path, PackedCausal(1024, 256), (q, k, v), **_flash(256, 128))
    (row,) = _rows(out)
    assert row["key_span"] == {"start": [2, 0], "stop": [2, 2]}
    _no_full_scores(out, 1024, 1024)


def test_auto_does_not_keep_scores_that_need_more_than_half_a_cores_lx(tmp_path):
    """4 heads x 1,600 tokens in fp32: 1.28 MB of scores per core over 32 cores. Priced
    alone (LX empty) the materialized chain fits a core's LX, and was kept (alone it is
    0.7% cheaper than flash); in a program the values live around it took LX, the scores
    went to HBM and cost 20x (HF Llama at 1,600 tokens: 3,092 us against 348 us with
    flash). auto keeps a materialized chain only within half a core's LX: this is flash."""
    from tests.programs import compile_pt2, export

    q, k, v = _qkv(1, 4, 4, 1600, 1600, 32, dtype=torch.float32)
    out = compile_pt2(export(tmp_path, Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v)), (q, k, v)), tmp_path / "out")
    (row,) = _rows(out)
    assert (row["query_tile"], row["key_tile"]) == (1600, 1600) and row["per_tile"]


def test_auto_replans_a_flash_tile_the_program_leaves_no_lx_for(tmp_path):
    """HF Llama (tiny width, fp32) at 1,856 tokens (29 granules of 64: no key tile of
    128/256/512 divides it). Priced alone, with LX empty, one 1,856-key tile needing 861 KB of
    LX per core was cheapest; in the program 774 KB of other values were live beside the
    second layer's, its scores tile went to HBM and every score step with it (3,589 us
    against 455 us). A flash tile needing over half of LX is now checked in the program
    (every layer's site rewritten) and chosen again within half when it does not fit."""
    from tests.models import hf
    from tests.programs import compile_pt2, export

    tokens = 29 * 64
    model = hf.long_prefill("llama", tokens)
    ids = torch.randint(0, hf.VOCAB, (1, tokens), generator=torch.Generator().manual_seed(0))
    out = compile_pt2(export(tmp_path, model, (ids,)), tmp_path / "out")
    report = load_json(out / "report.json")
    per_tile = {name for row in report["attention"] for name in row["per_tile"]}
    assert len(report["attention"]) == 2 and per_tile
    spilled = [b["buffer"] for b in report["scratchpad"]["buffers"]
               if b["buffer"] in per_tile and not b["placed"]]
    assert spilled == []
    assert report["cost"]["totals"]["time_us"] < 600
