"""Batched prefill with an `attention_mask` input: left- and right-padded sequences, equal to eager.

A left-padded sequence's pad query rows attend to no key at all (every key is padding or in the
future). Eager's `scaled_dot_product_attention` gives 0 for such a row; a plain softmax gives
0/0 = NaN, which reaches every real token through the next layer. Each test's batch holds one
padded and one full sequence, so a NaN or a mask off by one shows in the logits of both.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from tests.differential.harness import run_and_compare  # noqa: E402
from tests.models import hf  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:While compiling, we found certain side effects")

BATCH, TOKENS, PADS = 2, 24, 5


class MaskedLogits(torch.nn.Module):
    """`model(input_ids, attention_mask).logits` (`last_hidden_state` for an encoder)."""

    def __init__(self, model: torch.nn.Module, encoder: bool) -> None:
        super().__init__()
        self.model, self.encoder = model, encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.encoder:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).logits


def padded_batch(side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask): sequence 0 padded by PADS tokens on `side`, sequence 1 full."""
    g = torch.Generator().manual_seed(hf.SEED)
    ids = torch.randint(3, hf.VOCAB, (BATCH, TOKENS), generator=g, dtype=torch.long)
    mask = torch.ones(BATCH, TOKENS, dtype=torch.long)
    pads = slice(0, PADS) if side == "left" else slice(TOKENS - PADS, TOKENS)
    ids[0, pads] = hf.PAD
    mask[0, pads] = 0
    return ids, mask


def build(family: str, dtype: torch.dtype):
    make_config, model_cls = hf._configs()[family]
    config = make_config()
    config.pad_token_id = hf.PAD
    model = hf._build(model_cls(), config, dtype)
    return MaskedLogits(model, encoder=family == "bert").eval()


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("family", ["llama", "granite", "bert"])
def test_padded_batch_prefill_equals_eager(tmp_path, family, side):
    module = build(family, torch.float32)
    inputs = padded_batch(side)
    with torch.no_grad():
        assert torch.isfinite(module(*inputs)).all()   # eager's pad rows are finite too
    run_and_compare(tmp_path, module, inputs, frontend="fast")


def test_left_padded_fp16_llama_equals_eager(tmp_path):
    run_and_compare(tmp_path, build("llama", torch.float16), padded_batch("left"),
                    frontend="fast")
