"""T5's encoder through the CLI, as a user runs it: `spyrec compile`, then `spyrec run --check`.

T5 computes its relative-position buckets from `log(|position| / max_exact)`: position 0 gives
`log(0)` = -inf, which is cast to int64 and then discarded by a `where`. The buckets depend only
on the sequence length, so they are folded at compile time (abs, log, min, the casts); before,
the cast ran on the device and the simulator refused the -inf (exit 2 at run).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from tests.programs import export, load_json  # noqa: E402


def tiny_t5_encoder():
    import transformers as tf

    config = tf.T5Config(d_model=32, num_layers=1, num_heads=2, d_kv=8, d_ff=64,
                         vocab_size=64, relative_attention_num_buckets=8, use_cache=False)
    torch.manual_seed(0)
    model = tf.T5EncoderModel(config).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids).last_hidden_state

    ids = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    return Encoder().eval(), ids


def spyrec(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spyrec", *map(str, args)],
                          capture_output=True, text=True)


def test_t5_encoder_compiles_runs_and_equals_eager(tmp_path):
    module, ids = tiny_t5_encoder()
    pt2 = export(tmp_path, module, (ids,), "t5")
    np.savez(tmp_path / "in.npz", input_ids=ids.numpy())
    done = spyrec("compile", pt2, "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    report = load_json(tmp_path / "out" / "report.json")
    assert report["frontend"]["used"] == "fast"  # min.other folded, no torch fallback
    ops = (tmp_path / "out" / "opspecs.json").read_text()
    assert '"log"' not in ops  # the buckets are a constant, not device work
    done = spyrec("run", tmp_path / "out", "--inputs", tmp_path / "in.npz", "--check")
    assert done.returncode == 0, done.stdout + done.stderr
