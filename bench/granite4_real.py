"""Granite 4 hybrid at its real per-layer geometry, for bench/families.py (issue 61 item 3).

ibm-granite/granite-4.0-h-tiny's published config (written here from its config.json; nothing
is downloaded, the weights are random): hidden 1536, 12 attention heads over 4 KV heads, Mamba-2
mixers of 48 heads x 64 with state 128 (1 group, expand 2, conv 4, chunk 256), MoE of 64
experts of 512 (top 6) beside a shared MLP of 1024, vocab 100352, bf16. Depth is cut to
`LAYERS` (one Mamba-2 layer then one attention layer: the real model repeats these) so the
compile fits a bench run; a prefill of `TOKENS` tokens. bench/families.py compiles it and
prints traffic against compulsory and the estimate against the roofline; it is only
simulated with `--check` (`RUN = False`).
"""

from __future__ import annotations

import torch

LAYERS = ("mamba", "attention")
TOKENS = 128
RUN = False
GEOMETRY = dict(vocab_size=100352, hidden_size=1536, intermediate_size=512,
                num_attention_heads=12, num_key_value_heads=4, num_local_experts=64,
                num_experts_per_tok=6, shared_intermediate_size=1024, mamba_n_heads=48,
                mamba_d_head=64, mamba_d_state=128, mamba_n_groups=1, mamba_expand=2,
                mamba_d_conv=4, mamba_chunk_size=256, max_position_embeddings=4096,
                rms_norm_eps=1e-5, tie_word_embeddings=True)


def granite4_hybrid_real():
    import transformers as tf

    from tests.models.new_families import Out
    config = tf.GraniteMoeHybridConfig(num_hidden_layers=len(LAYERS), layer_types=list(LAYERS),
                                       use_cache=False, **GEOMETRY)
    torch.manual_seed(0)
    model = tf.GraniteMoeHybridForCausalLM(config).eval().to(torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, GEOMETRY["vocab_size"], (1, TOKENS), generator=g)
    return Out(model, "logits"), (ids,)


FAMILIES = {"granite4_hybrid_real": granite4_hybrid_real}
