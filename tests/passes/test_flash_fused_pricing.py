"""Flash attention's tile search prices candidates fused when the pipeline fuses (issue 58):
the key loop's body is one fused SuperDSC whose PT and SFP streams run at once, so its time
is about the PT array's, not the sum of every op. The search may skip a candidate whose
compute floor is over a price already found; fused, that floor lets the units overlap, and
it must stay below the fused time for every tile shape and every `unit_overlap`."""

import dataclasses

import pytest
import torch.nn.functional as F

from tests.passes.test_flash_attention import _before_tiling, _qkv
from tests.programs import Lambda, export


@pytest.mark.parametrize("overlap", [0.0, 0.5, 1.0])
def test_the_fused_floor_bounds_every_candidates_fused_time(tmp_path, capsys, overlap):
    from spyrec.costmodel import DEFAULT_PARAMS
    from spyrec.passes.flash_attention.search import _planned
    from spyrec.passes.flash_attention.sites import FlashTiles, find_sites
    from spyrec.plan.fusion import fused_planned_time_us, fusion_groups
    from spyrec.plan.lx_placement import apply_lx
    from spyrec.plan.split_estimate import compute_floor_us
    from spyrec.plan.trials import Planning, place_trial
    from spyrec.plan.whole_plan import planned_time_us

    params = dataclasses.replace(DEFAULT_PARAMS, unit_overlap=overlap)
    planning = Planning(params=params, fusion=True)
    q, k, v = _qkv(1, 4, 4, 1024, 1024, 64)
    pt2 = export(tmp_path, Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True)), (q, k, v))
    (site,) = find_sites(graph := _before_tiling(pt2, tmp_path, capsys))
    ratios = []
    for tiles in [FlashTiles(1024, 128, 4), FlashTiles(256, 256, 2), FlashTiles(128, 512, 1)]:
        planned = _planned(graph, site, tiles, planning, check=False)
        apply_lx(planned, place_trial(planned, planning))
        assert fusion_groups(planned), tiles            # the key loop's body fuses
        fused, serial = fused_planned_time_us(planned, params), planned_time_us(planned, params)
        floor = compute_floor_us(planned, 32, params, fused=True)
        assert 0 < floor <= fused <= serial + 1e-6, (tiles, floor, fused, serial)
        ratios.append(fused / serial)
        if overlap == 0.0:                             # serialized: the members' sum
            assert fused == pytest.approx(serial, rel=1e-6), tiles
    if overlap == 1.0:      # concurrent streams: under the sum, well under where PT-bound
        assert max(ratios) < 1 and min(ratios) < 0.85, ratios


def test_planning_reads_whether_the_pipeline_fuses():
    from spyrec.passes.pipeline import build_pipeline, read_pipeline_file
    from spyrec.plan.trials import Planning

    entries, _ = read_pipeline_file(None)
    assert Planning.of(build_pipeline(entries)).fusion is True
    assert Planning.of(build_pipeline(entries, ["fusion.enabled=false"])).fusion is False
    assert Planning.of(build_pipeline([e for e in entries if e["pass"] != "fusion"])).fusion \
        is False
