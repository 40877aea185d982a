"""Compile's cost estimate runs in a forked child from `ESTIMATE_BESIDE_MIN_OPS` ops on
(spyrec/compiler.py `_estimate_beside`, spyrec/beside.py) while the parent prints and writes
the files: the output directory is the one the estimate in the parent writes, byte for byte
but for the timings."""

import json

import torch

import spyrec
import spyrec.beside as beside
import spyrec.compiler as compiler
from tests.programs import Lambda


def _without_timings(report: dict) -> dict:
    """The report but for its wall times and the build's id (which covers the source's path,
    a new temporary for each export)."""
    return {k: v for k, v in report.items() if k not in ("passes", "build")}


def test_the_estimate_beside_writes_the_same_directory(tmp_path, monkeypatch):
    forks = []
    start = beside.Beside._start

    def counting(self):
        start(self)
        forks.append(self.forked)
    monkeypatch.setattr(beside.Beside, "_start", counting)
    ep = torch.export.export(
        Lambda(lambda m, x, y: torch.softmax(x @ y, -1) * 2 + x.sum(-1, keepdim=True)).eval(),
        (torch.randn(64, 128), torch.randn(128, 64)))
    outs = {}
    for label, least in (("inline", 1 << 30), ("beside", 0)):
        monkeypatch.setattr(compiler, "ESTIMATE_BESIDE_MIN_OPS", least)
        spyrec.compile(ep, tmp_path / label)
        outs[label] = tmp_path / label
    assert forks == [True]          # the second compile forked, the first did not
    names = sorted(p.name for p in outs["inline"].iterdir())
    assert names == sorted(p.name for p in outs["beside"].iterdir())
    for name in names:
        a, b = ((outs[k] / name).read_bytes() for k in ("inline", "beside"))
        if name == "report.json":
            a, b = (_without_timings(json.loads(x)) for x in (a, b))
            assert a["cost"]["totals"]["time_us"] > 0
        if name == "manifest.json":    # spyrec.compile saves each export to a new temporary
            a, b = (json.loads(x) for x in (a, b))
            assert a["source"].pop("path") != b["source"].pop("path")
            assert a.pop("build")["files"] == b.pop("build")["files"]
        if name != "report.txt":    # it prints the timings
            assert a == b, name
