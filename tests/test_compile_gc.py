"""Compile runs with the cyclic collector's automatic collections off (spyrec/compiler.py
`_no_automatic_collections`: its objects make almost no cycles, so collections only re-scanned
live objects), bounded by `_CollectWhenGrown`, and gives the caller's setting back."""

import gc

import torch

import spyrec
import spyrec.compiler as compiler
import spyrec.process_tuning as tuning
from tests.programs import Lambda


def test_compile_runs_without_automatic_collections_and_restores_them(tmp_path, monkeypatch):
    seen = []
    lower = compiler.run_passes

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return lower(*args, **kwargs)
    monkeypatch.setattr(compiler, "run_passes", recording)
    ep = torch.export.export(Lambda(lambda m, x: x * 2 + 1).eval(), (torch.randn(4, 64),))
    assert gc.isenabled()
    spyrec.compile(ep, tmp_path / "on")
    assert seen == [False] and gc.isenabled()

    gc.disable()            # a caller that runs without collections keeps it that way
    try:
        spyrec.compile(ep, tmp_path / "off")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_collection_after_a_pass_only_once_the_resident_set_grew_a_gib(monkeypatch):
    rss = iter([1000, 1000 + tuning.COLLECT_AFTER_GROWTH - 1,       # mark, under: none
                1000 + tuning.COLLECT_AFTER_GROWTH, 5000,           # at: collect, new mark
                5000 + tuning.COLLECT_AFTER_GROWTH - 1,             # under the new mark
                None])                                                # unreadable: none
    collected = []
    monkeypatch.setattr(tuning.gc, "collect", lambda: collected.append(1))
    valve = tuning.CollectWhenGrown(lambda: next(rss))
    for step in range(1, 5):
        valve.after(step, "p", None, frozenset())
    assert collected == [1] and valve.collections == 1 and valve.mark == 5000


def test_resident_bytes_reads_this_process():
    n = tuning.resident_bytes()
    assert n is None or 10 << 20 < n < 64 << 30
