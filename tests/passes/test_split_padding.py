"""split_padding (issue 28 §4): a matmul whose N no core count divides gets N padded with zero
weight rows at compile time, when the padded matmul splits over more cores for less time.

The lm_head of Granite's vocabulary (49,155 = 768 sticks + 3 elements) cannot split N at all:
a split of a stick var needs whole sticks. Here V = 97 * 64 + 3 = 6,211 (98 sticks, the last
partial), K = 512, fp16: a 6.4 MB weight. Unpadded, N stays on one core and only K (8 sticks)
splits; padded to whole sticks that more cores divide, N splits too. At 8 tokens the
unpadded matmul splits M over 8 cores that share each weight read (the broadcast cohort) and
padding does not pay; at 64 it does (M over 32 cores would read the weight 4 times).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.differential.harness import run_and_compare
from tests.programs import load_json

V, K = 97 * 64 + 3, 512


class Head(torch.nn.Module):
    def __init__(self, n: int = V, tied: bool = False) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.embed = torch.nn.Embedding(n, K)
        self.embed.weight.data = torch.randn(n, K, generator=g) * 0.05
        self.head = torch.nn.Linear(K, n, bias=False)
        self.head.weight.data = torch.randn(n, K, generator=g) * 0.05
        if tied:
            self.head.weight = self.embed.weight
        self.half()

    def forward(self, ids):
        return self.head(self.embed(ids))


def _ids(tokens: int) -> torch.Tensor:
    return torch.randint(0, V, (1, tokens), generator=torch.Generator().manual_seed(1))


def _report(out) -> dict:
    return load_json(out / "report.json")


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("tokens", [1, 64])
def test_the_lm_head_pads_its_vocab_splits_it_and_equals_eager(tmp_path, tied, tokens):
    out = run_and_compare(tmp_path, Head(tied=tied), (_ids(tokens),))
    report = _report(out)
    (row,) = report["split_padding"]["list"]
    assert row["n"] == V and row["n_padded"] % 64 == 0 and row["n_padded"] > V
    sticks = row["n_padded"] // 64
    assert row["time_us"] < row["unpadded_time_us"]
    assert "c2:1," in row["unpadded_split"]         # N unsplit: its last stick is partial
    tensors = {t["name"]: t for t in load_json(out / "manifest.json")["tensors"]}
    padded = tensors[row["padded"]]
    assert padded["role"] == "constant" and padded["host_shape"] == [row["n_padded"], K]
    assert padded["device_bytes"] == sticks * K * 128         # whole sticks of N, K rows each
    # the weight only the padded matmul read is not written beside its padded copy
    assert row["weight"] not in tensors
    (matmul,) = [r for r in report["cost"]["ops"] if r["op"] == "batchmatmul"]
    assert matmul["cores_used"] >= 8
    assert 0 < report["work_division"]["max_span_bytes"] <= 256 << 20
    split = dict(kv.split(":") for kv in row["split"].split(" + ")[0][1:-1].split(", "))
    assert sticks % int(split["c2"]) == 0 and int(split["c2"]) > 1
    if tied:    # the padded lm_head is the table padded: stored once, laid out at load
        weights = {w["name"]: w for w in load_json(out / "manifest.json")["weights"]["tensors"]}
        (table,) = [w for w in weights.values() if "bytes" in w and w["bytes"] > V * K]
        assert {k: weights[row["padded"]].get(k) for k in ("relayout_of", "pad", "bytes")} == \
            {"relayout_of": table["name"], "pad": [row["n_padded"] - V, 0], "bytes": None}


def test_padding_rows_are_zero_in_the_weights_file(tmp_path):
    out = run_and_compare(tmp_path, Head(), (_ids(1),))
    (row,) = _report(out)["split_padding"]["list"]
    manifest = load_json(out / "manifest.json")
    entry = next(t for t in manifest["weights"]["tensors"] if t["name"] == row["padded"])
    blob = np.fromfile(out / manifest["weights"]["file"], dtype=np.uint8,
                       count=entry["bytes"], offset=entry["offset"]).view(np.float16)
    sticks = row["n_padded"] // 64
    device = blob.reshape(entry["device_size"])               # [N sticks, K, 64]
    assert list(device.shape) == [sticks, K, 64]
    # element (n, k) of the padded weight sits at [n // 64, k, n % 64]: rows n >= V are zero
    host = np.moveaxis(device, 1, 2).reshape(sticks * 64, K)
    assert np.all(host[V:] == 0) and np.any(host[:V] != 0)
    weights = Head().head.weight.detach().numpy()
    assert np.array_equal(host[:V], weights)


def test_a_tied_tables_padded_lm_head_is_laid_out_at_load_with_zero_rows(tmp_path):
    """The tied table is stored once; the loader pads it with zero rows up to whole sticks
    per core and lays it out as the lm_head reads it."""
    from spyrec.sim.weights import constant_bytes
    from spyrec.sim.loader import read_spyrec_dir

    out = run_and_compare(tmp_path, Head(tied=True), (_ids(1),))
    (row,) = _report(out)["split_padding"]["list"]
    program = read_spyrec_dir(out)
    loaded = constant_bytes(program.weights_file, program.weights, program.manifest.tensors)
    sticks = row["n_padded"] // 64
    device = loaded[row["padded"]].view(np.float16).reshape(sticks, K, 64)
    host = np.moveaxis(device, 1, 2).reshape(sticks * 64, K)
    assert np.all(host[V:] == 0)
    assert np.array_equal(host[:V], Head(tied=True).embed.weight.detach().numpy())
    assert (out / "weights.bin").stat().st_size < 2 * V * K * 2


def test_an_n_the_cores_divide_is_not_padded(tmp_path):
    out = run_and_compare(tmp_path, Head(n=32 * 64), (_ids(1).clamp(max=32 * 64 - 1),))
    assert _report(out)["split_padding"] == {"count": 0, "list": []}


def test_padding_is_left_out_where_it_does_not_pay(tmp_path):
    out = run_and_compare(tmp_path, Head(), (_ids(8),))
    assert _report(out)["split_padding"]["count"] == 0


def test_the_pass_can_be_turned_off(tmp_path):
    out = run_and_compare(tmp_path, Head(), (_ids(1),), sets=["split_padding.enabled=false"])
    assert _report(out)["split_padding"]["count"] == 0
    (matmul,) = [r for r in _report(out)["cost"]["ops"] if r["op"] == "batchmatmul"]
    assert matmul["cores_used"] <= K // 64          # N on one core: only K's 8 sticks split
    (row,) = [r for r in _report(out)["work_division"]["ops"] if r["op"] == "linear"]
    assert row["fewer_cores"] == (f"no split of [c2<{V}, r0<{K}] uses 32 cores (a split "
                                  f"divides its range, a stick var in whole sticks)")


@pytest.mark.parametrize("setting, message", [
    ("split_padding.cores=64", "split_padding.cores must be between 1 and 32, got 64"),
    ("split_padding.spread_within=5",
     "split_padding.spread_within must be at least 0 and below 1, got 5")])
def test_options_out_of_range_are_one_message(tmp_path, setting, message, capsys):
    from tests.programs import cli, export

    pt2 = export(tmp_path, Head(n=64), (_ids(1).clamp(max=63),))
    code, _, err = cli(capsys, "compile", pt2, "-o", tmp_path / "out", "--set", setting)
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


class TwoHeads(torch.nn.Module):
    """Two lm_heads alike but for their weights (the layers of a stack)."""

    def __init__(self) -> None:
        super().__init__()
        self.one, self.two = Head(), Head()
        self.two.embed = self.one.embed

    def forward(self, ids):
        return self.one(ids) + self.two(ids)


def test_matmuls_alike_but_for_names_are_priced_once(tmp_path, monkeypatch):
    """The estimates of a padding site are memoized on what they depend on, without buffer
    names: the second head pads as the first, from the first's estimates."""
    from spyrec.passes import split_padding

    calls = []
    estimate = split_padding._estimate

    def counted(graph, op, *args):
        calls.append(op.name)
        return estimate(graph, op, *args)
    monkeypatch.setattr(split_padding, "_estimate", counted)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    run_and_compare(tmp_path / "one", Head(), (_ids(64),))
    alone, calls[:] = len(calls), []
    out = run_and_compare(tmp_path / "two", TwoHeads(), (_ids(64),))
    first, second = _report(out)["split_padding"]["list"]
    assert len(calls) == alone > 1 and len(set(calls)) == 1
    assert {k: v for k, v in first.items() if k not in ("op", "weight", "padded", "source")} == \
        {k: v for k, v in second.items() if k not in ("op", "weight", "padded", "source")}
