"""One compiled program for every length (issue 30): transformers' Llama, Granite, GPT-2 and
OPT prefill (rotary and learned positions; tiny width, 2 layers: tests/models/hf.py) exported
with input_ids' dim 1 = 64 * Dim("s", max=32), so torch records 128..2,048 tokens by 64.
Compiled once; simulated at several lengths, each equal to eager on the same tokens; a length
off the granularity is exit 2.

The 2,048-token runs (the maximum) take about 15 s each and live in `make symbolic`."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

from spyrec.sim.runner import simulate
from tests.differential.harness import assert_close
from tests.programs import cli, compile_pt2

pytest.importorskip("transformers")

MAX_GRANULES, GRANULE = 32, 64


@pytest.fixture(scope="module", params=["llama", "granite", "gpt2", "opt"])
def compiled(request, tmp_path_factory):
    """(module, token ids of the maximum length, OUT) of one family's dynamic export."""
    from tests.models import hf

    tmp = tmp_path_factory.mktemp(request.param)
    module = hf.long_prefill(request.param, GRANULE * MAX_GRANULES).eval()
    ids = torch.randint(0, hf.VOCAB, (1, GRANULE * MAX_GRANULES),
                        generator=torch.Generator().manual_seed(0))
    s = torch.export.Dim("s", max=MAX_GRANULES)
    with torch.no_grad():
        ep = torch.export.export(module, (ids[:, :256],),
                                 dynamic_shapes={"input_ids": {1: GRANULE * s}})
    pt2 = tmp / "model.pt2"
    torch.export.save(ep, str(pt2))
    return module, ids, compile_pt2(pt2, tmp / "out")


@pytest.mark.parametrize("tokens", [128, 192, 256, 704])
def test_one_program_equals_eager_at_each_length(compiled, tokens):
    module, ids, out = compiled
    result = simulate(out, {"input_ids": ids[:, :tokens].numpy()})
    with torch.no_grad():
        expected = module(ids[:, :tokens])
    (got,) = result.outputs
    assert got.shape == (1, tokens, expected.shape[-1])
    assert_close(got, expected, f"logits at {tokens} tokens")


@pytest.mark.skipif(not os.environ.get("SPYREC_SYMBOLIC_MAX"),
                    reason="the maximum's runs take ~15 s each: `make symbolic`")
def test_one_program_equals_eager_at_the_maximum(compiled):
    test_one_program_equals_eager_at_each_length(compiled, GRANULE * MAX_GRANULES)


def test_a_length_off_the_granularity_is_refused(compiled, tmp_path, capsys):
    _, ids, out = compiled
    inputs = tmp_path / "ids.npz"
    np.savez(inputs, input_ids=ids[:, :100].numpy())
    code, _, err = cli(capsys, "run", out, "--inputs", inputs)
    assert code == 2 and "Traceback" not in err
    assert "100" in err and "128..2048 by 64" in err


def test_the_minimum_share_steps_up_with_the_length(compiled):
    """The length_shares pass prices each length's minimum share (`plan/length_shares.py`):
    Llama's and Granite's projections split their rows over 32 cores, and the cost model
    finds 16 rows per busy core best at 128 tokens (8 cores reading each weight once) and
    20 at 256 (13 busy cores, the last running 16 rows: cheaper than 16 busy cores, two
    broadcast cohorts each reading every weight, and than 8, half the compute), and about
    32 from 704 (one floor could not serve every length: 16 costs 512 tokens 1.13x the
    static program, 32 costs 128 tokens 1.28x; bench/symbolic.py). bundle.mlir picks the
    step from the length argument (one `arith.cmpi ule` per step before the last); the runs
    at 128/192 (16), 256 (20: a short last slice) and 704 (~32) above pass through three
    steps. report.json says why (each share's estimate where they differ) within its
    schema, report.txt says which."""
    import json

    from spyrec.sim.files import validate

    module, _, out = compiled
    (symbol,) = json.loads((out / "manifest.json").read_text())["symbols"]
    report = json.loads((out / "report.json").read_text())
    validate({k: report[k] for k in ("format", "build", "passes", "restickify", "layouts", "ops",
                                     "cost", "work_division", "length_shares")},
             "report", "report.json")
    if not type(module.model).__name__.startswith(("Llama", "Granite")):
        return
    steps = symbol["min_shares"]
    floor = {n: next(m for upto, m in steps if n <= upto) for n in (128, 256, 2048)}
    assert floor == {128: 16, 256: 20, 2048: 32}
    (row,) = report["length_shares"]
    assert row["min_shares"] == steps
    at_128, at_256 = row["estimates_us"]["128"], row["estimates_us"]["256"]
    assert min(at_128, key=at_128.get) == "16"
    assert at_256["20"] < at_256["16"] < at_256["32"]
    assert f"sized by {symbol['name']} runs at least 16 up to" in \
        (out / "report.txt").read_text()
    text = (out / "bundle.mlir").read_text()
    assert [int(c) for c in re.findall(rf"arith\.cmpi ule, %{symbol['name']}, %c(\d+)", text)] \
        == sorted((upto for upto, _ in steps[:-1]), reverse=True)
