"""More tiny `transformers` families, built from config objects in code (no downloads).

GPT-J, BLOOM, RoBERTa, DeBERTa (v2), T5's encoder, Falcon, MPT, Cohere and ModernBERT: each
stores ops in its exported graph that the families of `hf.py` do not (repeat, runtime cumsum,
relative-position buckets, isinf/any, chunk, masked_fill, repeat_interleave). All are built at
one small size: hidden 64, 2 layers, 4 heads, MLP 128, vocab 256, 16 tokens, batch 1, eval
mode, a fixed seed.

Families whose users pass an `attention_mask` (BLOOM builds its alibi from it with a cumsum;
the encoders mask padding) take `(input_ids, attention_mask)` with the last `PADS` tokens
padding; the other decoders take `input_ids` only. A builder returns `(module, inputs)` so the
export is the ordinary `torch.export.export(module, inputs)`. Every family has an fp16
variant `<name>_fp16` (the model `.half()`). `FAMILIES = {name: builder}` lists them all.
"""

from __future__ import annotations

from typing import Callable

import torch

SEED = 0
LAYERS = 2
HIDDEN = 64
HEADS = 4
INTERMEDIATE = 128
VOCAB = 256
TOKENS = 16
MAX_POSITIONS = 64
PADS = 3
PAD, BOS, EOS = 1, 0, 2   # RoBERTa's convention: pad 1 (its position ids start after it)


class Logits(torch.nn.Module):
    """`model(input_ids[, attention_mask])` -> logits (decoders) or the last hidden state."""

    def __init__(self, model: torch.nn.Module, encoder: bool) -> None:
        super().__init__()
        self.model, self.encoder = model, encoder

    def forward(self, input_ids: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
        if self.encoder:
            return self.model(input_ids=input_ids, **kwargs).last_hidden_state
        return self.model(input_ids=input_ids, use_cache=False, **kwargs).logits


def _configs() -> dict[str, tuple[Callable[[], object], Callable[[], type]]]:
    """name -> (make config, model class), imported lazily so `import more_families` is cheap."""
    import transformers as tf

    common = dict(vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    llama_like = dict(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      max_position_embeddings=MAX_POSITIONS, use_cache=False, **common)
    bert_like = dict(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                     num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     max_position_embeddings=MAX_POSITIONS, **common)
    return {
        "gptj": (lambda: tf.GPTJConfig(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                                       n_inner=INTERMEDIATE, n_positions=MAX_POSITIONS,
                                       rotary_dim=8, use_cache=False, **common),
                 lambda: tf.GPTJForCausalLM),
        "bloom": (lambda: tf.BloomConfig(hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                                         use_cache=False, **common),
                  lambda: tf.BloomForCausalLM),
        "roberta": (lambda: tf.RobertaConfig(**bert_like), lambda: tf.RobertaModel),
        "deberta_v2": (lambda: tf.DebertaV2Config(
            relative_attention=True, position_buckets=8, max_relative_positions=MAX_POSITIONS,
            pos_att_type=["p2c", "c2p"], **bert_like), lambda: tf.DebertaV2Model),
        "t5_encoder": (lambda: tf.T5Config(
            d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=INTERMEDIATE, num_layers=LAYERS,
            num_heads=HEADS, relative_attention_num_buckets=8, use_cache=False, **common),
            lambda: tf.T5EncoderModel),
        "falcon": (lambda: tf.FalconConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                           num_attention_heads=HEADS, use_cache=False,
                                           **common), lambda: tf.FalconForCausalLM),
        "mpt": (lambda: tf.MptConfig(d_model=HIDDEN, n_heads=HEADS, n_layers=LAYERS,
                                     expansion_ratio=2, max_seq_len=MAX_POSITIONS,
                                     use_cache=False, **common), lambda: tf.MptForCausalLM),
        "cohere": (lambda: tf.CohereConfig(num_key_value_heads=2, **llama_like),
                   lambda: tf.CohereForCausalLM),
        "modernbert": (lambda: tf.ModernBertConfig(
            hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, max_position_embeddings=MAX_POSITIONS,
            global_attn_every_n_layers=2, local_attention=8, cls_token_id=BOS,
            sep_token_id=EOS, **common),
            lambda: tf.ModernBertModel),
    }


ENCODERS = ("roberta", "deberta_v2", "t5_encoder", "modernbert")
MASKED = ("bloom",) + ENCODERS      # their users pass an attention_mask


def inputs(family: str) -> tuple[torch.Tensor, ...]:
    """(input_ids,) or (input_ids, attention_mask) with the last PADS tokens padding."""
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(3, VOCAB, (1, TOKENS), generator=g, dtype=torch.long)
    if family not in MASKED:
        return (ids,)
    mask = torch.ones(1, TOKENS, dtype=torch.long)
    ids[:, TOKENS - PADS:] = PAD
    mask[:, TOKENS - PADS:] = 0
    return ids, mask


def build(family: str, dtype: torch.dtype = torch.float32):
    """(Logits(model), inputs) for one family in `dtype`."""
    make_config, model_cls = _configs()[family]
    config = make_config()
    torch.manual_seed(SEED)
    model = model_cls()(config).eval()
    if dtype == torch.float16:
        model = model.half()
    return Logits(model, encoder=family in ENCODERS).eval(), inputs(family)


NAMES = ("gptj", "bloom", "roberta", "deberta_v2", "t5_encoder", "falcon", "mpt", "cohere",
         "modernbert")


def _registry() -> dict[str, Callable[[], tuple[torch.nn.Module, tuple]]]:
    out = {}
    for suffix, dtype in (("", torch.float32), ("_fp16", torch.float16)):
        for fam in NAMES:
            out[fam + suffix] = (lambda f=fam, d=dtype: build(f, d))
    return out


FAMILIES: dict[str, Callable[[], tuple[torch.nn.Module, tuple]]] = _registry()
