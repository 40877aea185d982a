"""Tiny mixture-of-experts `transformers` models built in code (no downloads).

Mixtral, Qwen2-MoE, Qwen3-MoE and GraniteMoE at one size: hidden 64, 2 layers, 4 experts with
top-2 routing (so routing really selects), vocab 256, 16 tokens of prefill, batch 1, eval mode,
a fixed seed. Each family comes with both experts implementations transformers offers for
export: `batched_mm` (gathers each token's expert weights: the export-friendly one) and the
default `grouped_mm` (sorts the token-expert pairs and calls the custom op
`transformers::grouped_mm_fallback`), in fp32 and fp16.

`FAMILIES = {name: builder}`, name `<family>_<implementation>[_fp16]`; a builder returns
`(module, example_inputs)` for `torch.export.export(module, example_inputs)`.
"""

from __future__ import annotations

from typing import Callable

import torch

from tests.models.hf import LogitsOnly

SEED = 0
LAYERS = 2
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
EXPERTS = 4
TOP_K = 2
INTERMEDIATE = 128
EXPERT_INTERMEDIATE = 64
VOCAB = 256
TOKENS = 16
IMPLEMENTATIONS = ("batched_mm", "grouped_mm")


def _common(implementation: str) -> dict:
    return dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                max_position_embeddings=64, bos_token_id=1, eos_token_id=2, use_cache=False,
                num_experts_per_tok=TOP_K, experts_implementation=implementation)


def _configs() -> dict[str, tuple[Callable[[str], object], Callable[[], type]]]:
    """family -> (config for an experts implementation, model class), imported lazily."""
    import transformers as tf

    return {
        "mixtral": (lambda impl: tf.MixtralConfig(
            intermediate_size=INTERMEDIATE, num_local_experts=EXPERTS, **_common(impl)),
            lambda: tf.MixtralForCausalLM),
        "granitemoe": (lambda impl: tf.GraniteMoeConfig(
            intermediate_size=INTERMEDIATE, num_local_experts=EXPERTS, **_common(impl)),
            lambda: tf.GraniteMoeForCausalLM),
        # a shared expert next to the routed ones, with its sigmoid gate
        "qwen2_moe": (lambda impl: tf.Qwen2MoeConfig(
            intermediate_size=INTERMEDIATE, moe_intermediate_size=EXPERT_INTERMEDIATE,
            shared_expert_intermediate_size=INTERMEDIATE, num_experts=EXPERTS,
            **_common(impl)), lambda: tf.Qwen2MoeForCausalLM),
        "qwen3_moe": (lambda impl: tf.Qwen3MoeConfig(
            intermediate_size=INTERMEDIATE, moe_intermediate_size=EXPERT_INTERMEDIATE,
            num_experts=EXPERTS, head_dim=HIDDEN // HEADS, **_common(impl)),
            lambda: tf.Qwen3MoeForCausalLM),
    }


def build(family: str, implementation: str, dtype: torch.dtype = torch.float32):
    """(LogitsOnly(model), (input_ids [1, TOKENS],)) for one family and implementation."""
    make_config, model_cls = _configs()[family]
    torch.manual_seed(SEED)
    model = model_cls()(make_config(implementation)).eval()
    if dtype == torch.float16:
        model = model.half()
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, VOCAB, (1, TOKENS), generator=g, dtype=torch.long)
    return LogitsOnly(model).eval(), (ids,)


def _registry() -> dict[str, Callable[[], tuple[torch.nn.Module, tuple]]]:
    out = {}
    for family in ("mixtral", "qwen2_moe", "qwen3_moe", "granitemoe"):
        for impl in IMPLEMENTATIONS:
            for suffix, dtype in (("", torch.float32), ("_fp16", torch.float16)):
                out[f"{family}_{impl}{suffix}"] = \
                    (lambda f=family, i=impl, d=dtype: build(f, i, d))
    return out


FAMILIES: dict[str, Callable[[], tuple[torch.nn.Module, tuple]]] = _registry()
