"""`spyrec generate` over prefill + decode programs in one directory (issue 59): a tiny Llama
and a tiny Granite (hidden 128, 2 layers, static cache 256, transformers' export recipe),
8 prompt tokens, 24 new tokens: the tokens equal eager's own loop over the module, `--check`
passes, and the bad requests are one line, exit 2."""

import json

import numpy as np
import pytest
import torch

from tests.cli_lines import error_line
from tests.models import hf
from tests.programs import cli

SLOTS, PROMPT, NEW = 256, [5, 17, 33, 2, 99, 140, 7, 64], 24


def _export_pair(tmp, family):
    """prefill.pt2 (8 tokens at 0..7) and decode.pt2 (one token) of one static-cache step
    module, and the module itself (eager's reference)."""
    step, (ids, pos) = hf.decode(family, torch.float32, slots=SLOTS, position=len(PROMPT))
    for name, args in (("prefill", (torch.tensor([PROMPT]), torch.arange(len(PROMPT)))),
                       ("decode", (ids, pos))):
        ep = torch.export.export(step, args, strict=True)
        torch.export.save(ep, str(tmp / f"{name}.pt2"))
    return step


def _eager_tokens(step) -> tuple[list[int], np.ndarray]:
    """The greedy loop in eager on the module (its own cache carries the state)."""
    with torch.no_grad():       # (export leaves the module's buffers as they were)
        logits = step(torch.tensor([PROMPT]), torch.arange(len(PROMPT)))
        tokens = [int(logits[0, -1].argmax())]
        for k in range(NEW - 1):
            logits = step(torch.tensor([[tokens[-1]]]), torch.tensor([len(PROMPT) + k]))
            tokens.append(int(logits[0, -1].argmax()))
    return tokens, logits[0, -1].numpy()


@pytest.fixture(scope="module", params=["llama", "granite"])
def served(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    step = _export_pair(tmp, request.param)
    return tmp, step


@pytest.mark.slow
def test_generate_equals_eager_and_check_passes(served, capsys):
    tmp, step = served
    code, _, err = cli(capsys, "compile", tmp / "prefill.pt2", tmp / "decode.pt2", "-o",
                       tmp / "out", "-q")
    assert code == 0, err
    assert json.loads((tmp / "out" / "programs.json").read_text())["programs"] == [
        "prefill", "decode"]
    code, out, err = cli(capsys, "generate", tmp / "out", "--prompt",
                         ",".join(map(str, PROMPT)), "--new-tokens", NEW, "--check", "--json",
                         "-q")
    assert code == 0, err
    doc = json.loads(out)
    tokens, _ = _eager_tokens(step)
    assert doc["tokens"] == tokens
    assert doc["check"]["ok"] and doc["check"]["eager_tokens"] == tokens
    assert [s["program"] for s in doc["steps"]] == ["prefill"] + ["decode"] * (NEW - 1)
    assert [s["position"] for s in doc["steps"]] == [0] + list(range(8, 8 + NEW - 1))
    proj = doc["projection"]
    assert proj["prompt_tokens"] == 8 and proj["cache_slots"] == SLOTS
    assert proj["decode_us_at_end"] >= proj["decode_us_at_prompt"] > 0
    assert 0 < proj["hbm_write_bytes_per_token"] < 1 << 20   # rows, not the 256-slot caches
    summary = (tmp / "out" / "report.txt").read_text()
    assert "prefill of 8 tokens (prefill):" in summary
    assert f"decode per token at the cache's end (position {SLOTS - 1}):" in summary
    report = json.loads((tmp / "out" / "decode" / "report.json").read_text())
    assert all(m["in_place"] for m in report["mutations"])


@pytest.mark.slow
def test_without_a_prefill_of_its_length_the_prompt_goes_token_by_token(served, capsys):
    tmp, step = served
    if not (tmp / "out").exists():
        cli(capsys, "compile", tmp / "prefill.pt2", tmp / "decode.pt2", "-o", tmp / "out",
            "-q")
    code, out, err = cli(capsys, "generate", tmp / "out", "--prompt", "5,17,33",
                         "--new-tokens", 3, "--check", "--json", "-q")
    assert code == 0, err
    doc = json.loads(out)
    assert [(s["program"], s["position"]) for s in doc["steps"]] == [
        ("decode", 0), ("decode", 1), ("decode", 2), ("decode", 3), ("decode", 4)]
    assert doc["check"]["ok"]


@pytest.mark.parametrize("args, message", [
    (["--prompt", ",".join(["1"] * (SLOTS + 1)), "--new-tokens", "1"],
     f"--prompt: {SLOTS + 1} tokens, longer than the cache's {SLOTS} slots"),
    (["--prompt", "1,2", "--new-tokens", str(SLOTS)],
     f"--new-tokens {SLOTS}: the prompt's 2 tokens and {SLOTS - 1} decode steps pass the "
     f"cache's {SLOTS} slots; give at most {SLOTS - 1}"),
    (["--prompt", "1,512", "--new-tokens", "2"],
     "--prompt: token id 512 is outside the vocabulary (0..511, the logits' last dim)"),
    (["--prompt", "1,x", "--new-tokens", "2"],
     "--prompt '1,x': give token ids separated by commas, e.g. --prompt 1,2,3"),
    (["--prompt", "1", "--new-tokens", "two"], "--new-tokens 'two': give a whole number"),
])
@pytest.mark.slow
def test_bad_requests_are_one_line_exit_2(served, capsys, args, message):
    tmp, _ = served
    if not (tmp / "out").exists():
        cli(capsys, "compile", tmp / "prefill.pt2", tmp / "decode.pt2", "-o", tmp / "out",
            "-q")
    code, out, err = cli(capsys, "generate", tmp / "out", *args)
    assert code == 2 and out == ""
    assert error_line(err) == f"spyrec: {message}"
