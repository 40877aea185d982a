"""Tiny random-initialized `transformers` models, built from configs in code (no downloads).

Every family is built at the same size: 2 layers, hidden 128, 4 attention heads (2 KV heads where
the family supports grouped-query attention), MLP 256, vocab 512, 128 positions; eval mode; a fixed
seed. A builder returns `(module, example_inputs)` so that the export is the ordinary

    ep = torch.export.export(module, example_inputs)

- prefill (`gpt2`, `llama`, ...): `input_ids` of 32 tokens, batch 1, `use_cache=False`; the module is
  a thin wrapper returning `.logits` (`last_hidden_state` for the encoders, BERT and T5's, which
  have no LM head here).
- decode (`llama_decode`, `granite_decode`): one token at position `DECODE_POSITION` with a static KV
  cache of `MAX_POSITIONS` slots, through transformers' own export recipe
  (`transformers.integrations.executorch.TorchExportableModuleWithStaticCache`, the module
  `TorchExportableModuleForDecoderOnlyLM` wraps). The caches are registered buffers
  (`key_cache_<i>`, `value_cache_<i>`, `cumulative_length_<i>`) the step mutates in place; the
  exported program returns them as buffer mutations next to the logits.

Every name also has an fp16 variant `<name>_fp16` (the model `.half()`; the inputs are integers
either way). `FAMILIES = {name: builder}` lists them all.
"""

from __future__ import annotations

from typing import Callable

import torch

SEED = 0
LAYERS = 2
HIDDEN = 128
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 256
VOCAB = 512
MAX_POSITIONS = 128
PREFILL_TOKENS = 32
DECODE_POSITION = 5
# special tokens inside the tiny vocabulary (several configs default to ids >= 512)
PAD, BOS, EOS = 0, 1, 2


class LogitsOnly(torch.nn.Module):
    """`model(input_ids).logits`: what a user exporting a causal LM writes."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


class LastHiddenState(torch.nn.Module):
    """`model(input_ids).last_hidden_state`: an encoder (BERT) without a head."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).last_hidden_state


def _prefill_ids() -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED)
    return torch.randint(0, VOCAB, (1, PREFILL_TOKENS), generator=g, dtype=torch.long)


def _build(model_cls, config, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(SEED)
    model = model_cls(config).eval()
    if dtype == torch.float16:
        model = model.half()
    return model


# --- configs ----------------------------------------------------------------------------------

def _llama_like(config_cls, **extra):
    """Config kwargs shared by the Llama-shaped families (Llama, Granite, Qwen2, Mistral, ...)."""
    kw = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
              num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
              max_position_embeddings=MAX_POSITIONS, bos_token_id=BOS, eos_token_id=EOS,
              use_cache=False)
    kw.update(extra)
    return config_cls(**kw)


def _configs() -> dict[str, tuple[Callable[[], object], Callable[[], type]]]:
    """name -> (make config, model class): imported lazily so `import hf` stays cheap."""
    import transformers as tf

    return {
        "gpt2": (lambda: tf.GPT2Config(
            vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=INTERMEDIATE,
            n_positions=MAX_POSITIONS, bos_token_id=BOS, eos_token_id=EOS, use_cache=False),
            lambda: tf.GPT2LMHeadModel),
        "llama": (lambda: _llama_like(tf.LlamaConfig), lambda: tf.LlamaForCausalLM),
        "granite": (lambda: _llama_like(tf.GraniteConfig), lambda: tf.GraniteForCausalLM),
        "qwen2": (lambda: _llama_like(tf.Qwen2Config), lambda: tf.Qwen2ForCausalLM),
        # MistralConfig's default sliding_window (4096, larger than the sequence) is kept.
        "mistral": (lambda: _llama_like(tf.MistralConfig), lambda: tf.MistralForCausalLM),
        "phi3": (lambda: _llama_like(tf.Phi3Config, pad_token_id=PAD),
                 lambda: tf.Phi3ForCausalLM),
        # Gemma's default head_dim is 256: make it hidden / heads like the others.
        "gemma": (lambda: _llama_like(tf.GemmaConfig, head_dim=HIDDEN // HEADS),
                  lambda: tf.GemmaForCausalLM),
        # GPT-NeoX has no GQA (num_key_value_heads is not a config field).
        "gpt_neox": (lambda: tf.GPTNeoXConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            max_position_embeddings=MAX_POSITIONS, use_cache=False), lambda: tf.GPTNeoXForCausalLM),
        "opt": (lambda: tf.OPTConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, ffn_dim=INTERMEDIATE, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, max_position_embeddings=MAX_POSITIONS,
            word_embed_proj_dim=HIDDEN, use_cache=False), lambda: tf.OPTForCausalLM),
        # T5's encoder: relative-position buckets (log of positions, -inf cast and discarded)
        "t5_encoder": (lambda: tf.T5Config(
            vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=INTERMEDIATE,
            num_layers=LAYERS, num_heads=HEADS, use_cache=False), lambda: tf.T5EncoderModel),
        "bert": (lambda: tf.BertConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            max_position_embeddings=MAX_POSITIONS), lambda: tf.BertModel),
    }


