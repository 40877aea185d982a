"""A constant read in two layouts gets both at compile time (DESIGN §3, issue 28 §3): a tied
embedding (the gather reads the table with the stick on d, the lm_head matmul with the stick on
the vocab) is never restickified on the device. The weights file stores the table once; the
loader lays the second layout out when it loads the weights (issue 26: weights on disk once)."""

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.differential.harness import run_and_compare
from tests.programs import load_json

VOCAB, D = 256, 128


class TiedLM(torch.nn.Module):
    """Embedding -> layer norm -> lm_head whose weight is the embedding table (Llama-3.2-1B)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, D)
        self.embed.weight.data = torch.randn(VOCAB, D, generator=g) * 0.1
        self.norm = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, VOCAB, bias=False)
        self.head.weight = self.embed.weight
        self.to(dtype)

    def forward(self, ids):
        return self.head(self.norm(self.embed(ids)))


def constant_restickifies(out: Path) -> list[str]:
    """The device restickify ops of compiled OUT that read a constant (opspecs.json, loop
    bodies included): the ops DESIGN §3 says never run."""
    constants = {t["name"] for t in load_json(out / "manifest.json")["tensors"]
                 if t["role"] == "constant"}
    found = []

    def walk(node) -> None:
        if isinstance(node, dict):
            if node.get("op") == "ReStickifyOpHBM" and any(
                    a["is_input"] and a["name"] in constants for a in node["args"]):
                found.append(node["name"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(load_json(out / "opspecs.json"))
    return found


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("tokens", [(2, 8), (1, 1)], ids=["prefill", "step"])
def test_tied_embedding_gets_both_layouts_at_compile_time(tmp_path, dtype, tokens):
    ids = torch.randint(0, VOCAB, tokens, generator=torch.Generator().manual_seed(1))
    out = run_and_compare(tmp_path, TiedLM(dtype), (ids,))
    assert constant_restickifies(out) == []
    report = load_json(out / "report.json")["restickify"]
    assert (report["count"], report["elements"], report["list"]) == (0, 0, [])
    itemsize = torch.finfo(dtype).bits // 8
    lanes = 128 // itemsize
    table = VOCAB * D * itemsize
    assert report["constant_layouts"] == [
        {"tensor": "p_embed_weight", "constant": "p_embed_weight__layout",
         "from_stick_dim": 1, "to_stick_dim": 0, "bytes": table}]
    tensors = {t["name"]: t for t in load_json(out / "manifest.json")["tensors"]}
    gathered, head = tensors["p_embed_weight"], tensors["p_embed_weight__layout"]
    assert (gathered["role"], head["role"]) == ("constant", "constant")
    # the gather's: sticks along d, one row of D/lanes sticks per token
    assert (gathered["device_size"], gathered["stride_map"]) == (
        [D // lanes, VOCAB, lanes], [lanes, D, 1])
    # the lm_head's: sticks along the vocab (its output's stick dim)
    assert (head["device_size"], head["stride_map"]) == (
        [VOCAB // lanes, D, lanes], [lanes * D, 1, D])
    weights = {t["name"]: t for t in load_json(out / "manifest.json")["weights"]["tensors"]}
    # the table is stored once: the lm_head's layout names it and the loader lays it out
    assert weights["p_embed_weight"]["bytes"] == table
    assert {k: v for k, v in weights["p_embed_weight__layout"].items()
            if k not in ("device_dtype", "device_size")} == {
        "name": "p_embed_weight__layout", "relayout_of": "p_embed_weight"}
    assert (out / "weights.bin").stat().st_size < 2 * table
    assert head["hbm_address"] != gathered["hbm_address"]
    # both hold the table in the run, each in its own device form: the second is the first
    # transposed
    from spyrec.sim.weights import constant_bytes
    from spyrec.sim.loader import read_spyrec_dir

    program = read_spyrec_dir(out)
    loaded = constant_bytes(program.weights_file, program.weights, program.manifest.tensors)
    first, second = (loaded[n].view(np.float16 if dtype == torch.float16 else np.float32)
                     for n in ("p_embed_weight", "p_embed_weight__layout"))
    from spyrec.inspect_dir import inspect_directory

    assert "  not in weights.bin: laid out at load from p_embed_weight\n" in \
        inspect_directory(out, "p_embed_weight__layout")
    rows = first.reshape(D // lanes, VOCAB, lanes).transpose(1, 0, 2).reshape(VOCAB, D)
    cols = second.reshape(VOCAB // lanes, D, lanes).transpose(1, 0, 2).reshape(D, VOCAB)
    assert np.array_equal(rows, cols.T)
    assert "p_embed_weight -> p_embed_weight__layout: stick dim 1 -> 0" in \
        (out / "report.txt").read_text()


def test_a_relayout_of_no_stored_constant_is_refused_naming_it(tmp_path):
    """A hand-edited manifest whose relayout_of names no stored constant of the same shape
    is one exit-2 line before anything runs."""
    import json

    from spyrec.errors import InputFileError
    from spyrec.sim.loader import read_spyrec_dir

    ids = torch.randint(0, VOCAB, (1, 4), generator=torch.Generator().manual_seed(1))
    out = run_and_compare(tmp_path, TiedLM(torch.float16), (ids,))
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["weights"]["tensors"]:
        if "relayout_of" in entry:
            entry["relayout_of"] = "p_norm_weight"
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputFileError, match=r"\('p_embed_weight__layout'\): relayout_of "
                                             r"'p_norm_weight' is not a stored constant of the "
                                             r"same shape \(plus `pad`\) and dtype"):
        read_spyrec_dir(out)