# --- builders ---------------------------------------------------------------------------------

def long_prefill(family: str, positions: int) -> torch.nn.Module:
    """LogitsOnly(model) of `family` (fp32) with `positions` positions instead of
    MAX_POSITIONS: long-context and symbolic-length programs run past 128 tokens."""
    make_config, model_cls = _configs()[family]
    config = make_config()
    config.max_position_embeddings = positions
    return LogitsOnly(_build(model_cls(), config, torch.float32))


def prefill(family: str, dtype: torch.dtype = torch.float32):
    """(LogitsOnly(model) or LastHiddenState(model), (input_ids,)) for one family."""
    make_config, model_cls = _configs()[family]
    model = _build(model_cls(), make_config(), dtype)
    wrapper = LastHiddenState(model) if family in ENCODERS else LogitsOnly(model)
    return wrapper.eval(), (_prefill_ids(),)


def decode(family: str, dtype: torch.dtype = torch.float32, slots: int = MAX_POSITIONS,
           position: int = DECODE_POSITION):
    """(static-cache decode step of `slots` cache slots, (input_ids [1, 1], cache_position
    [1] = `position`)) for Llama or Granite."""
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    make_config, model_cls = _configs()[family]
    config = make_config()
    config.use_cache = True
    config.max_position_embeddings = max(slots, config.max_position_embeddings)
    model = _build(model_cls(), config, dtype)
    model.generation_config.use_cache = True
    model.generation_config.cache_implementation = "static"

    class DecodeStep(TorchExportableModuleWithStaticCache):
        """transformers' recipe with a positional (input_ids, cache_position) signature."""

        def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
            return super().forward(input_ids=input_ids, cache_position=cache_position)

    step = DecodeStep(model, batch_size=1, max_cache_len=slots,
                      device=torch.device("cpu")).eval()
    g = torch.Generator().manual_seed(SEED + 1)
    input_ids = torch.randint(0, VOCAB, (1, 1), generator=g, dtype=torch.long)
    cache_position = torch.tensor([position], dtype=torch.long)
    return step, (input_ids, cache_position)


PREFILL_FAMILIES = ("gpt2", "llama", "granite", "qwen2", "mistral", "phi3", "gemma", "gpt_neox",
                    "opt", "bert", "t5_encoder")
ENCODERS = ("bert", "t5_encoder")  # no LM head: the last hidden state is the output
DECODE_FAMILIES = ("llama", "granite")


def _registry() -> dict[str, Callable[[], tuple[torch.nn.Module, tuple]]]:
    out = {}
    for suffix, dtype in (("", torch.float32), ("_fp16", torch.float16)):
        for fam in PREFILL_FAMILIES:
            out[fam + suffix] = (lambda f=fam, d=dtype: prefill(f, d))
        for fam in DECODE_FAMILIES:
            out[f"{fam}_decode{suffix}"] = (lambda f=fam, d=dtype: decode(f, d))
    return out


FAMILIES: dict[str, Callable[[], tuple[torch.nn.Module, tuple]]] = _registry()


def export_kwargs(name: str) -> dict:
    """Extra `torch.export.export` keywords for `name`: `strict=True` for the decode steps, as
    transformers' own recipe (`TorchExportableModuleForDecoderOnlyLM.export`) does. Non-strict
    export (torch's default) does not see the cache tensors as the registered buffers: they are
    reached through `StaticCache.layers[i].keys`, not the module, so they are lifted as constants
    (`lifted_tensor_*`) and the in-place cache writes land on those constants."""
    return {"strict": True} if "_decode" in name else {}


def export(name: str) -> torch.export.ExportedProgram:
    """The ordinary export of `FAMILIES[name]`."""
    module, example_inputs = FAMILIES[name]()
    return torch.export.export(module, example_inputs, **export_kwargs(name))
